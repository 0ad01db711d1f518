// One K/V heatmap: positions across, head dimensions down, drawn by a QCPColorMap from a
// buffer (no per-cell items), with a QCPColorScale and a hover tooltip naming the
// position, the dimension and the value. Three of these sit side by side: reference,
// cached and |difference|.
#pragma once

#include <QString>

#include <cstdint>
#include <vector>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

class KvHeatmapView : public QCustomPlot {
  Q_OBJECT

 public:
  enum class Role { Reference, Cached, Difference };

  explicit KvHeatmapView(Role role, QWidget* parent = nullptr);

  Role role() const { return role_; }
  /// Paints a [positions, dims] row-major buffer. `range` is the colour range.
  void setBuffer(const std::vector<float>& buffer, int64_t positions, int64_t dims,
                 QCPRange range, const QString& subtitle);
  void clearBuffer(const QString& message);
  /// Outlines positions [first, last] (the records the current step appended); -1: none.
  void setMarkedPositions(int64_t first, int64_t last);
  /// The axes' names: "position" / "head dim" for K/V rows, the state's features for a
  /// recurrent layer's state.
  void setAxisNames(const QString& across, const QString& down);
  void setGradient(const QCPColorGradient& gradient);
  /// Shows positions [first, last] (the rest stays reachable by dragging / wheel zoom).
  void setVisiblePositions(double first, double last);

  QCPColorMap* colorMap() const { return map_; }
  QCPColorScale* colorScale() const { return scale_; }
  int64_t positions() const { return positions_; }
  int64_t dims() const { return dims_; }
  /// The tooltip text for a widget point ("" outside the map): position, dim, value.
  QString valueTextAt(const QPoint& widgetPos) const;
  QString title() const;
  /// The framed columns' left and right edges in position coordinates (for tests).
  double markerLeft() const { return marker_->topLeft->coords().x(); }
  double markerRight() const { return marker_->bottomRight->coords().x(); }

 protected:
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  Role role_;
  QCPTextElement* title_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  QCPItemRect* marker_;
  QCPItemText* pointer_;  // a caret above the marked columns (one column is easy to miss)
  void placeMarker();
  void fitTicks();

  int64_t markedFirst_ = -1;  // the framed positions (-1: none)
  int64_t markedLast_ = -1;
  int64_t positions_ = 0;
  int64_t dims_ = 0;
};

}  // namespace kvscope::ui
