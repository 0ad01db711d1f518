#include "ui/models/FindingsModel.hpp"

#include <QColor>
#include <QFont>
#include <QStringList>
#include <algorithm>

namespace kvscope::ui {

FindingsModel::FindingsModel(QObject* parent) : QAbstractTableModel(parent) {}

void FindingsModel::setReport(std::shared_ptr<const AuditReport> report) {
  beginResetModel();
  report_ = std::move(report);
  groups_ = report_ ? groupFindings(report_->findings) : std::vector<FindingGroup>{};
  endResetModel();
}

const FindingGroup* FindingsModel::group(int row) const {
  if (row < 0 || row >= static_cast<int>(groups_.size())) return nullptr;
  return &groups_[static_cast<size_t>(row)];
}

const Finding* FindingsModel::finding(int row) const {
  const FindingGroup* g = group(row);
  return g ? &g->first() : nullptr;
}

int FindingsModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid()) return 0;
  return static_cast<int>(groups_.size());
}

int FindingsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant FindingsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this) return {};
  const FindingGroup* g = group(index.row());
  if (!g) return {};
  const Finding* f = &g->first();
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case IdColumn:
          // A consequence sits under its root (the core orders it right after it).
          return g->depth == 0 ? QString::fromStdString(f->id)
                                     : QStringLiteral("\u21b3 ") + QString::fromStdString(f->id);
        case WhereColumn: {
          if (g->members.size() > 1) {
            QString where = QString::fromStdString(g->onsets());
            const int64_t layer = f->layer;  // named once when every request's onset shares it
            if (layer >= 0 && std::all_of(g->members.begin(), g->members.end(),
                                          [&](const Finding* m) { return m->layer == layer; }))
              where += tr(" (layer %1)").arg(layer);
            return where;
          }
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
    case Qt::ToolTipRole: {
      QStringList lines;
      for (const Finding* m : g->members) {
        const QString text = QString::fromStdString(m->explanation);
        const QString line = m->causedBy.empty()
                                 ? text
                                 : tr("Caused by %1: %2").arg(QString::fromStdString(m->causedBy), text);
        lines << (g->members.size() > 1 ? tr("request %1, step %2: %3").arg(m->request).arg(m->step).arg(line)
                                        : line);
      }
      return lines.join(QLatin1Char('\n'));
    }
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
    case RequestCountRole: return static_cast<int>(g->members.size());
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
