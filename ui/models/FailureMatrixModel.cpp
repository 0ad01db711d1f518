#include "ui/models/FailureMatrixModel.hpp"

#include <QColor>
#include <QFont>
#include <algorithm>

#include "kvscope/FindingGroups.hpp"

namespace kvscope::ui {

const std::vector<const FailureMatrixRow*>& FailureMatrixModel::rows() {
  static const std::vector<const FailureMatrixRow*> table = [] {
    std::vector<const FailureMatrixRow*> out;
    for (const FailureMatrixRow& r : FailureMatrix::rows())
      if (r.origin == MatrixOrigin::Method) out.push_back(&r);
    bool heading = false;
    for (const FailureMatrixRow& r : FailureMatrix::rows())
      if (r.origin != MatrixOrigin::Method) {
        if (!heading) out.push_back(nullptr);
        heading = true;
        out.push_back(&r);
      }
    return out;
  }();
  return table;
}

int FailureMatrixModel::additionsHeadingRow() {
  const auto& table = rows();
  for (size_t i = 0; i < table.size(); ++i)
    if (!table[i]) return static_cast<int>(i);
  return -1;
}

int FailureMatrixModel::rowFor(const Finding& finding) {
  const auto& table = rows();
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i] && finding.id == table[i]->id) return static_cast<int>(i);
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
  focusObservation_.clear();
  focusFirstCheck_.clear();
  // A bug that several requests show fires its row once, with the count of requests.
  if (report_)
    for (const FindingGroup& g : groupFindings(report_->findings)) {
      const int r = rowFor(g.first());
      if (r < 0) continue;
      auto& ids = matched_[static_cast<size_t>(r)];
      std::string label = g.id;
      if (g.members.size() > 1) label += " (" + g.onsets() + ")";
      if (std::find(ids.begin(), ids.end(), label) == ids.end()) ids.push_back(label);
    }
  endResetModel();
}

bool FailureMatrixModel::isMatched(int row) const {
  return row >= 0 && row < static_cast<int>(matched_.size()) && !matched_[static_cast<size_t>(row)].empty();
}

void FailureMatrixModel::setFocusFinding(const Finding& finding) {
  focusObservation_ = finding.matrixRow;
  focusFirstCheck_ = finding.firstCheck;
  focusRow_ = rowFor(finding);
  if (rowCount() > 0) Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

void FailureMatrixModel::setFocusRow(int row) {
  if (row == focusRow_ && focusObservation_.empty() && focusFirstCheck_.empty()) return;
  focusRow_ = row;
  focusObservation_.clear();
  focusFirstCheck_.clear();
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
  const FailureMatrixRow* row = rows()[static_cast<size_t>(index.row())];
  if (!row) {  // the heading above KV Scope's additions, across the columns
    switch (role) {
      case Qt::DisplayRole:
        return index.column() == ObservationColumn
                   ? tr("KV Scope's additions (not in the method's matrix)")
                   : QString();
      case Qt::FontRole: {
        QFont f;
        f.setBold(true);
        f.setItalic(true);
        return f;
      }
      case Qt::BackgroundRole:
        return QColor(0xEC, 0xEF, 0xF1);
      case Qt::ForegroundRole:
        return QColor(0x37, 0x47, 0x4F);
      case Qt::ToolTipRole:
        return tr(
            "Rows KV Scope adds to the method's failure matrix: the audit's own outcomes "
            "and bugs filed against production engines (docs/audit.md)");
      case MatchedRole:
        return false;
      case FindingIdRole:
        return QString();
      case OriginRole:
        return QStringLiteral("heading");
      default:
        return {};
    }
  }
  const bool matched = isMatched(index.row());
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case ObservationColumn:
          return QString::fromStdString(index.row() == focusRow_ && !focusObservation_.empty()
                                            ? focusObservation_
                                            : row->observation);
        case FirstCheckColumn:
          return QString::fromStdString(index.row() == focusRow_ && !focusFirstCheck_.empty()
                                            ? focusFirstCheck_
                                            : row->firstCheck);
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
    case FindingIdRole:
      return QString::fromStdString(row->id);
    case OriginRole:
      return row->origin == MatrixOrigin::Method ? QStringLiteral("method")
                                                 : QStringLiteral("kv_scope");
    case Qt::ToolTipRole: {
      const QString origin = row->origin == MatrixOrigin::Method ? tr("the method's failure matrix")
                                                                 : tr("a KV Scope addition");
      return matched ? tr("%1 (%2); fired by: %3")
                           .arg(QString::fromStdString(row->id), origin,
                                data(index.siblingAtColumn(FindingColumn)).toString())
                     : tr("%1 (%2)").arg(QString::fromStdString(row->id), origin);
    }
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
