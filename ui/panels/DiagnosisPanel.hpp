// The diagnosis: the six stages as a checklist (the first failing one is the root), the
// findings, the evidence of the selected finding in words and numbers, and the whole
// failure matrix with the rows the findings fired highlighted. Clicking a finding selects
// its request, step and layer. The sections are as tall as their content, in one scroll area
// (no scroll box of their own in a short dock).
#pragma once

#include <QWidget>

#include <memory>

#include "kvscope/AuditReport.hpp"

class QLabel;
class QScrollArea;
class QTableView;
class QTextBrowser;
class QTreeView;

namespace kvscope::ui {

class FailureMatrixModel;
class FindingsModel;
class SelectionContext;
class StageListModel;

class DiagnosisPanel : public QWidget {
  Q_OBJECT

 public:
  explicit DiagnosisPanel(SelectionContext* context, QWidget* parent = nullptr);

  FindingsModel* findingsModel() const { return findings_; }
  StageListModel* stageModel() const { return stages_; }
  FailureMatrixModel* matrixModel() const { return matrix_; }
  QTableView* findingsView() const { return findingsView_; }
  QTreeView* stageView() const { return stageView_; }
  QTableView* matrixView() const { return matrixView_; }
  QString evidenceText() const;
  /// Shows a finding's evidence, highlights its row and selects its request/step/layer
  /// (and the kv head where the cache differs most).
  void activateFinding(int row);
  /// The row of a finding given by id ("cross_request") or 0-based row ("1"); -1 if none.
  int findingRow(const QString& idOrRow) const;
  /// The dock's one scroll area (the sections inside size to their content).
  QScrollArea* scrollArea() const { return scroll_; }
  /// Scrolls the highlighted failure-matrix row (the selected finding's) into view.
  void showFocusRow();

 private:
  void refresh();
  void showEvidence(int row);

  SelectionContext* context_;
  std::shared_ptr<const AuditReport> report_;
  StageListModel* stages_;
  FindingsModel* findings_;
  FailureMatrixModel* matrix_;
  QLabel* verdict_;
  QTreeView* stageView_;
  QTableView* findingsView_;
  QTextBrowser* evidence_;
  QTableView* matrixView_;
  QScrollArea* scroll_;
};

}  // namespace kvscope::ui
