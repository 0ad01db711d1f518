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
class HelpMenu;
class InspectorController;
class KvHeatmapPanel;
class LayerOverviewView;
class LogitDeltaView;
class PositionTimelineView;
class RecentFilesMenu;
class RunSetupPanel;
class SelectionContext;
class StepComparePanel;
class TokenSearchBar;
class TokenStepperPanel;
class ViewToolTips;

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
  HelpMenu* helpMenu() const { return help_; }
  RecentFilesMenu* recentMenu() const { return recentMenu_; }
  TokenSearchBar* tokenSearch() const { return search_; }
  StepComparePanel* stepCompare() const { return compare_; }
  QDockWidget* stepCompareDock() const { return compareDock_; }
  QDockWidget* diagnosisDock() const { return diagnosisDock_; }
  ViewToolTips* viewToolTips() const { return tips_; }

  /// Shows an audit output computed elsewhere (headless mode, tests).
  void showOutput(std::shared_ptr<const AuditJobOutput> output);
  /// The same, with the inputs it was computed from (what a minimized reproducer needs).
  void showOutput(std::shared_ptr<const AuditJobOutput> output, const AuditJobSpec& spec);
  /// Runs the audit the setup and fault panels describe on the engine thread (Ctrl+R);
  /// false, with the reason in the banner, when they do not describe one.
  bool runAudit();
  /// Selects a finding of the shown report (its id, e.g. "cross_request", or its 0-based
  /// row): its request, step and layer, and its evidence. False with `error` if none.
  bool selectFinding(const QString& idOrRow, QString* error);
  /// Opens a path: a directory as the model, a file as the trace. Adds it to recent files.
  bool openPath(const QString& path);
  /// Opens a file as the reference trace (trace+trace mode); checked like a trace.
  bool openReferencePath(const QString& path);
  /// Recent models and traces, newest first (File → Open recent lists them by kind).
  QStringList recentFiles() const;
  /// The inputs of the audit on screen (the bundle names them).
  const AuditJobSpec& auditedSpec() const { return auditedSpec_; }
  /// The setup and fault panels' job, as Run audit would post it.
  AuditJobSpec currentSpec() const;
  /// Fills the setup and fault panels with the last run's inputs (QSettings); false if none.
  bool restoreLastRun();
  static QString traceFileFilter();
  /// The panel that export "current view" writes (the one that last had focus).
  QWidget* currentView() const;

  ExportOutcome exportWindow(const QString& path);
  ExportOutcome exportCurrentView(const QString& path);
  ExportOutcome exportBundle(const QString& directory);
  /// Audit → Minimize trace for a bug report: writes the smallest trace that still shows the
  /// first finding to `path` (on the engine thread; waits for it). False with `message` set
  /// when it cannot; on success `message` is the kvscope-cli command that reproduces it.
  /// InspectorWindowReproducer.cpp.
  bool minimizeTrace(const QString& path, QString* message = nullptr);
  QAction* minimizeAction() const { return minimizeAction_; }
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
  // InspectorWindowUsability.cpp
  void buildUsability();
  void showCompareDock();
  void checkTraceFile(const QString& path, const QString& role);
  QString inUserWords(const QString& message) const;
  QString titleForOutput() const;
  BundleInputs bundleInputs() const;
  void saveLastRun(const AuditJobSpec& spec) const;
  // InspectorWindowReproducer.cpp
  void buildMinimizeAction(QMenu* audit);
  void minimizeTraceInteractive();
  std::shared_ptr<const Reproducer> runMinimize(const QString& path, const QString& commandPath,
                                                QString* error);

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
  QAction* minimizeAction_ = nullptr;
  QDockWidget* setupDock_ = nullptr;
  QDockWidget* diagnosisDock_ = nullptr;
  RecentFilesMenu* recentMenu_ = nullptr;
  HelpMenu* help_ = nullptr;
  TokenSearchBar* search_ = nullptr;
  StepComparePanel* compare_ = nullptr;
  QDockWidget* compareDock_ = nullptr;
  ViewToolTips* tips_ = nullptr;
  AuditJobSpec runningSpec_;  // posted by runAudit
  AuditJobSpec auditedSpec_;  // the inputs of the audit on screen
  std::vector<FaultInfo> catalog_;
  QWidget* currentView_ = nullptr;
  bool stateRestored_ = false;
  bool docksSized_ = false;
};

}  // namespace kvscope::ui
