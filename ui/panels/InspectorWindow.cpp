#include "ui/panels/InspectorWindow.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QShowEvent>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/BundleFolderDialog.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/RecentFilesMenu.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/panels/StepKeyFilter.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/LayerOverviewView.hpp"
#include "ui/views/LogitDeltaView.hpp"
#include "ui/views/PositionTimelineView.hpp"
#include "ui/views/QCustomPlotInclude.hpp"
#include "ui/views/StaleOverlay.hpp"

namespace kvscope::ui {

namespace {
const QString kGeometryKey = QStringLiteral("window/geometry");
const QString kStateKey = QStringLiteral("window/state");
const QString kGradientKey = QStringLiteral("view/colourMap");
constexpr int kNarrowWindow = 1500;  // below: the setup shares the right dock with the diagnosis

// At most the screen's available area (a laptop's 1366x768 gets no 1680x1050 window, and
// a geometry saved on a larger screen is cut down), and on it.
void fitIntoScreen(QWidget* window) {
  const QScreen* screen = window->screen();
  if (!screen) return;
  const QRect available = screen->availableGeometry();
  const QSize frame = window->frameGeometry().size() - window->geometry().size();
  const QSize room = available.size() - frame.expandedTo(QSize(0, window->isVisible() ? 0 : 30));
  if (window->width() > room.width() || window->height() > room.height())
    window->resize(window->size().boundedTo(room));
  if (!available.contains(window->frameGeometry().topLeft()) ||
      !available.contains(window->frameGeometry().bottomRight()))
    window->move(available.topLeft());
}
}  // namespace

InspectorWindow::InspectorWindow(EngineController::AuditJobFunction job,
                                 std::vector<FaultInfo> faultCatalog, QWidget* parent)
    : QMainWindow(parent), catalog_(std::move(faultCatalog)) {
  setObjectName(QStringLiteral("InspectorWindow"));
  setWindowTitle(tr("KV Scope"));
  setAcceptDrops(true);
  context_ = new SelectionContext(this);
  engine_ = new EngineController(std::move(job), this);
  controller_ = new InspectorController(context_, engine_, this);
  exporter_ = new ExportController(this);
  exporter_->setOverwritePolicy(ExportController::OverwritePolicy::Ask);
  exporter_->setAskOverwrite([this](const QStringList& existing) {
    return QMessageBox::question(this, tr("Overwrite?"),
                                 tr("These files exist:\n%1\n\nOverwrite them?").arg(existing.join(QLatin1Char('\n'))),
                                 QMessageBox::Yes | QMessageBox::No, QMessageBox::No) == QMessageBox::Yes;
  });

  buildCentre();
  buildDocks();
  for (QWidget* panel : std::initializer_list<QWidget*>{stepper_, heatmaps_, overview_, timeline_,
                                                        logits_, diagnosis_})
    new StaleOverlay(context_, panel);  // marks old results when the inputs change
  buildMenus();
  qApp->installEventFilter(new StepKeyFilter(this));  // stepping keys wherever the focus is
  statusBar()->showMessage(tr("Open a model directory or a trace, then Run audit (Ctrl+R)."));

  connect(controller_, &InspectorController::auditStarted, this, [this] {
    setup_->setRunning(true);
    headline_->showMessage(tr("Running audit…"), false);
    context_->setStale(tr("a new audit is running"));
    statusBar()->showMessage(tr("Running audit on the engine thread…"));
  });
  connect(controller_, &InspectorController::auditSucceeded, this, [this] {
    setup_->setRunning(false);
    setup_->setProgress(1.0, tr("done"));
    auditedSpec_ = runningSpec_;
    setWindowTitle(titleForOutput());
    statusBar()->showMessage(tr("Audit finished."), 5000);
  });
  connect(controller_, &InspectorController::auditFailed, this, [this](const QString& message, bool input) {
    setup_->setRunning(false);
    setup_->setProgress(0.0, message);
    headline_->showMessage((input ? tr("Input error: %1") : tr("Audit failed: %1"))
                               .arg(input ? inUserWords(message) : message),
                           true);
    context_->setStale(input ? tr("fix the input error and run again (Ctrl+R)")
                             : tr("the audit failed; run again (Ctrl+R)"));
    statusBar()->showMessage(message);
  });
  connect(controller_, &InspectorController::auditCancelled, this, [this] {
    setup_->setRunning(false);
    setup_->setProgress(0.0, tr("cancelled"));
    headline_->showMessage(tr("Audit cancelled"), false);
    context_->setStale(tr("the new run was cancelled; run again (Ctrl+R)"));
  });
  connect(engine_, &EngineController::progress, this, [this](const QString& tag, double f, const QString& what) {
    if (tag == EngineController::auditTag()) setup_->setProgress(f, what);
  });
  connect(qApp, &QApplication::focusChanged, this, [this](QWidget*, QWidget* now) { trackFocus(now); });
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    // "demo-model (divergent) — KV Scope": the name once (the platform adds nothing then).
    setWindowTitle(titleForOutput());
  });
  resize(1680, 1050);
  loadSettings();
  fitIntoScreen(this);
  // A narrow window stacks the setup under the diagnosis: the diagnosis comes up with results.
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    if (context_->output() && !tabifiedDockWidgets(diagnosisDock_).isEmpty())
      diagnosisDock_->raise();
  });
  connect(heatmaps_, &KvHeatmapPanel::gradientChanged, this,
          [](const QString& name) { QSettings().setValue(kGradientKey, name); });
}

InspectorWindow::~InspectorWindow() = default;

void InspectorWindow::buildCentre() {
  headline_ = new HeadlineView(context_, this);
  stepper_ = new TokenStepperPanel(context_, this);
  heatmaps_ = new KvHeatmapPanel(context_, this);
  overview_ = new LayerOverviewView(context_, this);
  timeline_ = new PositionTimelineView(context_, this);
  logits_ = new LogitDeltaView(context_, this);
  for (QWidget* w : std::initializer_list<QWidget*>{heatmaps_, overview_, timeline_, logits_})
    w->setFocusPolicy(Qt::ClickFocus);

  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->setObjectName(QStringLiteral("bottomSplitter"));
  bottom->addWidget(overview_);
  bottom->addWidget(timeline_);
  bottom->addWidget(logits_);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 3);
  bottom->setStretchFactor(2, 4);
  auto* vertical = new QSplitter(Qt::Vertical, this);
  vertical->setObjectName(QStringLiteral("centreSplitter"));
  vertical->addWidget(heatmaps_);
  vertical->addWidget(bottom);
  vertical->setStretchFactor(0, 5);
  vertical->setStretchFactor(1, 4);

  auto* centre = new QWidget(this);
  auto* layout = new QVBoxLayout(centre);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(headline_);
  layout->addWidget(stepper_);
  layout->addWidget(vertical, 1);
  setCentralWidget(centre);
  currentView_ = heatmaps_;
}

void InspectorWindow::buildDocks() {
  setup_ = new RunSetupPanel(this);
  faults_ = new FaultPanel(this);
  faults_->setCatalog(catalog_);
  auto* tabs = new QTabWidget(this);
  tabs->addTab(setup_, tr("Run"));
  tabs->addTab(faults_, tr("Faults"));
  setupDock_ = new QDockWidget(tr("Audit setup"), this);
  setupDock_->setObjectName(QStringLiteral("setupDock"));
  // Scrolls on a short screen instead of cutting off Run audit.
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(tabs);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // As wide as the setup needs once it is laid out (its hint is too small before the window
  // is shown), so nothing is cut off beside the scroll bar.
  auto fitWidth = [scroll, tabs] {
    scroll->setMinimumWidth(tabs->minimumSizeHint().width() +
                            scroll->verticalScrollBar()->sizeHint().width());
  };
  fitWidth();
  QMetaObject::invokeMethod(scroll, fitWidth, Qt::QueuedConnection);
  setupDock_->setWidget(scroll);
  addDockWidget(Qt::LeftDockWidgetArea, setupDock_);

  diagnosis_ = new DiagnosisPanel(context_, this);
  diagnosisDock_ = new QDockWidget(tr("Diagnosis"), this);
  diagnosisDock_->setObjectName(QStringLiteral("diagnosisDock"));
  diagnosisDock_->setWidget(diagnosis_);
  addDockWidget(Qt::RightDockWidgetArea, diagnosisDock_);
  // The side columns keep the full height: a dock at the bottom (Compare steps) goes under
  // the plots only, never under the diagnosis (issue 27: four tiny scroll boxes).
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
  setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);

  connect(setup_, &RunSetupPanel::runRequested, this, &InspectorWindow::runAudit);
  connect(setup_, &RunSetupPanel::cancelRequested, controller_, &InspectorController::cancelAudit);
  connect(setup_, &RunSetupPanel::browseModelRequested, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open model directory"));
    if (!dir.isEmpty()) openPath(dir);
  });
  connect(setup_, &RunSetupPanel::browseTraceRequested, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open trace"), QString(), traceFileFilter());
    if (!f.isEmpty()) openPath(f);
  });
  connect(setup_, &RunSetupPanel::browseReferenceRequested, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open reference trace"), QString(),
                                                   traceFileFilter());
    if (!f.isEmpty()) openReferencePath(f);
  });
}

void InspectorWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("Open &model directory…"), QKeySequence(Qt::CTRL | Qt::Key_O), this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open model directory"));
    if (!dir.isEmpty()) openPath(dir);
  });
  file->addAction(tr("Open &GGUF model file…"), this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open GGUF model"), QString(),
                                                   tr("GGUF models (*.gguf);;All files (*)"));
    if (!f.isEmpty()) openPath(f);
  });
  file->addAction(tr("Open &trace…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open trace"), QString(), traceFileFilter());
    if (!f.isEmpty()) openPath(f);
  });
  recentMenu_ = new RecentFilesMenu(tr("Open &recent"), this);
  file->addMenu(recentMenu_);
  file->addSeparator();
  file->addAction(tr("Export current &view…"), QKeySequence(Qt::CTRL | Qt::Key_E), this,
                  [this] { exportInteractive(false); });
  file->addAction(tr("Export &window…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), this,
                  [this] { exportInteractive(true); });
  file->addAction(tr("Export &bug-report bundle…"), this, [this] { exportBundleInteractive(); });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* audit = menuBar()->addMenu(tr("&Audit"));
  audit->addAction(tr("&Run audit"), QKeySequence(Qt::CTRL | Qt::Key_R), this,
                   &InspectorWindow::runAudit);
  audit->addAction(tr("&Cancel"), QKeySequence(Qt::Key_Escape), controller_, &InspectorController::cancelAudit);
  buildMinimizeAction(audit);

  QMenu* nav = menuBar()->addMenu(tr("&Navigate"));
  nav->addAction(stepper_->nextAction());
  nav->addAction(stepper_->previousAction());
  nav->addAction(stepper_->divergenceAction());
  nav->addSeparator();
  auto* layerUp = nav->addAction(tr("Next layer"), QKeySequence(Qt::Key_BracketRight), this,
                                 [this] { context_->setLayer(context_->selection().layer + 1); });
  auto* layerDown = nav->addAction(tr("Previous layer"), QKeySequence(Qt::Key_BracketLeft), this,
                                   [this] { context_->setLayer(context_->selection().layer - 1); });
  auto* kind = nav->addAction(tr("Toggle keys / values"), QKeySequence(Qt::Key_V), this, [this] {
    context_->setKind(context_->selection().kind == KvKind::Keys ? KvKind::Values : KvKind::Keys);
  });
  for (QAction* a : {layerUp, layerDown, kind}) a->setShortcutContext(Qt::ApplicationShortcut);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(setupDock_->toggleViewAction());
  view->addAction(diagnosisDock_->toggleViewAction());
  rebuildRecentMenu();
  buildUsability();
}

void InspectorWindow::showOutput(std::shared_ptr<const AuditJobOutput> output) {
  auditedSpec_ = currentSpec();
  controller_->setOutput(std::move(output));
}

void InspectorWindow::showOutput(std::shared_ptr<const AuditJobOutput> output,
                                 const AuditJobSpec& spec) {
  auditedSpec_ = spec;
  controller_->setOutput(std::move(output));
}

bool InspectorWindow::openPath(const QString& path) {
  const QFileInfo info(path);
  if (!info.exists()) {
    statusBar()->showMessage(tr("%1: no such file or directory").arg(path));
    return false;
  }
  const QString model = setup_->modelDir(), trace = setup_->traceFile();
  // A directory is a HuggingFace model, a .gguf file llama.cpp's; any other file a trace.
  const bool isModel = info.isDir() || info.suffix().compare(QStringLiteral("gguf"), Qt::CaseInsensitive) == 0;
  if (isModel)
    setup_->setModelDir(info.absoluteFilePath());
  else
    setup_->setTraceFile(info.absoluteFilePath());
  if (model != setup_->modelDir() || trace != setup_->traceFile())
    context_->setStale(tr("%1 opened; run the audit again (Ctrl+R)").arg(info.fileName()));
  addRecent(info.absoluteFilePath());
  statusBar()->showMessage(isModel ? tr("Model: %1").arg(info.absoluteFilePath())
                                   : tr("Trace: %1").arg(info.absoluteFilePath()),
                           5000);
  if (!isModel) checkTraceFile(info.absoluteFilePath(), tr("Trace"));
  return true;
}

bool InspectorWindow::runAudit() {
  AuditJobSpec spec = setup_->spec();
  for (const QString& f : faults_->specs()) spec.faults.push_back(f.toStdString());
  if (spec.modelDir.empty() && spec.traceFile.empty()) {
    headline_->showMessage(tr("Input error: open a model directory or a trace first"), true);
    context_->setStale(tr("fix the input error and run again (Ctrl+R)"));
    return false;
  }
  QString error;
  if (!setup_->validate(&error)) {
    headline_->showMessage(tr("Input error: %1").arg(error), true);
    context_->setStale(tr("fix the input error and run again (Ctrl+R)"));
    return false;
  }
  runningSpec_ = spec;
  saveLastRun(spec);
  controller_->runAudit(spec);
  return true;
}

bool InspectorWindow::selectFinding(const QString& idOrRow, QString* error) {
  const int row = diagnosis_->findingRow(idOrRow);
  if (row < 0) {
    const AuditResult* r = context_->result();
    QStringList ids;
    if (r)
      for (const auto& f : r->report.findings) ids << QString::fromStdString(f.id);
    *error = ids.isEmpty() ? tr("--select-finding %1: the report has no findings").arg(idOrRow)
                           : tr("--select-finding %1: no such finding (findings: %2)")
                                 .arg(idOrRow, ids.join(QStringLiteral(", ")));
    return false;
  }
  diagnosis_->activateFinding(row);
  return true;
}

void InspectorWindow::addRecent(const QString& path) {
  recentMenu_->add(
      QFileInfo(path).isDir() ? RecentFilesMenu::Kind::Model : RecentFilesMenu::Kind::Trace, path);
}

void InspectorWindow::rebuildRecentMenu() {
  if (recentMenu_) recentMenu_->load();
}

void InspectorWindow::trackFocus(QWidget* now) {
  for (QWidget* w = now; w; w = w->parentWidget()) {
    if (w == heatmaps_ || w == overview_ || w == timeline_ || w == logits_ || w == diagnosis_ ||
        w == stepper_) {
      currentView_ = w;
      return;
    }
  }
}

QWidget* InspectorWindow::currentView() const { return currentView_; }

void InspectorWindow::flushPlots() {
  QCoreApplication::processEvents();
  for (QCustomPlot* plot : findChildren<QCustomPlot*>()) plot->replot(QCustomPlot::rpImmediateRefresh);
}

ExportOutcome InspectorWindow::exportWindow(const QString& path) {
  flushPlots();
  return exporter_->exportWidget(this, path);
}

ExportOutcome InspectorWindow::exportCurrentView(const QString& path) {
  flushPlots();
  return exporter_->exportWidget(currentView_, path);
}

ExportOutcome InspectorWindow::exportBundle(const QString& directory) {
  if (!context_->output()) {
    ExportOutcome out;
    out.error = tr("no audit to export");
    return out;
  }
  // The screenshot shows what the bundle is about: the diagnosis with the fired matrix row
  // in view (not as the panels happen to be scrolled), and the selected step in the strip.
  diagnosisDock_->raise();
  diagnosis_->showFocusRow();
  stepper_->revealCurrent();
  flushPlots();
  ExportController::MinimizeForBundle minimize;
  if (ExportController::canMinimize(auditedSpec_, context_->output().get()))
    minimize = [this](const QString& path, QString* error) {
      return runMinimize(path, ExportController::minimizedFileName(), error);
    };
  return exporter_->exportBundle(
      this, *context_->output(), directory, bundleInputs(), minimize,
      ExportController::whyNotMinimizable(auditedSpec_, context_->output().get()));
}

void InspectorWindow::exportInteractive(bool wholeWindow) {
  const QString path = QFileDialog::getSaveFileName(
      this, wholeWindow ? tr("Export window") : tr("Export current view"), QString(),
      tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"), nullptr,
      QFileDialog::DontConfirmOverwrite);  // the exporter asks itself
  if (path.isEmpty()) return;
  const ExportOutcome out = wholeWindow ? exportWindow(path) : exportCurrentView(path);
  statusBar()->showMessage(out.ok ? tr("Wrote %1").arg(out.written.join(QStringLiteral(", "))) : out.error, 8000);
  if (!out.ok) QMessageBox::warning(this, tr("Export failed"), out.error);  // not only 8 s
}

void InspectorWindow::exportBundleInteractive() {
  const QString dir = BundleFolderDialog::getFolder(this);  // a new folder name is fine
  if (dir.isEmpty()) return;
  const ExportOutcome out = exportBundle(dir);
  statusBar()->showMessage(out.ok ? tr("Wrote %1").arg(out.written.join(QStringLiteral(", "))) : out.error, 8000);
  if (!out.ok) QMessageBox::warning(this, tr("Bundle export failed"), out.error);
}

void InspectorWindow::loadSettings() {
  QSettings s;
  recentMenu_->load();
  const QByteArray geometry = s.value(kGeometryKey).toByteArray();
  if (!geometry.isEmpty()) restoreGeometry(geometry);
  const QByteArray state = s.value(kStateKey).toByteArray();
  if (!state.isEmpty()) stateRestored_ = restoreState(state);
  const QString gradient = s.value(kGradientKey).toString();
  if (!gradient.isEmpty()) heatmaps_->setGradientName(gradient);
  restoreLastRun();
}

void InspectorWindow::saveSettings() const {
  QSettings s;
  s.setValue(kGeometryKey, saveGeometry());
  s.setValue(kStateKey, saveState());
  recentMenu_->save();
  s.setValue(kGradientKey, heatmaps_->gradientName());
}

void InspectorWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  if (!stateRestored_ && !docksSized_) {
    // First run: a narrow setup column, a diagnosis column wide enough for the matrix.
    docksSized_ = true;
    if (width() < kNarrowWindow) {
      // A laptop screen: one dock column, so the plots keep about two thirds of the width.
      tabifyDockWidget(diagnosisDock_, setupDock_);
      (context_->output() ? diagnosisDock_ : setupDock_)->raise();
      resizeDocks({diagnosisDock_}, {std::max(380, width() * 3 / 10)}, Qt::Horizontal);
    } else {
      resizeDocks({setupDock_, diagnosisDock_},
                  {std::max(230, width() / 7), std::max(420, width() * 2 / 7)}, Qt::Horizontal);
    }
  }
}

void InspectorWindow::closeEvent(QCloseEvent* event) {
  saveSettings();
  engine_->cancel();
  QMainWindow::closeEvent(event);
}

void InspectorWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void InspectorWindow::dropEvent(QDropEvent* event) {
  bool any = false;
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile()) any = openPath(url.toLocalFile()) || any;
  if (any) event->acceptProposedAction();
}

}  // namespace kvscope::ui
