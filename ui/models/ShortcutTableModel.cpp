#include "ui/models/ShortcutTableModel.hpp"

#include <QCoreApplication>
#include <QStringList>

namespace kvscope::ui {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("ShortcutTableModel", text); }

ShortcutRow keys(QList<QKeySequence> k, const char* action, const char* where) {
  return ShortcutRow{std::move(k), QString(), tr(action), tr(where)};
}
ShortcutRow mouse(const char* input, const char* action, const char* where) {
  return ShortcutRow{{}, tr(input), tr(action), tr(where)};
}

std::vector<ShortcutRow> makeRows() {
  using K = QKeySequence;
  return {
      keys({K(Qt::Key_Right), K(Qt::Key_N)}, "Next step", "Navigate (anywhere in the window)"),
      keys({K(Qt::Key_Left), K(Qt::Key_P)}, "Previous step", "Navigate (anywhere in the window)"),
      keys({K(Qt::Key_D), K(Qt::CTRL | Qt::Key_D)}, "Jump to the first divergence", "Navigate"),
      keys({K(Qt::Key_BracketRight)}, "Next layer", "Navigate"),
      keys({K(Qt::Key_BracketLeft)}, "Previous layer", "Navigate"),
      keys({K(Qt::Key_V)}, "Toggle keys / values", "Navigate"),
      keys({K(Qt::CTRL | Qt::Key_F)},
           "Find a token by text or id (Enter: next match, Shift+Enter: previous, Esc: close)",
           "Navigate"),
      keys({K(Qt::CTRL | Qt::Key_B)},
           "Pin the current step: its difference map stays beside the current one", "Navigate"),
      keys({K(Qt::CTRL | Qt::SHIFT | Qt::Key_B)}, "Unpin the step", "Navigate"),
      keys({K(Qt::CTRL | Qt::Key_R)}, "Run the audit", "Audit"),
      keys({K(Qt::Key_Escape)}, "Cancel the running audit", "Audit"),
      keys({K(Qt::CTRL | Qt::Key_O)}, "Open a model directory", "File"),
      keys({K(Qt::CTRL | Qt::SHIFT | Qt::Key_O)}, "Open a trace (.kvtrace)", "File"),
      keys({K(Qt::CTRL | Qt::ALT | Qt::Key_O)}, "Open a reference trace (trace+trace mode)",
           "File"),
      keys({K(Qt::CTRL | Qt::Key_E)}, "Export the current view (PNG, SVG or PDF by suffix)",
           "File"),
      keys({K(Qt::CTRL | Qt::SHIFT | Qt::Key_E)}, "Export the window", "File"),
      keys({K(Qt::CTRL | Qt::Key_Q)}, "Quit", "File"),
      keys({K(Qt::Key_F1)}, "This list of shortcuts and mouse actions", "Help"),
      keys({K(Qt::Key_Return)}, "Go to the selected finding", "Findings list"),
      mouse("Click a token", "Select the step that fed it", "Token strip"),
      mouse("Click the last token (never fed)", "Select the step that chose it", "Token strip"),
      mouse("Click the divergence button at the edge", "Go back to the divergent step",
            "Token strip"),
      mouse("Hover a token", "Its text, id, position and step", "Token strip"),
      mouse("Click a bar", "Select that layer", "Layer overview"),
      mouse("Click a finding", "Go to its request, step, layer and kv head", "Findings list"),
      mouse("Hover a heatmap", "Position, head dimension and value", "K/V heatmaps"),
      mouse("Drag / wheel", "Pan / zoom the positions of all three maps together", "K/V heatmaps"),
      mouse("Click a step", "Select that step", "Logit delta and position plots"),
      mouse("Hover the plot", "Expected and recorded position, cache length at that step",
            "Positions"),
      mouse("Drop a folder / a file", "Open it as the model / the trace", "Window"),
  };
}

QString escapeCell(QString s) { return s.replace(QLatin1Char('|'), QStringLiteral("\\|")); }

}  // namespace

ShortcutTableModel::ShortcutTableModel(QObject* parent) : QAbstractTableModel(parent) {}

const std::vector<ShortcutRow>& ShortcutTableModel::rows() {
  static const std::vector<ShortcutRow> table = makeRows();
  return table;
}

QString ShortcutTableModel::inputText(const ShortcutRow& row, QKeySequence::SequenceFormat format) {
  if (row.keys.isEmpty()) return row.mouse;
  QStringList parts;
  for (const QKeySequence& k : row.keys) parts << k.toString(format);
  return parts.join(QStringLiteral(", "));
}

bool ShortcutTableModel::contains(const QKeySequence& key) {
  for (const ShortcutRow& r : rows())
    for (const QKeySequence& k : r.keys)
      if (k == key) return true;
  return false;
}

QString ShortcutTableModel::markdown() {
  QString md = QStringLiteral("| Key | Action | Where |\n| --- | --- | --- |\n");
  for (const ShortcutRow& r : rows())
    if (!r.keys.isEmpty())
      md += QStringLiteral("| %1 | %2 | %3 |\n")
                .arg(escapeCell(inputText(r)), escapeCell(r.action), r.where);
  md += QStringLiteral("\n| Mouse | Action | Where |\n| --- | --- | --- |\n");
  for (const ShortcutRow& r : rows())
    if (r.keys.isEmpty())
      md += QStringLiteral("| %1 | %2 | %3 |\n").arg(r.mouse, escapeCell(r.action), r.where);
  return md;
}

int ShortcutTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows().size());
}

int ShortcutTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant ShortcutTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const ShortcutRow& r = rows()[static_cast<size_t>(index.row())];
  if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
    switch (index.column()) {
      case InputColumn:
        return inputText(r, QKeySequence::NativeText);
      case ActionColumn:
        return r.action;
      case WhereColumn:
        return r.where;
      default:
        return {};
    }
  }
  return {};
}

QVariant ShortcutTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case InputColumn:
      return tr("Key / mouse");
    case ActionColumn:
      return tr("Action");
    case WhereColumn:
      return tr("Where");
    default:
      return {};
  }
}

}  // namespace kvscope::ui
