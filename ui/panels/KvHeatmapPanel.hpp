// Reference | cached | |difference| heatmaps of the selected layer and head after the
// selected step, with the layer, head, K/V and colour-map selectors above them. Reference
// and cached share one symmetric colour range so equal values look equal.
#pragma once

#include <QStringList>
#include <QWidget>

#include "ui/views/QCustomPlotInclude.hpp"

class QComboBox;
class QLabel;
class QSpinBox;

namespace kvscope::ui {

class ElidedLabel;
class KvHeatmapView;
class SelectionContext;

class KvHeatmapPanel : public QWidget {
  Q_OBJECT

 public:
  explicit KvHeatmapPanel(SelectionContext* context, QWidget* parent = nullptr);

  KvHeatmapView* referenceView() const { return reference_; }
  KvHeatmapView* cachedView() const { return cached_; }
  KvHeatmapView* differenceView() const { return difference_; }

  static QStringList gradientNames();
  /// Viridis and cividis: readable with the common colour-vision deficiencies.
  static bool isColourBlindSafe(const QString& name);
  static QCPColorGradient gradientByName(const QString& name);
  QString gradientName() const;
  void setGradientName(const QString& name);

 Q_SIGNALS:
  void gradientChanged(const QString& name);

 private:
  void syncControls();
  void paintSnapshot();

  SelectionContext* context_;
  QSpinBox* layer_;
  QSpinBox* head_;
  QComboBox* kind_;
  QComboBox* gradient_;
  QLabel* heading_;
  QLabel* note_;
  ElidedLabel* layerKind_;  // what the shown layer is (StepView::layerKind), elided to fit
  KvHeatmapView* reference_;
  KvHeatmapView* cached_;
  KvHeatmapView* difference_;
  bool syncingRange_ = false;  // a range set by the panel itself, or being copied
};

}  // namespace kvscope::ui
