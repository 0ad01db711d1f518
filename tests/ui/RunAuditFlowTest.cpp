// The window's run flow with an injected fake job: drop a model folder and a trace file on
// the window (drag and drop), compose faults in the fault panel, press Run audit: the job
// receives the spec (model, trace, prompts, settings, faults) on the engine thread, the
// progress bar moves, the result becomes the inspected output at its first divergence.
// Cancel and input errors show in the banner.
#include <QDropEvent>
#include <QGroupBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSemaphore>
#include <QSpinBox>
#include <QtTest>
#include <atomic>
#include <mutex>
#include <thread>

#include "TestAudit.hpp"
#include "kvscope/Error.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/views/HeadlineView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

std::vector<FaultInfo> testCatalog() {
  return {{"wrong_layer", "layer L reads layer S's cache", "layer 1 matches, layer 2 differs",
           {{"layer", "reader", "2"}, {"source", "source", "1"}}},
          {"cross_request", "request R writes into V's cache", "a batch row changes when another request arrives",
           {{"request", "writer", "1"}, {"victim", "victim", "0"}}}};
}

void drop(QWidget* target, const QList<QUrl>& urls) {
  QMimeData mime;
  mime.setUrls(urls);
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  QVERIFY(enter.isAccepted());
  QDropEvent dropEvent(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &dropEvent);
}

}  // namespace

class RunAuditFlowTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { QSettings().clear(); }

  void dropConfigureRunAndInspect() {
    std::mutex m;
    AuditJobSpec seen;
    QThread* jobThread = nullptr;
    InspectorWindow window(
        [&](const AuditJobSpec& spec) {
          {
            std::lock_guard<std::mutex> lock(m);
            seen = spec;
            jobThread = QThread::currentThread();
          }
          for (int i = 0; i <= 10; ++i) {
            if (spec.options.progress) spec.options.progress(i / 10.0, "step " + std::to_string(i));
            std::this_thread::sleep_for(std::chrono::milliseconds(40));
          }
          return *test::makeTestOutput();
        },
        testCatalog());
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    QTemporaryDir dir;
    QFile trace(dir.filePath(QStringLiteral("run.kvtrace")));
    QVERIFY(trace.open(QIODevice::WriteOnly));
    trace.close();
    drop(&window, {QUrl::fromLocalFile(dir.path()), QUrl::fromLocalFile(trace.fileName())});
    QCOMPARE(window.setup()->modelDir(), QFileInfo(dir.path()).absoluteFilePath());
    QCOMPARE(window.setup()->traceFile(), QFileInfo(trace.fileName()).absoluteFilePath());
    QCOMPARE(window.recentFiles().size(), 2);
    QCOMPARE(window.recentFiles().first(), QFileInfo(trace.fileName()).absoluteFilePath());

    window.setup()->setPrompts({QStringLiteral("The cache"), QStringLiteral("A second prompt")});
    window.setup()->findChildren<QSpinBox*>().first()->setValue(5);  // max new tokens
    QVERIFY(window.faults()->applySpec(QStringLiteral("wrong_layer:layer=2,source=1")));
    QVERIFY(window.faults()->applySpec(QStringLiteral("cross_request")));

    QSignalSpy succeeded(window.controller(), &InspectorController::auditSucceeded);
    QSignalSpy progressed(window.engine(), &EngineController::progress);
    QTest::mouseClick(window.setup()->runButton(), Qt::LeftButton);
    QVERIFY(!window.setup()->runButton()->isEnabled());
    QVERIFY(window.setup()->cancelButton()->isEnabled());
    QVERIFY(window.headline()->headline().contains(QStringLiteral("Running")));
    QTRY_VERIFY_WITH_TIMEOUT(succeeded.count() == 1, 10000);
    QVERIFY(progressed.count() >= 2);
    QVERIFY(window.setup()->runButton()->isEnabled());
    QCOMPARE(window.setup()->findChild<QProgressBar*>()->value(), 1000);

    std::lock_guard<std::mutex> lock(m);
    QVERIFY(jobThread && jobThread != QCoreApplication::instance()->thread());
    QCOMPARE(QString::fromStdString(seen.modelDir), QFileInfo(dir.path()).absoluteFilePath());
    QCOMPARE(seen.prompts.size(), size_t(2));
    QCOMPARE(seen.maxNewTokens, int64_t(5));
    QCOMPARE(seen.faults, (std::vector<std::string>{"wrong_layer:layer=2,source=1", "cross_request:request=1,victim=0"}));
    QVERIFY(window.controller()->waitUntilSettled(10000));
    QCOMPARE(window.context()->selection().step, int64_t(3));
    QVERIFY(window.headline()->headline().startsWith(QStringLiteral("Divergent: request 0, step 3, layer 2")));
  }

  void cancelAndInputErrorsShowInTheBanner() {
    std::atomic<bool> started{false};
    std::atomic<bool> fail{false};
    InspectorWindow window(
        [&](const AuditJobSpec& spec) -> AuditJobOutput {
          if (fail) throw InputError(spec.modelDir + "/config.json", "n_embd", "missing");
          started = true;
          while (!spec.options.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          throw AuditCancelled();
        },
        {});
    window.show();
    // Nothing to audit: refused before anything is posted.
    QTest::mouseClick(window.setup()->runButton(), Qt::LeftButton);
    QVERIFY(window.headline()->headline().startsWith(QStringLiteral("Input error")));
    QVERIFY(window.engine()->isIdle());

    window.setup()->setModelDir(QStringLiteral("/models/tiny"));
    QTest::mouseClick(window.setup()->runButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(started.load(), 10000);
    QTest::mouseClick(window.setup()->cancelButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(window.headline()->headline() == QStringLiteral("Audit cancelled"), 10000);
    QVERIFY(window.setup()->runButton()->isEnabled());

    fail = true;
    QTest::mouseClick(window.setup()->runButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(window.headline()->headline().contains(QStringLiteral("n_embd")), 10000);
    QVERIFY(window.headline()->headline().startsWith(QStringLiteral("Input error")));
    QVERIFY(!window.context()->output());
  }
};

QTEST_MAIN(RunAuditFlowTest)
#include "RunAuditFlowTest.moc"
