// The torch side of Model: weights as tensors and the forward pass shared by the
// uncached reference and the cached engine.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/MemoryBudget.hpp"
#include "model/AttentionContext.hpp"
#include "model/RotaryEmbedding.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope {

// One decoder block's weights, as the checkpoint stores them: recipe.layout says [out, in]
// (nn.Linear) or [in, out] (GPT-2's Conv1D); undefined where the family has no such tensor.
struct LayerWeights {
  torch::Tensor attnNormW, attnNormB, mlpNormW, mlpNormB;  // [H]; biases with LayerNorm
  torch::Tensor postAttnNormW, postMlpNormW;             // [H]: norms of the sublayer outputs
  torch::Tensor qkvW, qkvB;  // fused q|k|v (recipe.fusedQkv): [(nh + 2 nkv) d, H] as Linear
  torch::Tensor qW, qB, kW, kB, vW, vB;  // q [nh*d, H], k/v [nkv*d, H] as Linear
  torch::Tensor oW, oB;                  // [H, nh*d] as Linear
  // Latent attention (config.mla): q_a [Rq, H] (+ bias), its norm [Rq], q_b [nh q, Rq]; kv_a
  // [Rkv + rope, H] (+ bias), its norm [Rkv], kv_b [nh (nope + v), Rkv], as Linear.
  torch::Tensor qAW, qAB, qANormW, qBW, kvAW, kvAB, kvANormW, kvBW;
  torch::Tensor sinksW;          // learned attention sinks (config.attentionSinks): [nh]
  torch::Tensor qNormW, kNormW;  // RMSNorm before RoPE (config.qkNorm): [d] per head, or
                                 // [h * d] over the projection (recipe.qkNormOverHeads)
  torch::Tensor gateW, gateB, upW, upB, downW, downB;  // gate/up [I, H], down [H, I] as Linear
  torch::Tensor gateUpW;                 // fused gate|up (recipe.fusedGateUp): [2I, H] as Linear
  torch::Tensor routerW, routerB;        // a MoE layer's router [E, H] (+ bias [E])
  torch::Tensor routerScoreB;            // DeepSeek's score correction bias [E] (choice only)
  std::vector<torch::Tensor> expertGateW, expertUpW, expertDownW;  // per expert [Im, H], [H, Im]
  torch::Tensor stackedGateUpW, stackedGateUpB;  // stacked experts: [E, H, 2Im] (gate/up
                                                 // interleaved), [E, 2Im]
  torch::Tensor stackedDownW, stackedDownB;      // [E, Im, H], [E, H]
  torch::Tensor sharedGateW, sharedUpW, sharedDownW;  // the shared expert: [Is, H], [Is, H], [H, Is]
  // The same stacked experts stored as MXFP4 (Mxfp4.hpp) instead: blocks [E, out, in/32, 16]
  // and scales [E, out, in/32] uint8, out/in of nn.Linear's orientation (gate|up: 2Im x H).
  torch::Tensor gateUpBlocks, gateUpScales, downBlocks, downScales;
  // A Gated DeltaNet layer (config.deltaNet) in the attention's place: in_proj_qkv [C, H],
  // in_proj_z [Vd, H], in_proj_b / in_proj_a [Hv, H], conv1d [C, 1, K], A_log / dt_bias [Hv]
  // (float32), the output norm [Dv], out_proj [H, Vd].
  torch::Tensor dnQkvW, dnZW, dnBW, dnAW, dnConvW, dnALog, dnDtBias, dnNormW, dnOutW;
  torch::Tensor dnQkvzW, dnBaW;  // Qwen3-Next's fused q|k|v|z [C + Vd, H] and b|a [2 Hv, H]
  torch::Tensor sharedExpertGateW;  // Qwen3-Next: [1, H], the shared expert's sigmoid gate
};

struct ModelImpl {
  std::shared_ptr<const Checkpoint> checkpoint;
  ModelConfig config;
  torch::Tensor embed;     // [V_rows, H]
  torch::Tensor posEmbed;  // learned positions (recipe.positions) [P, H]
  std::vector<LayerWeights> layers;
  torch::Tensor finalW, finalB;  // [H]
  torch::Tensor lmHead;          // [V, H] (the embedding when tied)
  std::unique_ptr<detail::RotaryEmbedding> rope;         // the full-attention layers'
  std::unique_ptr<detail::RotaryEmbedding> slidingRope;  // the sliding layers' (config.slidingRope)
  std::vector<int64_t> layerWindows;  // per layer: sliding window, 0 = full attention
  std::vector<int64_t> layerChunks;   // per layer: attention chunk (Llama 4), 0 = none
  // Qwen3-Next's fused DeltaNet projections, per key-head group [q, k, v, z] and [b, a]: the
  // output columns in the order q | k | v | z ([C + Vd]) and b | a ([2 Hv]).
  torch::Tensor dnQkvzOrder, dnBaOrder;
  double embedScale = 1.0;  // config.embeddingMultiplier, in the embedding's dtype where the
                            // recipe rounds it (recipe.embeddingScaleInWeightDtype)
  uint64_t weightsVersion = 0;
  std::map<std::string, torch::Tensor*> byName;  // checkpoint name -> member (for updates)

  void loadWeights();
  /// dnQkvzOrder / dnBaOrder from config.deltaNet (a family with fused DeltaNet projections).
  void fusedDeltaNetOrder();
  /// The RoPE `layer` rotates with (config.ropeFor): slidingRope on a sliding layer that has one.
  const detail::RotaryEmbedding& ropeOf(int64_t layer) const;
  /// cos/sin of the rows whose attention swaps `layer`'s RoPE for the other layer type's
  /// (the layer_rope_theta fault) replaced by that RoPE's.
  void swapLayerRope(int64_t layer, const torch::Tensor& ids, const torch::Tensor& positions,
                     const detail::AttentionContext& attention, torch::Tensor& cos,
                     torch::Tensor& sin) const;
  /// The forward pass. ids, positions: [B, s] int64. Returns logits [B, s - logitsFrom, V]:
  /// the rows of the fed columns logitsFrom.. only (the head's matmul over a long prompt's
  /// rows nobody reads is most of the arithmetic of a short model's prefill).
  /// Throws ContextLimitError before reading a position row that does not exist, and
  /// UsageError for ids outside the embedding.
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& positions,
                        detail::AttentionContext& attention, detail::TorchTapSink* taps,
                        int64_t logitsFrom = 0) const;
  /// The first fed column forward() computes logits for, asked `logitsFrom` of s columns:
  /// clamped to the last (a forward always gives the row that chooses the next token).
  static int64_t firstLogitsColumn(int64_t logitsFrom, int64_t s) {
    return std::clamp<int64_t>(logitsFrom, 0, std::max<int64_t>(s - 1, 0));
  }
  /// Layer 0's key records of `token` placed at positions 0..count-1: [count, h_kv, d].
  /// Layer 0's keys depend only on the token and its position, so this tells which
  /// position a recorded key was really computed at.
  torch::Tensor probeLayer0Keys(int64_t token, int64_t count) const;
  /// A dense MLP computes a long forward's rows in chunks of at most this many (ModelForward).
  static constexpr int64_t kMlpRows = 4096;
  /// Bytes of the weights as stored (the mapped tensors).
  uint64_t weightBytes() const;
  /// Memory one forward allocates for B rows of s fed tokens attending over t keys
  /// (activations, attention scores, logits), the weights in `weights`. `logitRows`: the
  /// logits rows per batch row it computes (forward's logitsFrom); -1: all s.
  MemoryNeed forwardMemory(int64_t B, int64_t s, int64_t t, int64_t logitRows = -1) const;
  /// Validates ids and positions without running anything.
  void checkInputs(const torch::Tensor& ids, const torch::Tensor& positions) const;
  /// A latent layer's rows decompressed per head, as the forward attends them and a
  /// decompressing engine (transformers 4.x) caches them: latent rows [B, 1, t, Rkv] and roped
  /// key parts [B, 1, t, rope] -> each head's key [B, nh, t, nope + rope] (kv_b_proj's nope part,
  /// then the shared roped part) and value [B, nh, t, v].
  std::pair<torch::Tensor, torch::Tensor> decompressedHeads(int64_t layer, const torch::Tensor& latentRows,
                                                            const torch::Tensor& ropedParts) const;

 private:
  /// wholeCos/wholeSin: the layer's RoPE over the whole head, defined only when a row of the
  /// forward rotates the whole head of a partial-rotary checkpoint (the partial_rotary fault).
  /// positions: the queries' position ids [B, s] (Ministral 3's attention temperature).
  torch::Tensor attentionBlock(int64_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                               const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& wholeCos,
                               const torch::Tensor& wholeSin, detail::AttentionContext& attention,
                               detail::TorchTapSink* taps) const;
  torch::Tensor mlpBlock(int64_t layer, const torch::Tensor& x, const detail::AttentionContext& attention,
                         detail::TorchTapSink* taps) const;
  /// Queries q [B, nh, n, d] (rows first..first+n-1 of a forward of s) over keys and values
  /// [B, nh, t, d] with the mask rows `allowed` [B, 1, n, t]: the context [B, nh, n, d].
  torch::Tensor attendQueries(int64_t layer, const torch::Tensor& q, const torch::Tensor& keys,
                              const torch::Tensor& values, const torch::Tensor& allowed,
                              const detail::AttentionContext& attention, int64_t first, int64_t s) const;
  /// Latent attention (config.mla) over x [B, s, H]: the latent rows and roped key parts are
  /// what the cache keeps (keys [B, 1, t, Rkv], values [B, 1, t, rope]); each head's key and value
  /// are decompressed from the held rows (MlaBlock.cpp).
  torch::Tensor latentAttentionBlock(int64_t layer, const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, detail::AttentionContext& attention,
                                     detail::TorchTapSink* taps) const;
  /// Attention in the absorbed form (the queries' nope part through kv_b_proj's key rows,
  /// scores against the held latent rows plus the roped parts, the latent context through the
  /// value rows): [B, nh, s, v]. `perHeadSplit`: kv_b_proj read per head, [nope key rows | v
  /// value rows], as the checkpoint holds it (EngineOptions::mlaAbsorbedDecode); false: every
  /// head's key rows, then every head's value rows (the mla_absorb fault).
  torch::Tensor absorbedContext(int64_t layer, const torch::Tensor& qNope, const torch::Tensor& qRope,
                                const detail::KvView& kv, const detail::AttentionContext& attention,
                                bool perHeadSplit) const;
  /// x times a projection, where the batch_variance fault splits a row's product in parts
  /// (AttentionContext::projectionSplits) summed in that many partial products.
  torch::Tensor rowSplitProduct(int64_t layer, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                const detail::AttentionContext& attention) const;
  /// Queries [B, nh, s, dq] over keys [B, nh, t, dq] and values [B, nh, t, dv] (attendQueries), in
  /// row chunks where AttentionContext::queryChunk asks: the context [B, nh, s, dv].
  torch::Tensor attendInChunks(int64_t layer, const torch::Tensor& q, const torch::Tensor& keys,
                               const torch::Tensor& values, const torch::Tensor& allowed,
                               const detail::AttentionContext& attention) const;
  /// A Gated DeltaNet layer over x [B, s, H]: the causal conv and the gated delta rule from the
  /// state attention.recurrentState() hands over (a fresh one: zeros), the new state handed back
  /// (DeltaNetBlock.cpp).
  torch::Tensor deltaNetBlock(int64_t layer, const torch::Tensor& x, detail::AttentionContext& attention,
                              detail::TorchTapSink* taps) const;
  /// The MoE MLP: the router's experts (ExpertRouter: the family's routing), each expert's MLP
  /// over the tokens routed to it, summed in expert order, plus a shared expert where there is one.
  torch::Tensor moeBlock(int64_t layer, const torch::Tensor& x, const detail::AttentionContext& attention,
                         detail::TorchTapSink* taps) const;
  /// x [.., in] times a weight in the recipe's layout, + b.
  torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;
  /// The weight an RMSNorm multiplies by: w, or (1 + w) in float32 (Gemma).
  torch::Tensor rmsWeight(const torch::Tensor& w) const;
  /// RoPE of x [B, h, s, d] by cos/sin [B, s, r] with the recipe's pairing.
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) const;
  /// q/k RMSNorm of x [B, h, s, d]: per head over d, or over all h * d of a position
  /// (recipe.qkNormOverHeads); x itself when w is undefined.
  torch::Tensor headNorm(const torch::Tensor& x, const torch::Tensor& w) const;
};

}  // namespace kvscope
