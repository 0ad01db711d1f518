// Every shortcut and mouse action of the inspector, in one table: the Help menu's list shows
// it, docs/inspector.md carries the same rows (markdown(); a UI test compares them), and a
// test checks that every action of the window with a shortcut is a row here. Add a
// shortcut here first.
#pragma once

#include <QAbstractTableModel>
#include <QKeySequence>
#include <QList>
#include <QString>
#include <vector>

namespace kvscope::ui {

struct ShortcutRow {
  QList<QKeySequence> keys;  // empty for a mouse action
  QString mouse;             // "Click a token", "Drag / wheel on a heatmap" ("" for keys)
  QString action;            // what it does
  QString where;             // "Window", "Findings list", "Find bar", a menu...
};

class ShortcutTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { InputColumn, ActionColumn, WhereColumn, ColumnCount };

  explicit ShortcutTableModel(QObject* parent = nullptr);

  /// The rows (keyboard first, then mouse).
  static const std::vector<ShortcutRow>& rows();
  /// "Ctrl+R" / "Right, N" (portable text: what the docs show) or the mouse action.
  static QString inputText(const ShortcutRow& row,
                           QKeySequence::SequenceFormat format = QKeySequence::PortableText);
  /// True when `key` is one of the table's key rows.
  static bool contains(const QKeySequence& key);
  /// The table as docs/inspector.md shows it: two Markdown tables (keys, mouse).
  static QString markdown();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
};

}  // namespace kvscope::ui
