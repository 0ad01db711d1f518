// Answers the engine's questions about injected faults: "at this request, step and
// layer, what goes wrong?". Built once from the parsed FaultSpecs.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kvscope/FaultSpec.hpp"
#include "model/AttentionFeature.hpp"

namespace kvscope::detail {

class FaultPlan {
 public:
  FaultPlan() = default;
  /// Validates parameter ranges against the model (throws UsageError).
  FaultPlan(std::vector<FaultSpec> faults, int64_t numLayers);

  /// Every layer a fault names (its `layer` or `source` parameter, when not -1), with the
  /// fault's name and the parameter's.
  struct NamedLayer { std::string fault, parameter; int64_t layer; };
  std::vector<NamedLayer> namedLayers() const;
  /// Position id the engine uses instead of `expected` (the correct one).
  int64_t position(int64_t request, int64_t step, int64_t indexInStep, int64_t expected) const;
  /// The layer whose records (request, step, layer) stores instead of its own, or -1.
  int64_t wrongLayerSource(int64_t request, int64_t step, int64_t layer) const;
  bool duplicateAppend(int64_t request, int64_t step, int64_t layer) const;
  bool duplicatePromptToken(int64_t request) const;
  /// The request whose cache row `request` is given on arrival, or -1.
  int64_t crossRequestVictim(int64_t request) const;
  /// The request whose records are written into `request`'s row at (step, layer), or -1.
  int64_t batchRowSource(int64_t request, int64_t step, int64_t layer) const;
  bool tieRuleLast(int64_t request) const;
  bool rngExtraDraw(int64_t request, int64_t step) const;
  bool rngReseed(int64_t request, int64_t step) const;
  int64_t windowExtra(int64_t layer) const;
  /// chunk_mask: `layer`'s chunked attention masked as a sliding window of the chunk's size.
  bool chunkAsWindow(int64_t layer) const;
  /// recurrent_state: (request, recurrent layer) reads its left padding into the recurrence
  /// (the pads' inputs not zeroed).
  bool padsEnterState(int64_t request, int64_t layer) const;
  /// temperature_position: (request, layer)'s query temperature taken at the cache index.
  bool temperatureAtCacheIndex(int64_t request, int64_t layer) const;
  bool takesTemperatureAtCacheIndex() const { return find("temperature_position") != nullptr; }
  /// window_wrap: the slots (request, layer)'s ring entries move by once it has wrapped (-1:
  /// one slot back; 0 without the fault).
  int64_t ringWrapShift(int64_t request, int64_t layer) const;
  /// The window_wrap fault needs ring caches (turned on unless chosen).
  bool needsRingCache() const;
  /// prefix_reuse: `request`'s prefix-cache lookup matches a block without its last token.
  bool prefixPartialMatch(int64_t request) const;
  /// The one layer whose rows a wrong block hands over (-1: every layer).
  int64_t prefixReuseLayer(int64_t request) const;
  /// Block size the prefix_reuse or prefix_state fault asks for (0 without them).
  int64_t prefixBlock() const;
  /// speculative_rollback: the rejected drafts' rows of (request, step, layer) stay cached.
  bool skipRollback(int64_t request, int64_t step, int64_t layer) const;
  /// state_rollback: recurrent (request, step, layer) keeps its state after the rejected
  /// drafts instead of the one after the accepted tokens.
  bool skipStateRollback(int64_t request, int64_t step, int64_t layer) const;
  /// prefix_state: a prefix hit of `request` leaves recurrent `layer`'s state unset (zeros).
  bool dropsPrefixState(int64_t request, int64_t layer) const;
  /// The layers the faults called `name` name (-1 for every layer they may act on: every chunked
  /// layer for chunk_mask, every sliding one for window_wrap, every recurrent one for the state faults).
  std::vector<int64_t> layersNamedBy(const char* name) const;
  /// Draft tokens per step the speculative_rollback or state_rollback fault asks for (0 without).
  int64_t speculativeDrafts() const;  // 1 when the sliding window keeps one key too many
  /// kv_quantization: the factor (request, step, layer)'s records are dequantised with
  /// instead of their own scale (1 without the fault).
  double quantizationScaleFactor(int64_t request, int64_t step, int64_t layer) const;
  /// The kv_quantization fault needs a quantised cache (int8 unless one is chosen).
  bool needsQuantizedCache() const;
  /// rope_scaling: (request, step, layer) rotates with the unscaled RoPE frequencies.
  bool ropeScalingDropped(int64_t request, int64_t step, int64_t layer) const;
  bool dropsRopeScaling() const;
  /// qk_norm_order: (request, step, layer) applies the q/k norm after RoPE.
  bool qkNormAfterRope(int64_t request, int64_t step, int64_t layer) const;
  bool swapsQkNormOrder() const;
  /// nope_layer_rope: (request, step, layer) reads its no_rope_layers entry inverted.
  bool ropeFlipped(int64_t request, int64_t step, int64_t layer) const;
  bool flipsNopeLayers() const;
  /// softcap_dropped / sink_dropped: (request, step, layer) computes its attention without
  /// the soft-cap / the sinks.
  bool featureDropped(AttentionFeature feature, int64_t request, int64_t step, int64_t layer) const;
  /// The fault that drops `feature`.
  static const char* dropFaultName(AttentionFeature feature);
  /// layer_rope_theta: (request, step, layer) rotates with the other layer type's RoPE.
  bool layerRopeSwapped(int64_t request, int64_t step, int64_t layer) const;
  bool swapsLayerRopes() const;
  /// partial_rotary: (request, step, layer) rotates the whole head of each attention head.
  bool wholeHeadRotated(int64_t request, int64_t step, int64_t layer) const;
  bool rotatesWholeHeads() const;
  bool dropsFeature(AttentionFeature feature) const;
  /// yarn_attention_factor: (request, step, layer) turns without YaRN's attention factor.
  bool attentionFactorDropped(int64_t request, int64_t step, int64_t layer) const;
  bool dropsAttentionFactor() const;
  /// expert_routing: how many experts (request, step, layer)'s tokens take where the
  /// checkpoint says `topK` (the fault's `experts`; 0 there: topK + 1).
  int64_t expertsPerToken(int64_t request, int64_t step, int64_t layer, int64_t topK) const;
  /// The expert counts the expert_routing faults ask for (0: topK + 1); empty without one.
  std::vector<int64_t> expertCounts() const;
  /// chunk_position: whether prefill chunk `chunk` of `request` takes restarted positions
  /// on `layer` (-1: the position ids themselves, as the fault with layer=-1 has it).
  bool chunkPositionsRestart(int64_t request, int64_t chunk, int64_t layer) const;
  /// Prompt tokens per chunk the chunk_position fault asks for (0 without it).
  int64_t prefillChunk() const;
  /// batch_variance: how many parts (request, step, layer)'s q/k/v projection sums its
  /// reduction in (split-K chosen by the batch size: `batchMates`); 1 = one reduction.
  int64_t projectionSplits(int64_t request, int64_t step, int64_t layer, int64_t batchMates) const;
  bool makesBatchVariant() const;
  /// The stale_cache fault: a weight update at a tick whose cache is kept.
  struct StaleUpdate {
    int64_t tick;
    int64_t layer;
    float scale;
  };
  std::optional<StaleUpdate> staleCache() const;
  std::vector<std::string> describe() const;
  /// The first fault `name` matching `request` (-1: any) changed the run at (request, step,
  /// layer); only its first firing is kept. For effects the engine decides on (a victim
  /// that exists, a batch mate present, a tie the rule broke differently, ...).
  void noteFired(const char* name, int64_t request, int64_t step, int64_t layer) const;
  /// What the run was like, for the reason a fault never fired.
  struct RunFacts {
    int64_t requests = 0;
    int64_t lastStep = -1;         // the largest step number any request reached
    int64_t lastTick = -1;
    bool prefixCache = false;      // a prefix cache was on
    bool prefilledAlone = false;   // some request was prefilled alone (the prefix cache's use)
    bool prefixHit = false;        // some prefix lookup handed rows over
    bool sampled = false;          // some request samples (temperature > 0)
    bool slidingWindow = false;    // some layer has a sliding window
    int64_t attentionChunk = 0;    // the chunk of the chunked layers (0: none)
  };
  /// Per fault, in order: where it first fired, or why it never did.
  std::vector<FaultFiring> firings(const RunFacts& facts) const;
  bool empty() const { return faults_.empty(); }

 private:
  const FaultSpec* find(const char* name) const;
  std::vector<const FaultSpec*> all(const char* name) const;
  static bool matches(const FaultSpec& f, int64_t request);
  /// A fault `name` matching `request` at its `layer` (-1: every layer).
  bool atLayer(const char* name, int64_t request, int64_t layer) const;
  /// A fault `name` matching `request` from its `step` on, at its `layer` (-1: every layer);
  /// notes the firing.
  bool fromStepAtLayer(const char* name, int64_t request, int64_t step, int64_t layer) const;
  void note(const FaultSpec* f, int64_t request, int64_t step, int64_t layer) const;
  std::vector<FaultSpec> faults_;
  mutable std::vector<FaultFiring> fired_;  // [faults_]: the first firing of each
};

}  // namespace kvscope::detail
