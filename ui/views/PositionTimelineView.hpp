// Positions per step for the selected request: the position the audit expects (decode
// continues from the prompt length) against the position the engine recorded, the cache
// length per step (one line per layer when layers disagree), and events (arrival, weight
// update, context limit, ...) as labelled markers (a label too long for the plot's height is
// elided; the tooltip names the events in full). The current step is a vertical line.
#pragma once

#include <cstdint>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

class SelectionContext;

class PositionTimelineView : public QCustomPlot {
  Q_OBJECT

 public:
  explicit PositionTimelineView(SelectionContext* context, QWidget* parent = nullptr);

  int eventMarkerCount() const { return eventMarkers_; }
  QCPGraph* expectedGraph() const { return expected_; }
  QCPGraph* recordedGraph() const { return recorded_; }
  /// The step nearest a widget point (-1 outside the axes).
  int64_t stepAt(const QPoint& widgetPos) const;

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void rebuild();
  void moveCursor();
  /// Event labels elided to the height above their foot, once the axes have their size.
  void fitEventLabels();

  SelectionContext* context_;
  QCPTextElement* title_;
  QCPGraph* expected_;
  QCPGraph* recorded_;
  QCPItemStraightLine* cursor_;
  int64_t request_ = -1;
  int eventMarkers_ = 0;
};

}  // namespace kvscope::ui
