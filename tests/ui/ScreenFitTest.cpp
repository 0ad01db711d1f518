// The window on a laptop screen (issue 27, items 11, 12 and 13), driven through the real
// window on real audits (TestAudit.hpp): a clean run names no divergence, pinning a step
// keeps the window inside 1366x768, event labels at one step stand apart, and the export
// keys work from a text field.
#include <QApplication>
#include <QDockWidget>
#include <QLineEdit>
#include <QMenuBar>
#include <QTimer>
#include <QScrollArea>
#include <QScrollBar>
#include <QToolButton>
#include <QTableView>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QtTest>

#include "TestAudit.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/FailureMatrixModel.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/panels/StepComparePanel.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/ElidedLabel.hpp"
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/PositionTimelineView.hpp"
#include "ui/views/TokenStripView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

// A line edit that claims Ctrl+E as QLineEdit does with X11 key bindings (end of line).
class ClaimingEdit : public QLineEdit {
 public:
  using QLineEdit::QLineEdit;

 protected:
  bool event(QEvent* e) override {
    if (e->type() == QEvent::ShortcutOverride) {
      auto* key = static_cast<QKeyEvent*>(e);
      if (key->key() == Qt::Key_E && (key->modifiers() & Qt::ControlModifier)) {
        e->accept();
        return true;
      }
    }
    if (e->type() == QEvent::KeyPress) {
      auto* key = static_cast<QKeyEvent*>(e);
      if (key->key() == Qt::Key_E && (key->modifiers() & Qt::ControlModifier)) {
        end(false);
        return true;
      }
    }
    return QLineEdit::event(e);
  }
};

class ScreenFitTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;

  void settle() {
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    window_->flushPlots();
  }
  void recreate(QSize size, std::shared_ptr<const AuditJobOutput> output) {
    window_.reset();
    window_ = std::make_unique<InspectorWindow>(nullptr, std::vector<FaultInfo>{});
    window_->resize(size);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    window_->showOutput(std::move(output));
    settle();
  }
  static std::shared_ptr<const AuditJobOutput> longPromptOutput(std::vector<std::string> faults) {
    AuditJobSpec spec = test::testAuditSpec(std::move(faults));
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < 90; ++i) prompt.push_back(5 + i * 3);
    spec.promptIds = {prompt};
    spec.arrivalTicks = {0};
    return std::make_shared<const AuditJobOutput>(runAuditJob(spec));
  }
  void pin() {
    QAction* pin = window_->findChild<QAction*>(QStringLiteral("pinStep"));
    QVERIFY(pin);
    pin->trigger();
    QVERIFY(window_->stepCompare()->pinned());
    settle();
    for (int i = 0; i < 5; ++i) QCoreApplication::processEvents();
  }

 private Q_SLOTS:
  void initTestCase() { QCoreApplication::setOrganizationName(QStringLiteral("KVScopeTest")); }
  void cleanup() { window_.reset(); }

  // Item 11: the never-fed token has step -1; a clean run has no divergence to point at.
  void cleanRunShowsNoDivergenceButton() {
    recreate(QSize(1366, 768), longPromptOutput({}));
    TokenStepperPanel* stepper = window_->stepper();
    QCOMPARE(stepper->strip()->divergentStep(), int64_t(-1));
    QVERIFY(stepper->strip()->stepRect(-1).isEmpty());
    QScrollBar* bar = stepper->scrollArea()->horizontalScrollBar();
    QVERIFY(bar->maximum() > 0);  // the strip is wider than the view
    for (int value : {bar->minimum(), bar->maximum() / 2, bar->maximum()}) {
      bar->setValue(value);
      QCoreApplication::processEvents();
      QVERIFY2(!stepper->divergencePin()->isVisible(),
               qPrintable(QStringLiteral("at %1: %2").arg(value).arg(stepper->divergencePin()->text())));
    }
    // A divergent run still names its divergence once it is out of view.
    recreate(QSize(1366, 768), longPromptOutput({"wrong_layer:layer=2,source=1,step=3"}));
    stepper = window_->stepper();
    QCOMPARE(stepper->strip()->divergentStep(), int64_t(3));
    bar = stepper->scrollArea()->horizontalScrollBar();
    bar->setValue(bar->minimum());
    QCoreApplication::processEvents();
    QVERIFY(stepper->divergencePin()->isVisible());
    QVERIFY(stepper->divergencePin()->text().contains(QStringLiteral("step 3: divergence")));
  }

  // A latent-attention MoE layer's summary ("full attention, latent (cache: c_kv 32 + roped
  // k_pe 8), yarn RoPE x4, pairs (2i, 2i+1), MoE 2 of 8 experts + shared") is elided to the room
  // the K/V panel has, its whole text the tooltip, and the window stays 1366 wide.
  void aLongLayerSummaryDoesNotWidenTheWindow() {
    recreate(QSize(1366, 768), test::makeLatentOutput());
    auto* summary = dynamic_cast<ElidedLabel*>(window_->findChild<QLabel*>(QStringLiteral("layerKind")));
    QVERIFY(summary);
    QVERIFY2(summary->fullText().contains(QStringLiteral("latent")), qPrintable(summary->fullText()));
    QCOMPARE(summary->toolTip(), summary->fullText());
    QVERIFY2(window_->width() <= 1366 && window_->minimumSizeHint().width() <= 1366,
             qPrintable(QStringLiteral("width %1, minimum %2").arg(window_->width()).arg(window_->minimumSizeHint().width())));
  }

  // Item 12: a pinned step on a 1366x768 screen: the window keeps its size and can shrink.
  void pinningKeepsALaptopWindowOnTheScreen() {
    recreate(QSize(1366, 738), test::makeTestOutput());
    const int diagnosisBefore = window_->diagnosis()->height();
    const int leastBefore = window_->minimumSizeHint().height();
    pin();
    QDockWidget* dock = window_->stepCompareDock();
    QVERIFY(dock->isVisible());
    QVERIFY2(window_->height() <= 738 && window_->minimumSizeHint().height() <= 738 &&
                 window_->minimumSize().height() <= 738,
             qPrintable(QStringLiteral("%1 high, at least %2")
                            .arg(window_->height())
                            .arg(window_->minimumSizeHint().height())));
    // Somewhere the maps have room: a tab beside the diagnosis, the maps one above the other.
    StepComparePanel* compare = window_->stepCompare();
    QVERIFY2(compare->pinnedView()->height() >= 150 && compare->currentView()->height() >= 150,
             qPrintable(QStringLiteral("maps %1 and %2 high")
                            .arg(compare->pinnedView()->height())
                            .arg(compare->currentView()->height())));
    QVERIFY(compare->pinnedView()->width() >= 150);
    QVERIFY(compare->stacked());
    // The diagnosis is a tab away, at its full height.
    QVERIFY(window_->tabifiedDockWidgets(dock).contains(window_->diagnosisDock()));
    window_->diagnosisDock()->raise();
    QCoreApplication::processEvents();
    QVERIFY(window_->diagnosis()->height() >= diagnosisBefore - 4);
    // Down to the height it could shrink to without the pinned step: nothing holds it up.
    window_->resize(1200, leastBefore);
    QCoreApplication::processEvents();
    QVERIFY2(window_->height() <= leastBefore,
             qPrintable(QStringLiteral("%1, %2 before the pin").arg(window_->height()).arg(leastBefore)));
  }

  // Item 12: a tall window puts the maps under the plots, side by side, and the diagnosis
  // keeps the whole right column.
  void pinningInATallWindowLeavesTheDiagnosisItsHeight() {
    recreate(QSize(1680, 1050), test::makeTestOutput());
    const int diagnosisBefore = window_->diagnosis()->height();
    pin();
    QDockWidget* dock = window_->stepCompareDock();
    QCOMPARE(window_->dockWidgetArea(dock), Qt::BottomDockWidgetArea);
    QVERIFY(window_->tabifiedDockWidgets(dock).isEmpty());
    QVERIFY(!window_->stepCompare()->stacked());
    QVERIFY(window_->height() <= 1050);
    QVERIFY2(window_->diagnosis()->height() >= diagnosisBefore - 4,
             qPrintable(QStringLiteral("%1 -> %2").arg(diagnosisBefore).arg(window_->diagnosis()->height())));
    QVERIFY(window_->stepCompare()->pinnedView()->height() >= 120);
  }

  // Item 12: at 1366x768 the diagnosis is one scroll area; its sections (stages, findings,
  // evidence, matrix) are as tall as their content and scroll nothing themselves.
  void diagnosisSectionsSizeToTheirContent() {
    recreate(QSize(1366, 738), test::makeTestOutput());
    window_->diagnosisDock()->raise();
    QCoreApplication::processEvents();
    DiagnosisPanel* diagnosis = window_->diagnosis();
    window_->selectFinding(QStringLiteral("0"), nullptr);
    settle();
    for (int i = 0; i < 5; ++i) QCoreApplication::processEvents();
    const std::vector<std::pair<const char*, QAbstractScrollArea*>> sections{
        {"stages", diagnosis->stageView()},
        {"findings", diagnosis->findingsView()},
        {"evidence", diagnosis->findChild<QTextBrowser*>()},
        {"matrix", diagnosis->matrixView()}};
    int outerScroll = 0;
    for (QScrollArea* area : diagnosis->findChildren<QScrollArea*>())
      if (area->verticalScrollBar()->maximum() > 0) ++outerScroll;
    for (const auto& [name, view] : sections) {
      QVERIFY(view);
      QVERIFY2(view->verticalScrollBar()->maximum() == 0,
               qPrintable(QStringLiteral("%1 scrolls by itself: %2 px hidden, %3 px high")
                              .arg(QString::fromLatin1(name))
                              .arg(view->verticalScrollBar()->maximum())
                              .arg(view->height())));
    }
    // Everything does not fit 738 px: the dock's one scroll area scrolls it.
    QCOMPARE(outerScroll, 1);
  }

  // Item 13: the bundle's screenshot shows the fired failure-matrix row, however the
  // diagnosis was scrolled before.
  void bundleScreenshotShowsTheFiredMatrixRow() {
    recreate(QSize(1366, 738), test::makeTestOutput());
    DiagnosisPanel* diagnosis = window_->diagnosis();
    window_->selectFinding(QStringLiteral("0"), nullptr);
    settle();
    // Scrolled away from it: every scroll box in the diagnosis at its top, the setup raised.
    if (auto* setup = window_->findChild<QDockWidget*>(QStringLiteral("setupDock"))) setup->raise();
    for (QAbstractScrollArea* area : diagnosis->findChildren<QAbstractScrollArea*>())
      area->verticalScrollBar()->setValue(0);
    QCoreApplication::processEvents();
    const Finding* finding = diagnosis->findingsModel()->finding(0);
    QVERIFY(finding);
    const int row = FailureMatrixModel::rowFor(*finding);
    QVERIFY(row > 0);
    QTemporaryDir dir;
    const ExportOutcome out = window_->exportBundle(dir.filePath(QStringLiteral("bundle")));
    QVERIFY2(out.ok, qPrintable(out.error));
    QTableView* matrix = diagnosis->matrixView();
    QVERIFY(matrix->isVisible());
    const QRect cell = matrix->visualRect(matrix->model()->index(row, 0));
    const QRegion seen = matrix->viewport()->visibleRegion();
    QVERIFY2(seen.intersected(cell).boundingRect().height() >= cell.height() / 2,
             qPrintable(QStringLiteral("row %1 (%2) at y %3..%4; in view: y %5..%6")
                            .arg(row)
                            .arg(QString::fromStdString(finding->id))
                            .arg(cell.top())
                            .arg(cell.bottom())
                            .arg(seen.boundingRect().top())
                            .arg(seen.boundingRect().bottom())));
  }

  // Item 12: events at one step (arrival, RoPE, batch group, ...) do not draw over each other.
  void eventLabelsAtOneStepStandApart() {
    auto output = std::make_shared<AuditJobOutput>(*test::makeTestOutput());
    RopeConfig rope;
    rope.type = "llama3";
    rope.factor = 8.0;
    output->result.trace.model.rope = rope;
    recreate(QSize(1366, 768), output);
    window_->context()->setRequest(0);
    settle();
    PositionTimelineView* timeline = window_->timeline();
    timeline->replot();
    std::vector<double> xs;
    QStringList texts;
    int height = 0;
    for (int i = 0; i < timeline->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(timeline->item(i))) {
        if (std::abs(timeline->xAxis->pixelToCoord(t->position->pixelPosition().x())) > 0.45)
          continue;  // not at step 0
        xs.push_back(t->position->pixelPosition().x());
        texts << t->text();
        height = QFontMetrics(t->font()).height();
      }
    QVERIFY2(xs.size() >= 2, qPrintable(texts.join(QStringLiteral(" | "))));
    std::sort(xs.begin(), xs.end());
    for (size_t i = 1; i < xs.size(); ++i)
      QVERIFY2(xs[i] - xs[i - 1] >= height - 1,
               qPrintable(QStringLiteral("%1 and %2: %3 px apart")
                              .arg(texts.value(static_cast<int>(i) - 1), texts.value(static_cast<int>(i)))
                              .arg(xs[i] - xs[i - 1])));
  }

  // Item 13: Ctrl+E from a text field opens the export, and the field keeps its text. With
  // X11 key bindings a QLineEdit claims Ctrl+E ("end of line") in its ShortcutOverride; the
  // offscreen platform's do not, so a field that claims it the same way stands in for it.
  void exportKeysReachTheWindowFromATextField() {
    recreate(QSize(1366, 768), test::makeTestOutput());
    window_->activateWindow();
    QLineEdit* trace = window_->setup()->traceEdit();
    auto* field = new ClaimingEdit(trace->parentWidget());
    field->setText(QStringLiteral("run.kvtrace"));
    field->setCursorPosition(0);
    field->show();
    QAction* exportView = nullptr;
    for (QAction* a : window_->findChildren<QAction*>())
      if (a->shortcut() == QKeySequence(Qt::CTRL | Qt::Key_E)) exportView = a;
    QVERIFY(exportView);
    int fired = 0;
    connect(exportView, &QAction::triggered, this, [&fired] { ++fired; });
    // The save dialog it opens is closed as soon as it is up.
    QTimer closer;
    connect(&closer, &QTimer::timeout, this, [] {
      if (QWidget* modal = QApplication::activeModalWidget()) modal->close();
    });
    closer.start(50);
    for (QLineEdit* edit : {trace, static_cast<QLineEdit*>(field)}) {
      edit->setEnabled(true);
      edit->setFocus();
      for (Qt::KeyboardModifiers m : {Qt::KeyboardModifiers(Qt::ControlModifier),
                                      Qt::KeyboardModifiers(Qt::ControlModifier | Qt::ShiftModifier)}) {
        QKeyEvent override(QEvent::ShortcutOverride, Qt::Key_E, m);
        QApplication::sendEvent(edit, &override);
        QVERIFY2(!override.isAccepted(), "the text field claimed the export key");
      }
    }
    QTest::keyClick(field, Qt::Key_E, Qt::ControlModifier);
    QCOMPARE(fired, 1);
    QCOMPARE(field->text(), QStringLiteral("run.kvtrace"));
    QCOMPARE(field->cursorPosition(), 0);  // not moved to the end
  }
};

QTEST_MAIN(ScreenFitTest)
#include "ScreenFitTest.moc"
