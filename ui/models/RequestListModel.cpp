#include "ui/models/RequestListModel.hpp"

#include <QColor>

#include "kvscope/Inspection.hpp"

namespace kvscope::ui {

RequestListModel::RequestListModel(QObject* parent) : QAbstractTableModel(parent) {}

void RequestListModel::setOutput(std::shared_ptr<const AuditJobOutput> output) {
  beginResetModel();
  output_ = std::move(output);
  divergentStep_.clear();
  if (output_) {
    const Inspector inspector(output_);
    for (const auto& r : output_->result.trace.requests)
      divergentStep_[r.id] = inspector.timeline(r.id).divergentStep;
  }
  endResetModel();
}

int RequestListModel::rowOf(int64_t requestId) const {
  if (!output_) return -1;
  const auto& reqs = output_->result.trace.requests;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].id == requestId) return static_cast<int>(i);
  return -1;
}

int64_t RequestListModel::firstDivergedStep(int64_t request) const {
  const auto it = divergentStep_.find(request);
  return it == divergentStep_.end() ? -1 : it->second;
}

int RequestListModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !output_) return 0;
  return static_cast<int>(output_->result.trace.requests.size());
}

int RequestListModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RequestListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this || !output_) return {};
  const auto& req = output_->result.trace.requests[static_cast<size_t>(index.row())];
  const int64_t diverged = firstDivergedStep(req.id);
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case LabelColumn:
          return diverged >= 0 ? tr("Request %1 — diverges at step %2").arg(req.id).arg(diverged)
                               : tr("Request %1 — clean").arg(req.id);
        case PromptColumn: return QString::fromStdString(req.promptText);
        case StepsColumn:
          return static_cast<qlonglong>(output_->result.trace.stepsOf(req.id).size());
        case StopColumn: return QString::fromStdString(req.stopReason);
        case GeneratedColumn: {
          const size_t row = static_cast<size_t>(index.row());
          if (row < output_->decodedText.size()) return QString::fromStdString(output_->decodedText[row]);
          QStringList ids;
          for (int64_t id : req.generated) ids << QString::number(id);
          return ids.join(QLatin1Char(' '));
        }
        default: return {};
      }
    case Qt::ForegroundRole:
      if (index.column() == LabelColumn && diverged >= 0) return QColor(0xC6, 0x28, 0x28);
      return {};
    case RequestIdRole: return static_cast<qlonglong>(req.id);
    case DivergentRole: return diverged >= 0;
    default: return {};
  }
}

QVariant RequestListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case LabelColumn: return tr("Request");
    case PromptColumn: return tr("Prompt");
    case StepsColumn: return tr("Steps");
    case StopColumn: return tr("Stop");
    case GeneratedColumn: return tr("Generated");
    default: return {};
  }
}

}  // namespace kvscope::ui
