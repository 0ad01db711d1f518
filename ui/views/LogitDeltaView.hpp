// Logit deltas. Top: max |cached - reference| logit per step of the selected request on a
// log scale against the tolerance band (rows within tolerance green, beyond it red).
// Bottom: the current step's delta for every token (cached - reference row), the largest
// ones labelled with their token.
#pragma once

#include <QWidget>

#include <cstdint>
#include <vector>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

class SelectionContext;

class LogitDeltaView : public QWidget {
  Q_OBJECT

 public:
  explicit LogitDeltaView(SelectionContext* context, QWidget* parent = nullptr);

  QCustomPlot* stepPlot() const { return steps_; }
  QCustomPlot* tokenPlot() const { return tokens_; }
  /// Token ids labelled in the bottom plot, largest |delta| first.
  const std::vector<int64_t>& labelledTokens() const { return labelled_; }
  static constexpr int kLabelledTokens = 5;
  /// The step nearest a point of the step plot (-1 outside its axes).
  int64_t stepAt(const QPoint& plotPos) const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void rebuildSteps();
  void moveCursor();
  void paintTokens();
  QString tokenText(int64_t id) const;

  SelectionContext* context_;
  QCustomPlot* steps_;
  QCPTextElement* stepsTitle_;
  QCPGraph* within_;
  QCPGraph* beyond_;
  QCPGraph* tolerance_;
  QCPGraph* floorGraph_;
  QCPItemStraightLine* cursor_;
  QCustomPlot* tokens_;
  QCPTextElement* tokensTitle_;
  QCPGraph* delta_;
  std::vector<QCPItemText*> labels_;
  std::vector<int64_t> labelled_;
  int64_t request_ = -1;
};

}  // namespace kvscope::ui
