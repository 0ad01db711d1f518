#include "kvscope/AuditResult.hpp"

#include "audit/ReferenceFromTrace.hpp"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace kvscope {

namespace {

// Concatenates [h, s_i, d] records along t, keeping the given columns of each.
FloatTensor concatRecords(
    const std::vector<std::pair<const FloatTensor*, std::vector<int64_t>>>& parts) {
  int64_t h = 0, d = 0, t = 0;
  for (const auto& [rec, cols] : parts) {
    if (rec->shape.size() != 3) continue;
    h = rec->shape[0];
    d = rec->shape[2];
    t += static_cast<int64_t>(cols.size());
  }
  if (h == 0) return {};
  FloatTensor out = FloatTensor::zeros({h, t, d});
  int64_t col = 0;
  for (const auto& [rec, cols] : parts) {
    if (rec->shape.size() != 3) continue;
    const int64_t s = rec->shape[1];
    for (int64_t j : cols) {
      for (int64_t hh = 0; hh < h; ++hh)
        std::copy_n(rec->data.begin() + (hh * s + j) * d, d, out.data.begin() + (hh * t + col) * d);
      ++col;
    }
  }
  return out;
}

}  // namespace

RequestReference referenceFromTrace(const Trace& t, int64_t request) { return detail::gatherReference(t, request, false); }

namespace detail {

RequestReference gatherReference(const Trace& t, int64_t request, bool consume) {
  RequestReference ref;
  ref.request = request;
  const int64_t L = t.model.numLayers, h = t.model.numKvHeads, d = t.model.headDim, dv = t.model.valueDim(),
                V = t.model.vocabSize;
  const std::vector<const TraceStep*> all = t.stepsOf(request);
  // An uncached engine recomputes the prefix and appends only the new entries: a
  // `cache_reset` step restarts the stream, so the reference starts at the last one.
  const auto reset = std::find_if(all.rbegin(), all.rend(), [](const TraceStep* s) { return s->resetsCache(); });
  const std::vector<const TraceStep*> steps(reset == all.rend() ? all.begin() : std::prev(reset.base()), all.end());
  std::vector<std::vector<int64_t>> real;  // per step, its real fed entries
  for (const TraceStep* s : steps) real.push_back(s->realColumns());
  const TraceRequest* req = t.findRequest(request);
  // A prefix-cache hit's reused entries are the prompt's first tokens, before the fed ones.
  const auto reusedIds = [req](const TraceStep& s) {
    return req ? std::min<int64_t>(s.reusedCount, static_cast<int64_t>(req->promptIds.size())) : 0;
  };
  // First the stream, so that every tensor is allocated once at its final size (a long run's
  // reference is gigabytes: no growing per-head buffers, no second copy).
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int64_t c = 0; c < reusedIds(*steps[i]); ++c) ref.ids.push_back(req->promptIds[static_cast<size_t>(c)]);
    for (int64_t j : real[i]) ref.ids.push_back(steps[i]->fedIds[static_cast<size_t>(j)]);
  }
  const auto T = static_cast<int64_t>(ref.ids.size());
  // Each step's logits row sits at its last entry; positions without one are NaN.
  ref.logits = FloatTensor({T, V}, std::vector<float>(static_cast<size_t>(T * V), std::numeric_limits<float>::quiet_NaN()));
  int64_t entries = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const TraceStep* s = steps[i];
    entries += reusedIds(*s) + static_cast<int64_t>(real[i].size());
    if (s->logits.empty() || entries == 0) continue;
    float* row = ref.logits.data.data() + (entries - 1) * V;
    if (s->logits.numel() == V) std::copy_n(s->logits.data.begin(), V, row);
    else std::fill_n(row, V, 0.0f);
  }
  for (int64_t l = 0; l < L; ++l) {
    FloatTensor k = FloatTensor::zeros({h, T, d}), v = FloatTensor::zeros({h, T, dv});
    if (!t.holdsRows(l)) {  // unknown, not zero: no record ever matches it
      std::fill(k.data.begin(), k.data.end(), std::numeric_limits<float>::quiet_NaN());
      std::fill(v.data.begin(), v.data.end(), std::numeric_limits<float>::quiet_NaN());
    }
    int64_t col = 0;  // the layer's records so far (a step may append fewer than it fed)
    for (size_t i = 0; i < steps.size() && t.holdsRows(l); ++i) {
      const TraceStep* s = steps[i];
      if (static_cast<size_t>(l) >= s->layers.size()) continue;
      const auto& rec = s->layers[static_cast<size_t>(l)];
      if (rec.keys.shape.size() != 3) continue;
      const int64_t cnt = rec.keys.shape[1];
      std::vector<int64_t> cols(static_cast<size_t>(std::min(s->reusedCount, cnt)));
      std::iota(cols.begin(), cols.end(), int64_t{0});  // reused records first
      for (int64_t j : real[i]) cols.push_back(j + s->reusedCount);
      for (int64_t j : cols) {
        if (j >= cnt || col >= T) continue;
        for (int64_t hh = 0; hh < h; ++hh) {
          std::copy_n(rec.keys.data.begin() + (hh * cnt + j) * d, d, k.data.begin() + (hh * T + col) * d);
          std::copy_n(rec.values.data.begin() + (hh * cnt + j) * dv, dv, v.data.begin() + (hh * T + col) * dv);
        }
        ++col;
      }
    }
    ref.keys.push_back(std::move(k));
    ref.values.push_back(std::move(v));
    // The caller owns the trace and gives its records up: free the layer's as soon as the
    // reference holds them (a long run's records are gigabytes; no second copy at the peak).
    if (!consume) continue;
    for (const TraceStep* s : all)
      if (static_cast<size_t>(l) < s->layers.size()) {
        auto& rec = const_cast<TraceLayerRecord&>(s->layers[static_cast<size_t>(l)]);
        rec.keys = {};
        rec.values = {};
      }
    // A step's records are small heap blocks: hand the freed pages back to the system, or the
    // process keeps them as well as the reference built from them.
    malloc_trim(0);
  }
  return ref;
}

}  // namespace detail

const float* RequestReference::logitsAt(int64_t position) const {
  if (logits.shape.size() != 2) return nullptr;
  const int64_t row = position - logitsFrom;
  if (position < 0 || row < 0 || row >= logits.shape[0]) return nullptr;
  return logits.data.data() + row * logits.shape[1];
}

size_t AuditResult::addReferencesFromTrace() {
  if (!referenceTrace) return 0;
  size_t added = 0;
  for (const auto& r : trace.requests) {
    if (referenceFor(r.id) || !referenceTrace->findRequest(r.id)) continue;
    references.push_back(referenceFromTrace(*referenceTrace, r.id));
    ++added;
  }
  return added;
}

const RequestReference* AuditResult::referenceFor(int64_t request) const {
  for (const auto& r : references)
    if (r.request == request) return &r;
  return nullptr;
}

FloatTensor AuditResult::cachedKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const {
  auto steps = trace.stepsOf(request);
  std::vector<std::pair<const FloatTensor*, std::vector<int64_t>>> parts;
  for (const TraceStep* s : steps) {
    if (s->step > step) break;
    if (!trace.holdsRows(layer)) return {};  // not in a minimized trace
    if (static_cast<size_t>(layer) >= s->layers.size()) continue;
    const auto& rec = s->layers[static_cast<size_t>(layer)];
    if (s->step == step) {
      const FloatTensor& snap = kind == KvKind::Keys ? rec.snapshotKeys : rec.snapshotValues;
      if (!snap.empty()) return snap;  // the engine's own view of its cache
    }
    const FloatTensor& r = kind == KvKind::Keys ? rec.keys : rec.values;
    parts.emplace_back(&r, s->realColumns(r.shape.size() == 3 ? r.shape[1] : 0));
  }
  return concatRecords(parts);
}

FloatTensor AuditResult::referenceKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const {
  const RequestReference* ref = referenceFor(request);
  if (!ref || layer < 0 || static_cast<size_t>(layer) >= ref->keys.size()) return {};
  int64_t t = 0;
  for (const TraceStep* s : trace.stepsOf(request)) {
    if (s->step > step) break;
    t += s->streamEntries();
  }
  const FloatTensor& full = kind == KvKind::Keys ? ref->keys[static_cast<size_t>(layer)]
                                                 : ref->values[static_cast<size_t>(layer)];
  if (full.shape.size() != 3) return {};
  const int64_t h = full.shape[0], T = full.shape[1], d = full.shape[2];
  t = std::min(t, T);
  FloatTensor out = FloatTensor::zeros({h, t, d});
  for (int64_t hh = 0; hh < h; ++hh)
    std::copy_n(full.data.begin() + hh * T * d, t * d, out.data.begin() + hh * t * d);
  return out;
}

std::vector<double> AuditResult::layerMaxDiff(int64_t request, int64_t step, KvKind kind) const {
  std::vector<double> out;
  for (int64_t l = 0; l < trace.model.numLayers; ++l) {
    auto a = cachedKv(request, step, l, kind);
    auto b = referenceKv(request, step, l, kind);
    if (a.empty() || b.empty()) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    if (a.shape != b.shape) {  // e.g. a duplicate append: a divergence of its own
      out.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    out.push_back(FloatTensor::maxAbsDiff(a, b));
  }
  return out;
}

}  // namespace kvscope
