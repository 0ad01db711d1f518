// The inspector's main window: the headline banner, the token stepper, the K/V heatmaps,
// the layer overview, the position timeline and the logit deltas in the centre; run setup
// and faults on the left, the diagnosis on the right. It owns the selection context and
// the engine bridge and composes the panels; the panels only know the context.
#pragma once

#include <QMainWindow>
#include <QStringList>

#include <memory>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "kvscope/FaultSpec.hpp"
#include "ui/bridge/EngineController.hpp"
#include "ui/bridge/ExportController.hpp"

class QAction;
class QDockWidget;
class QMenu;
class QSplitter;

namespace kvscope::ui {

class DiagnosisPanel;
class FaultPanel;
class HeadlineView;
class InspectorController;
class KvHeatmapPanel;
class LayerOverviewView;
class LogitDeltaView;
class PositionTimelineView;
class RunSetupPanel;
class SelectionContext;
class TokenStepperPanel;

class InspectorWindow : public QMainWindow {
  Q_OBJECT

 public:
  InspectorWindow(EngineController::AuditJobFunction job, std::vector<FaultInfo> faultCatalog,
                  QWidget* parent = nullptr);
  ~InspectorWindow() override;

  SelectionContext* context() const { return context_; }
  EngineController* engine() const { return engine_; }
  InspectorController* controller() const { return controller_; }
  ExportController* exporter() const { return exporter_; }
  HeadlineView* headline() const { return headline_; }
  TokenStepperPanel* stepper() const { return stepper_; }
  KvHeatmapPanel* heatmaps() const { return heatmaps_; }
  LayerOverviewView* layerOverview() const { return overview_; }
  PositionTimelineView* timeline() const { return timeline_; }
  LogitDeltaView* logits() const { return logits_; }
  DiagnosisPanel* diagnosis() const { return diagnosis_; }
  RunSetupPanel* setup() const { return setup_; }
  FaultPanel* faults() const { return faults_; }

  /// Shows an audit output computed elsewhere (headless, synthetic).
  void showOutput(std::shared_ptr<const AuditJobOutput> output);
  /// Runs the audit the setup and fault panels describe on the engine thread (Ctrl+R);
  /// false, with the reason in the banner, when they do not describe one.
  bool runAudit();
  /// Selects a finding of the shown report (its id, e.g. "cross_request", or its 0-based
  /// row): its request, step and layer, and its evidence. False with `error` if none.
  bool selectFinding(const QString& idOrRow, QString* error);
  /// Opens a path: a directory as the model, a file as the trace. Adds it to recent files.
  bool openPath(const QString& path);
  QStringList recentFiles() const { return recent_; }
  /// The panel that export "current view" writes (the one that last had focus).
  QWidget* currentView() const;

  ExportOutcome exportWindow(const QString& path);
  ExportOutcome exportCurrentView(const QString& path);
  ExportOutcome exportBundle(const QString& directory);
  /// Processes pending events and replots every plot now (before grabbing pixels).
  void flushPlots();

  void loadSettings();
  void saveSettings() const;

 protected:
  void closeEvent(QCloseEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildCentre();
  void buildDocks();
  void buildMenus();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void exportInteractive(bool wholeWindow);
  void exportBundleInteractive();
  void trackFocus(QWidget* now);

  SelectionContext* context_;
  EngineController* engine_;
  InspectorController* controller_;
  ExportController* exporter_;
  HeadlineView* headline_ = nullptr;
  TokenStepperPanel* stepper_ = nullptr;
  KvHeatmapPanel* heatmaps_ = nullptr;
  LayerOverviewView* overview_ = nullptr;
  PositionTimelineView* timeline_ = nullptr;
  LogitDeltaView* logits_ = nullptr;
  DiagnosisPanel* diagnosis_ = nullptr;
  RunSetupPanel* setup_ = nullptr;
  FaultPanel* faults_ = nullptr;
  QDockWidget* setupDock_ = nullptr;
  QDockWidget* diagnosisDock_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QStringList recent_;
  std::vector<FaultInfo> catalog_;
  QWidget* currentView_ = nullptr;
  bool stateRestored_ = false;
  bool docksSized_ = false;
};

}  // namespace kvscope::ui
