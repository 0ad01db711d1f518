// The engine-thread bridge with an injected fake job: every job runs on one engine thread
// (never the GUI thread), a newer request with the same tag replaces a queued one, results
// of superseded generations are dropped, cancellation and errors come back as signals.
#include <QSemaphore>
#include <QThread>
#include <QtTest>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "TestAudit.hpp"
#include "kvscope/Error.hpp"
#include "ui/bridge/EngineController.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

// A fake audit: records which spec ran on which thread; optionally blocks until released.
struct FakeJob {
  QSemaphore entered;
  QSemaphore release;
  std::mutex mutex;
  std::vector<int64_t> ran;          // spec.maxNewTokens of every call, in order
  std::set<QThread*> threads;
  bool block = true;

  EngineController::AuditJobFunction function() {
    return [this](const AuditJobSpec& spec) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        ran.push_back(spec.maxNewTokens);
        threads.insert(QThread::currentThread());
      }
      entered.release();
      if (block && !release.tryAcquire(1, 10000)) throw std::runtime_error("fake job never released");
      AuditJobOutput out;
      out.result.report.inputDescription = "job " + std::to_string(spec.maxNewTokens);
      return out;
    };
  }
};

AuditJobSpec specWith(int64_t tag) {
  AuditJobSpec s;
  s.maxNewTokens = tag;
  return s;
}

}  // namespace

class EngineBridgeTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void coalescesSameTagAndDropsStaleResults() {
    FakeJob fake;
    EngineController engine(fake.function());
    std::vector<std::pair<quint64, std::string>> delivered;
    connect(&engine, &EngineController::auditFinished, this,
            [&](quint64 g, std::shared_ptr<const AuditJobOutput> out) {
              QCOMPARE(QThread::currentThread(), QCoreApplication::instance()->thread());
              delivered.emplace_back(g, out->result.report.inputDescription);
            });
    QSignalSpy stale(&engine, &EngineController::staleDropped);

    const uint64_t g1 = engine.postAudit(specWith(1));
    QVERIFY(fake.entered.tryAcquire(1, 10000));  // job 1 is running on the engine thread
    const uint64_t g2 = engine.postAudit(specWith(2));
    const uint64_t g3 = engine.postAudit(specWith(3));  // replaces the queued job 2
    QVERIFY(g1 < g2 && g2 < g3);
    QCOMPARE(engine.coalescedCount(), 1);
    QCOMPARE(engine.latestGeneration(EngineController::auditTag()), g3);
    QVERIFY(!engine.isIdle());
    fake.release.release(2);

    QTRY_VERIFY_WITH_TIMEOUT(engine.isIdle(), 10000);
    QCOMPARE(fake.ran, (std::vector<int64_t>{1, 3}));  // job 2 never ran
    QCOMPARE(delivered.size(), size_t(1));               // job 1's result was stale
    QCOMPARE(delivered[0].first, quint64(g3));
    QCOMPARE(delivered[0].second, std::string("job 3"));
    QCOMPARE(stale.count(), 1);
    QCOMPARE(stale.at(0).at(1).value<quint64>(), quint64(g1));
    QCOMPARE(engine.staleDroppedCount(), 1);
    QCOMPARE(fake.threads.size(), size_t(1));
    QVERIFY(*fake.threads.begin() != QCoreApplication::instance()->thread());
    QCOMPARE(*fake.threads.begin(), engine.engineThread());
  }

  void differentTagsDoNotCoalesce() {
    FakeJob fake;
    fake.block = false;
    EngineController engine(fake.function());
    QSignalSpy finished(&engine, &EngineController::taskFinished);
    std::atomic<int> ran{0};
    std::set<QThread*> threads;
    std::mutex m;
    auto work = [&](const EngineTaskContext&) -> EnginePayload {
      ++ran;
      std::lock_guard<std::mutex> lock(m);
      threads.insert(QThread::currentThread());
      return std::make_shared<const int>(7);
    };
    engine.post(QStringLiteral("a"), work);
    engine.post(QStringLiteral("b"), work);
    engine.postAudit(specWith(4));
    QTRY_VERIFY_WITH_TIMEOUT(engine.isIdle(), 10000);
    QCOMPARE(ran.load(), 2);
    QCOMPARE(finished.count(), 3);
    QCOMPARE(threads.size(), size_t(1));
    QCOMPARE(*threads.begin(), engine.engineThread());
    QCOMPARE(engine.coalescedCount(), 0);
  }

  void scrubbingCoalescesSnapshotRequests() {
    // Many selection changes in a row: the snapshot that lands matches the last selection.
    FakeJob fake;
    EngineController engine(fake.function());
    SelectionContext context;
    InspectorController controller(&context, &engine);
    controller.setOutput(test::makeTestOutput());
    QVERIFY(controller.waitUntilSettled(10000));
    context.select(InspectionPoint{0, 0, 0, 0, KvKind::Keys});
    for (int64_t step = 0; step < 6; ++step)
      for (int64_t layer = 0; layer < 3; ++layer)
        context.select(InspectionPoint{0, step, layer, 1, KvKind::Values});
    QVERIFY(controller.waitUntilSettled(10000));
    QVERIFY(context.snapshot());
    QCOMPARE(context.snapshot()->point, context.selection());
    QCOMPARE(context.snapshot()->point.step, int64_t(5));
    QVERIFY(engine.coalescedCount() + engine.staleDroppedCount() > 0);
  }

  void cancelStopsTheRunningAudit() {
    std::atomic<bool> started{false};
    EngineController engine([&](const AuditJobSpec& spec) -> AuditJobOutput {
      started = true;
      for (int i = 0; i < 10000; ++i) {
        if (spec.options.cancelled && spec.options.cancelled()) throw AuditCancelled();
        if (spec.options.progress) spec.options.progress(i / 10000.0, "working");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return {};
    });
    QSignalSpy cancelled(&engine, &EngineController::auditCancelled);
    QSignalSpy finished(&engine, &EngineController::auditFinished);
    QSignalSpy progress(&engine, &EngineController::progress);
    engine.postAudit(specWith(1));
    QTRY_VERIFY_WITH_TIMEOUT(started.load(), 10000);
    QTRY_VERIFY_WITH_TIMEOUT(progress.count() > 0, 10000);
    engine.cancel();
    QTRY_COMPARE_WITH_TIMEOUT(cancelled.count(), 1, 10000);
    QCOMPARE(finished.count(), 0);
    QTRY_VERIFY(engine.isIdle());
  }

  void inputErrorsAreReported() {
    EngineController engine([](const AuditJobSpec&) -> AuditJobOutput {
      throw InputError("model/config.json", "n_layer", "expected a positive integer");
    });
    QSignalSpy failed(&engine, &EngineController::auditFailed);
    engine.postAudit(specWith(1));
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 10000);
    QVERIFY(failed.at(0).at(1).toString().contains(QStringLiteral("n_layer")));
    QCOMPARE(failed.at(0).at(2).toBool(), true);
  }

  void destroyingWhileRunningDoesNotHang() {
    std::atomic<bool> started{false};
    {
      EngineController engine([&](const AuditJobSpec& spec) -> AuditJobOutput {
        started = true;
        while (!(spec.options.cancelled && spec.options.cancelled()))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        throw AuditCancelled();
      });
      engine.postAudit(specWith(1));
      QTRY_VERIFY_WITH_TIMEOUT(started.load(), 10000);
    }
    QVERIFY(started.load());
  }
};

QTEST_MAIN(EngineBridgeTest)
#include "EngineBridgeTest.moc"
