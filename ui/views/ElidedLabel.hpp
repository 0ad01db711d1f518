// A one-line label that never widens the row it sits in: its text is elided at the right to
// the width the layout gives it, and the whole text is its tooltip (the K/V panel's layer
// summary, which for a latent or MoE layer runs longer than a 1366-pixel window).
#pragma once

#include <QLabel>
#include <QString>

namespace kvscope::ui {

class ElidedLabel : public QLabel {
 public:
  explicit ElidedLabel(QWidget* parent = nullptr);
  /// Shows `text` (elided to the label's width) and sets it as the tooltip.
  void setFullText(const QString& text);
  const QString& fullText() const { return full_; }
  QSize minimumSizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void refit();
  QString full_;
};

}  // namespace kvscope::ui
