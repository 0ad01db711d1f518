#include "ui/views/ElidedLabel.hpp"

#include <algorithm>

#include <QFontMetrics>
#include <QResizeEvent>

namespace kvscope::ui {

ElidedLabel::ElidedLabel(QWidget* parent) : QLabel(parent) {
  setTextFormat(Qt::PlainText);
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
}

void ElidedLabel::setFullText(const QString& text) {
  full_ = text;
  setToolTip(text);
  refit();
}

QSize ElidedLabel::minimumSizeHint() const {
  // Room for an ellipsis and a few characters; the layout gives it whatever else is left.
  return {fontMetrics().horizontalAdvance(QStringLiteral("MMMM…")), QLabel::minimumSizeHint().height()};
}

void ElidedLabel::resizeEvent(QResizeEvent* event) {
  QLabel::resizeEvent(event);
  refit();
}

void ElidedLabel::refit() { setText(fontMetrics().elidedText(full_, Qt::ElideRight, std::max(0, width()))); }

}  // namespace kvscope::ui
