// Two steps side by side: pin a step (Ctrl+B) and its |cached − reference| map stays here,
// beside the current step's, at the current layer, kv head and K/V kind, on one colour
// scale, with the change between them in numbers (max and where). The pinned step's view is
// computed by the inspector on the engine thread (tag "pinnedSnapshot").
#pragma once

#include <QWidget>
#include <cstdint>
#include <memory>

#include "ui/bridge/StepSnapshot.hpp"

class QGridLayout;
class QLabel;

namespace kvscope::ui {

class EngineController;
class KvHeatmapView;
class SelectionContext;

class StepComparePanel : public QWidget {
  Q_OBJECT

 public:
  StepComparePanel(SelectionContext* context, EngineController* engine, QWidget* parent = nullptr);

  static QString pinnedTag() { return QStringLiteral("pinnedSnapshot"); }

  /// Pins the current request and step; false without an audit.
  bool pinCurrent();
  void unpin();
  bool pinned() const { return pinnedStep_ >= 0; }
  int64_t pinnedRequest() const { return pinnedRequest_; }
  int64_t pinnedStep() const { return pinnedStep_; }
  KvHeatmapView* pinnedView() const { return pinnedView_; }
  KvHeatmapView* currentView() const { return currentView_; }
  /// The pinned step's view at the current layer/head/kind (nullptr until it arrives).
  const std::shared_ptr<const StepSnapshot>& pinnedSnapshot() const { return pinnedSnap_; }
  QString summary() const;
  /// The maps one above the other (a tall, narrow dock: the side of the window) instead of
  /// side by side (the bottom); follows the panel's shape.
  bool stacked() const { return stacked_; }

 Q_SIGNALS:
  void pinChanged(bool pinned);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void requestPinned();
  void placeMaps(bool stacked);
  void repaint();

  SelectionContext* context_;
  EngineController* engine_;
  QGridLayout* grid_;
  bool stacked_ = false;
  QLabel* heading_;
  QLabel* pinnedTitle_;
  QLabel* currentTitle_;
  QLabel* summary_;
  KvHeatmapView* pinnedView_;
  KvHeatmapView* currentView_;
  int64_t pinnedRequest_ = -1;
  int64_t pinnedStep_ = -1;
  std::shared_ptr<const StepSnapshot> pinnedSnap_;
};

}  // namespace kvscope::ui
