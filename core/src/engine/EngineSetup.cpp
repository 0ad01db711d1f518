#include "engine/EngineSetup.hpp"

#include <algorithm>

#include "kvscope/Error.hpp"
#include "kvscope/MemoryBudget.hpp"
#include "model/RotaryEmbedding.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope::detail {

namespace {

void checkRingRequest(const ModelConfig& cfg, const std::vector<int64_t>& layerWindows,
                      const FaultPlan& faults, const EngineOptions& options,
                      int64_t speculativeDrafts) {
  const bool asked = options.ringWindow || faults.needsRingCache();
  if (!asked) return;
  const std::string what = options.ringWindow ? "--ring-window" : "fault 'window_wrap'";
  if (options.uncached)
    throw UsageError(what + " needs the cached engine: the uncached reference keeps no cache");
  if (std::none_of(layerWindows.begin(), layerWindows.end(), [](int64_t w) { return w > 0; }))
    throw UsageError(what + ": this " + architectureName(cfg.architecture) +
                     " checkpoint has no sliding-window layer (its config.json sets no "
                     "sliding_window), so no layer keeps a ring; ring caches need a model such "
                     "as Mistral or Qwen2 with use_sliding_window");
  if (speculativeDrafts > 0)
    throw UsageError(what +
                     " does not combine with speculative decoding: rolling rejected drafts back "
                     "would need the slots they overwrote");
  for (const int64_t l : faults.layersNamedBy("window_wrap"))
    if (l >= 0 && layerWindows.at(static_cast<size_t>(l)) == 0)
      throw UsageError("fault 'window_wrap': layer " + std::to_string(l) +
                       " attends over every entry (no sliding window), so it keeps no ring; "
                       "name a sliding layer or layer=-1");
}

// A model with recurrent (Gated DeltaNet) layers: the faults on their state need one (and the
// cached engine) and name only such layers; a fault that acts on a layer's K/V entries cannot
// name one. Speculative decoding and prefix caching keep the states they need (the state after
// each draft, after each prefix block).
void checkRecurrentRequest(const ModelConfig& cfg, const FaultPlan& faults, const EngineOptions& options) {
  struct StateFault {
    std::string name;
    const char* what;         // what the fault changes, for the refusals
    const char* onAttention;  // why an attention layer is not one it acts on
  };
  static const std::vector<StateFault> stateFaults = {
      {"recurrent_state", "no state reads the padding", "its mask keeps the pads out"},
      {"state_rollback", "no state is rolled back after rejected drafts", "it keeps K/V rows, not a state"},
      {"prefix_state", "no state is handed over on a prefix hit", "it keeps K/V rows, not a state"}};
  for (const StateFault& f : stateFaults)
    for (const int64_t l : faults.layersNamedBy(f.name.c_str())) {
      const std::string fault = "fault '" + f.name + "'";
      if (!cfg.hasRecurrentLayers())
        throw UsageError(fault + " needs a checkpoint with recurrent layers (Qwen3.5's linear_attention layers); "
                         "this " + cfg.modelType + " checkpoint has none, so " + f.what);
      if (l >= 0 && !cfg.isRecurrentLayer(l))
        throw UsageError(fault + ": layer " + std::to_string(l) + " is an attention layer (" + f.onAttention +
                         "); name a linear_attention layer or layer=-1");
      if (options.uncached)
        throw UsageError(fault + " needs the cached engine: the uncached reference keeps no state between steps");
    }
  if (!cfg.hasRecurrentLayers() || options.uncached) return;
  const auto onState = [](const std::string& fault) {
    return std::any_of(stateFaults.begin(), stateFaults.end(), [&](const StateFault& f) { return f.name == fault; });
  };
  for (const auto& named : faults.namedLayers())
    if (cfg.isRecurrentLayer(named.layer) && !onState(named.fault))
      throw UsageError("fault '" + named.fault + "': " + named.parameter + "=" + std::to_string(named.layer) +
                       " is a recurrent (Gated DeltaNet) layer: it keeps a state, not the K/V entries the fault "
                       "acts on; name an attention layer (layer_types full_attention)");
}

}  // namespace

void checkEngineRequest(const ModelConfig& cfg, const std::vector<int64_t>& layerWindows,
                        const FaultPlan& faults, const EngineOptions& options,
                        const std::vector<RequestSpec>& specs, int64_t speculativeDrafts) {
  for (const int64_t l : faults.layersNamedBy("chunk_position"))
    if (l >= 0 && !cfg.usesRope())
      throw UsageError(
          "fault 'chunk_position': layer=" + std::to_string(l) + " needs a RoPE model; this " +
          architectureName(cfg.architecture) +
          " checkpoint adds learned position embeddings once, at its input, so a wrong "
          "position reaches every layer: use layer=-1");
  // LongRoPE: a forward whose longest position passes the original context turns with the
  // long factors, so a cache built before that point holds keys turned with the short ones.
  // transformers' Phi-3 generate recomputes its cache there; this engine does not, so a
  // cached run may not cross it.
  if (const int64_t original = cfg.usesRope() ? RotaryEmbedding::factorSwitchOf(cfg.rope) : 0;
      original > 0 && !options.uncached) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto prompt = static_cast<int64_t>(specs[i].promptIds.size());
      const int64_t lastFed = prompt + std::max<int64_t>(specs[i].maxNewTokens, 1) - 1;  // longest forward
      if (prompt <= original && lastFed > original)
        throw UsageError("request " + std::to_string(i) + ": its " + std::to_string(prompt) +
                         "-token prompt and " + std::to_string(specs[i].maxNewTokens) +
                         " new tokens cross LongRoPE's switch from short to long factors at " +
                         std::to_string(original) + " positions (original_max_position_embeddings); "
                         "the cache would keep keys turned with the short factors (transformers' "
                         "Phi-3 generate recomputes it there, this engine does not): generate at "
                         "most " + std::to_string(original - prompt + 1) +
                         " tokens, or start from a prompt longer than " + std::to_string(original));
    }
  }
  if (faults.makesBatchVariant() && options.uncached)
    throw UsageError(
        "fault 'batch_variance' needs the cached engine: the uncached reference runs every "
        "request alone");
  if (faults.makesBatchVariant() &&
      std::none_of(specs.begin(), specs.end(),
                   [](const RequestSpec& s) { return s.batchGroup >= 0; }))
    throw UsageError(
        "fault 'batch_variance' needs a batch: give two or more prompts that arrive at the same "
        "tick with --batch");
  if (faults.dropsRopeScaling() && (!cfg.usesRope() || cfg.rope.type == "default"))
    throw UsageError(
        "fault 'rope_scaling' needs a RoPE checkpoint with rope_scaling (linear, llama3 or "
        "dynamic); this " +
        architectureName(cfg.architecture) + " checkpoint " +
        (cfg.usesRope() ? "uses default RoPE" : "has no RoPE (learned position embeddings)"));
  if (faults.swapsQkNormOrder() && !cfg.qkNorm)
    throw UsageError("fault 'qk_norm_order' needs a checkpoint with a per-head q/k norm "
                     "(q_norm/k_norm weights, as Qwen3 has); this " +
                     architectureName(cfg.architecture) + " checkpoint has none, so there is "
                     "no order to swap");
  if (faults.flipsNopeLayers() &&
      (cfg.ropeLayers.empty() ||
       std::find(cfg.ropeLayers.begin(), cfg.ropeLayers.end(), false) == cfg.ropeLayers.end()))
    throw UsageError("fault 'nope_layer_rope' needs a checkpoint with NoPE layers (no_rope_layers "
                     "with a 0, as SmolLM3 has); every layer of this " +
                     architectureName(cfg.architecture) + " checkpoint rotates, so there is no "
                     "list to read inverted");
  if (faults.swapsLayerRopes() && (!cfg.slidingRope || *cfg.slidingRope == cfg.rope))
    throw UsageError("fault 'layer_rope_theta' needs a checkpoint whose sliding layers rotate "
                     "with a RoPE of their own (rope_local_base_freq or "
                     "rope_parameters.sliding_attention, as Gemma 3 has); every layer of this " +
                     architectureName(cfg.architecture) + " checkpoint rotates with one RoPE, "
                     "so there is no other theta to use");
  if (faults.rotatesWholeHeads() && cfg.usesRope() && cfg.rope.type == "longrope")
    throw UsageError("fault 'partial_rotary' cannot apply to a longrope checkpoint: its "
                     "short_factor and long_factor hold one divisor per rotary pair, so there are "
                     "no whole-head frequencies to turn with");
  if (faults.rotatesWholeHeads() && (!cfg.usesRope() || cfg.rope.partialRotaryFactor >= 1.0))
    throw UsageError("fault 'partial_rotary' needs a partial-rotary checkpoint "
                     "(partial_rotary_factor below 1, as Phi-3 and Phi-4-mini have); this " +
                     architectureName(cfg.architecture) + " checkpoint " +
                     (cfg.usesRope() ? "rotates the whole of each head" : "has no RoPE") +
                     ", so there is no unrotated part to rotate");
  if (faults.dropsFeature(detail::AttentionFeature::Softcap) && !(cfg.attnLogitSoftcap > 0))
    throw UsageError("fault 'softcap_dropped' needs a checkpoint with an attention soft-cap "
                     "(attn_logit_softcapping, as Gemma 2 has); this " +
                     architectureName(cfg.architecture) + " checkpoint has none, so there is "
                     "no soft-cap to drop");
  if (faults.dropsFeature(detail::AttentionFeature::LatentHeadSplit) && !cfg.mla.enabled())
    throw UsageError("fault 'mla_absorb' needs a checkpoint with multi-head latent attention "
                     "(kv_lora_rank, as DeepSeek V2 and V3 have); this " +
                     architectureName(cfg.architecture) + " checkpoint caches per-head keys and "
                     "values, so there is no latent to absorb the weights into");
  if (faults.dropsFeature(detail::AttentionFeature::ScoreMscale) && cfg.mla.scoreMscale == 1.0)
    throw UsageError("fault 'score_mscale' needs a checkpoint whose softmax scale carries yarn's mscale (latent "
                     "attention with a yarn rope_scaling and mscale_all_dim, as DeepSeek V2 and V3 ship); this " +
                     architectureName(cfg.architecture) + " checkpoint scales its scores by " +
                     (cfg.mla.enabled() ? "qk_head_dim^-0.5 alone" : "its head size alone") +
                     ", so there is no mscale to drop");
  if (options.mlaAbsorbedDecode && !cfg.mla.enabled())
    throw UsageError("--mla-absorbed needs a checkpoint with multi-head latent attention (kv_lora_rank, as "
                     "DeepSeek V2 and V3 have); this " +
                     architectureName(cfg.architecture) + " checkpoint caches per-head keys and values, so "
                     "there is no latent to decode against");
  if (faults.dropsFeature(detail::AttentionFeature::Sinks) && !cfg.attentionSinks)
    throw UsageError("fault 'sink_dropped' needs a checkpoint with attention sinks "
                     "(self_attn.sinks, as GPT-OSS has); this " +
                     architectureName(cfg.architecture) + " checkpoint has none, so there are "
                     "no sinks to drop");
  if (faults.dropsAttentionFactor() && detail::RotaryEmbedding::attentionFactorOf(cfg) == 1.0)
    throw UsageError("fault 'yarn_attention_factor' needs a checkpoint whose RoPE scales cos and "
                     "sin by an attention factor other than 1 (yarn, or longrope past factor 1); "
                     "this " + architectureName(cfg.architecture) + " checkpoint's RoPE is '" +
                     (cfg.usesRope() ? cfg.rope.type : std::string("none")) +
                     "', so there is no attention factor to drop");
  for (const int64_t experts : faults.expertCounts()) {
    if (cfg.moe.numExperts == 0)
      throw UsageError("fault 'expert_routing' needs a mixture-of-experts checkpoint (num_experts "
                       "/ num_local_experts, as Qwen3-MoE, Mixtral and GPT-OSS have); this " +
                       architectureName(cfg.architecture) + " checkpoint has no router");
    const int64_t taken = experts > 0 ? experts : cfg.moe.topK + 1;
    if (taken == cfg.moe.topK || taken > cfg.moe.numExperts)
      throw UsageError("fault 'expert_routing': experts=" + std::to_string(taken) + " but the checkpoint routes to " +
                       std::to_string(cfg.moe.topK) + " of " + std::to_string(cfg.moe.numExperts) +
                       " experts (num_experts_per_tok): give another count, at most " +
                       std::to_string(cfg.moe.numExperts));
  }
  if (faults.takesTemperatureAtCacheIndex() && !(cfg.queryScaleBeta > 0))
    throw UsageError("fault 'temperature_position' needs a checkpoint with a query temperature (Llama 4's "
                     "attn_temperature_tuning, Ministral 3's llama_4_scaling_beta); this " +
                     architectureName(cfg.architecture) + " checkpoint has none, so no position to take it at");
  for (const int64_t l : faults.layersNamedBy("chunk_mask")) {
    if (cfg.attentionChunk == 0)
      throw UsageError("fault 'chunk_mask' needs a checkpoint with chunked attention layers "
                       "(attention_chunk_size and chunked_attention layer_types, as Llama 4 has); "
                       "this " + architectureName(cfg.architecture) + " checkpoint has none, so no "
                       "chunk mask to mistake for a sliding window");
    if (l >= 0 && !cfg.isChunkedLayer(l))
      throw UsageError("fault 'chunk_mask': layer " + std::to_string(l) +
                       " attends over every entry (not a chunked_attention layer); name a chunked "
                       "layer or layer=-1");
  }
  checkRingRequest(cfg, layerWindows, faults, options, speculativeDrafts);
  checkRecurrentRequest(cfg, faults, options);
  const bool prefix = options.prefixCacheBlock > 0 || faults.prefixBlock() > 0;
  if (prefix && !options.uncached &&
      (options.ringWindow || faults.needsRingCache() || options.prefillChunk > 0 ||
       faults.prefillChunk() > 0))
    throw UsageError("--prefix-cache does not combine with " +
                     std::string(options.prefillChunk > 0 || faults.prefillChunk() > 0
                                     ? "chunked prefill"
                                     : "ring caches") +
                     ": a hit copies a prompt's rows by cache index, which neither keeps");
  if (options.prefixCacheBlock < 0 || options.prefixCacheBlock > 4096)
    throw UsageError("--prefix-cache: block size must be in 1..4096 tokens (0 = off), got " +
                     std::to_string(options.prefixCacheBlock));
}

std::vector<RingSlots> ringLayout(const std::vector<int64_t>& layerWindows, bool ring) {
  std::vector<RingSlots> out;
  for (int64_t w : layerWindows) out.emplace_back(ring ? w : 0);
  return out;
}

std::vector<TraceLayerKind> traceLayerKinds(const std::vector<int64_t>& layerWindows,
                                            const std::vector<int64_t>& layerChunks, bool ring,
                                            const std::vector<bool>& recurrentLayers, bool latent) {
  const auto positive = [](int64_t w) { return w > 0; };
  if (!latent && std::none_of(layerWindows.begin(), layerWindows.end(), positive) &&
      std::none_of(layerChunks.begin(), layerChunks.end(), positive) &&
      std::find(recurrentLayers.begin(), recurrentLayers.end(), true) == recurrentLayers.end())
    return {};
  std::vector<TraceLayerKind> out;
  for (size_t l = 0; l < layerWindows.size(); ++l) {
    const int64_t w = layerWindows[l];
    TraceLayerKind k{w, ring && w > 0 ? w : 0};
    k.chunk = l < layerChunks.size() ? layerChunks[l] : 0;
    k.recurrent = l < recurrentLayers.size() && recurrentLayers[l];
    k.latent = latent;
    out.push_back(k);
  }
  return out;
}

std::string checkEngineMemory(const ModelImpl& impl, const std::vector<RequestSpec>& specs, const EngineOptions& options,
                       int64_t capacity) {
  const ModelConfig& cfg = impl.config;
  const auto f = [](int64_t n) { return static_cast<uint64_t>(n) * sizeof(float); };
  int64_t longestPrompt = 0, longestRun = 0;
  uint64_t kept = 0;
  const int64_t perToken = cfg.numLayers * cfg.numKvHeads * (cfg.headDim + cfg.cacheValueDim());  // K and V
  for (const auto& s : specs) {
    const auto prompt = static_cast<int64_t>(s.promptIds.size());
    const int64_t run = std::min(prompt + s.maxNewTokens, cfg.maxPositions);
    longestPrompt = std::max(longestPrompt, prompt);
    longestRun = std::max(longestRun, run);
    kept += f(s.maxNewTokens * cfg.vocabSize);  // one logits row per step
    if (options.recordCache || options.uncached) kept += f(run * perToken);
    if (options.recordSnapshots) kept += f(s.maxNewTokens * run * perToken);
  }
  const auto B = static_cast<int64_t>(std::max<size_t>(1, specs.size()));
  // A forward computes the logits rows of each request's last entry and its drafts only.
  const int64_t logitRows = 1 + std::max<int64_t>(options.speculativeDrafts, 0);
  MemoryNeed need = options.uncached ? impl.forwardMemory(1, longestRun, longestRun, logitRows)
                                     : impl.forwardMemory(B, longestPrompt, capacity, logitRows);
  need.kvCache = options.uncached ? 0 : f(B * capacity * perToken);
  need.kept = kept;
  return need.check(MemoryAvailable::now(),
             std::string(options.uncached ? "uncached" : "cached") + " generation of " +
                 std::to_string(specs.size()) + " request(s) up to " + std::to_string(longestRun) +
                 " tokens",
             "generate fewer tokens (--max-new), drop --snapshots, audit in trace+trace mode "
             "(kvscope-cli audit --reference-trace A --trace B loads no model), or use a "
             "machine with more memory");
}

FaultPlan::RunFacts runFacts(const std::vector<RequestState>& requests, const Trace& trace,
                             int64_t lastTick, bool prefixCache, int64_t prefillChunk,
                             const std::vector<int64_t>& layerWindows,
                             const std::vector<int64_t>& layerChunks) {
  FaultPlan::RunFacts facts;
  facts.requests = static_cast<int64_t>(requests.size());
  facts.lastTick = lastTick;
  for (const auto& r : requests) {
    facts.lastStep = std::max(facts.lastStep, r.step - 1);
    facts.sampled = facts.sampled || !r.spec.policy.greedy();
    facts.prefilledAlone = facts.prefilledAlone || r.spec.batchGroup < 0;
  }
  facts.prefixCache = prefixCache;
  facts.prefilledAlone = facts.prefilledAlone && prefillChunk == 0;
  for (const auto& st : trace.steps) facts.prefixHit = facts.prefixHit || st.reusedCount > 0;
  facts.slidingWindow =
      std::any_of(layerWindows.begin(), layerWindows.end(), [](int64_t w) { return w > 0; });
  for (int64_t c : layerChunks) facts.attentionChunk = std::max(facts.attentionChunk, c);
  return facts;
}

bool choiceDiffers(const std::vector<float>& logits, const SamplingPolicy& a,
                   const SamplingPolicy& b, const RequestRng& rng) {
  RequestRng ra = rng, rb = rng;
  return Sampler::choose(logits, a, ra).token != Sampler::choose(logits, b, rb).token;
}

std::vector<int64_t> promptLookupDrafts(const RequestState& r, size_t k) {
  std::vector<int64_t> s = r.consumed;
  s.push_back(r.generated.back());
  const size_t n = s.size();
  for (size_t gram : {size_t{2}, size_t{1}}) {
    if (n <= gram) continue;
    for (size_t end = n - 1; end >= gram; --end) {  // candidate occurrence s[end-gram, end)
      if (!std::equal(s.begin() + static_cast<std::ptrdiff_t>(end - gram),
                      s.begin() + static_cast<std::ptrdiff_t>(end),
                      s.end() - static_cast<std::ptrdiff_t>(gram)))
        continue;
      std::vector<int64_t> out;
      for (size_t j = end; j < n && out.size() < k; ++j) out.push_back(s[j]);
      while (out.size() < k) out.push_back(out.back());
      return out;
    }
  }
  return std::vector<int64_t>(k, s.back());
}

}  // namespace kvscope::detail
