// The report's findings as a table: finding id, where (request/step/layer/position),
// confidence, the failure-matrix observation and its first check. A bug that several
// requests show is one row (kvscope::groupFindings): "where" names each request's onset,
// and the row selects the earliest. Roles expose the request/step/layer so a click can
// select them.
#pragma once

#include <QAbstractTableModel>

#include <memory>

#include "kvscope/AuditReport.hpp"
#include "kvscope/FindingGroups.hpp"

namespace kvscope::ui {

class FindingsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { IdColumn, WhereColumn, ConfidenceColumn, MatrixRowColumn, FirstCheckColumn, ColumnCount };
  enum Role { RequestRole = Qt::UserRole + 1, StepRole, LayerRole, FindingIdRole, RequestCountRole };

  explicit FindingsModel(QObject* parent = nullptr);

  void setReport(std::shared_ptr<const AuditReport> report);
  /// The row's earliest finding (nullptr out of range).
  const Finding* finding(int row) const;
  /// The row's findings: one per request that shows the bug (nullptr out of range).
  const FindingGroup* group(int row) const;

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const AuditReport> report_;
  std::vector<FindingGroup> groups_;  // pointers into report_->findings
};

}  // namespace kvscope::ui
