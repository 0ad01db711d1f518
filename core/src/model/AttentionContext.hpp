// How one forward pass obtains the keys and values each layer attends over. The uncached
// reference attends over the new records only; the cached engine appends them to its
// cache and attends over the whole cache.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "cache/KvQuantizer.hpp"
#include "kvscope/ExpertRouting.hpp"
#include "model/AttentionFeature.hpp"

namespace kvscope::detail {

struct KvView {
  torch::Tensor keys;     // [B, h_kv, t, d]
  torch::Tensor values;   // [B, h_kv, t, d]
  torch::Tensor allowed;  // [B, 1, s, t] bool: query i may attend key j
};

/// A recurrent (Gated DeltaNet) layer's state for the rows of one forward.
struct RecurrentState {
  torch::Tensor conv;   // [B, C, K]: the causal conv's last K inputs (zeros before a row's first)
  torch::Tensor state;  // [B, Hv, Dk, Dv] float32
};

class AttentionContext {
 public:
  virtual ~AttentionContext() = default;
  /// kNew, vNew: [B, h_kv, s, d], this layer's records for the s fed tokens (keys after RoPE).
  virtual KvView attend(int64_t layer, const torch::Tensor& kNew, const torch::Tensor& vNew) = 0;
  /// The state recurrent `layer` starts this forward from: undefined tensors where every row
  /// starts a fresh sequence (the uncached reference), else the rows' states (zeros for a
  /// fresh row).
  virtual RecurrentState recurrentState(int64_t layer) {
    (void)layer;
    return {};
  }
  /// The state recurrent `layer` ends this forward in, every fed entry consumed.
  virtual void keepRecurrentState(int64_t layer, const RecurrentState& next) {
    (void)layer;
    (void)next;
  }
  /// A one-row pass: the fed lengths n after which a recurrent layer reports its state (taps
  /// "conv_state_at" / "recurrent_state_at", one per n in order); empty: none.
  const std::vector<int64_t>& statesAfter() const { return statesAfter_; }
  void keepStatesAfter(std::vector<int64_t> lengths) { statesAfter_ = std::move(lengths); }
  /// Recurrent `layer`'s state after the first `length` fed entries of a one-row forward, for
  /// each length of statesAfter() (conv [1, C, K], state [1, Hv, Dk, Dv]): the cached engine
  /// keeps them to roll rejected drafts back and to hand a prefix's state over.
  virtual void keepStateAfter(int64_t layer, int64_t length, const RecurrentState& state) {
    (void)layer;
    (void)length;
    (void)state;
  }
  /// The prefix_state hypothesis: every recurrent layer restarts from a zero state (and a
  /// zero conv history) at fed entry `n`, as an engine that reused a prefix's attention rows
  /// without its state computes the rest; -1 (the default): no restart.
  int64_t stateRestart() const { return stateRestart_; }
  void restartStateAt(int64_t n) { stateRestart_ = n; }
  /// [B, s] bool: the fed entries that are real tokens (a recurrent layer zeroes the others'
  /// inputs, as transformers' apply_mask_to_padding_states does); undefined: every entry.
  virtual torch::Tensor realEntries(int64_t layer) const {
    (void)layer;
    return {};
  }
  /// What the cache's element type keeps of this layer's new records (a quantised cache
  /// rounds them; identity otherwise). The forward calls it before the k_proj/v_proj taps
  /// and attend(), so taps report and attention reads what is stored.
  virtual void roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) {
    (void)layer;
    (void)kNew;
    (void)vNew;
  }
  /// Whether batch row `row` of this forward rotates `layer`'s queries and keys with the
  /// unscaled RoPE frequencies (the rope_scaling fault: a path that drops rope_scaling).
  virtual bool dropsRopeScaling(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward applies `layer`'s per-head q/k norm after RoPE
  /// instead of before it (the qk_norm_order fault: a fused norm + rotary kernel that
  /// swaps the two). Only checkpoints with a q/k norm (Qwen3) have an order to swap.
  virtual bool normsAfterRope(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward reads `layer`'s entry of no_rope_layers inverted
  /// (the nope_layer_rope fault): a NoPE layer rotates, a rotary one does not.
  virtual bool flipsRope(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward rotates the whole of each head on a
  /// partial-rotary checkpoint (the partial_rotary fault: partial_rotary_factor ignored, the
  /// frequencies and pairs taken over head_dim).
  virtual bool rotatesWholeHead(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward turns `layer`'s queries and keys without the
  /// RoPE's attention factor (the yarn_attention_factor fault: cos and sin left unscaled on a
  /// yarn or longrope checkpoint).
  virtual bool dropsAttentionFactor(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward rotates `layer` with the other layer type's RoPE
  /// (the layer_rope_theta fault): a sliding layer with the full-attention layers' theta and
  /// scaling, a full-attention layer with the sliding ones'. Only checkpoints whose sliding
  /// layers have a RoPE of their own (Gemma 3) have two to mix up.
  virtual bool swapsLayerRope(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` of this forward computes `layer`'s attention without the
  /// checkpoint's `feature` (the softcap_dropped and sink_dropped faults: a kernel path
  /// without Gemma 2's attn_logit_softcapping, or without GPT-OSS's attention sinks). Only
  /// checkpoints with the feature have one to drop.
  virtual bool dropsFeature(AttentionFeature feature, int64_t layer, int64_t row) const {
    (void)feature;
    (void)layer;
    (void)row;
    return false;
  }
  /// Whether batch row `row` attends `layer`'s latent rows in the absorbed form serving engines
  /// decode with (EngineOptions::mlaAbsorbedDecode): kv_b_proj's key rows folded into the
  /// queries, its value rows applied to the latent context; the same attention as the
  /// materialised form up to rounding. Only latent-attention checkpoints have one.
  virtual bool absorbsLatent(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return false;
  }
  /// The query rows of `layer` ([B, 1, s, 1] bool) that run without `feature`: the rows
  /// dropsFeature() names and the queries setDroppedQueries() set; undefined when none.
  torch::Tensor droppedQueries(AttentionFeature feature, int64_t layer, int64_t B, int64_t s) const;
  /// An audit hypothesis: from query index `fromQuery` on (of a one-row pass), `layer`
  /// computes its attention without `feature`.
  void setDroppedQueries(AttentionFeature feature, int64_t layer, int64_t fromQuery);
  /// In how many parts batch row `row` sums `layer`'s q/k/v projection over the hidden
  /// dimension (the batch_variance fault: a split-K kernel chosen by the batch size); 1 = one
  /// reduction, as every correct path does.
  virtual int64_t projectionSplits(int64_t layer, int64_t row) const {
    (void)layer;
    (void)row;
    return 1;
  }
  /// How many experts batch row `row`'s tokens take at `layer` where the checkpoint says
  /// `topK` (the expert_routing fault: num_experts_per_tok misread); `topK` on every correct
  /// path.
  virtual int64_t expertsPerToken(int64_t layer, int64_t row, int64_t topK) const {
    (void)layer;
    (void)row;
    return topK;
  }
  /// A one-row pass that takes another engine's experts where its own router's choice is a
  /// near tie with them (ExpertRouter::follow); every difference goes to `decisions`.
  void followExperts(const ExpertGuide* guide, std::vector<RoutingDecision>* decisions) {
    guide_ = guide;
    decisions_ = decisions;
  }
  const ExpertGuide* expertGuide() const { return guide_; }
  std::vector<RoutingDecision>* routingDecisions() const { return decisions_; }
  /// How many query rows one attention product takes at once: all s of a short forward, so
  /// many of a long one that its [B, heads, rows, t] scores, probabilities and mask stay
  /// within `elements` each (kScoreElements: 64 MiB of float32) instead of growing with
  /// s x t. The one rule for the forward and its memory estimate (ModelImpl::forwardMemory).
  static int64_t queryRows(int64_t B, int64_t heads, int64_t s, int64_t t, int64_t elements = kScoreElements);
  static constexpr int64_t kScoreElements = int64_t{1} << 24;
  int64_t queryChunk(int64_t B, int64_t heads, int64_t s, int64_t t) const {
    return queryRows(B, heads, s, t, scoreElements_);
  }
  /// A smaller budget than kScoreElements (a test chunks a short forward with it).
  void limitScoreElements(int64_t elements) { scoreElements_ = elements; }
  /// Position ids [B, s] that `layer` rotates its queries and keys with instead of the
  /// forward's (the chunk_position fault: a kernel that computes positions per chunk; the
  /// chunk_position hypothesis the audit tests); undefined: the forward's. RoPE models only:
  /// learned position embeddings take the forward's positions once, at the input.
  const torch::Tensor& layerPositions(int64_t layer) const;
  void setLayerPositions(int64_t layer, torch::Tensor positions);
  /// Per layer, the chunk of positions a chunked layer's queries attend within (Llama 4's
  /// attention_chunk_size; 0: not chunked). Every forward sets its model's
  /// (ModelImpl::layerChunks) before the first layer runs.
  void setLayerChunks(const std::vector<int64_t>& chunks) {
    chunks_ = chunks;
    modelChunk_ = chunks.empty() ? 0 : *std::max_element(chunks.begin(), chunks.end());
  }
  /// The chunk `layer` attends within: the model's, or the other one where the layer's
  /// chunking is flipped (flipsChunk).
  int64_t layerChunk(int64_t layer) const {
    const auto l = static_cast<size_t>(layer);
    const int64_t own = l < chunks_.size() ? chunks_[l] : 0;
    return flipsChunk(layer) ? (own > 0 ? 0 : modelChunk_) : own;
  }
  /// The positions [B, s] `layer`'s query temperature is taken at (Llama 4's
  /// attn_temperature_tuning, Ministral 3's llama_4_scaling_beta): the forward's position ids
  /// on every correct path; a row the temperature_position fault (or its hypothesis) moves takes
  /// its cache index, padding counted.
  virtual torch::Tensor temperaturePositions(int64_t layer, const torch::Tensor& positions) const {
    (void)layer;
    return positions;
  }
  /// Whether `layer` runs chunked where the checkpoint says full attention and the other way
  /// round (an audit hypothesis of nope_layer_rope: a path whose layer pattern, chunks
  /// included, ignores no_rope_layers, as mlx-lm's Llama 4 does).
  virtual bool flipsChunk(int64_t layer) const {
    (void)layer;
    return false;
  }

 private:
  std::vector<int64_t> chunks_;
  std::vector<int64_t> statesAfter_;
  int64_t stateRestart_ = -1;
  int64_t modelChunk_ = 0;
  std::vector<torch::Tensor> layerPositions_;  // [layer] [B, s] or undefined
  const ExpertGuide* guide_ = nullptr;
  int64_t scoreElements_ = kScoreElements;
  std::vector<RoutingDecision>* decisions_ = nullptr;
  std::map<AttentionFeature, std::vector<int64_t>> droppedFrom_;  // [layer] first query without
                                                                 // the feature, -1: none
};

/// allowed[b, 0, i, j] = keyValid[b, j] && keyIdx[j] <= queryIdx[i] &&
///                       (window == 0 || keyIdx[j] > queryIdx[i] - window) &&
///                       (chunk == 0 || keyOrd[b, j] / chunk == queryOrd[b, i] / chunk)
/// queryIdx: [s] slot indices of the queries, keyIdx: [t], keyValid: [B, t] bool; with a
/// chunk, queryOrd [B, s] and keyOrd [B, t]: each entry's place among its request's real
/// tokens (streamOrdinals), so padding does not move a chunk's edges (transformers subtracts
/// the left padding for the same reason).
/// This is transformers' mask: causal and sliding-window terms on cache indices, padding
/// on the attention mask (positions only enter through RoPE / learned embeddings).
torch::Tensor buildAllowedMask(const torch::Tensor& queryIdx, const torch::Tensor& keyIdx,
                               const torch::Tensor& keyValid, int64_t window, int64_t chunk = 0,
                               const torch::Tensor& queryOrd = {}, const torch::Tensor& keyOrd = {});
/// Each entry's place among the real entries before it of its row: cumsum(valid) - 1, [B, t].
torch::Tensor streamOrdinals(const torch::Tensor& valid);

/// Attends over the fed tokens only: a full-prefix, uncached pass. `keyValid` [B, s] marks
/// real tokens (all true without padding).
class UncachedAttention : public AttentionContext {
 public:
  /// `quantizer`: the rounding of a quantised cache whose correct use this pass stands for
  /// (every entry, the step's own included, read back rounded); nullptr for none.
  UncachedAttention(torch::Tensor keyValid, std::vector<int64_t> layerWindows,
                    const KvQuantizer* quantizer = nullptr)
      : keyValid_(std::move(keyValid)), windows_(std::move(layerWindows)), quantizer_(quantizer) {}
  KvView attend(int64_t layer, const torch::Tensor& kNew, const torch::Tensor& vNew) override;
  void roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) override;
  torch::Tensor realEntries(int64_t) const override {
    return keyValid_.all().item<bool>() ? torch::Tensor() : keyValid_;
  }
  /// An audit hypothesis (the chunk_mask row): `layer`'s chunk masked as a sliding window of
  /// the chunk's size, as a kernel that treats chunked attention as sliding-window attention.
  void maskChunkAsWindow(int64_t layer) { chunkAsWindow_.insert(layer); }
  /// An audit hypothesis (the nope_layer_rope row): `layers` read their no_rope_layers entry
  /// inverted (RoPE, Llama 4's q/k norm and query temperature with it), and with `chunks`
  /// their chunking too.
  void flipLayers(std::set<int64_t> layers, bool chunks) {
    flipped_ = std::move(layers);
    flipChunks_ = chunks;
  }
  bool flipsRope(int64_t layer, int64_t) const override { return flipped_.count(layer) > 0; }
  bool flipsChunk(int64_t layer) const override { return flipChunks_ && flipped_.count(layer) > 0; }
  /// An audit hypothesis (the temperature_position row): the query temperature taken `shift`
  /// positions later (a left-padded row's pads counted).
  void shiftTemperature(int64_t shift) { temperatureShift_ = shift; }
  torch::Tensor temperaturePositions(int64_t, const torch::Tensor& positions) const override {
    return temperatureShift_ == 0 ? positions : positions + temperatureShift_;
  }

 private:
  std::set<int64_t> chunkAsWindow_, flipped_;
  bool flipChunks_ = false;
  int64_t temperatureShift_ = 0;
  torch::Tensor keyValid_;  // [B, s] bool
  std::vector<int64_t> windows_;
  const KvQuantizer* quantizer_;
};

}  // namespace kvscope::detail
