// The six audit stages as a tree: one row per stage (number, title, status icon, summary),
// its checks as children. The first failing stage is the root cause and is marked.
#pragma once

#include <QAbstractItemModel>
#include <QIcon>

#include <memory>

#include "kvscope/AuditReport.hpp"

namespace kvscope::ui {

class StageListModel : public QAbstractItemModel {
  Q_OBJECT

 public:
  enum Column { StageColumn, SummaryColumn, ColumnCount };
  enum Role { StatusRole = Qt::UserRole + 1, RootCauseRole };

  explicit StageListModel(QObject* parent = nullptr);

  void setReport(std::shared_ptr<const AuditReport> report);
  /// Row of the first failing stage, -1 when none fails.
  int rootCauseRow() const;
  /// A check as shown: "ok: X" and "FAIL: X" as X (the core words a failed check as what
  /// failed; its icon says ok or FAIL).
  static QString checkText(const QString& check);
  static QIcon statusIcon(StageStatus status);

  QModelIndex index(int row, int column, const QModelIndex& parent = QModelIndex()) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  int stageCount() const;
  std::shared_ptr<const AuditReport> report_;
};

}  // namespace kvscope::ui
