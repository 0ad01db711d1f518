#include "ui/StepSnapshotBuilder.hpp"

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

namespace {

// Copies head `head` of a [h, t, d] tensor into a [t, d] buffer.
std::vector<float> headSlice(const FloatTensor& t, int64_t head, int64_t* positions,
                             int64_t* dim) {
  *positions = 0;
  *dim = 0;
  if (t.shape.size() != 3 || head < 0 || head >= t.shape[0]) return {};
  const int64_t T = t.shape[1], d = t.shape[2];
  *positions = T;
  *dim = d;
  const auto begin = t.data.begin() + head * T * d;
  return std::vector<float>(begin, begin + T * d);
}

}  // namespace

int64_t StepSnapshotBuilder::referenceRow(const Trace& trace, int64_t request, int64_t step) {
  int64_t consumed = 0;
  bool found = false;
  for (const TraceStep* s : trace.stepsOf(request)) {
    if (s->step > step) break;
    consumed += s->realFedCount();
    found = found || s->step == step;
  }
  return found ? consumed - 1 : -1;
}

std::vector<double> StepSnapshotBuilder::layerDiffs(const AuditResult& result, uint64_t serial,
                                                    int64_t request, int64_t step,
                                                    KvKind kind) {
  if (serial != cacheSerial_) {
    layerCache_.clear();
    cacheSerial_ = serial;
  }
  const auto key = std::make_tuple(request, step, static_cast<int>(kind));
  auto it = layerCache_.find(key);
  if (it != layerCache_.end()) return it->second;
  if (layerCache_.size() > 512) layerCache_.clear();
  auto diffs = result.layerMaxDiff(request, step, kind);
  layerCache_.emplace(key, diffs);
  return diffs;
}

std::shared_ptr<const StepSnapshot> StepSnapshotBuilder::build(const AuditJobOutput& output,
                                                               uint64_t outputSerial,
                                                               const Selection& selection) {
  std::lock_guard<std::mutex> lock(mutex_);
  const AuditResult& result = output.result;
  auto snap = std::make_shared<StepSnapshot>();
  snap->outputSerial = outputSerial;
  snap->selection = selection;
  const Selection& s = selection;

  const FloatTensor cachedT = result.cachedKv(s.request, s.step, s.layer, s.kind);
  const FloatTensor refT = result.referenceKv(s.request, s.step, s.layer, s.kind);
  int64_t dCached = 0, dRef = 0;
  snap->cached = headSlice(cachedT, s.head, &snap->cachedPositions, &dCached);
  snap->reference = headSlice(refT, s.head, &snap->referencePositions, &dRef);
  snap->headDim = dCached ? dCached : dRef;

  float absMax = 0.0f;
  for (float v : snap->cached) absMax = std::max(absMax, std::abs(v));
  for (float v : snap->reference) absMax = std::max(absMax, std::abs(v));
  snap->valueAbsMax = absMax;

  if (snap->reference.empty()) {
    snap->note = "no reference K/V for request " + std::to_string(s.request);
  } else if (dCached != dRef && dCached != 0) {
    snap->note = "head dimension differs: cached " + std::to_string(dCached) + ", reference " +
                 std::to_string(dRef);
  } else if (!snap->cached.empty()) {
    const int64_t t = std::min(snap->cachedPositions, snap->referencePositions);
    const int64_t d = snap->headDim;
    snap->absDiff.resize(static_cast<size_t>(t * d));
    for (int64_t p = 0; p < t; ++p) {
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = static_cast<size_t>(p * d + j);
        const float diff = std::abs(snap->cached[i] - snap->reference[i]);
        snap->absDiff[i] = diff;
        if (diff > snap->diffMax) {
          snap->diffMax = diff;
          snap->diffArgPosition = p;
          snap->diffArgDim = j;
        }
      }
    }
    if (snap->cachedPositions != snap->referencePositions)
      snap->note = "cache length differs: cached " + std::to_string(snap->cachedPositions) +
                   " positions, reference " + std::to_string(snap->referencePositions);
  }

  snap->layerMaxDiff = layerDiffs(result, outputSerial, s.request, s.step, s.kind);
  snap->layerMaxDiffOther =
      layerDiffs(result, outputSerial, s.request, s.step,
                 s.kind == KvKind::Keys ? KvKind::Values : KvKind::Keys);

  // The step's logits row against the reference row for the same real prefix.
  const RequestReference* ref = result.referenceFor(s.request);
  const TraceStep* stepRecord = nullptr;
  for (const TraceStep* st : result.trace.stepsOf(s.request))
    if (st->step == s.step) stepRecord = st;
  const int64_t row = referenceRow(result.trace, s.request, s.step);
  if (ref && stepRecord && row >= 0 && ref->logits.shape.size() == 2 &&
      row < ref->logits.shape[0] && stepRecord->logits.numel() == ref->logits.shape[1]) {
    const int64_t V = ref->logits.shape[1];
    snap->logitDelta.resize(static_cast<size_t>(V));
    double maxAbs = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const float delta = stepRecord->logits.data[static_cast<size_t>(v)] -
                          ref->logits.data[static_cast<size_t>(row * V + v)];
      snap->logitDelta[static_cast<size_t>(v)] = delta;
      maxAbs = std::max(maxAbs, static_cast<double>(std::abs(delta)));
    }
    snap->maxAbsLogitDelta = maxAbs;
  }
  return snap;
}

}  // namespace kvscope::ui
