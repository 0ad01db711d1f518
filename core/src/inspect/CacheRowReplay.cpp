#include "inspect/CacheRowReplay.hpp"

#include <algorithm>
#include <map>
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
  // A ring layer's checksum covers its slots in slot order, not this stream-order row; the
  // audit checks it against the records its slot map places (RequestWalk::checkRing).
  if (trace.layerKind(layer).ring()) return false;
  std::vector<std::vector<float>> heads;  // per head, [t, d] as the engine's row holds it
  int64_t length = 0;                     // the row's length before each step
  for (const TraceStep* st : trace.stepsOf(request)) {
    if (st->step > step) break;
    if (static_cast<size_t>(layer) >= st->layers.size()) return false;
    const TraceLayerRecord& rec = st->layers[static_cast<size_t>(layer)];
    const FloatTensor& r = recordsOf(rec, kind);
    if (r.shape.size() != 3) return false;
    const int64_t h = r.shape[0], n = r.shape[1], d = r.shape[2];
    if (heads.empty()) heads.resize(static_cast<size_t>(h));
    if (static_cast<int64_t>(heads.size()) != h) return false;
    // Appended at the end; a rollback (rejected drafts) then trims the tail.
    const int64_t kept = rec.keptRecords(length, n);
    for (int64_t hh = 0; hh < h; ++hh)
      heads[static_cast<size_t>(hh)].insert(heads[static_cast<size_t>(hh)].end(),
                                            r.data.begin() + hh * n * d,
                                            r.data.begin() + (hh * n + kept) * d);
    length += kept;
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
  const int64_t h = trace.model.numKvHeads, d = kind == KvKind::Keys ? trace.model.headDim : trace.model.valueDim();
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
  std::map<int64_t, int64_t> lengthOf;  // per writing request: its cache length before the step
  std::map<const TraceStep*, int64_t> startOf;
  for (const TraceStep* st : writes) {
    const TraceLayerRecord& rec = st->layers[static_cast<size_t>(layer)];
    const FloatTensor& r = recordsOf(rec, kind);
    if (r.shape.size() != 3 || r.shape[0] != h || r.shape[2] != d) return {};
    const int64_t n = r.shape[1];
    // Written after the writer's own rows; a rollback may trim the tail afterwards. A cache
    // length outside [start, start + n] (a reset) means the records end at the cache length.
    int64_t start = lengthOf[st->request];
    if (rec.cacheLength < start || rec.cacheLength > start + n) start = rec.cacheLength - n;
    const int64_t kept = rec.keptRecords(start, n);
    if (rec.cacheLength <= 0 || start < 0 || start + kept > capacity) return {};
    for (int64_t hh = 0; hh < h; ++hh)
      std::copy_n(r.data.begin() + hh * n * d, kept * d, row.begin() + (hh * capacity + start) * d);
    lengthOf[st->request] = start + kept;
    startOf[st] = start;
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
    const auto at = startOf.find(st);
    if (at == startOf.end()) return {};
    const int64_t kept = rec.keptRecords(at->second, n);
    for (int64_t j : st->realColumns(n))
      if (j < kept) keep.push_back(at->second + j);
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
