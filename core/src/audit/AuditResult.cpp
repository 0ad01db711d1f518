#include "kvscope/AuditResult.hpp"

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

RequestReference referenceFromTrace(const Trace& t, int64_t request) {
  RequestReference ref;
  ref.request = request;
  const int64_t L = t.model.numLayers, h = t.model.numKvHeads, d = t.model.headDim, dv = t.model.valueDim(),
                V = t.model.vocabSize;
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> logitRows;
  // Per layer, per head: concatenation of real appended records.
  std::vector<std::vector<std::vector<float>>> kh(
      static_cast<size_t>(L), std::vector<std::vector<float>>(static_cast<size_t>(h)));
  auto vh = kh;
  for (const TraceStep* s : t.stepsOf(request)) {
    if (std::find(s->events.begin(), s->events.end(), "cache_reset") != s->events.end()) {
      // An uncached engine recomputes the prefix; only the new entries are appended. A
      // reset restarts the stream.
      ids.clear();
      logitRows.clear();
      for (auto& layer : kh)
        for (auto& head : layer) head.clear();
      for (auto& layer : vh)
        for (auto& head : layer) head.clear();
    }
    const std::vector<int64_t> realCols = s->realColumns();
    // A prefix-cache hit's reused entries are the prompt's first tokens, before the fed ones.
    const TraceRequest* req = t.findRequest(request);
    for (int64_t c = 0;
         c < s->reusedCount && req && c < static_cast<int64_t>(req->promptIds.size()); ++c) {
      ids.push_back(req->promptIds[static_cast<size_t>(c)]);
      logitRows.emplace_back(static_cast<size_t>(V), std::numeric_limits<float>::quiet_NaN());
    }
    for (int64_t j : realCols) {
      ids.push_back(s->fedIds[static_cast<size_t>(j)]);
      logitRows.emplace_back(static_cast<size_t>(V), std::numeric_limits<float>::quiet_NaN());
    }
    if (!s->logits.empty() && !logitRows.empty()) logitRows.back() = s->logits.data;
    for (int64_t l = 0; l < L && static_cast<size_t>(l) < s->layers.size(); ++l) {
      if (!t.holdsRows(l)) continue;  // a minimized trace's absent layer: NaN below
      const auto& rec = s->layers[static_cast<size_t>(l)];
      if (rec.keys.shape.size() != 3) continue;
      const int64_t cnt = rec.keys.shape[1];
      std::vector<int64_t> cols(static_cast<size_t>(std::min(s->reusedCount, cnt)));
      std::iota(cols.begin(), cols.end(), int64_t{0});  // reused records first
      for (int64_t j : realCols) cols.push_back(j + s->reusedCount);
      for (int64_t j : cols) {
        if (j >= cnt) continue;
        for (int64_t hh = 0; hh < h; ++hh) {
          auto* kd = rec.keys.data.data() + (hh * cnt + j) * d;
          auto* vd = rec.values.data.data() + (hh * cnt + j) * dv;
          kh[static_cast<size_t>(l)][static_cast<size_t>(hh)].insert(
              kh[static_cast<size_t>(l)][static_cast<size_t>(hh)].end(), kd, kd + d);
          vh[static_cast<size_t>(l)][static_cast<size_t>(hh)].insert(
              vh[static_cast<size_t>(l)][static_cast<size_t>(hh)].end(), vd, vd + dv);
        }
      }
    }
  }
  const auto T = static_cast<int64_t>(ids.size());
  ref.ids = std::move(ids);
  ref.logits = FloatTensor::zeros({T, V});
  for (int64_t p = 0; p < T; ++p) {
    const auto& row = logitRows[static_cast<size_t>(p)];
    if (static_cast<int64_t>(row.size()) == V)
      std::copy(row.begin(), row.end(), ref.logits.data.begin() + p * V);
  }
  for (int64_t l = 0; l < L; ++l) {
    FloatTensor k = FloatTensor::zeros({h, T, d}), v = FloatTensor::zeros({h, T, dv});
    if (!t.holdsRows(l)) {  // unknown, not zero: no record ever matches it
      std::fill(k.data.begin(), k.data.end(), std::numeric_limits<float>::quiet_NaN());
      std::fill(v.data.begin(), v.data.end(), std::numeric_limits<float>::quiet_NaN());
    }
    for (int64_t hh = 0; hh < h; ++hh) {
      const auto& ks = kh[static_cast<size_t>(l)][static_cast<size_t>(hh)];
      const auto& vs = vh[static_cast<size_t>(l)][static_cast<size_t>(hh)];
      const int64_t have = d > 0 ? std::min<int64_t>(T, static_cast<int64_t>(ks.size()) / d) : 0;
      std::copy(ks.begin(), ks.begin() + have * d, k.data.begin() + hh * T * d);
      std::copy(vs.begin(), vs.begin() + have * dv, v.data.begin() + hh * T * dv);
    }
    ref.keys.push_back(std::move(k));
    ref.values.push_back(std::move(v));
  }
  return ref;
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
