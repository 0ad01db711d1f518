// Small multiples of the whole stack at the current step: one bar per layer with the
// largest |cached - reference| over that layer's cache (log scale), against the noise
// floor. Layers above the floor are red, the first divergent one darkest and labelled;
// the selected layer is outlined. Clicking a bar selects its layer.
#pragma once

#include <cstdint>
#include <vector>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

class SelectionContext;

class LayerOverviewView : public QCustomPlot {
  Q_OBJECT

 public:
  explicit LayerOverviewView(SelectionContext* context, QWidget* parent = nullptr);

  /// Values shown, per layer (NaN: no comparison; +inf: shapes differ).
  const std::vector<double>& values() const { return values_; }
  /// First layer above the noise floor at this step, -1 when none.
  int64_t firstDivergentLayer() const { return firstDivergent_; }
  /// Widget point at the centre of a layer's bar (for tests and tooltips).
  QPoint layerCenter(int64_t layer) const;
  int64_t layerAt(const QPoint& widgetPos) const;
  /// The selected layer's band (for tests): spans the axis's whole height.
  QCPItemRect* selectionBand() const { return selected_; }
  QString title() const;
  /// The noise floor per layer: the audit's tolerance at this step (kDefaultNoiseFloor
  /// where the step was not audited).
  const std::vector<double>& noiseFloor() const { return floors_; }
  static constexpr double kDefaultNoiseFloor = 1e-4;

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  void refresh();

  SelectionContext* context_;
  QCPTextElement* title_;
  QCPBars* okBars_;
  QCPBars* badBars_;
  QCPBars* firstBars_;
  QCPItemRect* selected_;
  QCPGraph* floor_;
  QCPItemText* firstLabel_;
  std::vector<double> values_;
  std::vector<double> floors_;
  int64_t firstDivergent_ = -1;
};

}  // namespace kvscope::ui
