// What a first-time user trips on (issue 16), driven through the real window on a real
// audit (TestAudit.hpp): clicks, keys and focus with QTest, and what the views then show.
#include <QAbstractSpinBox>
#include <QApplication>
#include <QDockWidget>
#include <QLabel>
#include <QPlainTextEdit>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "TestAudit.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/panels/TokenStepperPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/LayerOverviewView.hpp"
#include "ui/views/LogitDeltaView.hpp"
#include "ui/views/PositionTimelineView.hpp"
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
};

QTEST_MAIN(UsabilityViewsTest)
#include "UsabilityViewsTest.moc"
