// What a first-time user trips on (issue 16), driven through the real window on a real
// audit (TestAudit.hpp): clicks, keys and focus with QTest, and what the views then show.
#include <QAbstractSpinBox>
#include <QApplication>
#include <QDockWidget>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeView>
#include <QWheelEvent>
#include <QtTest>
#include <cmath>

#include "TestAudit.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/models/StageListModel.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/LayerOverviewView.hpp"
#include "ui/views/LogitDeltaView.hpp"
#include "ui/views/PlotTitle.hpp"
#include "ui/views/PositionTimelineView.hpp"
#include "ui/views/StaleOverlay.hpp"
#include "ui/views/TokenStripView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

class UsabilityViewsTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;
  std::shared_ptr<const AuditJobOutput> output_;

  SelectionContext* ctx() const { return window_->context(); }
  void settle() {
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    window_->flushPlots();
  }
  void clickFinding(int row) {
    QTableView* view = window_->diagnosis()->findingsView();
    const QRect rect = view->visualRect(window_->diagnosis()->findingsModel()->index(row, 0));
    QTest::mouseClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, rect.center());
  }
  int findingRow(const char* id) const {
    return window_->diagnosis()->findingRow(QString::fromLatin1(id));
  }
  // A fresh window of `size` showing `output` (none: the start-up screen).
  void recreate(QSize size, std::shared_ptr<const AuditJobOutput> output) {
    window_.reset();
    window_ = std::make_unique<InspectorWindow>(nullptr, std::vector<FaultInfo>{});
    window_->resize(size);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    if (output) window_->showOutput(std::move(output));
    settle();
  }
  std::vector<QWidget*> panels() const {
    return {window_->stepper(),  window_->heatmaps(), window_->layerOverview(),
            window_->timeline(), window_->logits(),   window_->diagnosis()};
  }
  int visibleOverlays() const {
    int n = 0;
    for (QWidget* panel : panels())
      for (auto* o : panel->findChildren<StaleOverlay*>(QString(), Qt::FindDirectChildrenOnly))
        if (o->isVisible() && o->geometry() == panel->rect()) ++n;
    return n;
  }
  QLabel* headlineTitle() const { return window_->headline()->findChildren<QLabel*>().at(0); }
  static bool integerTicks(QCPAxis* axis) {
    for (double t : axis->tickVector())
      if (t != std::round(t)) return false;
    return !axis->tickVector().isEmpty();
  }
  // Adjacent tick labels leave room between them.
  static bool ticksApart(QCPAxis* axis) {
    const QFontMetrics fm(axis->tickLabelFont());
    const auto ticks = axis->tickVector();
    const auto labels = axis->tickVectorLabels();
    for (int i = 1; i < ticks.size(); ++i) {
      const double gap = std::abs(axis->coordToPixel(ticks[i]) - axis->coordToPixel(ticks[i - 1]));
      const double need =
          (fm.horizontalAdvance(labels[i]) + fm.horizontalAdvance(labels[i - 1])) / 2.0 + 4;
      if (axis->orientation() == Qt::Horizontal && gap < need) return false;
      if (axis->orientation() == Qt::Vertical && gap < fm.height()) return false;
    }
    return true;
  }
  // Every title line fits its plot.
  static bool titlesFit(QCustomPlot* plot) {
    for (QCPLayoutElement* e : plot->plotLayout()->elements(true))
      if (auto* t = qobject_cast<QCPTextElement*>(e)) {
        const QFontMetrics fm(t->font());
        for (const QString& line : t->text().split(QLatin1Char('\n')))
          if (fm.horizontalAdvance(line) > plot->width() || line.contains(QChar(0x2026))) {
            qWarning() << "cut title" << line << plot->width();
            return false;
          }
      }
    return true;
  }
  // Legends are rows of their own, not over the data and inside their plot; the position
  // plot's event labels stay inside its axes.
  void legendsAndLabelsFit() const {
    for (QCustomPlot* plot :
         {window_->logits()->stepPlot(), static_cast<QCustomPlot*>(window_->timeline())}) {
      const QRect box = plot->legend->rect();
      QVERIFY(!plot->legend->outerRect().intersects(plot->axisRect()->rect()));
      QVERIFY2(QRect(QPoint(0, 0), plot->size()).contains(box),
               qPrintable(QStringLiteral("legend %1,%2 %3x%4 in a %5x%6 plot")
                              .arg(box.x())
                              .arg(box.y())
                              .arg(box.width())
                              .arg(box.height())
                              .arg(plot->width())
                              .arg(plot->height())));
      for (QCPLayoutElement* item : plot->legend->elements(false))
        if (item) QVERIFY(box.contains(item->outerRect()));
    }
    PositionTimelineView* timeline = window_->timeline();
    int labels = 0;
    for (int i = 0; i < timeline->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(timeline->item(i))) {
        ++labels;
        const QRectF axes = QRectF(timeline->axisRect()->rect()).adjusted(-1, -1, 1, 1);
        for (QCPItemAnchor* corner : {t->topLeft, t->topRight, t->bottomLeft, t->bottomRight})
          QVERIFY2(axes.contains(corner->pixelPosition()), qPrintable(t->text()));
      }
    QVERIFY(labels >= 1);  // request 1's arrival, at least
  }
  static bool wrapsWhole(QLabel* label) {
    return label->height() >= label->heightForWidth(label->width()) - 1;
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

  // Item 1: a click on the finding that is already selected goes there again, and a jump
  // shows the K/V kind the finding is about (not the one the toggle had).
  void clickOnTheSelectedFindingJumpsThere() {
    const int row = findingRow("wrong_layer");
    QVERIFY(row >= 0);
    QCOMPARE(window_->diagnosis()->findingsView()->currentIndex().row(), row);  // pre-selected
    const Finding& finding = *window_->diagnosis()->findingsModel()->finding(row);
    // Wander off: another step, layer, head and kind.
    ctx()->select(InspectionPoint{1, 1, 0, 0, KvKind::Values});
    settle();
    clickFinding(row);
    settle();
    const InspectionPoint s = ctx()->selection();
    QCOMPARE(s.request, finding.request);
    QCOMPARE(s.step, finding.step);
    QCOMPARE(s.layer, finding.layer);
    QVERIFY(!s.autoHead && !s.autoKind);  // resolved
    const InspectionPoint resolved =
        ctx()->inspector()->view(ctx()->inspector()->locate(finding)).point;
    QCOMPARE(s.kind, resolved.kind);
    QCOMPARE(s.head, resolved.head);
    // The difference map shows the finding's layer, not the noise of another kind.
    QVERIFY2(!window_->heatmaps()->differenceView()->title().contains(QStringLiteral("(noise)")),
             qPrintable(window_->heatmaps()->differenceView()->title()));
    // Once more, with the toggle flipped: the click goes back to the finding's kind.
    ctx()->setKind(s.kind == KvKind::Keys ? KvKind::Values : KvKind::Keys);
    settle();
    clickFinding(row);
    settle();
    QCOMPARE(ctx()->selection().kind, resolved.kind);
  }

  // Item 5: stepping keys work right after using the kv-head spin box, and wherever the
  // focus is (the diagnosis dock, the findings table, a floating dock).
  void steppingKeysWorkWhereverFocusIs() {
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    ctx()->select(InspectionPoint{0, 1, 0, 0, KvKind::Keys});
    settle();
    QSpinBox* head = window_->heatmaps()->findChildren<QSpinBox*>().at(1);
    QVERIFY(head->prefix().contains(QStringLiteral("head")));
    head->setFocus(Qt::MouseFocusReason);
    QTest::keyClick(head, Qt::Key_Up);  // uses the spin box: head 1
    settle();
    QCOMPARE(ctx()->selection().head, int64_t(1));
    QVERIFY(QApplication::focusWidget() == head || head->isAncestorOf(QApplication::focusWidget()));
    QWidget* focus = QApplication::focusWidget();
    QTest::keyClick(focus, Qt::Key_Right);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(2));
    QTest::keyClick(focus, Qt::Key_N);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(3));
    QTest::keyClick(focus, Qt::Key_BracketRight);
    settle();
    QCOMPARE(ctx()->selection().layer, int64_t(1));
    QTest::keyClick(focus, Qt::Key_BracketLeft);
    settle();
    QCOMPARE(ctx()->selection().layer, int64_t(0));
    QTest::keyClick(focus, Qt::Key_P);
    QTest::keyClick(focus, Qt::Key_Left);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(1));
    QCOMPARE(ctx()->selection().head, int64_t(1));  // the spin box did not take the keys
    // The findings table.
    QTableView* findings = window_->diagnosis()->findingsView();
    findings->setFocus(Qt::MouseFocusReason);
    QTest::keyClick(findings, Qt::Key_Right);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(2));
    QTest::keyClick(findings, Qt::Key_D);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(3));
    QCOMPARE(ctx()->selection().layer, int64_t(2));
    // Text fields keep their letters.
    auto* prompts = window_->setup()->findChild<QPlainTextEdit*>();
    QVERIFY(prompts);
    prompts->setFocus(Qt::MouseFocusReason);
    QTest::keyClick(prompts, Qt::Key_N);
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(3));
    QVERIFY(prompts->toPlainText().contains(QLatin1Char('n')));
  }

  // Item 2: after opening another model or trace, or after an input error, no panel shows
  // the previous audit as if it were current.
  void staleResultsAreMarked() {
    QCOMPARE(visibleOverlays(), 0);
    QTemporaryDir otherModel;
    QVERIFY(window_->openPath(otherModel.path()));
    settle();
    QCOMPARE(visibleOverlays(), int(panels().size()));
    QVERIFY2(window_->headline()->headline().contains(QStringLiteral("run the audit again")),
             qPrintable(window_->headline()->headline()));
    QVERIFY(!window_->headline()->headline().startsWith(QStringLiteral("Divergent")));
    auto* overlay = window_->diagnosis()->findChild<StaleOverlay*>();
    QVERIFY(overlay->text().contains(QStringLiteral("Previous audit")));
    // The wash is painted over the heatmaps.
    const QImage plain = window_->heatmaps()->grab().toImage();
    QVERIFY(!plain.isNull());
    // A new audit clears the marks.
    window_->showOutput(output_);
    settle();
    QCOMPARE(visibleOverlays(), 0);
    QVERIFY(window_->headline()->headline().startsWith(QStringLiteral("Divergent")));
    // An input error (no model, no trace) via the Run audit button.
    window_->setup()->setModelDir(QString());
    window_->setup()->setTraceFile(QString());
    QPushButton* run = nullptr;
    for (auto* b : window_->setup()->findChildren<QPushButton*>())
      if (b->text().contains(QStringLiteral("Run audit"))) run = b;
    QVERIFY(run);
    QTest::mouseClick(run, Qt::LeftButton);
    settle();
    QVERIFY2(window_->headline()->headline().startsWith(QStringLiteral("Input error")),
             qPrintable(window_->headline()->headline()));
    QCOMPARE(visibleOverlays(), int(panels().size()));
    const QLabel* detail = window_->headline()->findChildren<QLabel*>().at(1);
    QVERIFY2(detail->text().contains(QStringLiteral("previous audit")), qPrintable(detail->text()));
  }

  // Item 3: the verdict line, the step line and the start-up hint read whole at the default
  // size of a laptop window (wrapped, with the whole text in a tooltip).
  void longTextWrapsInsteadOfBeingCut() {
    recreate(QSize(1366, 768), output_);
    QVERIFY(window_->selectFinding(QStringLiteral("cross_request"), nullptr));
    settle();
    QLabel* title = headlineTitle();
    QCOMPARE(title->text(), HeadlineView::headlineFor(output_->result.report));
    QVERIFY(title->wordWrap());
    QVERIFY2(wrapsWhole(title), qPrintable(QStringLiteral("%1 < %2")
                                               .arg(title->height())
                                               .arg(title->heightForWidth(title->width()))));
    QLabel* step = nullptr;
    for (auto* l : window_->stepper()->findChildren<QLabel*>())
      if (l->text().startsWith(QStringLiteral("step "))) step = l;
    QVERIFY(step);
    QVERIFY(step->toolTip().contains(QStringLiteral("max |\u0394logit|")));
    QVERIFY(wrapsWhole(step));
    // The start-up hint.
    recreate(QSize(1366, 768), nullptr);
    TokenStripView* strip = window_->stepper()->strip();
    QScrollArea* scroll = window_->stepper()->scrollArea();
    QVERIFY(strip->width() >= scroll->viewport()->width() - 2);
    const QRect need = strip->fontMetrics().boundingRect(strip->rect().adjusted(6, 0, -6, 0),
                                                         Qt::AlignCenter | Qt::TextWordWrap,
                                                         TokenStripView::placeholderText());
    QVERIFY(strip->rect().contains(need));
    QCOMPARE(strip->toolTip(), TokenStripView::placeholderText());
  }

  // Item 4: the window fits the screen, and at 1366x768 every panel is there, whole, with
  // legends beside the data, tick labels apart and titles that fit.
  void fitsALaptopScreen() {
    window_->resize(3000, 2000);
    window_->saveSettings();
    window_.reset();
    {
      InspectorWindow fresh(nullptr, {});
      const QRect available = fresh.screen()->availableGeometry();
      QVERIFY2(fresh.width() <= available.width() && fresh.height() <= available.height(),
               qPrintable(QStringLiteral("%1x%2 on %3x%4")
                              .arg(fresh.width())
                              .arg(fresh.height())
                              .arg(available.width())
                              .arg(available.height())));
    }
    QSettings().clear();
    recreate(QSize(1366, 768), output_);
    ctx()->select(InspectionPoint{0, 3, 2, 0, KvKind::Keys});
    settle();
    const QRect inside = window_->rect();
    for (QWidget* panel : panels()) {
      QVERIFY2(panel->isVisible(), panel->metaObject()->className());
      const QRect r(panel->mapTo(window_.get(), QPoint(0, 0)), panel->size());
      QVERIFY2(inside.contains(r), panel->metaObject()->className());
      QVERIFY2(panel->height() >= panel->minimumSizeHint().height() && panel->height() >= 100,
               panel->metaObject()->className());
    }
    // The setup shares the diagnosis's dock column (one tab away).
    auto* setupDock = window_->findChild<QDockWidget*>(QStringLiteral("setupDock"));
    auto* diagnosisDock = window_->findChild<QDockWidget*>(QStringLiteral("diagnosisDock"));
    QVERIFY(window_->tabifiedDockWidgets(diagnosisDock).contains(setupDock));
    QVERIFY(window_->heatmaps()->width() >= 800);
    legendsAndLabelsFit();
    for (KvHeatmapView* map :
         {window_->heatmaps()->referenceView(), window_->heatmaps()->cachedView(),
          window_->heatmaps()->differenceView()}) {
      QVERIFY(ticksApart(map->xAxis));
      QVERIFY(ticksApart(map->yAxis));
      QVERIFY(titlesFit(map));
    }
    for (QCustomPlot* plot : {static_cast<QCustomPlot*>(window_->layerOverview()),
                              static_cast<QCustomPlot*>(window_->timeline()),
                              window_->logits()->stepPlot(), window_->logits()->tokenPlot()}) {
      QVERIFY(ticksApart(plot->xAxis));
      QVERIFY(titlesFit(plot));
    }
    // Token labels in the logit plot do not overlap.
    std::vector<QRectF> labels;
    for (int i = 0; i < window_->logits()->tokenPlot()->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(window_->logits()->tokenPlot()->item(i)))
        labels.emplace_back(t->topLeft->pixelPosition(), t->bottomRight->pixelPosition());
    QVERIFY(labels.size() >= 2);
    for (size_t i = 0; i < labels.size(); ++i)
      for (size_t j = i + 1; j < labels.size(); ++j) QVERIFY(!labels[i].intersects(labels[j]));
    // Token labels are whole, none cut at either end of the axis.
    const QRect tokenAxes = window_->logits()->tokenPlot()->axisRect()->rect();
    for (const QRectF& l : labels)
      QVERIFY(l.left() >= tokenAxes.left() - 1 && l.right() <= tokenAxes.right() + 1);
    // At the default size too.
    recreate(QSize(1680, 1050), output_);
    ctx()->select(InspectionPoint{0, 3, 2, 0, KvKind::Keys});
    settle();
    legendsAndLabelsFit();
  }

  // Item 9: what is drawn means what it seems to.
  void visualsSayWhatTheyMean() {
    ctx()->select(InspectionPoint{0, 2, 1, 0, KvKind::Keys});
    settle();
    // The selected layer is a band over the whole axis height, not an outline of a value.
    QCPItemRect* band = window_->layerOverview()->selectionBand();
    QCOMPARE(band->topLeft->typeY(), QCPItemPosition::ptAxisRectRatio);
    QCOMPARE(band->topLeft->coords().y(), 0.0);
    QCOMPARE(band->bottomRight->coords().y(), 1.0);
    QCOMPARE(band->pen().style(), Qt::NoPen);
    // Steps count from 0: six steps are 0-5.
    QVERIFY2(window_->stepper()->stepDescription().contains(
                 QStringLiteral("step <b>2</b> (of steps 0\u20135)")),
             qPrintable(window_->stepper()->stepDescription()));
    // Every check has its own mark; a failed check says what did not hold.
    const StageListModel* stages = window_->diagnosis()->findChild<QTreeView*>()->model()
                                       ? qobject_cast<const StageListModel*>(
                                             window_->diagnosis()->findChild<QTreeView*>()->model())
                                       : nullptr;
    QVERIFY(stages);
    int failed = 0;
    for (int i = 0; i < stages->rowCount(); ++i) {
      const QModelIndex stage = stages->index(i, 0);
      for (int j = 0; j < stages->rowCount(stage); ++j) {
        const QModelIndex check = stages->index(j, 0, stage);
        QVERIFY(!check.data(Qt::DecorationRole).value<QIcon>().isNull());
        const QString text = check.data().toString();
        QVERIFY(!text.startsWith(QStringLiteral("FAIL")) &&
                !text.startsWith(QStringLiteral("ok:")));
        if (check.data(StageListModel::StatusRole).toString() == QStringLiteral("fail")) {
          ++failed;
          // What failed, not the condition that did not hold.
          QVERIFY2(!text.contains(QStringLiteral("records equal")) &&
                       !text.contains(QStringLiteral("rows unchanged")) &&
                       !text.contains(QStringLiteral("within tolerance")),
                   qPrintable(text));
          if (text.startsWith(QStringLiteral("new K/V records")))
            QVERIFY2(text.contains(QStringLiteral("differ from the reference projection")),
                     qPrintable(text));
        }
      }
    }
    QVERIFY(failed >= 1);
    // The colours are explained.
    QVERIFY(TokenStepperPanel::colourLegend().contains(QStringLiteral("first divergent step")));
    bool legendShown = false;
    for (auto* l : window_->stepper()->findChildren<QLabel*>())
      legendShown = legendShown || l->toolTip() == TokenStepperPanel::colourLegend();
    QVERIFY(legendShown);
    QVERIFY(window_->logits()->tokenPlot()->xAxis->label().contains(QStringLiteral("red")));
    // The new records' frame stays inside their columns (step 2 appended position 5).
    ctx()->select(InspectionPoint{0, 2, 1, 0, KvKind::Keys});
    settle();
    const auto& snap = ctx()->snapshot();
    for (KvHeatmapView* map :
         {window_->heatmaps()->referenceView(), window_->heatmaps()->differenceView()}) {
      QVERIFY(map->markerLeft() >= double(snap->appendedFirst) - 0.5);
      QVERIFY(map->markerRight() <= double(snap->appendedFirst + snap->appendedCount - 1) + 0.5);
    }
    // Integer axes carry whole ticks.
    QVERIFY(integerTicks(window_->timeline()->yAxis));
    QVERIFY(integerTicks(window_->timeline()->xAxis));
    QVERIFY(integerTicks(window_->logits()->tokenPlot()->xAxis));
    QVERIFY(integerTicks(window_->heatmaps()->referenceView()->xAxis));
    // The empty start-up screen shows no made-up content.
    recreate(QSize(1366, 768), nullptr);
    for (KvHeatmapView* map :
         {window_->heatmaps()->referenceView(), window_->heatmaps()->cachedView(),
          window_->heatmaps()->differenceView()}) {
      QVERIFY(!map->colorScale()->visible());
      QVERIFY(!map->xAxis->tickLabels());
    }
    for (QCustomPlot* plot : window_->findChildren<QCustomPlot*>()) {
      for (int g = 0; g < plot->graphCount(); ++g) QCOMPARE(plot->graph(g)->dataCount(), 0);
      for (int i = 0; i < plot->itemCount(); ++i)
        QVERIFY2(!plot->item(i)->visible() || qobject_cast<QCPItemText*>(plot->item(i)),
                 plot->metaObject()->className());
    }
  }

  // Item 10: the heatmaps zoom together; a click on a step in the logit or position plot
  // selects it; a click on the never-fed last token selects the step that chose it.
  void plotsInteract() {
    KvHeatmapPanel* maps = window_->heatmaps();
    KvHeatmapView* ref = maps->referenceView();
    const QCPRange before = ref->xAxis->range();
    const QPoint at = ref->axisRect()->rect().center();
    QWheelEvent wheel(at, ref->mapToGlobal(at), QPoint(), QPoint(0, 240), Qt::NoButton,
                      Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(ref, &wheel);
    settle();
    QVERIFY(ref->xAxis->range() != before);
    QCOMPARE(maps->cachedView()->xAxis->range(), ref->xAxis->range());
    QCOMPARE(maps->differenceView()->xAxis->range(), ref->xAxis->range());

    QCustomPlot* steps = window_->logits()->stepPlot();
    const int y = steps->axisRect()->rect().center().y();
    QTest::mouseClick(steps, Qt::LeftButton, Qt::NoModifier,
                      QPoint(int(steps->xAxis->coordToPixel(4.0)), y));
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(4));
    PositionTimelineView* timeline = window_->timeline();
    QTest::mouseClick(
        timeline, Qt::LeftButton, Qt::NoModifier,
        QPoint(int(timeline->xAxis->coordToPixel(1.0)), timeline->axisRect()->rect().center().y()));
    settle();
    QCOMPARE(ctx()->selection().step, int64_t(1));

    TokenStripView* strip = window_->stepper()->strip();
    const TokenStripView::Cell* unfed = nullptr;
    for (const auto& c : strip->cells())
      if (c.step < 0) unfed = &c;
    QVERIFY(unfed);
    window_->stepper()->scrollArea()->ensureVisible(unfed->rect.center().x(),
                                                    unfed->rect.center().y());
    QTest::mouseClick(strip, Qt::LeftButton, Qt::NoModifier, unfed->rect.center());
    settle();
    QCOMPARE(ctx()->selection().step, strip->lastStep());
    QVERIFY(window_->stepper()->stepDescription().contains(
        QStringLiteral("chose #%1").arg(unfed->tokenId)));
  }

  // Item 11: a long prompt: the current step's start and the divergence stay in view.
  void longPromptKeepsTheDivergenceInView() {
    AuditJobSpec spec = test::testAuditSpec({"wrong_layer:layer=2,source=1"});
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < 90; ++i) prompt.push_back(5 + i * 3);
    spec.promptIds = {prompt};
    spec.arrivalTicks = {0};
    auto output = std::make_shared<const AuditJobOutput>(runAuditJob(spec));
    recreate(QSize(1366, 768), output);
    TokenStripView* strip = window_->stepper()->strip();
    QScrollBar* bar = window_->stepper()->scrollArea()->horizontalScrollBar();
    const int viewport = window_->stepper()->scrollArea()->viewport()->width();
    auto inView = [&](const QRect& r) {
      return r.left() >= bar->value() && r.left() + 60 <= bar->value() + viewport;
    };
    QCOMPARE(strip->divergentStep(), int64_t(0));
    QCOMPARE(ctx()->selection().step, int64_t(0));
    QVERIFY(strip->stepRect(0).width() > viewport);  // the prefill is wider than the view
    QVERIFY2(
        inView(strip->stepRect(0)),
        qPrintable(QStringLiteral("%1 / %2").arg(bar->value()).arg(strip->stepRect(0).left())));
    QVERIFY(!window_->stepper()->divergencePin()->isVisible());
    // A later step: it is in view, and the divergence is named at the edge.
    QTest::keyClick(window_.get(), Qt::Key_End);  // nothing
    for (int i = 0; i < 4; ++i) QTest::keyClick(strip, Qt::Key_Right);
    settle();
    QCoreApplication::processEvents();
    QCOMPARE(ctx()->selection().step, int64_t(4));
    QVERIFY2(inView(strip->stepRect(4)), qPrintable(QStringLiteral("%1+%2 / %3 max %4 strip %5")
                                                        .arg(bar->value())
                                                        .arg(viewport)
                                                        .arg(strip->stepRect(4).left())
                                                        .arg(bar->maximum())
                                                        .arg(strip->width())));
    QToolButton* pin = window_->stepper()->divergencePin();
    QVERIFY(pin->isVisible());
    QVERIFY(pin->text().contains(QStringLiteral("step 0: divergence")));
    QTest::mouseClick(pin, Qt::LeftButton);
    settle();
    QCoreApplication::processEvents();
    QCOMPARE(ctx()->selection().step, int64_t(0));
    QVERIFY(inView(strip->stepRect(0)));
    // A short prompt: the divergence (step 3) and a later step (5) are both in view.
    recreate(QSize(1366, 768), output_);
    ctx()->select(InspectionPoint{0, 5, 2, 0, KvKind::Keys});
    settle();
    QCoreApplication::processEvents();
    TokenStripView* shortStrip = window_->stepper()->strip();
    QScrollBar* shortBar = window_->stepper()->scrollArea()->horizontalScrollBar();
    const int shortView = window_->stepper()->scrollArea()->viewport()->width();
    for (int64_t step : {3, 5}) {
      const QRect r = shortStrip->stepRect(step);
      QVERIFY2(r.left() >= shortBar->value() && r.right() <= shortBar->value() + shortView,
               qPrintable(QStringLiteral("step %1 at %2-%3, view %4+%5")
                              .arg(step)
                              .arg(r.left())
                              .arg(r.right())
                              .arg(shortBar->value())
                              .arg(shortView)));
    }
  }
};

QTEST_MAIN(UsabilityViewsTest)
#include "UsabilityViewsTest.moc"
