#include "ui/models/FailureMatrixModel.hpp"

#include <QColor>
#include <QFont>

namespace kvscope::ui {

const std::vector<FailureMatrixModel::Row>& FailureMatrixModel::rows() {
  static const std::vector<Row> table = {
      {"mismatch begins at a token together with a position offset",
       "position index or token ownership", "position"},
      {"layer 1 matches, layer 2 differs", "layer 2's cache source and append", "wrong_layer"},
      {"cache length grows by two in one step", "duplicate append or a duplicated prompt token",
       "duplicate_append"},
      {"a batch row changes when another request arrives",
       "cache mixing across the batch or request axes", "cross_request"},
      {"greedy token differs but logits match", "policy or tie rule", "tie_rule"},
      {"sampled runs differ but probabilities match", "seed and RNG call order", "rng_order"},
      {"cache works until the weights update", "stale projected K/V", "stale_cache"},
      {"a generated token cannot be fed back", "context limit reached", "context_limit"},
  };
  return table;
}

int FailureMatrixModel::rowFor(const Finding& finding) {
  const auto& table = rows();
  for (size_t i = 0; i < table.size(); ++i)
    if (finding.matrixRow == table[i].observation) return static_cast<int>(i);
  for (size_t i = 0; i < table.size(); ++i)
    if (finding.id == table[i].findingId) return static_cast<int>(i);
  return -1;
}

FailureMatrixModel::FailureMatrixModel(QObject* parent) : QAbstractTableModel(parent) {
  matched_.resize(rows().size());
}

void FailureMatrixModel::setReport(std::shared_ptr<const AuditReport> report) {
  beginResetModel();
  report_ = std::move(report);
  matched_.assign(rows().size(), {});
  focusRow_ = -1;
  if (report_)
    for (const auto& f : report_->findings) {
      const int r = rowFor(f);
      if (r >= 0) matched_[static_cast<size_t>(r)].push_back(f.id);
    }
  endResetModel();
}

bool FailureMatrixModel::isMatched(int row) const {
  return row >= 0 && row < static_cast<int>(matched_.size()) && !matched_[static_cast<size_t>(row)].empty();
}

void FailureMatrixModel::setFocusRow(int row) {
  if (row == focusRow_) return;
  focusRow_ = row;
  if (rowCount() > 0) Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int FailureMatrixModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows().size());
}

int FailureMatrixModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant FailureMatrixModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this) return {};
  const Row& row = rows()[static_cast<size_t>(index.row())];
  const bool matched = isMatched(index.row());
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case ObservationColumn: return QString::fromUtf8(row.observation);
        case FirstCheckColumn: return QString::fromUtf8(row.firstCheck);
        case FindingColumn: {
          QStringList ids;
          for (const auto& id : matched_[static_cast<size_t>(index.row())]) ids << QString::fromStdString(id);
          return ids.join(QStringLiteral(", "));
        }
        default: return {};
      }
    case Qt::BackgroundRole:
      if (matched) return index.row() == focusRow_ ? QColor(0xEF, 0x9A, 0x9A) : QColor(0xFF, 0xCD, 0xD2);
      return {};
    case Qt::ForegroundRole:
      if (matched) return QColor(0x7F, 0x00, 0x00);
      return report_ && !report_->findings.empty() ? QColor(0x75, 0x75, 0x75) : QVariant();
    case Qt::FontRole:
      if (matched) {
        QFont f;
        f.setBold(true);
        return f;
      }
      return {};
    case MatchedRole: return matched;
    case Qt::ToolTipRole:
      return matched ? tr("Fired by: %1").arg(data(index.siblingAtColumn(FindingColumn)).toString())
                     : QVariant();
    default: return {};
  }
}

QVariant FailureMatrixModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case ObservationColumn: return tr("Observation");
    case FirstCheckColumn: return tr("First check");
    case FindingColumn: return tr("Finding");
    default: return {};
  }
}

}  // namespace kvscope::ui
