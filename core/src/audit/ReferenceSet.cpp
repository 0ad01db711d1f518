#include "audit/ReferenceSet.hpp"

#include "audit/ReferenceFromTrace.hpp"

#include <algorithm>
#include <set>
#include <cmath>
#include <limits>

#include "kvscope/Error.hpp"
#include "model/AllocationGuard.hpp"
#include "model/KvTapCollector.hpp"
#include "model/ModelImpl.hpp"

namespace kvscope::detail {

namespace {
// Per position: max |rounded - unrounded logits|, what the cache's rounding alone does (0
// before the rows the passes kept).
std::vector<float> roundingEffect(const ReferenceRun& rounded, const ReferenceRun& exact) {
  std::vector<float> out;
  if (rounded.logits.shape != exact.logits.shape || rounded.logits.shape.size() != 2 ||
      rounded.logitsFrom != exact.logitsFrom)
    return out;
  const int64_t rows = rounded.logits.shape[0], V = rounded.logits.shape[1], from = rounded.logitsFrom;
  out.assign(static_cast<size_t>(from + rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < V; ++v) {
      const auto i = static_cast<size_t>(r * V + v);
      auto& effect = out[static_cast<size_t>(from + r)];
      effect = std::max(effect, std::fabs(rounded.logits.data[i] - exact.logits.data[i]));
    }
  return out;
}

// The first stream position whose logits row a step of `request` chose from: a prompt's
// earlier rows are compared by nothing, so the reference does not compute them. One row of
// slack for a previous token fed again (the walk's index then lags the entries by one); 0
// where the run restarts its stream (cache_reset).
int64_t firstLogitsRow(const Trace& trace, int64_t request) {
  const std::vector<const TraceStep*> steps = trace.stepsOf(request);
  const std::vector<int64_t> held = trace.streamHeldAfter(request);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i]->resetsCache()) return 0;
    if (!steps[i]->logits.empty()) return std::max<int64_t>(held[i] - 2, 0);
  }
  return 0;
}
}  // namespace

ReferenceSet::ReferenceSet(const Model& model, const Trace& trace,
                           std::map<uint64_t, std::string> weightsDirectories)
    : model_(&model), trace_(&trace), directories_(std::move(weightsDirectories)) {
  if (trace.model.latentHeads && trace.kvCache.quantized())
    throw UsageError("the trace's cache is quantised (kv_cache) and holds each head's decompressed latent "
                     "attention (model.latent_records \"heads\"): KV Scope rounds a quantised cache's latent "
                     "rows, not decompressed heads, so this audit cannot say which rounding is right");
}

void ReferenceSet::inTraceLayout(const Model& m, ReferenceRun& run) const {
  if (!trace_->model.latentHeads) return;
  torch::InferenceMode guard;
  for (size_t l = 0; l < run.keys.size() && l < run.values.size(); ++l) {
    if (run.keys[l].data.empty()) continue;
    const auto [keys, values] = m.impl().decompressedHeads(static_cast<int64_t>(l), fromFloatTensor(run.keys[l]).unsqueeze(0),
                                                           fromFloatTensor(run.values[l]).unsqueeze(0));
    run.keys[l] = toFloatTensor(keys.select(0, 0).contiguous());
    run.values[l] = toFloatTensor(values.select(0, 0).contiguous());
  }
}

ReferenceSet::ReferenceSet(std::shared_ptr<Trace> reference) : referenceTrace_(std::move(reference)) {}

const Model* ReferenceSet::modelFor(uint64_t version) {
  if (version == model_->weightsVersion()) return model_;
  auto it = updated_.find(version);
  if (it != updated_.end()) return it->second.get();
  auto dir = directories_.find(version);
  if (dir != directories_.end()) {
    auto other = Model::load(dir->second);
    const auto& a = model_->config();
    const auto& b = other->config();
    if (a.numLayers != b.numLayers || a.numKvHeads != b.numKvHeads || a.headDim != b.headDim ||
        a.cacheValueDim() != b.cacheValueDim() || a.vocabSize != b.vocabSize)
      throw InputError(dir->second + "/config.json", "num_hidden_layers",
                       "the checkpoint given for weights version " + std::to_string(version) +
                           " has " + std::to_string(b.numLayers) + " layers, " +
                           std::to_string(b.numKvHeads) + " kv heads, head dim " +
                           std::to_string(b.headDim) + ", vocab " + std::to_string(b.vocabSize) +
                           "; version 0 (" + model_->checkpoint().directory() + ") has " +
                           std::to_string(a.numLayers) + ", " + std::to_string(a.numKvHeads) +
                           ", " + std::to_string(a.headDim) + ", " + std::to_string(a.vocabSize));
    updated_[version] = std::move(other);
    return updated_[version].get();
  }
  // Replay the trace's weight updates on a fresh copy of the checkpoint.
  std::vector<const TraceEvent*> updates;
  for (const auto& e : trace_->events)
    if (e.kind == "weight_update" && e.weightsVersion <= version) updates.push_back(&e);
  std::sort(updates.begin(), updates.end(),
            [](const TraceEvent* a, const TraceEvent* b) { return a->weightsVersion < b->weightsVersion; });
  if (updates.size() != version || updates.empty() || updates.back()->weightsVersion != version || updates.front()->tensor.empty()) {
    reason_ = "the trace used weights version " + std::to_string(version) +
              " but no checkpoint was given for it (--weights-version " + std::to_string(version) +
              "=DIR) and the trace does not record how the weights changed (weight_update events)";
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
  // A reference trace cannot grow, and a model reference covers every stream it was asked
  // for up to the context: computed once per (request, version), never again per step.
  if (it != cache_.end() && (referenceTrace_ || requested_[key] >= stream.size()))
    return &it->second;
  requested_[key] = stream.size();
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
    const TraceRequest* req = trace_->findRequest(request);
    const int64_t prefill = req ? static_cast<int64_t>(req->promptIds.size()) : -1;
    ExpertGuide guide;
    if (req && m->config().moe.numExperts > 0) guide = expertGuideOf(*trace_, *req, ids);
    guide.margin = expertMargin_;
    const ExpertGuide* experts = guide.choices.empty() ? nullptr : &guide;
    ReferenceKeep keep;  // the rows the steps chose from; no hidden states
    keep.logitsFrom = firstLogitsRow(*trace_, request);
    keep.hiddenStates = false;
    ReferenceRun run =
        m->reference(ids, trace_->kvCache, watch_, prefill, experts, stateLengths(*trace_, request), keep);
    inTraceLayout(*m, run);
    if (memoryNote_.empty()) memoryNote_ = run.memoryNote;
    passes_.references += run.passes;
    passes_.referenceTokens += run.passes * static_cast<int64_t>(ids.size());
    ref.request = request;
    if (trace_->kvCache.quantized()) {
      const ReferenceRun exact = m->reference(ids, {}, watch_, prefill, experts, {}, keep);
      passes_.references += exact.passes;
      passes_.referenceTokens += exact.passes * static_cast<int64_t>(ids.size());
      ref.roundingEffect = roundingEffect(run, exact);
    }
    ref.routing = std::move(run.routing);
    const ExpertChoices& engine = guide.choices;
    const auto row = static_cast<size_t>(engine.layers * engine.slots);  // one token's ids
    for (size_t t = 0; experts && t < ids.size(); ++t)
      ref.routedTokens += std::any_of(engine.ids.begin() + static_cast<std::ptrdiff_t>(t * row),
                                      engine.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * row),
                                      [](int64_t id) { return id >= 0; });
    ref.ids = std::move(run.ids);
    ref.logits = std::move(run.logits);
    ref.logitsFrom = run.logitsFrom;
    ref.keys = std::move(run.keys);
    ref.values = std::move(run.values);
    ref.statesAt = std::move(run.statesAt);
  }
  cache_[key] = std::move(ref);
  return &cache_[key];
}

RequestReference ReferenceSet::release(const RequestReference* ref) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (&it->second == ref) {
      RequestReference out = std::move(it->second);
      requested_.erase(it->first);
      cache_.erase(it);
      return out;
    }
  return *ref;  // not one of this set's (cannot happen): a copy
}

std::vector<int64_t> stateLengths(const Trace& trace, int64_t request) {
  std::set<int64_t> out;
  const std::vector<int64_t> recurrent = trace.recurrentLayers();
  if (recurrent.empty()) return {};
  const auto steps = trace.stepsOf(request);
  const std::vector<int64_t> held = trace.streamHeldAfter(request);
  const auto l = static_cast<size_t>(recurrent.front());
  for (size_t i = 0; i < steps.size(); ++i)
    if (l < steps[i]->layers.size() && !steps[i]->layers[l].recurrentState.empty() && held[i] > 0) out.insert(held[i]);
  return {out.begin(), out.end()};
}

ExpertGuide expertGuideOf(const Trace& trace, const TraceRequest& request,
                          const std::vector<int64_t>& stream) {
  ExpertGuide guide;
  ExpertChoices& out = guide.choices;
  const auto steps = trace.stepsOf(request.id);
  for (const TraceStep* st : steps)
    if (!st->experts.empty() && st->experts.layers == trace.model.numLayers) {
      out.slots = std::max(out.slots, st->experts.slots);  // a step with fewer: padded
      out.layers = st->experts.layers;
    }
  if (out.empty()) return guide;
  const auto K = static_cast<size_t>(out.slots), L = static_cast<size_t>(out.layers);
  out.ids.assign(stream.size() * L * K, -1);
  size_t next = 0;  // the stream index the request's next fed token stands for
  for (const TraceStep* st : steps) {
    next = std::max(next, static_cast<size_t>(std::max<int64_t>(st->reusedCount, 0)));
    const ExpertChoices& e = st->experts;
    const bool recorded = !e.empty() && e.layers == out.layers;
    for (size_t i = 0; i < st->fedIds.size(); ++i) {
      if (!st->isRealEntry(i)) continue;
      if (next >= stream.size() || st->fedIds[i] != stream[next]) {
        ++next;  // not the stream's token here (the walk reports it): nothing to follow
        continue;
      }
      for (size_t l = 0; recorded && l < L; ++l)
        for (size_t k = 0; k < static_cast<size_t>(e.slots); ++k)
          out.ids[(next * L + l) * K + k] = e.ids[(i * L + l) * static_cast<size_t>(e.slots) + k];
      ++next;
    }
  }
  return guide;
}

RequestReference ReferenceSet::fromTrace(int64_t request, const std::vector<int64_t>& stream) {
  RequestReference full = gatherReference(*referenceTrace_, request, true);
  // Keep the prefix on which the reference's stream agrees with the audited stream.
  size_t agree = 0;
  while (agree < full.ids.size() && agree < stream.size() && full.ids[agree] == stream[agree])
    ++agree;
  const auto T = static_cast<int64_t>(agree);
  const auto Tfull = static_cast<int64_t>(full.ids.size());
  if (T == Tfull) return full;  // the whole reference: no second copy of a long run's rows
  RequestReference ref;
  ref.request = request;
  ref.ids.assign(full.ids.begin(), full.ids.begin() + T);
  const int64_t V = full.logits.shape.size() == 2 ? full.logits.shape[1] : 0;
  ref.logits = FloatTensor::zeros({T, V});
  std::copy_n(full.logits.data.begin(), T * V, ref.logits.data.begin());
  auto prefix = [T, Tfull](const FloatTensor& x) {
    const int64_t h = x.shape[0], d = x.shape[2];
    FloatTensor out = FloatTensor::zeros({h, T, d});
    for (int64_t hh = 0; hh < h; ++hh)
      std::copy_n(x.data.begin() + hh * Tfull * d, T * d, out.data.begin() + hh * T * d);
    return out;
  };
  for (const auto& k : full.keys) ref.keys.push_back(prefix(k));
  for (const auto& v : full.values) ref.values.push_back(prefix(v));
  return ref;
}

std::unique_ptr<ReferenceRun> ReferenceSet::branch(const std::vector<int64_t>& ids,
                                                   uint64_t version) {
  if (!model_ || ids.empty()) return nullptr;
  const Model* m = modelFor(version);
  if (!m || static_cast<int64_t>(ids.size()) > m->config().maxPositions) return nullptr;
  ++passes_.rederivations;
  auto run = std::make_unique<ReferenceRun>(m->reference(ids, trace_->kvCache));
  inTraceLayout(*m, *run);
  return run;
}

std::unique_ptr<ReferenceRun> ReferenceSet::positioned(
    const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
    const std::map<int64_t, std::vector<int64_t>>& layerPositions, uint64_t version) {
  PassHypothesis change;
  change.layerPositions = layerPositions;
  return hypothesis(ids, positions, change, version);
}

std::unique_ptr<ReferenceRun> ReferenceSet::hypothesis(const std::vector<int64_t>& ids,
                                                       const std::vector<int64_t>& positions,
                                                       const PassHypothesis& change,
                                                       uint64_t version) {
  if (!model_ || ids.empty() || positions.size() != ids.size()) return nullptr;
  const Model* m = modelFor(version);
  if (!m) return nullptr;
  const auto T = static_cast<int64_t>(ids.size());
  m->checkReferenceMemory(T);
  ++passes_.rederivations;
  try {
    return guardAllocations("the uncached pass of an audit hypothesis", [&] {
      torch::InferenceMode guard;
      const KvQuantizer rounding(trace_->kvCache);
      UncachedAttention attention(torch::ones({1, T}, torch::kBool), m->impl().layerWindows,
                                  &rounding);
      for (const auto& [layer, own] : change.layerPositions)
        if (own.size() == ids.size())
          attention.setLayerPositions(layer, torch::tensor(own, torch::kLong).view({1, T}));
      for (const auto& [feature, layers] : change.droppedFrom)
        for (const auto& [layer, from] : layers) attention.setDroppedQueries(feature, layer, from);
      for (const int64_t layer : change.chunkAsWindow) attention.maskChunkAsWindow(layer);
      if (!change.ropeFlipped.empty()) attention.flipLayers(change.ropeFlipped, change.chunksFlip);
      attention.shiftTemperature(change.temperatureShift);
      attention.restartStateAt(change.stateRestart);
      KvTapCollector taps(/*withLogits=*/true);
      m->impl().forward(torch::tensor(ids, torch::kLong).view({1, T}),
                        torch::tensor(positions, torch::kLong).view({1, T}), attention, &taps);
      auto run = std::make_unique<ReferenceRun>();
      run->ids = ids;
      run->weightsVersion = version;
      for (int64_t l = 0; l < m->config().numLayers; ++l) {  // a recurrent layer's stay empty
        const torch::Tensor k = taps.keysOf(static_cast<size_t>(l)), v = taps.valuesOf(static_cast<size_t>(l));
        run->keys.push_back(k.defined() ? toFloatTensor(k.contiguous()) : FloatTensor{});
        run->values.push_back(v.defined() ? toFloatTensor(v.contiguous()) : FloatTensor{});
        const auto L = static_cast<size_t>(l);
        const bool state = L < taps.recurrentStates.size() && taps.recurrentStates[L].defined();
        run->convStates.push_back(state ? toFloatTensor(taps.convStates[L].contiguous()) : FloatTensor{});
        run->recurrentStates.push_back(state ? toFloatTensor(taps.recurrentStates[L].contiguous()) : FloatTensor{});
      }
      if (taps.logits.defined()) run->logits = toFloatTensor(taps.logits.contiguous());
      inTraceLayout(*m, *run);
      return run;
    });
  } catch (const UsageError&) {
    return nullptr;  // positions beyond the context: the hypothesis cannot be computed
  }
}

FloatTensor ReferenceSet::probeLayer0(int64_t token, int64_t count, uint64_t version) {
  if (!model_) return {};
  const Model* m = modelFor(version);
  if (!m) return {};
  count = std::min(count, m->config().maxPositions);
  const torch::Tensor keys = m->impl().probeLayer0Keys(token, count);
  return keys.defined() ? toFloatTensor(keys) : FloatTensor{};  // layer 0 recurrent: no keys
}

FloatTensor ReferenceSet::keyNormWeight(int64_t layer, uint64_t version) {
  if (!model_) return {};
  const Model* m = modelFor(version);
  if (!m || layer < 0 || layer >= m->config().numLayers) return {};
  const auto& w = m->impl().layers.at(static_cast<size_t>(layer)).kNormW;
  return w.defined() ? toFloatTensor(w.to(torch::kFloat).contiguous()) : FloatTensor{};
}

}  // namespace kvscope::detail
