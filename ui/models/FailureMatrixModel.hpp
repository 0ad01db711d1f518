// The failure matrix of docs/audit-method.md, whole: observation -> first check, with the
// rows that the report's findings map onto highlighted (several may fire at once).
#pragma once

#include <QAbstractTableModel>

#include <memory>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"

namespace kvscope::ui {

class FailureMatrixModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { ObservationColumn, FirstCheckColumn, FindingColumn, ColumnCount };
  enum Role { MatchedRole = Qt::UserRole + 1 };

  struct Row {
    const char* observation;
    const char* firstCheck;
    const char* findingId;  // the report's stable finding id for this row
  };
  static const std::vector<Row>& rows();
  /// Matrix row for a finding (by its observation text, else its id); -1 when none.
  static int rowFor(const Finding& finding);

  explicit FailureMatrixModel(QObject* parent = nullptr);
  void setReport(std::shared_ptr<const AuditReport> report);
  bool isMatched(int row) const;
  /// Emphasises one row (the finding selected in the list); -1 for none.
  void setFocusRow(int row);

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const AuditReport> report_;
  std::vector<std::vector<std::string>> matched_;  // per row: finding ids that map onto it
  int focusRow_ = -1;
};

}  // namespace kvscope::ui
