#include "ui/views/StaleOverlay.hpp"

#include <QEvent>
#include <QPainter>
#include <QPainterPath>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

StaleOverlay::StaleOverlay(SelectionContext* context, QWidget* target)
    : QWidget(target), context_(context), target_(target) {
  setObjectName(QStringLiteral("staleOverlay"));
  setAttribute(Qt::WA_TransparentForMouseEvents);
  setAttribute(Qt::WA_NoSystemBackground);
  setFocusPolicy(Qt::NoFocus);
  target_->installEventFilter(this);
  connect(context_, &SelectionContext::staleChanged, this, [this] { sync(); });
  sync();
}

QString StaleOverlay::text() const {
  return isVisible() ? tr("Previous audit — %1").arg(context_->staleReason()) : QString();
}

void StaleOverlay::sync() {
  setGeometry(target_->rect());
  setVisible(context_->stale());
  if (isVisible()) raise();
  update();
}

bool StaleOverlay::eventFilter(QObject* watched, QEvent* event) {
  if (watched == target_ &&
      (event->type() == QEvent::Resize || event->type() == QEvent::ChildAdded)) {
    setGeometry(target_->rect());
    if (isVisible()) raise();
  }
  return QWidget::eventFilter(watched, event);
}

void StaleOverlay::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(255, 255, 255, 165));
  // A label at the top, wrapped to the panel's width.
  QFont f = font();
  f.setBold(true);
  p.setFont(f);
  const QString message = text();
  const QRect room = rect().adjusted(12, 8, -12, -8);
  QRect box = p.fontMetrics().boundingRect(room, Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap,
                                           message);
  box = box.adjusted(-8, -4, 8, 4).intersected(rect());
  p.setRenderHint(QPainter::Antialiasing);
  p.setPen(QPen(Theme::neutral(), 1));
  p.setBrush(QColor(0xFF, 0xF8, 0xE1));
  p.drawRoundedRect(box, 4, 4);
  p.setPen(QColor(0x5D, 0x40, 0x37));
  p.drawText(room, Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap, message);
}

}  // namespace kvscope::ui
