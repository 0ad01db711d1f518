// The report's findings as a table: finding id, where (request/step/layer/position),
// confidence, the failure-matrix observation and its first check. Roles expose the
// request/step/layer so a click can select them.
#pragma once

#include <QAbstractTableModel>

#include <memory>

#include "kvscope/AuditReport.hpp"

namespace kvscope::ui {

class FindingsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { IdColumn, WhereColumn, ConfidenceColumn, MatrixRowColumn, FirstCheckColumn, ColumnCount };
  enum Role { RequestRole = Qt::UserRole + 1, StepRole, LayerRole, FindingIdRole };

  explicit FindingsModel(QObject* parent = nullptr);

  void setReport(std::shared_ptr<const AuditReport> report);
  const Finding* finding(int row) const;

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const AuditReport> report_;
};

}  // namespace kvscope::ui
