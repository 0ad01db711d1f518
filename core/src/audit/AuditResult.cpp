#include "kvscope/AuditResult.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope {

namespace {

// Concatenates [h, s_i, d] records along t, keeping only the entries marked real.
FloatTensor concatRecords(const std::vector<std::pair<const FloatTensor*, const std::vector<uint8_t>*>>& parts) {
  int64_t h = 0, d = 0, t = 0;
  for (const auto& [rec, mask] : parts) {
    if (rec->shape.size() != 3) continue;
    h = rec->shape[0];
    d = rec->shape[2];
    for (int64_t j = 0; j < rec->shape[1]; ++j)
      if (!mask || mask->empty() || (static_cast<size_t>(j) < mask->size() && (*mask)[static_cast<size_t>(j)]))
        ++t;
  }
  if (h == 0) return {};
  FloatTensor out = FloatTensor::zeros({h, t, d});
  int64_t col = 0;
  for (const auto& [rec, mask] : parts) {
    if (rec->shape.size() != 3) continue;
    const int64_t s = rec->shape[1];
    for (int64_t j = 0; j < s; ++j) {
      if (mask && !mask->empty() && !(static_cast<size_t>(j) < mask->size() && (*mask)[static_cast<size_t>(j)])) continue;
      for (int64_t hh = 0; hh < h; ++hh)
        std::copy_n(rec->data.begin() + (hh * s + j) * d, d, out.data.begin() + (hh * t + col) * d);
      ++col;
    }
  }
  return out;
}

}  // namespace

const RequestReference* AuditResult::referenceFor(int64_t request) const {
  for (const auto& r : references)
    if (r.request == request) return &r;
  return nullptr;
}

FloatTensor AuditResult::cachedKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const {
  auto steps = trace.stepsOf(request);
  std::vector<std::pair<const FloatTensor*, const std::vector<uint8_t>*>> parts;
  for (const TraceStep* s : steps) {
    if (s->step > step) break;
    if (layer < 0 || static_cast<size_t>(layer) >= s->layers.size()) continue;
    const auto& rec = s->layers[static_cast<size_t>(layer)];
    if (s->step == step) {
      const FloatTensor& snap = kind == KvKind::Keys ? rec.snapshotKeys : rec.snapshotValues;
      if (!snap.empty()) return snap;  // the engine's own view of its cache
    }
    const FloatTensor& r = kind == KvKind::Keys ? rec.keys : rec.values;
    // Records may hold more entries than fed tokens (duplicate appends); the mask then
    // covers only the fed part and extra entries count as real.
    parts.emplace_back(&r, r.shape.size() == 3 && static_cast<size_t>(r.shape[1]) == s->fedMask.size()
                               ? &s->fedMask
                               : nullptr);
  }
  return concatRecords(parts);
}

FloatTensor AuditResult::referenceKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const {
  const RequestReference* ref = referenceFor(request);
  if (!ref || layer < 0 || static_cast<size_t>(layer) >= ref->keys.size()) return {};
  int64_t t = 0;
  for (const TraceStep* s : trace.stepsOf(request)) {
    if (s->step > step) break;
    t += s->realFedCount();
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
