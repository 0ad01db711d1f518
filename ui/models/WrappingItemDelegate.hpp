// Word-wrapping rows for a tree view: the delegate sizes each row for the width its text
// really has (its column, or the whole row when the first column is spanned) and lays the
// view out again when that width changes, so long stage summaries and checks wrap in a
// narrow dock instead of being cut off.
#pragma once

#include <QStyledItemDelegate>

class QTreeView;

namespace kvscope::ui {

class WrappingItemDelegate : public QStyledItemDelegate {
  Q_OBJECT

 public:
  /// Installs itself on `view` (item delegate, resize watcher).
  explicit WrappingItemDelegate(QTreeView* view);

  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  void paint(QPainter* painter, const QStyleOptionViewItem& option,
             const QModelIndex& index) const override;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  int textWidth(const QModelIndex& index) const;
  void relayoutSoon();

  QTreeView* view_;
  int lastViewportWidth_ = -1;
  bool relayoutQueued_ = false;
};

}  // namespace kvscope::ui
