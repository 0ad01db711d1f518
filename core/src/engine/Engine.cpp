#include "kvscope/Engine.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>

#include "cache/KvCache.hpp"
#include "cache/KvQuantizer.hpp"
#include "engine/CachedAttention.hpp"
#include "engine/EngineSetup.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/PrefixCache.hpp"
#include "engine/RecurrentCheckpoints.hpp"
#include "engine/RequestState.hpp"
#include "engine/StepRecorder.hpp"
#include "model/ExpertTapCollector.hpp"
#include "model/families/ModelFamily.hpp"
#include "kvscope/BuildInfo.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Sampler.hpp"
#include "model/AllocationGuard.hpp"
#include "model/KvTapCollector.hpp"
#include "model/ModelImpl.hpp"

namespace kvscope {

using detail::RequestState;

namespace {

class EngineRun {
 public:
  EngineRun(Model& model, const std::vector<RequestSpec>& specs, const EngineOptions& options)
      : model_(model), impl_(model.impl()), cfg_(impl_.config), options_(options),
        faults_(options.faults, cfg_.numLayers) {
    int64_t longest = 0, longestNew = 0;
    specDrafts_ =
        options.speculativeDrafts > 0 ? options.speculativeDrafts : faults_.speculativeDrafts();
    if (specDrafts_ > 16) throw UsageError("at most 16 speculative draft tokens per step");
    prefillChunk_ = options.prefillChunk > 0 ? options.prefillChunk : faults_.prefillChunk();
    if (options.uncached) prefillChunk_ = 0;  // the reference recomputes the whole prefix
    batchInvariant_ = options.batchInvariant || faults_.makesBatchVariant();
    ringWindow_ = (options.ringWindow || faults_.needsRingCache()) && !options.uncached;
    const int64_t block =
        options.prefixCacheBlock > 0 ? options.prefixCacheBlock : faults_.prefixBlock();
    if (block > 0 && !options.uncached) prefix_ = std::make_unique<detail::PrefixCache>(block);
    detail::checkEngineRequest(cfg_, impl_.layerWindows, faults_, options, specs, specDrafts_);
    KvQuantization quant;
    quant.dtype = options.kvCacheDtype.empty() && faults_.needsQuantizedCache() && !options.uncached
                      ? "int8"
                      : options.kvCacheDtype;
    try {
      if (quant.blockwise()) {
        quant.scale = "per_block";
        // Keys and values are stored in blocks along their rows (MLA's values are narrower).
        const bool keysFit = cfg_.headDim % KvQuantization::kBlockElements == 0;
        if (!keysFit || cfg_.cacheValueDim() % KvQuantization::kBlockElements != 0)
          throw std::invalid_argument(quant.dtype + " needs " + (keysFit ? "value_head_dim" : "head_dim") +
                                      " a multiple of 32 (its blocks), not " +
                                      std::to_string(keysFit ? cfg_.cacheValueDim() : cfg_.headDim));
      }
      quant.validate(cfg_.numLayers);
    } catch (const std::invalid_argument& e) {
      std::string known;
      for (const auto& d : KvQuantization::dtypes()) known += (known.empty() ? "" : ", ") + d;
      throw UsageError(std::string("--kv-cache: ") + e.what() + " (known: " + known + ")");
    }
    quantizer_ = detail::KvQuantizer(quant);
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& s = specs[i];
      if (s.promptIds.empty()) throw UsageError("request " + std::to_string(i) + " has an empty prompt");
      if (static_cast<int64_t>(s.promptIds.size()) > cfg_.maxPositions)
        throw ContextLimitError(static_cast<int64_t>(s.promptIds.size()) - 1, cfg_.maxPositions);
      if (s.maxNewTokens < 1) throw UsageError("max new tokens must be at least 1");
      s.policy.validate();
      RequestState r;
      r.id = static_cast<int64_t>(i);
      r.spec = s;
      r.rng = RequestRng(s.policy.seed);
      r.lengths.assign(static_cast<size_t>(cfg_.numLayers), 0);
      r.rings = detail::ringLayout(impl_.layerWindows, ringWindow_);
      requests_.push_back(std::move(r));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(s.promptIds.size()) + s.maxNewTokens);
      longestNew = std::max(longestNew, s.maxNewTokens);
    }
    for (auto& r : requests_) {
      r.slot = r.id;
      const int64_t victim = faults_.crossRequestVictim(r.id);
      if (victim >= 0 && victim < static_cast<int64_t>(requests_.size())) {
        r.slot = victim;
        faults_.noteFired("cross_request", r.id, 0, -1);
      }
    }
    // Preallocated once: appends along t never reallocate. Slack covers duplicate appends.
    // Speculative steps append their drafts before rolling the rejected ones back (a skipped
    // rollback keeps them all).
    const int64_t capacity =
        std::min(longest, cfg_.maxPositions) * 2 + 8 + specDrafts_ * (longestNew + 1);
    memoryNote_ = detail::checkEngineMemory(impl_, specs, options, capacity);
    cache_ = detail::KvCache::forModel(cfg_, std::max<int64_t>(1, static_cast<int64_t>(requests_.size())), capacity);
    updates_ = options.weightUpdates;
    if (auto stale = faults_.staleCache()) {
      updates_.push_back({stale->tick, "", stale->scale, 0});
      keepStale_ = true;
      staleLayer_ = stale->layer;
    }
    padId_ = cfg_.padTokenId.value_or(cfg_.eosTokenIds.empty() ? 0 : cfg_.eosTokenIds.front());
  }

  const std::string& memoryNote() const { return memoryNote_; }

  Trace run() {
    Trace trace;
    trace.engine = "kvscope " + BuildInfo::detect().kvscopeVersion;
    trace.mode = options_.uncached ? "uncached" : "cached";
    trace.model = modelInfo();
    trace.faults = faults_.describe();
    trace.kvCache = quantizer_.format();
    trace.layerKinds = detail::traceLayerKinds(impl_.layerWindows, impl_.layerChunks, ringWindow_, cfg_.deltaNet.layers,
                                                cfg_.mla.enabled());
    trace_ = &trace;
    int64_t tick = 0;
    const int64_t lastArrival = std::accumulate(requests_.begin(), requests_.end(), int64_t{0},
        [](int64_t m, const RequestState& r) { return std::max(m, r.spec.arrivalTick); });
    while (std::any_of(requests_.begin(), requests_.end(), [](const RequestState& r) { return !r.done; })) {
      if (options_.cancelled && options_.cancelled()) throw AuditCancelled();
      applyWeightUpdates(tick);
      std::vector<RequestState*> arriving;
      for (auto& r : requests_)
        if (!r.arrived && r.spec.arrivalTick == tick) arriving.push_back(&r);
      std::set<int64_t> prefilled;
      for (auto& group : groups(arriving)) {
        for (auto* r : group) {
          r->arrived = true;
          prefilled.insert(r->id);
        }
        runStep(group, tick, /*prefill=*/true);
      }
      std::vector<RequestState*> decoding;
      for (auto& r : requests_)
        if (r.arrived && !r.done && !prefilled.count(r.id)) decoding.push_back(&r);
      for (auto& group : groups(decoding)) runStep(group, tick, /*prefill=*/false);
      ++tick;
      if (options_.progress) options_.progress(progressFraction());
      if (tick > lastArrival + cfg_.maxPositions * 4 + 16) throw UsageError("engine made no progress");
    }
    for (const auto& r : requests_) {
      TraceRequest tr;
      tr.id = r.id;
      tr.promptIds = r.spec.promptIds;
      tr.promptText = r.spec.promptText;
      tr.policy = r.spec.policy;
      tr.maxNewTokens = r.spec.maxNewTokens;
      tr.eosIds = r.spec.stopAtEos ? cfg_.eosTokenIds : std::vector<int64_t>{};
      tr.generated = r.generated;
      tr.stopReason = r.stopReason;
      tr.arrivalTick = r.spec.arrivalTick;
      tr.batchGroup = r.spec.batchGroup;
      trace.requests.push_back(std::move(tr));
    }
    if (!faults_.empty())
      trace.faultFirings = faults_.firings(detail::runFacts(
          requests_, trace, tick - 1, prefix_ != nullptr, prefillChunk_, impl_.layerWindows, impl_.layerChunks));
    return trace;
  }

 private:
  TraceModelInfo modelInfo() const {
    TraceModelInfo m = TraceModelInfo::ofConfig(cfg_);
    m.fingerprint = model_.fingerprint();
    m.directory = model_.checkpoint().directory();
    m.storedDtype = model_.storedDtype();
    if (cfg_.usesRope() && cfg_.rope.type != "default") m.rope = cfg_.rope;
    return m;
  }

  double progressFraction() const {
    double total = 0, done = 0;
    for (const auto& r : requests_) {
      total += static_cast<double>(r.spec.maxNewTokens);
      done += r.done ? static_cast<double>(r.spec.maxNewTokens) : static_cast<double>(r.generated.size());
    }
    return total > 0 ? done / total : 1.0;
  }

  // Requests sharing a batch group run as one left-padded batch; the rest run alone.
  // Batch-invariant kernels: every member runs alone, knowing how many mates it has.
  std::vector<std::vector<RequestState*>> groups(const std::vector<RequestState*>& members) const {
    std::vector<std::vector<RequestState*>> out;
    std::map<int64_t, size_t> byGroup;
    std::map<int64_t, int64_t> groupSize;
    for (auto* r : members)
      if (r->spec.batchGroup >= 0) ++groupSize[r->spec.batchGroup];
    for (auto* r : members) {
      r->batchMates = r->spec.batchGroup >= 0 ? groupSize[r->spec.batchGroup] : 1;
      // A rebuilt cache holds no pads, so its length no longer lines up with the group's.
      const bool batched = r->spec.batchGroup >= 0 && !r->needsRebuild && !r->leftBatch &&
                           !options_.uncached && !batchInvariant_;
      if (batched && byGroup.count(r->spec.batchGroup)) {
        out[byGroup[r->spec.batchGroup]].push_back(r);
        continue;
      }
      if (batched) byGroup[r->spec.batchGroup] = out.size();
      out.push_back({r});
    }
    return out;
  }

  void applyWeightUpdates(int64_t tick) {
    for (const auto& u : updates_) {
      if (u.tick != tick) continue;
      std::string tensor = u.tensor;
      if (tensor.empty()) {  // stale_cache: the layer's key projection
        tensor = familyOf(cfg_.architecture).keyProjection(staleLayer_);
      }
      model_.applyWeightUpdate(tensor, u.scale, u.seed);
      TraceEvent e;
      e.tick = tick;
      e.kind = "weight_update";
      e.tensor = tensor;
      e.scale = u.scale;
      e.seed = u.seed;
      e.weightsVersion = model_.weightsVersion();
      e.detail = keepStale_ ? "cache kept (stale)" : "caches rebuilt on next use";
      trace_->events.push_back(e);
      for (auto& r : requests_) {
        if (r.arrived && !r.done && !keepStale_) r.needsRebuild = true;
        if (r.arrived && !r.done && keepStale_ && u.tensor.empty())
          faults_.noteFired("stale_cache", -1, r.step, -1);
      }
    }
  }

  // One forward for a group (prefill or decode), then choose, record and stop.
  void runStep(std::vector<RequestState*>& group, int64_t tick, bool prefill) {
    const size_t B = group.size();
    std::vector<std::vector<int64_t>> fed(B), pos(B);
    std::vector<std::vector<uint8_t>> mask(B);
    std::vector<std::vector<std::string>> events(B);
    std::vector<std::vector<int64_t>> drafts(B);  // speculative decoding: draft tokens fed last
    size_t width = 0;
    std::vector<uint8_t> prefilling(B, 0);  // 1: the step feeds (a chunk of) the prompt
    std::vector<detail::PrefixHit> hits(B);  // prefix caching: rows taken instead of computed
    for (size_t b = 0; b < B; ++b) {
      RequestState& r = *group[b];
      const auto promptLength = static_cast<int64_t>(r.spec.promptIds.size());
      if (r.promptFed < promptLength) {
        if (r.needsRebuild) {  // a weight update mid-prefill: the prompt from its first chunk
          events[b].push_back("cache_reset");
          r.restartPrefill();
        }
        if (prefill) events[b].push_back("arrival");
        const bool chunked = B == 1 && prefillChunk_ > 0 && r.spec.batchGroup < 0;
        if (prefix_ && B == 1 && r.promptFed == 0 && !chunked)
          hits[b] = prefix_->reuse(r, *cache_, model_.weightsVersion(), faults_,
                                   [&](RequestState& q, int64_t n) { computePrefix(q, n); });
        const int64_t n = chunked ? std::min(prefillChunk_, promptLength - r.promptFed)
                                  : promptLength - r.promptFed;
        fed[b].assign(r.spec.promptIds.begin() + r.promptFed,
                      r.spec.promptIds.begin() + r.promptFed + n);
        prefilling[b] = 1;
      } else if (r.needsRebuild || options_.uncached) {
        fed[b] = r.consumed;
        fed[b].push_back(r.generated.back());
        if (prefix_) prefix_->forgetSlot(r.slot);
        if (r.needsRebuild) {
          events[b].push_back("cache_reset");
          r.needsRebuild = false;
          r.leftBatch = r.spec.batchGroup >= 0;
        }
        r.clearCache();
      } else if (r.step == r.firstDecodeStep && faults_.duplicatePromptToken(r.id)) {
        fed[b] = {r.spec.promptIds.back(), r.generated.back()};
        faults_.noteFired("duplicate_prompt_token", r.id, r.step, -1);
      } else {
        fed[b] = {r.generated.back()};
        if (B == 1 && speculates(r)) {
          drafts[b] = proposeDrafts(r);
          fed[b].insert(fed[b].end(), drafts[b].begin(), drafts[b].end());
        }
      }
      width = std::max(width, fed[b].size());
    }
    // Left padding to a common width; positions follow cumsum(mask) - 1 (pads get 1).
    for (size_t b = 0; b < B; ++b) {
      RequestState& r = *group[b];
      const size_t pad = width - fed[b].size();
      std::vector<int64_t> ids(pad, padId_);
      ids.insert(ids.end(), fed[b].begin(), fed[b].end());
      fed[b] = ids;
      mask[b].assign(pad, 0);
      mask[b].insert(mask[b].end(), width - pad, 1);
      int64_t next = r.nextPosition, inStep = 0;
      // chunk_position (layer -1): the chunk's position ids restart at 0, as when an engine
      // computes them per chunk instead of from the cache's length.
      const bool restart = prefilling[b] && faults_.chunkPositionsRestart(r.id, r.chunk, -1);
      for (size_t j = 0; j < width; ++j) {
        if (!mask[b][j]) {
          pos[b].push_back(1);
          continue;
        }
        const int64_t p = faults_.position(r.id, r.step, inStep, next++);
        pos[b].push_back(restart ? inStep : p);
        ++inStep;
      }
    }
    // The context limit is checked before any position row is read.
    for (size_t b = 0; b < B; ++b) {
      const int64_t maxPos = *std::max_element(pos[b].begin(), pos[b].end());
      if (maxPos >= cfg_.maxPositions) {
        for (auto* r : group) stopForContext(*r, tick, maxPos);
        return;
      }
    }
    std::vector<int64_t> flatIds, flatPos;
    for (size_t b = 0; b < B; ++b) {
      flatIds.insert(flatIds.end(), fed[b].begin(), fed[b].end());
      flatPos.insert(flatPos.end(), pos[b].begin(), pos[b].end());
    }
    const auto W = static_cast<int64_t>(width);
    // The rows a step reads: each request's last entry and the rows verifying its drafts
    // (a long prompt's other rows are never read: the head's matmul skips them).
    int64_t logitsFrom = W - 1;
    for (size_t b = 0; b < B; ++b)
      logitsFrom = std::min(logitsFrom, W - 1 - static_cast<int64_t>(drafts[b].size()));
    logitsFrom = std::max<int64_t>(logitsFrom, 0);
    auto idsT = torch::tensor(flatIds, torch::kLong).view({static_cast<int64_t>(B), W});
    auto posT = torch::tensor(flatPos, torch::kLong).view({static_cast<int64_t>(B), W});
    std::vector<std::vector<TraceLayerRecord>> records(B);
    std::vector<int64_t> accepted(B, 0);
    torch::Tensor logits;
    std::unique_ptr<detail::CachedAttention> cached;  // the cached engine's forward (its kept states)
    // A mixture of experts' choices, recorded per entry (and the uncached engine's records).
    detail::KvTapCollector kvTaps;
    detail::ExpertTapCollector routed(options_.uncached ? &kvTaps : nullptr);
    if (options_.uncached) {
      detail::UncachedAttention attention(
          torch::tensor(std::vector<int64_t>(mask[0].begin(), mask[0].end()))
              .to(torch::kBool)
              .view({1, W}),
          impl_.layerWindows, &quantizer_);
      logits = impl_.forward(idsT, posT, attention, &routed, logitsFrom);
      // The prompt, then one token per step.
      records[0] = detail::StepRecorder::uncachedLayers(kvTaps, cfg_.numLayers, W, group[0]->step == 0 ? W : 1);
    } else {
      cached = std::make_unique<detail::CachedAttention>(*cache_, group, mask, pos, faults_, impl_.layerWindows,
                                                         quantizer_);
      detail::CachedAttention& attention = *cached;
      attention.absorbLatentDecode(options_.mlaAbsorbedDecode);
      // chunk_position (layer L): the recorded ids are right, layer L rotates at the
      // chunk-local ones (B is 1: chunked requests are prefilled alone).
      if (B == 1 && prefilling[0])
        for (int64_t l = 0; l < cfg_.numLayers; ++l)
          if (faults_.chunkPositionsRestart(group[0]->id, group[0]->chunk, l))
            attention.setLayerPositions(l, torch::arange(W, torch::kLong).view({1, W}));
      if (B == 1 && cfg_.hasRecurrentLayers())
        attention.keepStatesAfter(detail::stateCheckpoints(*group[0], W, drafts[0].size(),
                                                            prefilling[0] != 0 && prefix_ ? prefix_->blockSize() : 0));
      logits = impl_.forward(idsT, posT, attention, &routed, logitsFrom);
      std::vector<std::vector<int64_t>> appendedUntil(B);
      for (size_t b = 0; b < B; ++b) {
        if (drafts[b].empty()) continue;
        appendedUntil[b] = group[b]->lengths;
        accepted[b] = verifyDrafts(*group[b], logits.select(0, static_cast<int64_t>(b)),
                                   fed[b].size() - static_cast<size_t>(logitsFrom), drafts[b]);
        rollBack(*group[b], static_cast<int64_t>(drafts[b].size()) - accepted[b], attention);
      }
      if (options_.recordCache) {
        detail::StepRecorder recorder(*cache_, options_.recordChecksums, options_.recordSnapshots,
                                      options_.uncached ? 0 : options_.recordStatesEvery);  // no state held uncached
        for (size_t b = 0; b < B; ++b)
          records[b] =
              recorder.layers(*group[b],
                              hits[b].length > 0 ? std::vector<int64_t>(group[b]->lengths.size(), 0)
                                                 : attention.lengthsBefore()[b],
                              appendedUntil[b], attention.ringRecords(b));
      }
    }
    for (size_t b = 0; b < B; ++b) {
      RequestState& r = *group[b];
      TraceStep st;
      st.request = r.id;
      st.step = r.step;
      st.tick = tick;
      st.slot = r.slot;
      st.fedIds = fed[b];
      st.positions = pos[b];
      if (std::find(mask[b].begin(), mask[b].end(), 0) != mask[b].end()) st.fedMask = mask[b];
      st.weightsVersion = model_.weightsVersion();
      st.events = events[b];
      st.layers = std::move(records[b]);
      st.reusedCount = hits[b].length;
      st.reusedFrom = hits[b].source;
      st.reusedBlocks = hits[b].blocks;
      // The experts of the entries the step records (the uncached engine: its own tokens).
      const bool ownTokens = options_.uncached && r.step > 0;
      st.experts = routed.choices(static_cast<int64_t>(b), ownTokens ? W - 1 : 0, ownTokens ? 1 : W,
                                  cfg_.numLayers);
      if (ownTokens) {  // the step's own tokens: the last one
        st.fedIds = {fed[b].back()};
        st.positions = {pos[b].back()};
      }
      if (prefilling[b]) {
        r.promptFed += std::count(mask[b].begin(), mask[b].end(), uint8_t{1});  // not pads
        if (r.chunk++ == 0) r.cacheVersion = model_.weightsVersion();
        if (r.promptFed < static_cast<int64_t>(r.spec.promptIds.size())) {
          // A chunk before the last chooses nothing: no logits row, no token.
          r.consumed.insert(r.consumed.end(), fed[b].begin(), fed[b].end());
          r.nextPosition += static_cast<int64_t>(fed[b].size());
          ++r.step;
          trace_->steps.push_back(std::move(st));
          continue;
        }
        r.firstDecodeStep = r.step + 1;
        if (prefix_ && B == 1)
          prefix_->add(r, model_.weightsVersion(), detail::prefixStates(r, W, hits[b], cached.get()));
      }
      // A speculative step chooses its next token from the row of its last accepted entry;
      // the accepted drafts join the stream before it, the rejected ones not at all.
      const auto rejected = static_cast<int64_t>(drafts[b].size()) - accepted[b];
      st.draftCount = static_cast<int64_t>(drafts[b].size());
      st.acceptedCount = accepted[b];
      r.generated.insert(r.generated.end(), drafts[b].begin(), drafts[b].begin() + accepted[b]);
      auto row = logits.select(0, static_cast<int64_t>(b)).select(0, W - 1 - rejected - logitsFrom).contiguous();
      std::vector<float> lr(row.data_ptr<float>(), row.data_ptr<float>() + cfg_.vocabSize);
      st.logits = FloatTensor({cfg_.vocabSize}, lr);
      choose(r, st, lr);
      for (size_t j = 0; j + static_cast<size_t>(rejected) < fed[b].size(); ++j)
        if (mask[b][j]) r.consumed.push_back(fed[b][j]);
      r.nextPosition += std::count(mask[b].begin(), mask[b].end(), uint8_t{1}) - rejected;
      ++r.step;
      finishIfDone(r, st);
      trace_->steps.push_back(std::move(st));
    }
  }

  // Prefix caching with the prefix_reuse fault on one layer: r's first n prompt rows as a
  // prefill computes them (the wrong block then replaces that layer's).
  void computePrefix(RequestState& r, int64_t n) {
    std::vector<int64_t> ids(r.spec.promptIds.begin(), r.spec.promptIds.begin() + n), pos(n);
    std::iota(pos.begin(), pos.end(), int64_t{0});
    detail::CachedAttention attention(*cache_, {&r}, {std::vector<uint8_t>(n, 1)}, {pos}, faults_,
                                      impl_.layerWindows, quantizer_);
    impl_.forward(torch::tensor(ids, torch::kLong).view({1, n}),
                  torch::tensor(pos, torch::kLong).view({1, n}), attention, nullptr);
  }

  // Speculative decoding runs for greedy requests decoding alone, when switched on.
  bool speculates(const RequestState& r) const {
    return specDrafts_ > 0 && !options_.uncached && r.spec.policy.greedy() &&
           r.spec.batchGroup < 0 && !r.leftBatch && draftBudget(r) > 0;
  }

  // Drafts a step may propose: the step emits up to drafts + 1 tokens, all within max new
  // tokens and the context.
  int64_t draftBudget(const RequestState& r) const {
    const int64_t tokens = r.spec.maxNewTokens - static_cast<int64_t>(r.generated.size()) - 1;
    const int64_t positions = cfg_.maxPositions - 1 - r.nextPosition;
    return std::max<int64_t>(0, std::min({specDrafts_, tokens, positions}));
  }

  std::vector<int64_t> proposeDrafts(const RequestState& r) const {
    return detail::promptLookupDrafts(r, static_cast<size_t>(draftBudget(r)));
  }

  // Greedy verification: draft j is accepted while it is the token row j (the entry before
  // it) chooses; an EOS is chosen, never accepted. Returns the number accepted.
  int64_t verifyDrafts(const RequestState& r, const torch::Tensor& rows, size_t width,
                       const std::vector<int64_t>& drafts) const {
    SamplingPolicy effective = r.spec.policy;
    if (faults_.tieRuleLast(r.id)) effective.tieRule = SamplingPolicy::TieRule::Highest;
    const auto& eos = cfg_.eosTokenIds;
    const auto first = static_cast<int64_t>(width - drafts.size()) - 1;  // row of the fed token
    int64_t accepted = 0;
    for (const int64_t d : drafts) {
      auto row = rows.select(0, first + accepted).contiguous();
      std::vector<float> lr(row.data_ptr<float>(), row.data_ptr<float>() + cfg_.vocabSize);
      RequestRng unused(0);
      const int64_t t = Sampler::choose(lr, effective, unused).token;
      if (t != d || (r.spec.stopAtEos && std::find(eos.begin(), eos.end(), t) != eos.end())) break;
      ++accepted;
    }
    return accepted;
  }

  // The rejected drafts' rows leave the cache (their records were appended last), except
  // where the speculative_rollback fault skips it; a recurrent layer takes back its state after
  // the accepted tokens (kept by the forward), except where the state_rollback fault skips it.
  void rollBack(RequestState& r, int64_t rejected, const detail::CachedAttention& attention) {
    if (rejected <= 0) return;
    int64_t longest = 0;
    for (int64_t l = 0; l < cfg_.numLayers; ++l) {
      auto& length = r.lengths[static_cast<size_t>(l)];
      if (!cfg_.isRecurrentLayer(l)) {
        if (!faults_.skipRollback(r.id, r.step, l)) length -= rejected;
        longest = std::max(longest, length);
        continue;
      }
      length -= rejected;
      longest = std::max(longest, length);
      if (faults_.skipStateRollback(r.id, r.step, l)) continue;
      const int64_t fed = length - attention.lengthsBefore()[0][static_cast<size_t>(l)];  // accepted entries
      const detail::RecurrentState* kept = attention.stateAfter(l, fed);
      if (!kept) throw std::logic_error("no state kept after the accepted tokens of a speculative step");
      cache_->setRecurrentState(l, r.slot, kept->conv.select(0, 0), kept->state.select(0, 0));
    }
    r.valid.resize(static_cast<size_t>(longest));
  }

  void choose(RequestState& r, TraceStep& st, const std::vector<float>& logits) {
    SamplingPolicy effective = r.spec.policy;
    if (faults_.tieRuleLast(r.id)) effective.tieRule = SamplingPolicy::TieRule::Highest;
    if (faults_.rngReseed(r.id, st.step)) {
      r.rng.reseed(r.spec.policy.seed);
      if (!effective.greedy()) faults_.noteFired("rng_reseed", r.id, st.step, -1);
    }
    if (faults_.rngExtraDraw(r.id, st.step) && !effective.greedy()) {
      r.rng.nextUniform();
      faults_.noteFired("rng_extra_draw", r.id, st.step, -1);
    }
    st.rngDrawsBefore = r.rng.draws();
    if (effective.tieRule != r.spec.policy.tieRule &&  // tie_rule_last: did the rule matter?
        detail::choiceDiffers(logits, r.spec.policy, effective, r.rng))
      faults_.noteFired("tie_rule_last", r.id, st.step, -1);
    SamplingOutcome out = Sampler::choose(logits, effective, r.rng);
    st.rngDrawsAfter = r.rng.draws();
    st.chosenToken = out.token;
    r.generated.push_back(out.token);
  }

  void finishIfDone(RequestState& r, TraceStep& st) {
    const auto& eos = cfg_.eosTokenIds;
    if (r.spec.stopAtEos && std::find(eos.begin(), eos.end(), st.chosenToken) != eos.end()) {
      r.done = true;
      r.stopReason = "eos";
      st.events.push_back("eos");
    } else if (static_cast<int64_t>(r.generated.size()) >= r.spec.maxNewTokens) {
      r.done = true;
      r.stopReason = "max_new_tokens";
    } else if (r.nextPosition >= cfg_.maxPositions) {
      // The token just chosen would need a position row that does not exist.
      r.done = true;
      r.stopReason = "context_limit";
      st.events.push_back("context_limit");
    }
  }

  void stopForContext(RequestState& r, int64_t tick, int64_t position) {
    r.done = true;
    r.stopReason = "context_limit";
    TraceEvent e;
    e.tick = tick;
    e.kind = "context_limit";
    e.detail = "request " + std::to_string(r.id) + " needs position " + std::to_string(position) +
               " of " + std::to_string(cfg_.maxPositions) + "; refused before the lookup";
    e.weightsVersion = model_.weightsVersion();
    trace_->events.push_back(e);
  }

  Model& model_;
  ModelImpl& impl_;
  const ModelConfig& cfg_;
  const EngineOptions& options_;
  detail::FaultPlan faults_;
  std::string memoryNote_;  // the weights streamed from the disk (MemoryNeed::check)
  std::vector<RequestState> requests_;
  std::unique_ptr<detail::KvCache> cache_;
  std::vector<WeightUpdateSpec> updates_;
  bool keepStale_ = false;
  int64_t staleLayer_ = 0;
  int64_t padId_ = 0;
  int64_t specDrafts_ = 0;  // speculative decoding: draft tokens per step (0 = off)
  int64_t prefillChunk_ = 0;  // chunked prefill: prompt tokens per forward (0 = whole prompt)
  bool batchInvariant_ = false;  // batch-invariant kernels (EngineOptions::batchInvariant)
  bool ringWindow_ = false;      // ring-buffer caches on sliding layers (EngineOptions::ringWindow)
  std::unique_ptr<detail::PrefixCache> prefix_;  // prefix caching (EngineOptions::prefixCacheBlock)
  detail::KvQuantizer quantizer_{KvQuantization{}};  // the cache's element type
  Trace* trace_ = nullptr;
};

}  // namespace

Engine::Engine(std::shared_ptr<Model> model) : model_(std::move(model)) {}

Trace Engine::run(const std::vector<RequestSpec>& requests, const EngineOptions& options) {
  torch::InferenceMode guard;
  return detail::guardAllocations("generation", [&] {
    EngineRun run(*model_, requests, options);
    memoryNote_ = run.memoryNote();
    return run.run();
  });
}

}  // namespace kvscope
