// The audited requests as a table: id, prompt, steps, stop reason, generated text and
// whether (and where) the request diverges. Column 0 is a one-line label for selectors.
#pragma once

#include <QAbstractTableModel>
#include <map>
#include <memory>

#include "kvscope/AuditJob.hpp"

namespace kvscope::ui {

class RequestListModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { LabelColumn, PromptColumn, StepsColumn, StopColumn, GeneratedColumn, ColumnCount };
  enum Role { RequestIdRole = Qt::UserRole + 1, DivergentRole };

  explicit RequestListModel(QObject* parent = nullptr);
  void setOutput(std::shared_ptr<const AuditJobOutput> output);
  int rowOf(int64_t requestId) const;

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  /// First diverged step of a request, -1 when none: the position timeline's
  /// (Inspector::timeline's divergentStep), so the list and the timeline agree.
  int64_t firstDivergedStep(int64_t request) const;
  std::shared_ptr<const AuditJobOutput> output_;
  std::map<int64_t, int64_t> divergentStep_;  // request id -> first diverged step
};

}  // namespace kvscope::ui
