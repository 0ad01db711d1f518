// kvscope::Inspector::view against the core's own accessors: the per-layer whole-cache maxima
// (computed incrementally when stepping forward) equal AuditResult::layerMaxDiff exactly,
// in forward, backward and random order; the head buffers equal cachedKv/referenceKv.
#include <QtTest>
#include <cmath>
#include <random>

#include "TestAudit.hpp"
#include "kvscope/Inspection.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

bool sameDiffs(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

class StepSnapshotTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void layerDiffsMatchTheCoreInEveryOrder() {
    const auto out = test::makeTestOutput();
    const AuditResult& r = out->result;
    std::vector<InspectionPoint> order;
    for (int64_t req = 0; req < 2; ++req)
      for (KvKind kind : {KvKind::Keys, KvKind::Values})
        for (int64_t step = 0; step < 6; ++step)
          order.push_back(InspectionPoint{req, step, 1, 0, kind});
    std::vector<InspectionPoint> backward(order.rbegin(), order.rend());
    std::vector<InspectionPoint> shuffled = order;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
    for (const auto* sequence : {&order, &backward, &shuffled}) {
      Inspector inspector(out);
      for (const InspectionPoint& s : *sequence) {
        const StepView snap = inspector.view(s);
        QVERIFY2(sameDiffs(snap.layerMaxDiff, r.layerMaxDiff(s.request, s.step, s.kind)),
                 qPrintable(QStringLiteral("request %1 step %2").arg(s.request).arg(s.step)));
      }
    }
  }

  void buffersAreTheSelectedHead() {
    const auto out = test::makeTestOutput();
    const AuditResult& r = out->result;
    Inspector inspector(out);
    const InspectionPoint s{0, 4, 2, 1, KvKind::Values};
    const auto snap = std::make_shared<StepView>(inspector.view(s));
    const FloatTensor c = r.cachedKv(0, 4, 2, KvKind::Values);
    const FloatTensor ref = r.referenceKv(0, 4, 2, KvKind::Values);
    QCOMPARE(snap->cachedPositions, c.shape[1]);
    QCOMPARE(snap->referencePositions, ref.shape[1]);
    QCOMPARE(snap->headDim, int64_t(8));
    const int64_t T = c.shape[1], D = c.shape[2];
    for (int64_t p = 0; p < T; ++p)
      for (int64_t j = 0; j < D; ++j) {
        const size_t src = static_cast<size_t>((1 * T + p) * D + j), dst = static_cast<size_t>(p * D + j);
        QCOMPARE(snap->cached[dst], c.data[src]);
        QCOMPARE(snap->reference[dst], ref.data[src]);
        QCOMPARE(snap->absDiff[dst], std::abs(c.data[src] - ref.data[src]));
      }
    // The logits row: cached - reference for the same real prefix.
    QCOMPARE(snap->logitDelta.size(), size_t(48));
    QCOMPARE(inspector.referenceRow(0, 4), int64_t(4 + 4 - 1));
    QVERIFY(snap->maxAbsLogitDelta > 1.0);  // step 4 is after the divergence
    const auto clean =
        std::make_shared<StepView>(inspector.view(InspectionPoint{0, 1, 2, 1, KvKind::Values}));
    QVERIFY(clean->maxAbsLogitDelta < 1e-4);
    QVERIFY(clean->diffMax < 1e-5f);
  }
};

QTEST_MAIN(StepSnapshotTest)
#include "StepSnapshotTest.moc"
