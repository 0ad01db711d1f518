#include "ui/models/FindingsModel.hpp"

#include <QColor>
#include <QFont>

namespace kvscope::ui {

FindingsModel::FindingsModel(QObject* parent) : QAbstractTableModel(parent) {}

void FindingsModel::setReport(std::shared_ptr<const AuditReport> report) {
  beginResetModel();
  report_ = std::move(report);
  endResetModel();
}

const Finding* FindingsModel::finding(int row) const {
  if (!report_ || row < 0 || row >= static_cast<int>(report_->findings.size())) return nullptr;
  return &report_->findings[static_cast<size_t>(row)];
}

int FindingsModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !report_) return 0;
  return static_cast<int>(report_->findings.size());
}

int FindingsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant FindingsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this) return {};
  const Finding* f = finding(index.row());
  if (!f) return {};
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case IdColumn:
          // A consequence sits under its root (the core orders it right after it).
          return f->causedBy.empty() ? QString::fromStdString(f->id)
                                     : QStringLiteral("\u21b3 ") + QString::fromStdString(f->id);
        case WhereColumn: {
          QString where = tr("request %1, step %2").arg(f->request).arg(f->step);
          if (f->layer >= 0) where += tr(", layer %1").arg(f->layer);
          if (f->position >= 0) where += tr(", pos %1").arg(f->position);
          return where;
        }
        case ConfidenceColumn: return QStringLiteral("%1%").arg(qRound(f->confidence * 100.0));
        case MatrixRowColumn: return QString::fromStdString(f->matrixRow);
        case FirstCheckColumn: return QString::fromStdString(f->firstCheck);
        default: return {};
      }
    case Qt::ToolTipRole:
      return f->causedBy.empty() ? QString::fromStdString(f->explanation)
                                 : tr("Caused by %1: %2")
                                       .arg(QString::fromStdString(f->causedBy),
                                            QString::fromStdString(f->explanation));
    case Qt::FontRole:
      if (index.column() == IdColumn) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    case Qt::ForegroundRole:
      if (index.column() == IdColumn) return QColor(0xC6, 0x28, 0x28);
      return {};
    case RequestRole: return static_cast<qlonglong>(f->request);
    case StepRole: return static_cast<qlonglong>(f->step);
    case LayerRole: return static_cast<qlonglong>(f->layer);
    case FindingIdRole: return QString::fromStdString(f->id);
    default: return {};
  }
}

QVariant FindingsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case IdColumn: return tr("Finding");
    case WhereColumn: return tr("Where");
    case ConfidenceColumn: return tr("Confidence");
    case MatrixRowColumn: return tr("Observation (failure matrix)");
    case FirstCheckColumn: return tr("First check");
    default: return {};
  }
}

}  // namespace kvscope::ui
