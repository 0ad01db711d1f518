// The failure matrix, whole, as the core holds it (kvscope::FailureMatrix::rows()): the
// method's rows (docs/audit-method.md) first, then a heading row and KV Scope's additions,
// each in the core's table order; observation -> first check, with the rows that the
// report's findings map onto highlighted (several may fire at once).
#pragma once

#include <QAbstractTableModel>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"
#include "kvscope/FailureMatrix.hpp"

namespace kvscope::ui {

class FailureMatrixModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { ObservationColumn, FirstCheckColumn, FindingColumn, ColumnCount };
  enum Role {
    MatchedRole = Qt::UserRole + 1,
    FindingIdRole,  // the row's finding id ("" on the heading)
    OriginRole,     // "method", "kv_scope" or "heading"
  };

  /// Each model row: a matrix row of the core's table, or (nullptr) the heading above
  /// KV Scope's additions.
  static const std::vector<const FailureMatrixRow*>& rows();
  /// The model row of the heading above KV Scope's additions (-1 when there are none).
  static int additionsHeadingRow();
  /// Matrix row for a finding (the row of its id: the core derives the finding's
  /// observation and first check from that row); -1 when none.
  static int rowFor(const Finding& finding);

  explicit FailureMatrixModel(QObject* parent = nullptr);
  void setReport(std::shared_ptr<const AuditReport> report);
  bool isMatched(int row) const;
  /// Emphasises one row (the finding selected in the list); -1 for none.
  void setFocusRow(int row);
  /// Emphasises the finding's row and shows its observation and first check in the finding's
  /// own words (the layers it names) instead of the method's example.
  void setFocusFinding(const Finding& finding);

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const AuditReport> report_;
  std::vector<std::vector<std::string>> matched_;  // per row: finding ids that map onto it
  int focusRow_ = -1;
  std::string focusObservation_, focusFirstCheck_;  // the focused finding's words ("" none)
};

}  // namespace kvscope::ui
