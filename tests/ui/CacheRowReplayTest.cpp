// CacheRowReplay on a hand-made trace: request 1 arrives at tick 1 in request 0's cache row
// (slot 0) and overwrites positions 0..1 with its prompt. Request 0's records never show
// it, its recorded checksum does; the replay rebuilds the row the engine really held, only
// when that reproduces the checksum, and the snapshot then compares that row.
#include <QtTest>

#include "inspect/CacheRowReplay.hpp"
#include "kvscope/Inspection.hpp"

using namespace kvscope;
using kvscope::detail::CacheRowReplay;

namespace {

// One layer, one kv head, d = 2; records [1, n, 2] with the given values.
TraceLayerRecord record(std::vector<float> values, int64_t cacheLength) {
  TraceLayerRecord rec;
  const auto n = static_cast<int64_t>(values.size() / 2);
  rec.keys.shape = {1, n, 2};
  rec.keys.data = values;
  rec.values = rec.keys;
  rec.cacheLength = cacheLength;
  return rec;
}

TraceStep step(int64_t request, int64_t number, int64_t tick, std::vector<int64_t> ids,
               TraceLayerRecord rec) {
  TraceStep s;
  s.request = request;
  s.step = number;
  s.tick = tick;
  s.slot = 0;  // both requests in the same row: the cross-request fault
  s.fedIds = std::move(ids);
  for (size_t i = 0; i < s.fedIds.size(); ++i) s.positions.push_back(static_cast<int64_t>(i));
  s.layers.push_back(std::move(rec));
  return s;
}

uint64_t checksum(const std::vector<float>& row) { return traceChecksum(row.data(), row.size()); }

struct Fixture {
  AuditResult result;
  std::vector<float> realRow;  // request 0's row after its step 1, as the engine held it
};

Fixture overwrittenRow(bool recordChecksum, bool checksumMatchesRealRow = true) {
  Fixture f;
  Trace& t = f.result.trace;
  t.model.numLayers = 1;
  t.model.numKvHeads = 1;
  t.model.headDim = 2;
  t.model.vocabSize = 8;
  TraceRequest r0, r1;
  r0.id = 0;
  r0.promptIds = {1, 2, 3};
  r1.id = 1;
  r1.promptIds = {4, 5};
  t.requests = {r0, r1};
  // tick 0: request 0's prefill writes positions 0..2.
  t.steps.push_back(step(0, 0, 0, {1, 2, 3}, record({1, 1, 2, 2, 3, 3}, 3)));
  // tick 1: request 1 arrives in the same row and writes positions 0..1.
  t.steps.push_back(step(1, 0, 1, {4, 5}, record({40, 40, 50, 50}, 2)));
  // tick 1: request 0 decodes one token at position 3.
  TraceStep decode = step(0, 1, 1, {6}, record({6, 6}, 4));
  decode.positions = {3};
  f.realRow = {40, 40, 50, 50, 3, 3, 6, 6};
  if (recordChecksum) {
    const uint64_t sum =
        checksum(checksumMatchesRealRow ? f.realRow : std::vector<float>{9, 9, 9, 9, 9, 9, 9, 9});
    decode.layers[0].keyChecksum = sum;
    decode.layers[0].valueChecksum = sum;
  }
  t.steps.push_back(decode);
  // The reference: request 0's own stream, as its records say.
  RequestReference ref;
  ref.request = 0;
  ref.ids = {1, 2, 3, 6};
  ref.logits = FloatTensor::zeros({4, 8});
  FloatTensor kv;
  kv.shape = {1, 4, 2};
  kv.data = {1, 1, 2, 2, 3, 3, 6, 6};
  ref.keys = {kv};
  ref.values = {kv};
  f.result.references = {ref};
  return f;
}

}  // namespace

class CacheRowReplayTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void rebuildsTheOverwrittenRowWhenTheChecksumAgrees() {
    const Fixture f = overwrittenRow(true);
    const Trace& t = f.result.trace;
    QVERIFY(!CacheRowReplay::rowRewritten(t, 0, 0, 0, KvKind::Keys));  // no checksum at step 0
    QVERIFY(CacheRowReplay::rowRewritten(t, 0, 1, 0, KvKind::Keys));
    QVERIFY(CacheRowReplay::rowRewritten(t, 0, 1, 0, KvKind::Values));
    const FloatTensor row = CacheRowReplay::replay(t, 0, 1, 0, KvKind::Keys);
    QCOMPARE(row.shape, (std::vector<int64_t>{1, 4, 2}));
    QCOMPARE(row.data, f.realRow);
    // The records alone still say the row is fine.
    QCOMPARE(f.result.cachedKv(0, 1, 0, KvKind::Keys).data,
             (std::vector<float>{1, 1, 2, 2, 3, 3, 6, 6}));
  }

  void refusesToGuessWithoutAMatchingChecksum() {
    QVERIFY(
        CacheRowReplay::replay(overwrittenRow(false).result.trace, 0, 1, 0, KvKind::Keys).empty());
    const Fixture wrong = overwrittenRow(true, false);
    QVERIFY(CacheRowReplay::rowRewritten(wrong.result.trace, 0, 1, 0, KvKind::Keys));
    QVERIFY(CacheRowReplay::replay(wrong.result.trace, 0, 1, 0, KvKind::Keys).empty());
  }

  void anUntrustedCacheLengthIsNeitherRebuiltNorAllocated() {
    // A damaged trace declares a cache of 2^40 entries after request 1's prefill: the row
    // would need terabytes; nothing longer than what was written into the slot is rebuilt.
    Fixture f = overwrittenRow(true);
    f.result.trace.steps[1].layers[0].cacheLength = int64_t{1} << 40;
    QVERIFY(CacheRowReplay::replay(f.result.trace, 0, 1, 0, KvKind::Keys).empty());
  }

  void recordsThatMatchTheChecksumAreNotRewritten() {
    Fixture f = overwrittenRow(false);
    TraceStep& decode = f.result.trace.steps.back();
    const uint64_t sum = checksum({1, 1, 2, 2, 3, 3, 6, 6});
    decode.layers[0].keyChecksum = sum;
    decode.layers[0].valueChecksum = sum;
    QVERIFY(!CacheRowReplay::rowRewritten(f.result.trace, 0, 1, 0, KvKind::Keys));
  }

  void snapshotComparesTheRowTheEngineHeld() {
    const auto out = std::make_shared<AuditJobOutput>();
    out->result = overwrittenRow(true).result;
    Inspector inspector(out);
    const auto snap =
        std::make_shared<StepView>(inspector.view(InspectionPoint{0, 1, 0, 0, KvKind::Keys}));
    QVERIFY(snap->rowRewritten);
    QVERIFY(snap->cachedFromReplay);
    QCOMPARE(snap->cached, overwrittenRow(true).realRow);
    QCOMPARE(snap->diffArgPosition, int64_t(1));  // |50 - 2| at position 1
    QCOMPARE(double(snap->diffMax), 48.0);
    QVERIFY(QString::fromStdString(snap->note).contains(QStringLiteral("rebuilt")));
    QCOMPARE(snap->layerMaxDiff.size(), size_t(1));
    QCOMPARE(snap->layerMaxDiff[0], 48.0);  // the overview sees it too
    QCOMPARE(inspector.worstHead(0, 1, 0, KvKind::Keys), int64_t(0));
    // Step 0, before request 1 arrived: nothing to rebuild.
    const auto before =
        std::make_shared<StepView>(inspector.view(InspectionPoint{0, 0, 0, 0, KvKind::Keys}));
    QVERIFY(!before->rowRewritten);
    QCOMPARE(before->diffMax, 0.0f);
  }
};

QTEST_MAIN(CacheRowReplayTest)
#include "CacheRowReplayTest.moc"
