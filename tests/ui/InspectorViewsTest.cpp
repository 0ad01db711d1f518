// The inspector window on a real audit (TestAudit.hpp): stepping changes the selection and the
// heatmaps' colour-map data (read back cell by cell against cachedKv / referenceKv /
// |difference|), the first divergence is highlighted and D jumps to it, clicking a layer
// in the overview or a finding selects it, and settings persist.
#include <QComboBox>
#include <QSettings>
#include <QSpinBox>
#include <QTableView>
#include <QtTest>
#include <cmath>

#include "TestAudit.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/LayerOverviewView.hpp"
#include "ui/views/LogitDeltaView.hpp"
#include "ui/views/PositionTimelineView.hpp"
#include "ui/views/Theme.hpp"
#include "ui/views/TokenStripView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

// Compares a heatmap's colour-map cells with a [h, t, d] tensor's head slice.
void expectMapEquals(KvHeatmapView* view, const FloatTensor& t, int64_t head) {
  QCOMPARE(t.shape.size(), size_t(3));
  const int64_t T = t.shape[1], D = t.shape[2];
  QCPColorMapData* data = view->colorMap()->data();
  QCOMPARE(int64_t(data->keySize()), T);
  QCOMPARE(int64_t(data->valueSize()), D);
  for (int64_t p = 0; p < T; ++p)
    for (int64_t j = 0; j < D; ++j) {
      const double expected = static_cast<double>(t.data[static_cast<size_t>((head * T + p) * D + j)]);
      if (data->cell(static_cast<int>(p), static_cast<int>(j)) != expected)
        QFAIL(qPrintable(QStringLiteral("cell (%1, %2): %3 != %4")
                             .arg(p).arg(j).arg(data->cell(static_cast<int>(p), static_cast<int>(j))).arg(expected)));
    }
}

FloatTensor absDiff(const FloatTensor& a, const FloatTensor& b) {
  FloatTensor d = a;
  for (size_t i = 0; i < d.data.size(); ++i) d.data[i] = std::abs(a.data[i] - b.data[i]);
  return d;
}

}  // namespace

class InspectorViewsTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;
  std::shared_ptr<const AuditJobOutput> output_;

  SelectionContext* ctx() const { return window_->context(); }
  void settle() {
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    window_->flushPlots();
  }

 private Q_SLOTS:
  void init() {
    QSettings().clear();
    window_ = std::make_unique<InspectorWindow>(nullptr, std::vector<FaultInfo>{});
    window_->resize(1600, 1000);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    output_ = test::makeTestOutput();
    window_->showOutput(output_);
    settle();
  }

  void cleanup() { window_.reset(); }

  void opensAtTheFirstDivergence() {
    const InspectionPoint s = ctx()->selection();
    QCOMPARE(s.request, int64_t(0));
    QCOMPARE(s.step, int64_t(3));
    QCOMPARE(s.layer, int64_t(2));
    QCOMPARE(window_->headline()->headline(),
             QStringLiteral("Divergent: request 0, step 3, layer 2 \u2014 wrong_layer (layer 1 "
                            "matches, layer 2 differs)"));
  }

  void steppingUpdatesSelectionAndHeatmapData() {
    const AuditResult& r = output_->result;
    ctx()->select(InspectionPoint{0, 0, 2, 1, KvKind::Values});
    settle();
    KvHeatmapPanel* maps = window_->heatmaps();
    int64_t previousPositions = -1;
    for (int64_t step = 0; step < 6; ++step) {
      const InspectionPoint s = ctx()->selection();
      QCOMPARE(s.step, step);
      QCOMPARE(s.layer, int64_t(2));
      QCOMPARE(s.head, int64_t(1));
      // From step 4 on, request 1 overwrote rows of request 0's cache: the inspector shows
      // the row the engine held (rebuilt, checksum-proven) instead of the own records.
      const auto& snap = ctx()->snapshot();
      FloatTensor cached = r.cachedKv(0, step, 2, KvKind::Values);
      QCOMPARE(snap->cachedFromReplay, step >= 4);
      if (snap->cachedFromReplay) {
        QVERIFY(QString::fromStdString(snap->note).contains(QStringLiteral("rebuilt")));
        for (int64_t p = 0; p < cached.shape[1]; ++p)
          for (int64_t j = 0; j < cached.shape[2]; ++j)
            cached.data[static_cast<size_t>((1 * cached.shape[1] + p) * cached.shape[2] + j)] =
                snap->cached[static_cast<size_t>(p * cached.shape[2] + j)];
      }
      const FloatTensor ref = r.referenceKv(0, step, 2, KvKind::Values);
      expectMapEquals(maps->cachedView(), cached, 1);
      expectMapEquals(maps->referenceView(), ref, 1);
      expectMapEquals(maps->differenceView(), absDiff(cached, ref), 1);
      QVERIFY(maps->cachedView()->positions() > previousPositions);  // the cache grew
      previousPositions = maps->cachedView()->positions();
      // Keyboard: Right goes to the next step.
      QTest::keyClick(window_->stepper()->strip(), Qt::Key_Right);
      settle();
    }
    QCOMPARE(ctx()->selection().step, int64_t(5));  // stays on the last step
    QTest::keyClick(window_->stepper()->strip(), Qt::Key_Left);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(4));
    QTest::keyClick(window_->stepper()->strip(), Qt::Key_P);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(3));
    QTest::keyClick(window_->stepper()->strip(), Qt::Key_N);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(4));
  }

  void differenceIsZeroBeforeAndLargeAfterTheDivergence() {
    KvHeatmapView* diff = window_->heatmaps()->differenceView();
    ctx()->select(InspectionPoint{0, 2, 2, 0, KvKind::Keys});
    settle();
    QVERIFY(ctx()->snapshot()->diffMax < 1e-5f);
    ctx()->setStep(3);
    settle();
    QVERIFY(ctx()->snapshot()->diffMax > 0.1f);
    QCOMPARE(ctx()->snapshot()->diffArgPosition, int64_t(6));  // the record step 3 appended
    // Tooltip text names position, dim and value.
    diff->replot();
    const double x = diff->xAxis->coordToPixel(6.0), y = diff->yAxis->coordToPixel(0.0);
    const QString tip = diff->valueTextAt(QPoint(int(x), int(y)));
    QVERIFY2(tip.startsWith(QStringLiteral("position 6, dim 0: ")), qPrintable(tip));
  }

  void firstDivergenceIsHighlightedAndDJumpsToIt() {
    TokenStripView* strip = window_->stepper()->strip();
    ctx()->select(InspectionPoint{0, 0, 0, 0, KvKind::Keys});
    settle();
    QCOMPARE(strip->divergentStep(), int64_t(3));
    // The divergent step's cells are painted in the alarm colour.
    const QRect cell = strip->stepRect(3);
    QVERIFY(!cell.isEmpty());
    const QImage image = strip->grab().toImage();
    const qreal dpr = image.devicePixelRatio();
    const QColor painted = image.pixelColor(QPoint(int((cell.left() + 5) * dpr), int((cell.top() + 5) * dpr)));
    QCOMPARE(painted, Theme::alarm());
    // D jumps to the first divergence (request, step, layer and the worst head).
    strip->setFocus();
    QTest::keyClick(strip, Qt::Key_D);
    settle();
    QCOMPARE(ctx()->selection().request, int64_t(0));
    QCOMPARE(ctx()->selection().step, int64_t(3));
    QCOMPARE(ctx()->selection().layer, int64_t(2));
    // The overview marks layer 2 as the first divergent layer at this step.
    QCOMPARE(window_->layerOverview()->firstDivergentLayer(), int64_t(2));
    QVERIFY(window_->layerOverview()->values()[0] < window_->layerOverview()->noiseFloor()[0]);
    QVERIFY(window_->layerOverview()->values()[2] > 0.1);
    // From another request, the window-wide shortcut (Ctrl+D) jumps back.
    ctx()->select(InspectionPoint{1, 0, 0, 0, KvKind::Keys});
    settle();
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    QTest::keyClick(window_.get(), Qt::Key_D, Qt::ControlModifier);
    settle();
    QCOMPARE(ctx()->selection().request, int64_t(0));
    QCOMPARE(ctx()->selection().step, int64_t(3));
  }

  void clickingALayerInTheOverviewSelectsIt() {
    LayerOverviewView* overview = window_->layerOverview();
    QCOMPARE(ctx()->selection().layer, int64_t(2));
    QTest::mouseClick(overview, Qt::LeftButton, Qt::NoModifier, overview->layerCenter(1));
    settle();
    QCOMPARE(ctx()->selection().layer, int64_t(1));
    const FloatTensor cached = output_->result.cachedKv(0, 3, 1, ctx()->selection().kind);
    QCOMPARE(window_->heatmaps()->cachedView()->colorMap()->data()->cell(0, 0),
             double(cached.data[static_cast<size_t>(ctx()->selection().head * cached.shape[1] *
                                                    cached.shape[2])]));
    QTest::mouseClick(overview, Qt::LeftButton, Qt::NoModifier, overview->layerCenter(0));
    settle();
    QCOMPARE(ctx()->selection().layer, int64_t(0));
  }

  void clickingAFindingSelectsItsRequestStepLayer() {
    DiagnosisPanel* diag = window_->diagnosis();
    QCOMPARE(diag->findingsModel()->rowCount(), 2);
    QTableView* view = diag->findingsView();
    const QRect rect = view->visualRect(diag->findingsModel()->index(1, 0));
    QTest::mouseClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, rect.center());
    settle();
    QCOMPARE(ctx()->selection().request, int64_t(0));
    QCOMPARE(ctx()->selection().step, int64_t(4));
    QCOMPARE(ctx()->selection().layer, int64_t(0));
    QVERIFY(diag->evidenceText().contains(QStringLiteral("cross_request")));
    // The jump shows the rows the other request wrote, in the head where they differ most.
    QVERIFY(ctx()->snapshot()->rowRewritten);
    QCOMPARE(ctx()->selection().head,
             ctx()->inspector()->worstHead(0, 4, 0, ctx()->selection().kind));
  }

  void tokenClickSelectsStepAndPanelsFollow() {
    TokenStripView* strip = window_->stepper()->strip();
    QTest::mouseClick(strip, Qt::LeftButton, Qt::NoModifier, strip->stepRect(4).center());
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(4));
    QVERIFY(window_->stepper()->stepDescription().contains(QStringLiteral("step <b>4</b>")));
    // The logit view shows the step's per-token deltas with the top tokens labelled.
    LogitDeltaView* logits = window_->logits();
    QCOMPARE(logits->labelledTokens().size(), size_t(LogitDeltaView::kLabelledTokens));
    QCOMPARE(logits->tokenPlot()->graph(0)->dataCount(),
             int(output_->result.trace.model.vocabSize));
    // Timeline: expected and recorded positions for 6 steps, the arrival marker.
    QCOMPARE(window_->timeline()->expectedGraph()->dataCount(), 6);
    QCOMPARE(window_->timeline()->recordedGraph()->dataCount(), 6);
    QVERIFY(window_->timeline()->eventMarkerCount() >= 1);
  }

  void settingsPersist() {
    window_->heatmaps()->setGradientName(QStringLiteral("Thermal"));
    window_->saveSettings();
    QTemporaryDir dir;
    QVERIFY(window_->openPath(dir.path()));
    window_.reset();
    InspectorWindow again(nullptr, {});
    QCOMPARE(again.heatmaps()->gradientName(), QStringLiteral("Thermal"));
    QVERIFY(!again.recentFiles().isEmpty());
    QCOMPARE(again.recentFiles().first(), QFileInfo(dir.path()).absoluteFilePath());
  }

  // A recurrent layer's state: its value heads selectable (4, the demo's 2 KV heads
  // notwithstanding), no keys/values choice, the axes and the difference named by the state's
  // features, the layer's bar its state error against its own floor.
  void aRecurrentLayersStateIsShownOnItsOwnTerms() {
    const auto out = test::makeRecurrentStateOutput();
    QCOMPARE(out->result.report.findings.size(), size_t(1));
    QCOMPARE(QString::fromStdString(out->result.report.findings[0].id), QStringLiteral("prefix_state"));
    window_->showOutput(out);
    settle();
    const InspectionPoint s = ctx()->selection();
    QCOMPARE(s.request, int64_t(1));
    QCOMPARE(s.layer, int64_t(0));
    const auto& snap = ctx()->snapshot();
    QVERIFY(snap->showsState);
    KvHeatmapPanel* maps = window_->heatmaps();
    QSpinBox* head = nullptr;
    for (QSpinBox* box : maps->findChildren<QSpinBox*>())
      if (box->prefix().contains(QStringLiteral("head"))) head = box;
    QVERIFY(head);
    QCOMPARE(head->prefix(), QStringLiteral("value head "));
    QCOMPARE(int64_t(head->maximum()) + 1, snap->heads);
    QVERIFY(snap->heads > ctx()->numKvHeads());
    QCOMPARE(maps->cachedView()->xAxis->label(), QStringLiteral("key feature"));
    QCOMPARE(maps->cachedView()->yAxis->label(), QStringLiteral("value feature"));
    for (QComboBox* box : maps->findChildren<QComboBox*>())
      if (box->itemText(0).startsWith(QStringLiteral("Keys"))) QVERIFY(!box->isEnabled());
    QVERIFY(snap->layerMaxDiff[0] > snap->layerNoiseFloor[0]);
    // An attention layer: kv heads and keys/values again.
    ctx()->select(InspectionPoint{1, s.step, 1, 0, KvKind::Keys});
    settle();
    QCOMPARE(head->prefix(), QStringLiteral("kv head "));
    QCOMPARE(maps->cachedView()->xAxis->label(), QStringLiteral("position"));
  }
};

QTEST_MAIN(InspectorViewsTest)
#include "InspectorViewsTest.moc"
