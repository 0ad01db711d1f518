// A wash over a panel while the audit it shows no longer answers the run setup
// (SelectionContext::stale: another model or trace opened, an input error, a run under
// way): the old numbers stay readable underneath, but no panel looks current. Mouse
// events pass through, so the previous audit can still be inspected.
#pragma once

#include <QWidget>

namespace kvscope::ui {

class SelectionContext;

class StaleOverlay : public QWidget {
  Q_OBJECT

 public:
  /// Covers `target` (as its child) whenever `context` is stale.
  StaleOverlay(SelectionContext* context, QWidget* target);

  /// What the overlay says ("" while hidden).
  QString text() const;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void paintEvent(QPaintEvent* event) override;

 private:
  void sync();

  SelectionContext* context_;
  QWidget* target_;
};

}  // namespace kvscope::ui
