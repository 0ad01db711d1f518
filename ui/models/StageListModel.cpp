#include "ui/models/StageListModel.hpp"

#include <QColor>
#include <QFont>
#include <QPainter>
#include <QPixmap>

namespace kvscope::ui {

namespace {

// Child rows carry (stage index + 1) in their internal id; stage rows carry 0.
constexpr quintptr kStageRow = 0;

}  // namespace

StageListModel::StageListModel(QObject* parent) : QAbstractItemModel(parent) {}

void StageListModel::setReport(std::shared_ptr<const AuditReport> report) {
  beginResetModel();
  report_ = std::move(report);
  endResetModel();
}

int StageListModel::stageCount() const {
  return report_ ? static_cast<int>(report_->stages.size()) : 0;
}

int StageListModel::rootCauseRow() const {
  for (int i = 0; i < stageCount(); ++i)
    if (report_->stages[static_cast<size_t>(i)].status == StageStatus::Fail) return i;
  return -1;
}

QIcon StageListModel::statusIcon(StageStatus status) {
  QPixmap pm(32, 32);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  p.setRenderHint(QPainter::Antialiasing);
  QColor fill;
  switch (status) {
    case StageStatus::Pass: fill = QColor(0x2E, 0x7D, 0x32); break;
    case StageStatus::Fail: fill = QColor(0xC6, 0x28, 0x28); break;
    case StageStatus::Skipped: fill = QColor(0x9E, 0x9E, 0x9E); break;
    case StageStatus::NotRun: fill = QColor(0xE0, 0xE0, 0xE0); break;
  }
  p.setPen(Qt::NoPen);
  p.setBrush(fill);
  p.drawEllipse(QRectF(2, 2, 28, 28));
  p.setPen(QPen(Qt::white, 4, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
  switch (status) {
    case StageStatus::Pass:
      p.drawPolyline(QPolygonF({QPointF(9, 17), QPointF(14, 22), QPointF(23, 10)}));
      break;
    case StageStatus::Fail:
      p.drawLine(QPointF(10, 10), QPointF(22, 22));
      p.drawLine(QPointF(22, 10), QPointF(10, 22));
      break;
    case StageStatus::Skipped:
      p.drawLine(QPointF(9, 16), QPointF(23, 16));
      break;
    case StageStatus::NotRun: break;
  }
  p.end();
  return QIcon(pm);
}

QString StageListModel::checkText(const QString& check) {
  // The core's words (a failed check already says what failed: AuditReport's CLI text and
  // Markdown print the same); the mark beside it says ok or FAIL.
  for (const QLatin1String prefix : {QLatin1String("FAIL:"), QLatin1String("ok:")})
    if (check.startsWith(prefix)) return check.mid(prefix.size()).trimmed();
  return check;
}

QModelIndex StageListModel::index(int row, int column, const QModelIndex& parent) const {
  if (!hasIndex(row, column, parent)) return {};
  if (!parent.isValid()) return createIndex(row, column, kStageRow);
  if (parent.internalId() != kStageRow) return {};
  return createIndex(row, column, static_cast<quintptr>(parent.row() + 1));
}

QModelIndex StageListModel::parent(const QModelIndex& child) const {
  if (!child.isValid() || child.internalId() == kStageRow) return {};
  return createIndex(static_cast<int>(child.internalId() - 1), 0, kStageRow);
}

int StageListModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return stageCount();
  if (parent.column() != 0 || parent.internalId() != kStageRow) return 0;
  if (parent.row() < 0 || parent.row() >= stageCount()) return 0;
  return static_cast<int>(report_->stages[static_cast<size_t>(parent.row())].checks.size());
}

int StageListModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant StageListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this) return {};
  if (index.internalId() != kStageRow) {
    const auto& stage = report_->stages[static_cast<size_t>(index.internalId() - 1)];
    const std::string& check = stage.checks[static_cast<size_t>(index.row())];
    const bool failed = check.rfind("FAIL", 0) == 0;
    if (role == Qt::DisplayRole && index.column() == StageColumn)
      return checkText(QString::fromStdString(check));
    // Each check its own mark, so a failed check never sits beside a passing stage's tick.
    if (role == Qt::DecorationRole && index.column() == StageColumn)
      return statusIcon(failed                               ? StageStatus::Fail
                        : check.rfind("ok", 0) == 0          ? StageStatus::Pass
                        : check.rfind("not checked", 0) == 0 ? StageStatus::Skipped
                                                             : StageStatus::NotRun);
    if (role == Qt::ForegroundRole && failed) return QColor(0xC6, 0x28, 0x28);
    if (role == Qt::ToolTipRole) return QString::fromStdString(check);
    if (role == StatusRole)
      return failed                      ? QStringLiteral("fail")
             : check.rfind("ok", 0) == 0 ? QStringLiteral("pass")
                                         : QStringLiteral("other");
    return {};
  }
  const auto& stage = report_->stages[static_cast<size_t>(index.row())];
  const bool root = index.row() == rootCauseRow();
  switch (role) {
    case Qt::DisplayRole:
      if (index.column() == StageColumn)
        return QStringLiteral("%1. %2").arg(stage.number).arg(QString::fromStdString(stage.title));
      return QString::fromStdString(stage.summary);
    case Qt::DecorationRole:
      if (index.column() == StageColumn) return statusIcon(stage.status);
      return {};
    case Qt::ToolTipRole:
      return QStringLiteral("%1: %2").arg(QString::fromStdString(stageStatusName(stage.status)),
                                          QString::fromStdString(stage.summary));
    case Qt::FontRole:
      if (root) {
        QFont f;
        f.setBold(true);
        return f;
      }
      return {};
    case Qt::ForegroundRole:
      if (stage.status == StageStatus::Fail) return QColor(0xC6, 0x28, 0x28);
      if (stage.status == StageStatus::Skipped || stage.status == StageStatus::NotRun)
        return QColor(0x75, 0x75, 0x75);
      return {};
    case StatusRole: return QString::fromStdString(stageStatusName(stage.status));
    case RootCauseRole: return root;
    default: return {};
  }
}

QVariant StageListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == StageColumn ? tr("Stage") : tr("Result");
}

}  // namespace kvscope::ui
