#include "audit/ReferenceSet.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvscope/Error.hpp"
#include "model/ModelImpl.hpp"

namespace kvscope::detail {

ReferenceSet::ReferenceSet(const Model& model, const Trace& trace) : model_(&model), trace_(&trace) {}

ReferenceSet::ReferenceSet(std::shared_ptr<const Trace> reference) : referenceTrace_(std::move(reference)) {}

const Model* ReferenceSet::modelFor(uint64_t version) {
  if (version == model_->weightsVersion()) return model_;
  auto it = updated_.find(version);
  if (it != updated_.end()) return it->second.get();
  // Replay the trace's weight updates on a fresh copy of the checkpoint.
  std::vector<const TraceEvent*> updates;
  for (const auto& e : trace_->events)
    if (e.kind == "weight_update" && e.weightsVersion <= version) updates.push_back(&e);
  std::sort(updates.begin(), updates.end(),
            [](const TraceEvent* a, const TraceEvent* b) { return a->weightsVersion < b->weightsVersion; });
  if (updates.size() != version || updates.empty() || updates.back()->weightsVersion != version || updates.front()->tensor.empty()) {
    reason_ = "the trace used weights version " + std::to_string(version) +
              " but does not record how the weights changed (weight_update events)";
    return nullptr;
  }
  auto fresh = Model::load(model_->checkpoint().directory());
  for (const auto* e : updates) fresh->applyWeightUpdate(e->tensor, static_cast<float>(e->scale), e->seed);
  updated_[version] = fresh;
  return fresh.get();
}

const RequestReference* ReferenceSet::get(int64_t request, uint64_t version, const std::vector<int64_t>& stream) {
  auto key = std::make_pair(request, referenceTrace_ ? 0 : version);
  auto it = cache_.find(key);
  if (it != cache_.end() && it->second.ids.size() >= stream.size()) return &it->second;
  RequestReference ref;
  if (referenceTrace_) {
    ref = fromTrace(request, stream);
  } else {
    const Model* m = modelFor(version);
    if (!m) return nullptr;
    std::vector<int64_t> ids = stream;
    const auto limit = static_cast<size_t>(m->config().maxPositions);
    if (ids.size() > limit) ids.resize(limit);  // positions beyond the context do not exist
    if (ids.empty()) return nullptr;
    ReferenceRun run = m->reference(ids);
    ref.request = request;
    ref.ids = std::move(run.ids);
    ref.logits = std::move(run.logits);
    ref.keys = std::move(run.keys);
    ref.values = std::move(run.values);
  }
  cache_[key] = std::move(ref);
  return &cache_[key];
}

RequestReference ReferenceSet::fromTrace(int64_t request, const std::vector<int64_t>& stream) const {
  RequestReference ref;
  ref.request = request;
  const Trace& t = *referenceTrace_;
  const int64_t L = t.model.numLayers, h = t.model.numKvHeads, d = t.model.headDim, V = t.model.vocabSize;
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> logitRows;
  // Per layer, per head: concatenation of real appended records.
  std::vector<std::vector<std::vector<float>>> kh(static_cast<size_t>(L), std::vector<std::vector<float>>(static_cast<size_t>(h)));
  auto vh = kh;
  for (const TraceStep* s : t.stepsOf(request)) {
    if (std::find(s->events.begin(), s->events.end(), "cache_reset") != s->events.end()) {
      // An uncached engine recomputes the prefix; only the new entries are appended. A
      // reset restarts the stream.
      ids.clear();
      logitRows.clear();
      for (auto& layer : kh) for (auto& head : layer) head.clear();
      for (auto& layer : vh) for (auto& head : layer) head.clear();
    }
    std::vector<int64_t> realCols;
    for (size_t j = 0; j < s->fedIds.size(); ++j)
      if (s->fedMask.empty() || s->fedMask[j]) realCols.push_back(static_cast<int64_t>(j));
    for (int64_t j : realCols) {
      ids.push_back(s->fedIds[static_cast<size_t>(j)]);
      logitRows.emplace_back(static_cast<size_t>(V), std::numeric_limits<float>::quiet_NaN());
    }
    if (!s->logits.empty() && !logitRows.empty()) logitRows.back() = s->logits.data;
    for (int64_t l = 0; l < L && static_cast<size_t>(l) < s->layers.size(); ++l) {
      const auto& rec = s->layers[static_cast<size_t>(l)];
      if (rec.keys.shape.size() != 3) continue;
      const int64_t cnt = rec.keys.shape[1];
      for (int64_t j : realCols) {
        if (j >= cnt) continue;
        for (int64_t hh = 0; hh < h; ++hh) {
          auto* kd = rec.keys.data.data() + (hh * cnt + j) * d;
          auto* vd = rec.values.data.data() + (hh * cnt + j) * d;
          kh[static_cast<size_t>(l)][static_cast<size_t>(hh)].insert(kh[static_cast<size_t>(l)][static_cast<size_t>(hh)].end(), kd, kd + d);
          vh[static_cast<size_t>(l)][static_cast<size_t>(hh)].insert(vh[static_cast<size_t>(l)][static_cast<size_t>(hh)].end(), vd, vd + d);
        }
      }
    }
  }
  // Keep the prefix on which the reference's stream agrees with the audited stream.
  size_t agree = 0;
  while (agree < ids.size() && agree < stream.size() && ids[agree] == stream[agree]) ++agree;
  const auto T = static_cast<int64_t>(agree);
  ref.ids.assign(ids.begin(), ids.begin() + T);
  ref.logits = FloatTensor::zeros({T, V});
  for (int64_t p = 0; p < T; ++p)
    std::copy(logitRows[static_cast<size_t>(p)].begin(), logitRows[static_cast<size_t>(p)].end(), ref.logits.data.begin() + p * V);
  for (int64_t l = 0; l < L; ++l) {
    FloatTensor k = FloatTensor::zeros({h, T, d}), v = FloatTensor::zeros({h, T, d});
    for (int64_t hh = 0; hh < h; ++hh) {
      const auto& ks = kh[static_cast<size_t>(l)][static_cast<size_t>(hh)];
      const auto& vs = vh[static_cast<size_t>(l)][static_cast<size_t>(hh)];
      const int64_t have = std::min<int64_t>(T, static_cast<int64_t>(ks.size()) / d);
      std::copy(ks.begin(), ks.begin() + have * d, k.data.begin() + hh * T * d);
      std::copy(vs.begin(), vs.begin() + have * d, v.data.begin() + hh * T * d);
    }
    ref.keys.push_back(std::move(k));
    ref.values.push_back(std::move(v));
  }
  return ref;
}

FloatTensor ReferenceSet::probeLayer0(int64_t token, int64_t count, uint64_t version) {
  if (!model_) return {};
  const Model* m = modelFor(version);
  if (!m) return {};
  count = std::min(count, m->config().maxPositions);
  return toFloatTensor(m->impl().probeLayer0Keys(token, count));
}

}  // namespace kvscope::detail
