#include "inspect/CacheRowReplay.hpp"

#include <algorithm>
#include <optional>
#include <vector>

namespace kvscope::detail {

namespace {

const FloatTensor& recordsOf(const TraceLayerRecord& rec, KvKind kind) {
  return kind == KvKind::Keys ? rec.keys : rec.values;
}

std::optional<uint64_t> checksumOf(const TraceLayerRecord& rec, KvKind kind) {
  return kind == KvKind::Keys ? rec.keyChecksum : rec.valueChecksum;
}

const TraceStep* findStep(const Trace& trace, int64_t request, int64_t step) {
  for (const TraceStep* st : trace.stepsOf(request))
    if (st->step == step) return st;
  return nullptr;
}

}  // namespace

bool CacheRowReplay::rowRewritten(const Trace& trace, int64_t request, int64_t step, int64_t layer,
                                  KvKind kind) {
  const TraceStep* target = findStep(trace, request, step);
  if (!target || layer < 0 || static_cast<size_t>(layer) >= target->layers.size()) return false;
  const std::optional<uint64_t> recorded =
      checksumOf(target->layers[static_cast<size_t>(layer)], kind);
  if (!recorded) return false;  // nothing to check against (most traces from other engines)
  std::vector<std::vector<float>> heads;  // per head, [t, d] as the engine's row holds it
  for (const TraceStep* st : trace.stepsOf(request)) {
    if (st->step > step) break;
    if (static_cast<size_t>(layer) >= st->layers.size()) return false;
    const FloatTensor& r = recordsOf(st->layers[static_cast<size_t>(layer)], kind);
    if (r.shape.size() != 3) return false;
    const int64_t h = r.shape[0], n = r.shape[1], d = r.shape[2];
    if (heads.empty()) heads.resize(static_cast<size_t>(h));
    if (static_cast<int64_t>(heads.size()) != h) return false;
    for (int64_t hh = 0; hh < h; ++hh)
      heads[static_cast<size_t>(hh)].insert(heads[static_cast<size_t>(hh)].end(),
                                            r.data.begin() + hh * n * d,
                                            r.data.begin() + (hh + 1) * n * d);
  }
  return traceRowChecksum(heads) != *recorded;
}

FloatTensor CacheRowReplay::replay(const Trace& trace, int64_t request, int64_t step, int64_t layer,
                                   KvKind kind) {
  const TraceStep* target = findStep(trace, request, step);
  if (!target || layer < 0 || static_cast<size_t>(layer) >= target->layers.size()) return {};
  const TraceLayerRecord& targetRec = target->layers[static_cast<size_t>(layer)];
  const std::optional<uint64_t> recorded = checksumOf(targetRec, kind);
  const int64_t length = targetRec.cacheLength;
  const int64_t h = trace.model.numKvHeads, d = trace.model.headDim;
  if (!recorded || length <= 0 || h <= 0 || d <= 0) return {};

  // Every write into the target's slot up to the target step, in recording order.
  std::vector<const TraceStep*> writes;
  int64_t capacity = length;
  for (const TraceStep& st : trace.steps) {
    if (st.slot == target->slot && static_cast<size_t>(layer) < st.layers.size()) {
      writes.push_back(&st);
      capacity = std::max(capacity, st.layers[static_cast<size_t>(layer)].cacheLength);
    }
    if (&st == target) break;
  }
  // Declared cache lengths are untrusted: a row longer than every record written into the
  // slot could not reproduce a checksum of written values, so it is not rebuilt (and never
  // allocated).
  int64_t written = 0;
  for (const TraceStep* st : writes) {
    const FloatTensor& r = recordsOf(st->layers[static_cast<size_t>(layer)], kind);
    written += r.shape.size() == 3 ? r.shape[1] : 0;
  }
  if (capacity > written) return {};
  std::vector<float> row(static_cast<size_t>(h * capacity * d), 0.0f);  // [h, capacity, d]
  for (const TraceStep* st : writes) {
    const TraceLayerRecord& rec = st->layers[static_cast<size_t>(layer)];
    const FloatTensor& r = recordsOf(rec, kind);
    if (r.shape.size() != 3 || r.shape[0] != h || r.shape[2] != d) return {};
    const int64_t n = r.shape[1];
    const int64_t start = rec.cacheLength - n;  // the writer's own cache length before the step
    if (rec.cacheLength <= 0 || start < 0) return {};
    for (int64_t hh = 0; hh < h; ++hh)
      std::copy_n(r.data.begin() + hh * n * d, n * d, row.begin() + (hh * capacity + start) * d);
  }
  FloatTensor full = FloatTensor::zeros({h, length, d});
  for (int64_t hh = 0; hh < h; ++hh)
    std::copy_n(row.begin() + hh * capacity * d, length * d, full.data.begin() + hh * length * d);
  if (traceChecksum(full.data.data(), full.data.size()) != *recorded) return {};

  // Drop the target request's pads, as AuditResult::cachedKv does (pads sit where the
  // request's own steps fed masked tokens).
  std::vector<int64_t> keep;
  for (const TraceStep* st : trace.stepsOf(request)) {
    if (st->step > step) break;
    const TraceLayerRecord& rec = st->layers[static_cast<size_t>(layer)];
    const FloatTensor& r = recordsOf(rec, kind);
    const int64_t n = r.shape.size() == 3 ? r.shape[1] : 0;
    for (int64_t j : st->realColumns(n)) keep.push_back(rec.cacheLength - n + j);
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  if (keep.empty() || keep.front() < 0 || keep.back() >= length) return {};
  const auto t = static_cast<int64_t>(keep.size());
  FloatTensor out = FloatTensor::zeros({h, t, d});
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t c = 0; c < t; ++c)
      std::copy_n(full.data.begin() + (hh * length + keep[static_cast<size_t>(c)]) * d, d,
                  out.data.begin() + (hh * t + c) * d);
  return out;
}

}  // namespace kvscope::detail
