#include "ui/StepSnapshotBuilder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ui/CacheRowReplay.hpp"

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

int64_t StepSnapshotBuilder::worstHead(const AuditResult& result, int64_t request, int64_t step,
                                       int64_t layer, KvKind kind) {
  const RequestReference* ref = result.referenceFor(request);
  if (!ref || layer < 0 || static_cast<size_t>(layer) >= ref->keys.size()) return -1;
  const TraceStep* current = nullptr;
  int64_t before = 0;
  for (const TraceStep* st : result.trace.stepsOf(request)) {
    if (st->step == step) {
      current = st;
      break;
    }
    before += st->realFedCount();
  }
  if (!current || static_cast<size_t>(layer) >= current->layers.size()) return -1;
  const auto& rec = current->layers[static_cast<size_t>(layer)];
  const FloatTensor& r = kind == KvKind::Keys ? rec.keys : rec.values;
  const FloatTensor& full = kind == KvKind::Keys ? ref->keys[static_cast<size_t>(layer)]
                                                 : ref->values[static_cast<size_t>(layer)];
  if (r.shape.size() != 3 || full.shape.size() != 3 || r.shape[0] != full.shape[0] ||
      r.shape[2] != full.shape[2])
    return -1;
  const int64_t h = r.shape[0], s = r.shape[1], d = r.shape[2], T = full.shape[1];
  const bool masked = static_cast<size_t>(s) == current->fedMask.size();
  int64_t best = -1;
  float bestDiff = -1.0f;
  for (int64_t hh = 0; hh < h; ++hh) {
    float m = 0.0f;
    int64_t k = 0;
    for (int64_t j = 0; j < s; ++j) {
      if (masked && !current->fedMask[static_cast<size_t>(j)]) continue;
      const int64_t p = before + k++;
      if (p >= T) break;
      for (int64_t x = 0; x < d; ++x)
        m = std::max(m, std::abs(r.data[static_cast<size_t>((hh * s + j) * d + x)] -
                                 full.data[static_cast<size_t>((hh * T + p) * d + x)]));
    }
    if (m > bestDiff) {
      bestDiff = m;
      best = hh;
    }
  }
  return best;
}

FloatTensor StepSnapshotBuilder::cachedSide(const AuditResult& result, int64_t request,
                                            int64_t step, int64_t layer, KvKind kind,
                                            bool* rewritten, bool* replayed) {
  *rewritten = CacheRowReplay::rowRewritten(result.trace, request, step, layer, kind);
  *replayed = false;
  if (*rewritten) {
    FloatTensor row = CacheRowReplay::replay(result.trace, request, step, layer, kind);
    if (!row.empty()) {
      *replayed = true;
      return row;
    }
  }
  return result.cachedKv(request, step, layer, kind);
}

int64_t StepSnapshotBuilder::worstCacheHead(const AuditResult& result, int64_t request,
                                            int64_t step, int64_t layer, KvKind kind) {
  bool rewritten = false, replayed = false;
  const FloatTensor a = cachedSide(result, request, step, layer, kind, &rewritten, &replayed);
  const FloatTensor b = result.referenceKv(request, step, layer, kind);
  if (a.shape.size() != 3 || b.shape.size() != 3 || a.shape[0] != b.shape[0] ||
      a.shape[2] != b.shape[2])
    return -1;
  const int64_t h = a.shape[0], ta = a.shape[1], tb = b.shape[1], d = a.shape[2];
  const int64_t t = std::min(ta, tb);
  int64_t best = -1;
  float bestDiff = 0.0f;
  for (int64_t hh = 0; hh < h; ++hh) {
    float m = 0.0f;
    for (int64_t p = 0; p < t; ++p) {
      const float* x = a.data.data() + (hh * ta + p) * d;
      const float* y = b.data.data() + (hh * tb + p) * d;
      for (int64_t j = 0; j < d; ++j) m = std::max(m, std::abs(x[j] - y[j]));
    }
    if (m > bestDiff) {
      bestDiff = m;
      best = hh;
    }
  }
  return best;
}

std::vector<double> StepSnapshotBuilder::layerDiffs(const AuditResult& result, uint64_t serial,
                                                    int64_t request, int64_t step,
                                                    KvKind kind) {
  if (serial != cacheSerial_) {
    layerCache_.clear();
    cacheSerial_ = serial;
    appendOnly_ = !result.trace.hasSnapshots();
  }
  const auto key = std::make_tuple(request, step, static_cast<int>(kind));
  auto it = layerCache_.find(key);
  if (it != layerCache_.end()) return it->second;
  if (layerCache_.size() > 4096) layerCache_.clear();
  std::vector<double> diffs;
  // Stepping forward one step is the common case: extend the previous step's maxima by
  // the records this step appended instead of rebuilding every layer's whole cache.
  bool done = false;
  if (appendOnly_) {
    int64_t previousStep = -1;
    for (const TraceStep* st : result.trace.stepsOf(request)) {
      if (st->step >= step) break;
      previousStep = st->step;
    }
    auto prev = layerCache_.find(std::make_tuple(request, previousStep, static_cast<int>(kind)));
    if (previousStep >= 0 && prev != layerCache_.end())
      done = incrementalDiffs(result, request, step, kind, prev->second, &diffs);
  }
  if (!done) diffs = result.layerMaxDiff(request, step, kind);
  // Rows overwritten after their records were appended: compare what the row held.
  for (size_t l = 0; l < diffs.size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    if (!CacheRowReplay::rowRewritten(result.trace, request, step, layer, kind)) continue;
    const FloatTensor row = CacheRowReplay::replay(result.trace, request, step, layer, kind);
    const FloatTensor ref = result.referenceKv(request, step, layer, kind);
    if (row.empty() || ref.empty()) continue;
    diffs[l] = row.shape == ref.shape ? FloatTensor::maxAbsDiff(row, ref)
                                      : std::numeric_limits<double>::infinity();
  }
  layerCache_.emplace(key, diffs);
  return diffs;
}

bool StepSnapshotBuilder::incrementalDiffs(const AuditResult& result, int64_t request, int64_t step,
                                           KvKind kind, const std::vector<double>& previous,
                                           std::vector<double>* out) {
  const RequestReference* ref = result.referenceFor(request);
  if (!ref) return false;
  const int64_t layers = result.trace.model.numLayers;
  if (static_cast<int64_t>(previous.size()) != layers) return false;
  const TraceStep* current = nullptr;
  int64_t before = 0;  // real tokens consumed before `step`
  for (const TraceStep* st : result.trace.stepsOf(request)) {
    if (st->step == step) {
      current = st;
      break;
    }
    before += st->realFedCount();
  }
  if (!current || static_cast<int64_t>(current->layers.size()) < layers) return false;
  std::vector<double> diffs(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const double prevValue = previous[static_cast<size_t>(l)];
    if (!std::isfinite(prevValue)) return false;  // shapes already differ: no shortcut
    const auto& rec = current->layers[static_cast<size_t>(l)];
    const FloatTensor& r = kind == KvKind::Keys ? rec.keys : rec.values;
    const FloatTensor& full = kind == KvKind::Keys ? ref->keys[static_cast<size_t>(l)]
                                                   : ref->values[static_cast<size_t>(l)];
    if (r.shape.size() != 3 || full.shape.size() != 3) return false;
    const int64_t h = r.shape[0], s = r.shape[1], d = r.shape[2];
    if (full.shape[0] != h || full.shape[2] != d) return false;
    // The same rule as AuditResult::cachedKv: the mask applies when it covers every entry.
    const bool masked = static_cast<size_t>(s) == current->fedMask.size();
    std::vector<int64_t> real;
    for (int64_t j = 0; j < s; ++j)
      if (!masked || current->fedMask[static_cast<size_t>(j)]) real.push_back(j);
    const int64_t T = full.shape[1];
    if (static_cast<int64_t>(real.size()) != current->realFedCount() ||
        before + static_cast<int64_t>(real.size()) > T)
      return false;  // the cache grew differently from the reference: full comparison
    double m = prevValue;
    for (int64_t hh = 0; hh < h; ++hh)
      for (size_t k = 0; k < real.size(); ++k) {
        const float* a = r.data.data() + (hh * s + real[k]) * d;
        const float* b = full.data.data() + (hh * T + before + static_cast<int64_t>(k)) * d;
        for (int64_t j = 0; j < d; ++j) m = std::max(m, static_cast<double>(std::abs(a[j] - b[j])));
      }
    diffs[static_cast<size_t>(l)] = m;
  }
  *out = std::move(diffs);
  return true;
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

  const FloatTensor cachedT = cachedSide(result, s.request, s.step, s.layer, s.kind,
                                         &snap->rowRewritten, &snap->cachedFromReplay);
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

  if (snap->rowRewritten) {
    const std::string what =
        snap->cachedFromReplay
            ? "the engine's cache row was overwritten after its records were appended; 'Cached' "
              "shows the row "
              "rebuilt from every write into its slot (it reproduces the recorded checksum)"
            : "the engine's checksum of this cache row does not match its records: rows were "
              "overwritten after "
              "they were appended, by writes the trace does not show";
    snap->note = snap->note.empty() ? what : snap->note + "; " + what;
  }

  snap->layerMaxDiff = layerDiffs(result, outputSerial, s.request, s.step, s.kind);
  for (const StepNumerics& n : result.report.steps)
    if (n.request == s.request && n.step == s.step) {
      snap->layerNoiseFloor = s.kind == KvKind::Keys ? n.keyTolerance : n.valueTolerance;
      snap->logitNoiseFloor = n.tolerance;
    }

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
