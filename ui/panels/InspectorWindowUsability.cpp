// InspectorWindow, continued: what a user of RenderDoc, Nsight or TensorBoard expects from
// the window's chrome — the Help menu, the reference-trace item and trace filters, recent
// files by kind, the last run's inputs at start-up, the colour-blind-safe colour maps, token
// search, pinning a step to compare, hover help on painted views — and a trace checked when
// it is opened (kvscope/TraceFileSniffer.hpp), not only when the audit runs.
#include <QAction>
#include <QActionGroup>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QVBoxLayout>

#include "kvscope/BuildInfo.hpp"
#include "kvscope/TraceFileSniffer.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/panels/HelpMenu.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/RecentFilesMenu.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/panels/StepComparePanel.hpp"
#include "ui/panels/TokenSearchBar.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/ViewToolTips.hpp"

namespace kvscope::ui {

namespace {
const QString kLastRunGroup = QStringLiteral("lastRun");

QMenu* menuTitled(QMenuBar* bar, const QString& title) {
  for (QAction* a : bar->actions())
    if (a->menu() && a->text() == title) return a->menu();
  return nullptr;
}
}  // namespace

QString InspectorWindow::traceFileFilter() {
  // llama.cpp's saved sequence states and mlx-lm's prompt caches are read as traces too
  // (with the model); llama-server names a slot's file as the user asks, so any is offered.
  return tr("KV Scope traces (*.kvtrace);;llama.cpp and mlx-lm saved caches (*.bin *.ggsq *.state "
            "*.safetensors);;All files (*)");
}

QStringList InspectorWindow::recentFiles() const { return recentMenu_->all(); }

void InspectorWindow::buildUsability() {
  // File: the reference trace has its own item (trace+trace mode), beside Open trace.
  if (QMenu* file = menuTitled(menuBar(), tr("&File"))) {
    auto* openReference = new QAction(tr("Open r&eference trace…"), this);
    openReference->setObjectName(QStringLiteral("openReferenceTrace"));
    openReference->setShortcut(QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_O));
    openReference->setToolTip(
        tr("The uncached run to compare the trace with (trace+trace mode: no model needed)"));
    connect(openReference, &QAction::triggered, this, [this] {
      const QString f = QFileDialog::getOpenFileName(this, tr("Open reference trace"), QString(),
                                                     traceFileFilter());
      if (!f.isEmpty()) openReferencePath(f);
    });
    file->insertAction(recentMenu_->menuAction(), openReference);
  }
  connect(recentMenu_, &RecentFilesMenu::openRequested, this,
          [this](RecentFilesMenu::Kind, const QString& path) { openPath(path); });

  // Navigate: find a token, pin a step.
  search_ = new TokenSearchBar(context_, stepper_->strip(), this);
  if (auto* layout = qobject_cast<QVBoxLayout*>(centralWidget()->layout()))
    layout->insertWidget(layout->indexOf(stepper_) + 1, search_);
  compare_ = new StepComparePanel(context_, engine_, this);
  compareDock_ = new QDockWidget(tr("Compare steps"), this);
  compareDock_->setObjectName(QStringLiteral("compareDock"));
  // In a scroll area: the dock never raises the window's minimum height past the screen
  // (issue 27: a pinned step grew a 1366x768 window to 984 pixels, for good).
  auto* compareScroll = new QScrollArea(this);
  compareScroll->setWidget(compare_);
  compareScroll->setWidgetResizable(true);
  compareScroll->setFrameShape(QFrame::NoFrame);
  compareScroll->setMinimumSize(120, 80);
  compareDock_->setWidget(compareScroll);
  addDockWidget(Qt::BottomDockWidgetArea, compareDock_);
  compareDock_->hide();
  if (QMenu* nav = menuTitled(menuBar(), tr("&Navigate"))) {
    nav->addSeparator();
    QAction* find = nav->addAction(tr("&Find token…"), QKeySequence(Qt::CTRL | Qt::Key_F), search_,
                                   &TokenSearchBar::activate);
    find->setObjectName(QStringLiteral("findToken"));
    QAction* pin = nav->addAction(
        tr("&Pin step for comparison"), QKeySequence(Qt::CTRL | Qt::Key_B), this, [this] {
          if (compare_->pinCurrent()) {
            showCompareDock();
          } else {
            statusBar()->showMessage(tr("Run an audit first: there is no step to pin"), 5000);
          }
        });
    pin->setObjectName(QStringLiteral("pinStep"));
    QAction* unpin =
        nav->addAction(tr("&Unpin step"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_B), compare_,
                       &StepComparePanel::unpin);
    unpin->setObjectName(QStringLiteral("unpinStep"));
    for (QAction* a : {find, pin, unpin}) a->setShortcutContext(Qt::WindowShortcut);
  }

  // View: the colour map, with the colour-blind-safe ones named as such.
  if (QMenu* view = menuTitled(menuBar(), tr("&View"))) {
    view->addAction(compareDock_->toggleViewAction());
    QMenu* colours = view->addMenu(tr("&Colour map"));
    colours->setObjectName(QStringLiteral("colourMapMenu"));
    auto* group = new QActionGroup(colours);
    for (const QString& name : KvHeatmapPanel::gradientNames()) {
      const bool safe = KvHeatmapPanel::isColourBlindSafe(name);
      QAction* a = colours->addAction(safe ? tr("%1 (colour-blind safe)").arg(name) : name);
      a->setObjectName(QStringLiteral("colourMap_") + name);
      a->setCheckable(true);
      a->setChecked(heatmaps_->gradientName() == name);
      group->addAction(a);
      connect(a, &QAction::triggered, this, [this, name] { heatmaps_->setGradientName(name); });
    }
    connect(heatmaps_, &KvHeatmapPanel::gradientChanged, colours, [colours](const QString& name) {
      for (QAction* a : colours->actions())
        a->setChecked(a->objectName() == QStringLiteral("colourMap_") + name);
    });
  }

  help_ = new HelpMenu(this);
  menuBar()->addMenu(help_);

  tips_ = new ViewToolTips(context_, stepper_->strip(), timeline_, headline_, this);

  // Fields that do not apply to the loaded inputs say why; so does the Faults tab.
  auto applicability = [this] {
    const bool trace = setup_->usesTrace();
    faults_->setEnabled(!trace);
    faults_->setToolTip(
        trace ? tr("Not used with a trace: faults are injected into the built-in engine, which "
                   "does not run when a trace is audited. Clear the Trace field to use them.")
              : QString());
  };
  connect(setup_, &RunSetupPanel::inputsChanged, this, applicability);
  applicability();
}

void InspectorWindow::checkTraceFile(const QString& path, const QString& role) {
  const std::string why = notATraceMessage(path.toStdString());
  setup_->setTraceProblem(role, why.empty() ? QString() : QString::fromStdString(why));
  if (why.empty()) {
    // The file that replaced a wrong one is fine: the banner stops blaming the old one.
    if (headline_->headline().contains(QStringLiteral("not a .kvtrace file")))
      headline_->showMessage(
          tr("%1 %2 opened; run the audit (Ctrl+R)").arg(role, QFileInfo(path).fileName()), false);
    return;
  }
  const QString text =
      tr("%1 %2: %3").arg(role, QFileInfo(path).fileName(), QString::fromStdString(why));
  headline_->showMessage(text, true);
  statusBar()->showMessage(text, 15000);
}

bool InspectorWindow::openReferencePath(const QString& path) {
  const QFileInfo info(path);
  if (!info.exists() || info.isDir()) {
    statusBar()->showMessage(info.isDir() ? tr("%1: a folder, not a reference trace").arg(path)
                                          : tr("%1: no such file").arg(path));
    return false;
  }
  setup_->setReferenceTraceFile(info.absoluteFilePath());
  addRecent(info.absoluteFilePath());
  statusBar()->showMessage(tr("Reference trace: %1").arg(info.absoluteFilePath()), 5000);
  checkTraceFile(info.absoluteFilePath(), tr("Reference trace"));
  return true;
}

QString InspectorWindow::inUserWords(const QString& message) const {
  // The parser's detail comes second: first what the file is.
  for (const std::string& f : {runningSpec_.traceFile, runningSpec_.referenceTraceFile}) {
    if (f.empty()) continue;
    const std::string why = notATraceMessage(f);
    if (!why.empty())
      return tr("%1: %2. Detail: %3")
          .arg(QFileInfo(QString::fromStdString(f)).fileName(), QString::fromStdString(why),
               message);
  }
  return message;
}

QString InspectorWindow::titleForOutput() const {
  // The platform appends the application's display name ("— KV Scope") unless the title
  // already ends with it: end with it, once.
  const AuditResult* r = context_->result();
  if (!r) return tr("KV Scope");
  const AuditJobSpec& s = auditedSpec_;
  QStringList names;
  if (!s.modelDir.empty()) names << QFileInfo(QString::fromStdString(s.modelDir)).fileName();
  if (!s.traceFile.empty()) names << QFileInfo(QString::fromStdString(s.traceFile)).fileName();
  if (!s.referenceTraceFile.empty())
    names << QFileInfo(QString::fromStdString(s.referenceTraceFile)).fileName();
  const QString verdict = r->report.clean() ? tr("clean") : tr("divergent");
  return names.isEmpty() ? tr("%1 — KV Scope").arg(verdict)
                         : tr("%1 (%2) — KV Scope").arg(names.join(QStringLiteral(" + ")), verdict);
}

AuditJobSpec InspectorWindow::currentSpec() const {
  AuditJobSpec spec = setup_->spec();
  for (const QString& f : faults_->specs()) spec.faults.push_back(f.toStdString());
  return spec;
}

BundleInputs InspectorWindow::bundleInputs() const {
  BundleInputs in;
  const AuditJobSpec& s = auditedSpec_;
  auto abs = [](const std::string& p) {
    return p.empty() ? QString() : QFileInfo(QString::fromStdString(p)).absoluteFilePath();
  };
  in.modelDir = abs(s.modelDir);
  in.traceFile = abs(s.traceFile);
  in.referenceTraceFile = abs(s.referenceTraceFile);
  for (const auto& item : weightsVersionItems(s))
    in.weightsVersions << QString::fromStdString(item);
  for (const auto& f : s.faults) in.faults << QString::fromStdString(f);
  for (const auto& p : s.prompts) in.prompts << QString::fromStdString(p);
  in.toolVersion = QString::fromStdString(BuildInfo::detect().kvscopeVersion);
  return in;
}

void InspectorWindow::saveLastRun(const AuditJobSpec& spec) const {
  QSettings s;
  s.beginGroup(kLastRunGroup);
  s.remove(QString());
  s.setValue(QStringLiteral("model"), QString::fromStdString(spec.modelDir));
  s.setValue(QStringLiteral("trace"), QString::fromStdString(spec.traceFile));
  s.setValue(QStringLiteral("reference"), QString::fromStdString(spec.referenceTraceFile));
  QStringList prompts, faults, weights, arrivals;
  for (const auto& p : spec.prompts) prompts << QString::fromStdString(p);
  for (const auto& f : spec.faults) faults << QString::fromStdString(f);
  for (const auto& w : weightsVersionItems(spec)) weights << QString::fromStdString(w);
  for (int64_t t : spec.arrivalTicks) arrivals << QString::number(t);
  s.setValue(QStringLiteral("prompts"), prompts);
  s.setValue(QStringLiteral("faults"), faults);
  s.setValue(QStringLiteral("weights"), weights);
  s.setValue(QStringLiteral("arrivals"), arrivals);
  s.setValue(QStringLiteral("maxNew"), static_cast<qlonglong>(spec.maxNewTokens));
  s.setValue(QStringLiteral("temperature"), spec.policy.temperature);
  s.setValue(QStringLiteral("topK"),
             spec.policy.topK ? static_cast<qlonglong>(*spec.policy.topK) : 0);
  s.setValue(QStringLiteral("topP"), spec.policy.topP ? *spec.policy.topP : 1.0);
  s.setValue(QStringLiteral("seed"), static_cast<qulonglong>(spec.policy.seed));
  s.endGroup();
}

bool InspectorWindow::restoreLastRun() {
  QSettings s;
  if (!s.childGroups().contains(kLastRunGroup)) return false;
  s.beginGroup(kLastRunGroup);
  AuditJobSpec spec;
  auto existing = [](const QString& p) {
    return !p.isEmpty() && QFileInfo::exists(p) ? p.toStdString() : std::string();
  };
  spec.modelDir = existing(s.value(QStringLiteral("model")).toString());
  spec.traceFile = existing(s.value(QStringLiteral("trace")).toString());
  spec.referenceTraceFile = existing(s.value(QStringLiteral("reference")).toString());
  for (const QString& p : s.value(QStringLiteral("prompts")).toStringList())
    spec.prompts.push_back(p.toStdString());
  for (const QString& t : s.value(QStringLiteral("arrivals")).toStringList())
    spec.arrivalTicks.push_back(t.toLongLong());
  if (!spec.modelDir.empty())
    for (const QString& w : s.value(QStringLiteral("weights")).toStringList()) {
      try {
        addWeightsVersion(spec, w.toStdString(), "Later weights");
      } catch (const std::exception&) {
        // a checkpoint that went away: leave it out
      }
    }
  spec.maxNewTokens = s.value(QStringLiteral("maxNew"), 16).toLongLong();
  spec.policy.temperature = s.value(QStringLiteral("temperature"), 0.0).toDouble();
  if (const qlonglong k = s.value(QStringLiteral("topK"), 0).toLongLong(); k > 0)
    spec.policy.topK = k;
  if (const double p = s.value(QStringLiteral("topP"), 1.0).toDouble(); p < 1.0)
    spec.policy.topP = p;
  spec.policy.seed = s.value(QStringLiteral("seed"), 0).toULongLong();
  const QStringList faults = s.value(QStringLiteral("faults")).toStringList();
  s.endGroup();
  setup_->setSpec(spec);
  faults_->clearSelection();
  for (const QString& f : faults) faults_->applySpec(f);
  if (spec.modelDir.empty() && spec.traceFile.empty()) return false;
  statusBar()->showMessage(tr("Restored the last run's inputs; Run audit (Ctrl+R) runs it again."),
                           8000);
  return true;
}

}  // namespace kvscope::ui

namespace kvscope::ui {

void InspectorWindow::showCompareDock() {
  if (compareDock_->isVisible()) {
    compareDock_->raise();
    return;
  }
  // Under the plots when they keep their minimum height and the maps get a useful one;
  // else (a laptop screen) a tab beside the diagnosis, where the maps stack in its height.
  const int below = compare_->sizeHint().height();
  const int needed = centralWidget()->minimumSizeHint().height() + below +
                     menuBar()->sizeHint().height() + statusBar()->sizeHint().height();
  const bool tab = height() < needed && diagnosisDock_->isVisible() &&
                   !diagnosisDock_->isFloating() && !compareDock_->isFloating();
  if (tab) tabifyDockWidget(diagnosisDock_, compareDock_);
  compareDock_->show();
  if (!tab && dockWidgetArea(compareDock_) == Qt::BottomDockWidgetArea)
    resizeDocks({compareDock_}, {below}, Qt::Vertical);
  compareDock_->raise();
}

}  // namespace kvscope::ui
