// Issue 16, items 7, 8 and 12, driven through the real window on a real audit (TestAudit.hpp):
// the bug bundle (a new folder name in the folder dialog, the inputs and the version in
// report.json and summary.md, integers as integers, near ties only when they are), a wrong
// file opened as a trace named for what it is when it is opened and when the audit runs, the
// Help menu and its shortcut table (the same table as docs/inspector.md and every shortcut
// of the window), tooltips on painted views, the reference-trace item and *.kvtrace filter,
// recent files by kind, the last run restored, a colour-blind-safe map, run-setup fields
// that do not apply to a trace, the title, token search and comparing two steps.
#include <QAbstractButton>
#include <QAbstractItemModelTester>
#include <QDialog>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QHelpEvent>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QTimer>
#include <QToolButton>
#include <QToolTip>
#include <QtTest>
#include <filesystem>
#include <functional>

#include "TestAudit.hpp"
#include "kvscope/BuildInfo.hpp"
#include "kvscope/FaultSpec.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/ShortcutTableModel.hpp"
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
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/PositionTimelineView.hpp"
#include "ui/views/TokenStripView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

QAction* actionNamed(QWidget* window, const QString& text) {
  for (QAction* a : window->findChildren<QAction*>())
    if (a->text() == text) return a;
  return nullptr;
}

QMenu* menuNamed(QMainWindow* window, const QString& title) {
  for (QAction* a : window->menuBar()->actions())
    if (a->menu() && a->text() == title) return a->menu();
  return nullptr;
}

/// Runs `body` on the next modal dialog of type T once it is shown (from a timer, while the
/// code under test sits in exec()).
template <typename T>
void onModal(std::function<void(T*)> body) {
  auto* timer = new QTimer;
  timer->setInterval(20);
  QObject::connect(timer, &QTimer::timeout, [timer, body] {
    if (auto* d = qobject_cast<T*>(QApplication::activeModalWidget())) {
      timer->stop();
      timer->deleteLater();
      body(d);
      // A dialog that refused the answer (a loaded machine, a file it has not listed yet)
      // would wait for ever: close it, so the test fails on its checks instead of timing out.
      QTimer::singleShot(10000, d, [d] {
        if (!d->isVisible()) return;
        qWarning("the dialog is still open 10 s after the test answered it; rejecting it");
        d->reject();
      });
    }
  });
  timer->start();
}

QString readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

QString tooltipAt(QWidget* widget, const QPoint& pos) {
  QToolTip::hideText();
  QHelpEvent help(QEvent::ToolTip, pos, widget->mapToGlobal(pos));
  QApplication::sendEvent(widget, &help);
  return QToolTip::isVisible() ? QToolTip::text() : QString();
}

EngineController::AuditJobFunction realJob() {
  return [](const AuditJobSpec& spec) { return runAuditJob(spec); };
}

/// A real trace of the test audit, written once.
QString realTrace() {
  static QTemporaryDir dir;
  static QString path;
  if (path.isEmpty()) {
    AuditJobSpec spec = test::testAuditSpec();
    path = dir.filePath(QStringLiteral("engine.kvtrace"));
    spec.saveTraceTo = path.toStdString();
    runAuditJob(spec);
  }
  return path;
}

}  // namespace

class UsabilityMenusTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;

  void openWindow(EngineController::AuditJobFunction job = nullptr, bool withOutput = true) {
    window_ = std::make_unique<InspectorWindow>(std::move(job), FaultSpec::catalog());
    window_->resize(1400, 900);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    if (withOutput) {
      AuditJobSpec spec = test::testAuditSpec();
      spec.faults.clear();
      window_->setup()->setSpec(spec);
      window_->showOutput(test::makeTestOutput());
      QVERIFY(window_->controller()->waitUntilSettled(10000));
    }
  }

 private Q_SLOTS:
  void initTestCase() { QGuiApplication::setApplicationDisplayName(QStringLiteral("KV Scope")); }
  void init() { QSettings().clear(); }
  void cleanup() { window_.reset(); }

  // --- item 7: the bug bundle ----------------------------------------------------------

  void bundleFolderDialogAcceptsANewFolderName() {
    openWindow();
    QTemporaryDir dir;
    const QString target = dir.filePath(QStringLiteral("new-bundle"));
    QVERIFY(!QFileInfo::exists(target));
    bool seen = false;
    onModal<QFileDialog>([&](QFileDialog* d) {
      seen = true;
      d->setDirectory(dir.path());
      auto* edit = d->findChild<QLineEdit*>(QStringLiteral("fileNameEdit"));
      QVERIFY(edit);
      edit->clear();
      QTest::keyClicks(edit, QStringLiteral("new-bundle"));
      QTest::keyClick(edit, Qt::Key_Return);
    });
    QAction* bundle = actionNamed(window_.get(), QStringLiteral("Export &bug-report bundle…"));
    QVERIFY(bundle);
    bundle->trigger();
    QVERIFY(seen);
    for (const QString& name : ExportController::bundleFileNames())
      QVERIFY2(QFileInfo::exists(QDir(target).filePath(name)), qPrintable(name));
  }

  void bundleNamesTheInputsTheVersionAndPrintsIntegers() {
    openWindow();
    QTemporaryDir dir;
    const ExportOutcome out = window_->exportBundle(dir.path());
    QVERIFY2(out.ok, qPrintable(out.error));
    const QString model =
        QFileInfo(QString::fromStdString(test::demoModelDir())).absoluteFilePath();
    const QString version = QString::fromStdString(BuildInfo::detect().kvscopeVersion);

    const QJsonObject json =
        QJsonDocument::fromJson(readAll(dir.filePath(QStringLiteral("report.json"))).toUtf8())
            .object();
    QCOMPARE(json.value(QStringLiteral("inputs"))
                 .toObject()
                 .value(QStringLiteral("model_dir"))
                 .toString(),
             model);
    QCOMPARE(
        json.value(QStringLiteral("tool")).toObject().value(QStringLiteral("version")).toString(),
        version);

    const QString md = readAll(dir.filePath(QStringLiteral("summary.md")));
    QVERIFY2(md.contains(QStringLiteral("- Model directory: `%1`").arg(model)),
             qPrintable(md.left(800)));
    QVERIFY(md.contains(QStringLiteral("- KV Scope version: %1").arg(version)));
    QVERIFY(md.indexOf(QStringLiteral("## Inputs")) < md.indexOf(QStringLiteral("## Findings")));
    // Evidence counts (requests affected, layers, slots) print as integers.
    static const QRegularExpression fakeFloat(QStringLiteral("= -?\\d+\\.0000\\b"));
    QVERIFY2(!md.contains(fakeFloat), qPrintable(md));
    QVERIFY(md.contains(QRegularExpression(QStringLiteral("`requests_affected` = \\d+\\n"))));

    // "(near tie)" only where the reference's top-2 margin is within twice the tolerance.
    const QJsonArray steps = json.value(QStringLiteral("steps")).toArray();
    int wide = 0;
    for (const QJsonValue& v : steps) {
      const QJsonObject s = v.toObject();
      const double margin = s.value(QStringLiteral("top2_margin")).toDouble();
      const double tol = s.value(QStringLiteral("tolerance")).toDouble();
      QCOMPARE(s.value(QStringLiteral("near_tie")).toBool(), margin < 2 * tol);
      if (margin >= 2 * tol) ++wide;
    }
    QVERIFY(wide > 0);
    for (const QString& line : md.split(QLatin1Char('\n'))) {
      if (!line.contains(QStringLiteral("(near tie)"))) continue;
      const QStringList cells = line.split(QLatin1Char('|'));
      const double tol = cells.value(5).trimmed().toDouble();
      const double margin =
          cells.value(6).split(QLatin1Char(' '), Qt::SkipEmptyParts).value(0).toDouble();
      QVERIFY2(margin < 2 * tol, qPrintable(line));
    }
  }

  // --- item 8: a wrong file opened as a trace ------------------------------------------

  void aWrongTraceIsNamedWhenOpenedAndWhenRun() {
    openWindow(realJob(), false);
    const QString config =
        QString::fromStdString(test::demoModelDir()) + QStringLiteral("/config.json");
    QVERIFY(window_->openPath(config));
    QVERIFY2(window_->headline()->headline().contains(
                 QStringLiteral("this is not a .kvtrace file (it looks like JSON)")),
             qPrintable(window_->headline()->headline()));
    QLineEdit* traceEdit = window_->setup()->traceEdit();
    QCOMPARE(traceEdit->text(), QFileInfo(config).absoluteFilePath());
    QVERIFY(traceEdit->toolTip().startsWith(
        QStringLiteral("this is not a .kvtrace file (it looks like JSON)")));

    // The model's weights dropped as a trace: a safetensors file, not a trace.
    QString weights;
    for (const auto& e : std::filesystem::directory_iterator(test::demoModelDir()))
      if (e.path().extension() == ".safetensors")
        weights = QString::fromStdString(e.path().string());
    QVERIFY(!weights.isEmpty());
    QVERIFY(window_->openPath(weights));
    QVERIFY2(window_->headline()->headline().contains(
                 QStringLiteral("it looks like a safetensors file")),
             qPrintable(window_->headline()->headline()));
    QVERIFY(window_->headline()->headline().contains(
        QStringLiteral("open its folder as the model directory")));

    // Run it anyway: the user's words first, the parser's detail second.
    QVERIFY(window_->openPath(config));
    window_->setup()->setModelDir(QString::fromStdString(test::demoModelDir()));
    QSignalSpy failed(window_->controller(), &InspectorController::auditFailed);
    QTest::keyClick(window_.get(), Qt::Key_R, Qt::ControlModifier);
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, 20000);
    const QString shown = window_->headline()->headline();
    QVERIFY2(shown.startsWith(QStringLiteral(
                 "Input error: config.json: this is not a .kvtrace file (it looks like JSON)")),
             qPrintable(shown));
    QVERIFY(shown.indexOf(QStringLiteral("Detail:")) >
            shown.indexOf(QStringLiteral("looks like JSON")));

    // A real trace opens without complaint.
    QVERIFY(window_->openPath(realTrace()));
    QVERIFY(traceEdit->toolTip().contains(QStringLiteral(".kvtrace file; empty")));
    QVERIFY(!window_->headline()->headline().contains(QStringLiteral("not a .kvtrace")));
  }

  // --- item 12 -------------------------------------------------------------------------

  void helpMenuShowsEveryShortcutFromOneTable() {
    openWindow();
    QMenu* help = menuNamed(window_.get(), QStringLiteral("&Help"));
    QVERIFY(help);
    QCOMPARE(help, static_cast<QMenu*>(window_->helpMenu()));
    // The Audit menu shows Ctrl+R.
    QAction* run = actionNamed(window_.get(), QStringLiteral("&Run audit"));
    QVERIFY(run);
    QCOMPARE(run->shortcut(), QKeySequence(Qt::CTRL | Qt::Key_R));
    // F1 opens the list: the table's rows, nothing else.
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    QTest::keyClick(window_.get(), Qt::Key_F1);
    QDialog* dialog = window_->helpMenu()->shortcutsDialog();
    QTRY_VERIFY(dialog->isVisible());
    auto* table = dialog->findChild<QTableView*>(QStringLiteral("shortcutsTable"));
    QVERIFY(table);
    QAbstractItemModelTester tester(table->model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(table->model()->rowCount(), static_cast<int>(ShortcutTableModel::rows().size()));
    bool hasRun = false;
    for (int r = 0; r < table->model()->rowCount(); ++r)
      hasRun = hasRun || table->model()->index(r, 0).data().toString() ==
                             QKeySequence(Qt::CTRL | Qt::Key_R).toString(QKeySequence::NativeText);
    QVERIFY(hasRun);
    dialog->hide();
    // Every shortcut of the window is a row of the table (add new ones there first).
    for (QAction* a : window_->findChildren<QAction*>())
      for (const QKeySequence& k : a->shortcuts())
        QVERIFY2(ShortcutTableModel::contains(k),
                 qPrintable(QStringLiteral("%1 (%2) is missing from "
                                           "ui/models/ShortcutTableModel.cpp and docs/inspector.md")
                                .arg(a->text(), k.toString())));
    // docs/inspector.md carries the same table.
    const QString doc = readAll(QStringLiteral(KVSCOPE_SOURCE_DIR "/docs/inspector.md"));
    if (!doc.contains(ShortcutTableModel::markdown()))
      qWarning().noquote() << ShortcutTableModel::markdown();
    QVERIFY2(doc.contains(ShortcutTableModel::markdown()),
             qPrintable(QStringLiteral("docs/inspector.md must contain:\n") +
                        ShortcutTableModel::markdown()));
  }

  void aboutNamesTheVersion() {
    openWindow();
    window_->helpMenu()->aboutAction()->trigger();
    QMessageBox* box = nullptr;
    QTRY_VERIFY((box = window_->findChild<QMessageBox*>(QStringLiteral("aboutBox"))) != nullptr);
    QVERIFY(box->text().contains(QString::fromStdString(BuildInfo::detect().kvscopeVersion)));
    QVERIFY(box->text().contains(QStringLiteral("LibTorch")));
    box->close();
  }

  void tooltipsOnTokensBannerPlotAndButtons() {
    openWindow();
    TokenStripView* strip = window_->stepper()->strip();
    const TokenStripView::Cell* generated = nullptr;
    for (const auto& c : strip->cells())
      if (!c.prompt && c.step > 0 && !generated) generated = &c;
    QVERIFY(generated);
    window_->stepper()->revealCurrent();
    const QString token = tooltipAt(strip, generated->rect.center());
    QVERIFY2(token.contains(QStringLiteral("token id %1").arg(generated->tokenId)),
             qPrintable(token));
    QVERIFY(token.contains(QStringLiteral("step %1").arg(generated->step)));

    PositionTimelineView* plot = window_->timeline();
    plot->replot(QCustomPlot::rpImmediateRefresh);
    const QPoint at(static_cast<int>(plot->xAxis->coordToPixel(2.0)),
                    plot->axisRect()->center().y());
    const QString timeline = tooltipAt(plot, at);
    QVERIFY2(timeline.contains(QStringLiteral("step 2")) &&
                 timeline.contains(QStringLiteral("expected position")),
             qPrintable(timeline));

    const QString banner = tooltipAt(window_->headline(), QPoint(5, 5));
    QVERIFY2(banner.contains(QStringLiteral("Press D")), qPrintable(banner));

    QList<QAbstractButton*> buttons = window_->setup()->findChildren<QAbstractButton*>();
    for (QAbstractButton* b :
         window_->stepper()->findChildren<QAbstractButton*>(Qt::FindDirectChildrenOnly))
      if (qobject_cast<QPushButton*>(b) || static_cast<QToolButton*>(b)->defaultAction())
        buttons << b;  // jump, ◀ ▶
    QVERIFY(buttons.size() >= 7);
    for (QAbstractButton* b : buttons)
      QVERIFY2(!b->toolTip().isEmpty(),
               qPrintable(b->text() + QLatin1Char(' ') + b->objectName() + QLatin1Char(' ') +
                          QString::fromLatin1(b->metaObject()->className())));
  }

  void openReferenceTraceUsesTheKvtraceFilter() {
    openWindow();
    QAction* open = window_->findChild<QAction*>(QStringLiteral("openReferenceTrace"));
    QVERIFY(open);
    QVERIFY(menuNamed(window_.get(), QStringLiteral("&File"))->actions().contains(open));
    const QString trace = realTrace();
    QStringList filters;
    onModal<QFileDialog>([&](QFileDialog* d) {
      filters = d->nameFilters();
      // The absolute path typed into the name field: accept() reads it as it is, without
      // waiting for the dialog to list the trace's folder.
      auto* edit = d->findChild<QLineEdit*>(QStringLiteral("fileNameEdit"));
      if (edit)
        edit->setText(QFileInfo(trace).absoluteFilePath());
      else
        d->selectFile(trace);
      QMetaObject::invokeMethod(d, "accept");
    });
    open->trigger();
    QVERIFY2(filters.value(0).contains(QStringLiteral("*.kvtrace")),
             qPrintable(filters.join(QLatin1Char(';'))));
    QCOMPARE(window_->setup()->spec().referenceTraceFile,
             QFileInfo(trace).absoluteFilePath().toStdString());
  }

  void recentFilesByKindWithClear() {
    openWindow(nullptr, false);
    const QString model =
        QFileInfo(QString::fromStdString(test::demoModelDir())).absoluteFilePath();
    const QString trace = QFileInfo(realTrace()).absoluteFilePath();
    QVERIFY(window_->openPath(model));
    QVERIFY(window_->openPath(trace));
    RecentFilesMenu* recent = window_->recentMenu();
    QCOMPARE(recent->models(), QStringList{model});
    QCOMPARE(recent->traces(), QStringList{trace});
    QCOMPARE(window_->recentFiles().first(), trace);
    QStringList sections;
    for (QAction* a : recent->actions())
      if (a->isSeparator() && !a->text().isEmpty()) sections << a->text();
    QCOMPARE(sections, (QStringList{QStringLiteral("Models"), QStringLiteral("Traces")}));
    // A recent model opens as the model.
    window_->setup()->setModelDir(QString());
    QAction* recentModel = nullptr;
    for (QAction* a : recent->actions())
      if (a->text() == model) recentModel = a;
    QVERIFY(recentModel);
    recentModel->trigger();
    QTRY_COMPARE(window_->setup()->modelDir(), model);
    // Clear forgets both kinds, also for the next start.
    QVERIFY(recent->clearAction()->isEnabled());
    recent->clearAction()->trigger();
    QVERIFY(window_->recentFiles().isEmpty());
    window_.reset();
    InspectorWindow again(nullptr, {});
    QVERIFY(again.recentFiles().isEmpty());
  }

  void lastRunInputsRestoredAtStartUp() {
    openWindow([](const AuditJobSpec&) { return *test::makeTestOutput(); }, false);
    const QString model = QString::fromStdString(test::demoModelDir());
    window_->setup()->setModelDir(model);
    window_->setup()->setPrompts({QStringLiteral("The cache"), QStringLiteral("A second request")});
    window_->setup()->setArrivalTicks({0, 3});
    window_->setup()->setMaxNewTokens(5);
    QVERIFY(window_->faults()->applySpec(QStringLiteral("wrong_layer:layer=2,source=1")));
    QSignalSpy done(window_->controller(), &InspectorController::auditSucceeded);
    QTest::keyClick(window_.get(), Qt::Key_R, Qt::ControlModifier);
    QTRY_VERIFY_WITH_TIMEOUT(done.count() == 1, 10000);
    window_.reset();

    InspectorWindow again(nullptr, FaultSpec::catalog());
    const AuditJobSpec spec = again.currentSpec();
    QCOMPARE(QString::fromStdString(spec.modelDir), model);
    QCOMPARE(spec.prompts.size(), size_t{2});
    QCOMPARE(spec.arrivalTicks, (std::vector<int64_t>{0, 3}));
    QCOMPARE(spec.maxNewTokens, int64_t{5});
    QCOMPARE(spec.faults.size(), size_t{1});
    QVERIFY(QString::fromStdString(spec.faults[0]).startsWith(QStringLiteral("wrong_layer")));
  }

  void colourBlindSafeColourMapFromTheViewMenu() {
    openWindow();
    QMenu* colours = window_->findChild<QMenu*>(QStringLiteral("colourMapMenu"));
    QVERIFY(colours);
    QAction* viridis = window_->findChild<QAction*>(QStringLiteral("colourMap_Viridis"));
    QVERIFY(viridis);
    QVERIFY(viridis->text().contains(QStringLiteral("colour-blind safe")));
    QVERIFY(window_->findChild<QAction*>(QStringLiteral("colourMap_Cividis")));
    viridis->trigger();
    QCOMPARE(window_->heatmaps()->gradientName(), QStringLiteral("Viridis"));
    QVERIFY(viridis->isChecked());
    QCPColorGradient g = window_->heatmaps()->referenceView()->colorMap()->gradient();
    QCOMPARE(QColor(g.color(0.0, QCPRange(0, 1))).name(), QStringLiteral("#440154"));
    QCOMPARE(QColor(g.color(1.0, QCPRange(0, 1))).name(), QStringLiteral("#fde725"));
    window_->saveSettings();
    window_.reset();
    InspectorWindow again(nullptr, {});
    QCOMPARE(again.heatmaps()->gradientName(), QStringLiteral("Viridis"));
  }

  void fieldsThatDoNotApplyToATraceAreDisabledWithAReason() {
    openWindow(nullptr, false);
    auto* prompts = window_->setup()->findChild<QPlainTextEdit*>();
    QVERIFY(prompts->isEnabled());
    QVERIFY(window_->faults()->isEnabled());
    QVERIFY(window_->openPath(realTrace()));
    QVERIFY(!prompts->isEnabled());
    QVERIFY(prompts->toolTip().contains(QStringLiteral("Not used with a trace")));
    for (QSpinBox* spin : window_->setup()->findChildren<QSpinBox*>()) {
      QVERIFY(!spin->isEnabled());
      QVERIFY(spin->toolTip().contains(QStringLiteral("Not used with a trace")));
    }
    QVERIFY(!window_->faults()->isEnabled());
    QVERIFY(window_->faults()->toolTip().contains(QStringLiteral("built-in engine")));
    window_->setup()->setTraceFile(QString());
    QVERIFY(prompts->isEnabled());
    QVERIFY(window_->faults()->isEnabled());
    // A saved cache holds one sequence: its prompt field says what it was made from.
    window_->setup()->setTraceFile(
        QStringLiteral(KVSCOPE_SOURCE_DIR "/tests/fixtures/mlx/llama-kv-plain.safetensors"));
    QVERIFY(prompts->isEnabled());
    QVERIFY(prompts->toolTip().contains(QStringLiteral("saved cache")));
    QVERIFY(!window_->faults()->isEnabled());
    window_->setup()->setTraceFile(QString());
  }

  void windowTitleNamesTheToolOnce() {
    openWindow();
    const QString title = window_->windowTitle();
    // The platform appends the display name unless the title ends with it.
    QVERIFY2(title.endsWith(QGuiApplication::applicationDisplayName()), qPrintable(title));
    QCOMPARE(title.count(QStringLiteral("KV Scope")), 1);
    QVERIFY2(title.contains(QFileInfo(QString::fromStdString(test::demoModelDir())).fileName()),
             qPrintable(title));
    QVERIFY(title.contains(QStringLiteral("divergent")));
  }

  void tokenSearchFindsByIdAndText() {
    openWindow();
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    TokenStripView* strip = window_->stepper()->strip();
    const TokenStripView::Cell* target = nullptr;
    for (const auto& c : strip->cells())
      if (!c.prompt && c.step >= 2 && !target) target = &c;
    QVERIFY(target);
    const int64_t id = target->tokenId;
    int64_t firstStep = -1;
    for (const auto& c : strip->cells())
      if (c.tokenId == id && firstStep < 0) firstStep = c.step;
    window_->context()->setStep(0);
    QTest::keyClick(window_.get(), Qt::Key_F, Qt::ControlModifier);
    TokenSearchBar* bar = window_->tokenSearch();
    QVERIFY(bar->isVisible());
    QTRY_VERIFY(bar->edit()->hasFocus());
    QTest::keyClicks(bar->edit(), QStringLiteral("#%1").arg(id));
    QCOMPARE(window_->context()->selection().step, firstStep);
    QVERIFY2(bar->status().contains(QStringLiteral("#%1").arg(id)), qPrintable(bar->status()));
    // Enter goes on (wrapping), Esc closes the bar and leaves the selection.
    QTest::keyClick(bar->edit(), Qt::Key_Return);
    QVERIFY(bar->status().contains(QStringLiteral("of")));
    QTest::keyClick(bar->edit(), Qt::Key_Escape);
    QVERIFY(!bar->isVisible());
    // Text: the prompt's tokens have text pieces; a piece is found by its text.
    QString piece;
    int64_t pieceStep = -1;
    for (const auto& c : strip->cells())
      if (c.step >= 1 && c.text.trimmed().size() >= 2 && piece.isEmpty()) {
        piece = c.text.trimmed();
        pieceStep = c.step;
      }
    if (!piece.isEmpty()) {
      QTest::keyClick(window_.get(), Qt::Key_F, Qt::ControlModifier);
      bar->edit()->setText(piece);
      const auto hits = bar->matches(piece);
      QVERIFY(!hits.empty());
      QCOMPARE(window_->context()->selection().step,
               strip->cells()[static_cast<size_t>(hits.front())].step);
      Q_UNUSED(pieceStep);
    }
    bar->edit()->setText(QStringLiteral("no-such-token-xyz"));
    QVERIFY(bar->status().contains(QStringLiteral("no token")));
  }

  void pinAStepAndCompareItWithTheCurrentOne() {
    openWindow();
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    window_->context()->setRequest(0);
    window_->context()->setStep(1);
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    QTest::keyClick(window_.get(), Qt::Key_B, Qt::ControlModifier);
    StepComparePanel* compare = window_->stepCompare();
    QVERIFY(compare->pinned());
    QCOMPARE(compare->pinnedStep(), int64_t{1});
    QVERIFY(window_->stepCompareDock()->isVisible());
    QTest::keyClick(window_.get(), Qt::Key_Right);
    QTest::keyClick(window_.get(), Qt::Key_Right);
    QTest::keyClick(window_.get(), Qt::Key_BracketRight);
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    QTRY_VERIFY(compare->pinnedSnapshot() &&
                compare->pinnedSnapshot()->point.layer == window_->context()->selection().layer);
    const InspectionPoint cur = window_->context()->selection();
    QCOMPARE(cur.step, int64_t{3});
    QCOMPARE(compare->pinnedSnapshot()->point.step, int64_t{1});
    QCOMPARE(compare->pinnedSnapshot()->point.head, cur.head);
    QCOMPARE(compare->pinnedSnapshot()->point.kind, cur.kind);
    QVERIFY(compare->pinnedView()->positions() > 0);
    QVERIFY(compare->currentView()->positions() > compare->pinnedView()->positions());
    QVERIFY2(compare->summary().contains(QStringLiteral("pinned")), qPrintable(compare->summary()));
    // The two maps share one colour scale.
    QCOMPARE(compare->pinnedView()->colorMap()->dataRange().upper,
             compare->currentView()->colorMap()->dataRange().upper);
    QTest::keyClick(window_.get(), Qt::Key_B, Qt::ControlModifier | Qt::ShiftModifier);
    QVERIFY(!compare->pinned());
  }
};

QTEST_MAIN(UsabilityMenusTest)
#include "UsabilityMenusTest.moc"
