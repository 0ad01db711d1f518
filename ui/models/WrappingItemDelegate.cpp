#include "ui/models/WrappingItemDelegate.hpp"

#include <QEvent>
#include <QHeaderView>
#include <QTimer>
#include <QTreeView>
#include <algorithm>

namespace kvscope::ui {

WrappingItemDelegate::WrappingItemDelegate(QTreeView* view)
    : QStyledItemDelegate(view), view_(view) {
  view_->setItemDelegate(this);
  view_->setWordWrap(true);
  view_->setUniformRowHeights(false);
  view_->viewport()->installEventFilter(this);
  connect(view_->header(), &QHeaderView::sectionResized, this, [this] { relayoutSoon(); });
}

int WrappingItemDelegate::textWidth(const QModelIndex& index) const {
  int depth = 0;
  for (QModelIndex p = index.parent(); p.isValid(); p = p.parent()) ++depth;
  const int indent = view_->indentation() * (depth + (view_->rootIsDecorated() ? 1 : 0));
  int width = 0;
  if (view_->isFirstColumnSpanned(index.row(), index.parent()))
    width = view_->viewport()->width();
  else
    width = view_->columnWidth(index.column());
  if (index.column() == 0) width -= indent;
  return std::max(40, width);
}

QSize WrappingItemDelegate::sizeHint(const QStyleOptionViewItem& option,
                                     const QModelIndex& index) const {
  // The first column of an unspanned row sizes itself (ResizeToContents); others wrap.
  if (index.column() == 0 && !view_->isFirstColumnSpanned(index.row(), index.parent()))
    return QStyledItemDelegate::sizeHint(option, index);
  QStyleOptionViewItem opt = option;
  initStyleOption(&opt, index);
  opt.features |= QStyleOptionViewItem::WrapText;
  opt.rect = QRect(0, 0, textWidth(index), 1);
  const QWidget* widget = view_;
  QSize size = widget->style()->sizeFromContents(QStyle::CT_ItemViewItem, &opt, QSize(), widget);
  // Only the height follows the wrapped text; the width stays what the column allows.
  return QSize(std::min(size.width(), opt.rect.width()), size.height());
}

void WrappingItemDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                                 const QModelIndex& index) const {
  QStyleOptionViewItem opt = option;
  opt.features |= QStyleOptionViewItem::WrapText;
  QStyledItemDelegate::paint(painter, opt, index);
}

bool WrappingItemDelegate::eventFilter(QObject* watched, QEvent* event) {
  if (watched == view_->viewport() && event->type() == QEvent::Resize &&
      view_->viewport()->width() != lastViewportWidth_) {
    lastViewportWidth_ = view_->viewport()->width();
    relayoutSoon();
  }
  return QStyledItemDelegate::eventFilter(watched, event);
}

void WrappingItemDelegate::relayoutSoon() {
  if (relayoutQueued_) return;
  relayoutQueued_ = true;
  QTimer::singleShot(0, this, [this] {
    relayoutQueued_ = false;
    view_->doItemsLayout();
  });
}

}  // namespace kvscope::ui
