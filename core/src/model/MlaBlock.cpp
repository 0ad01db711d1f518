// ModelImpl::latentAttentionBlock: DeepSeek's multi-head latent attention (config.mla), as
// transformers' DeepseekV3Attention (and V2's) computes it. The query: q_proj, or q_b_proj of the normed
// q_a_proj; its heads split into a nope part and a roped part. kv_a_proj_with_mqa gives each token
// a latent row (normed by kv_a_layernorm) and one roped key part shared by every head: these two
// are the cache's keys [B, 1, t, Rkv] and values [B, 1, t, rope] (what transformers 5 caches).
// From the rows the cache holds, kv_b_proj decompresses each head's key nope part and value; a
// head's key is its nope part and the shared roped part. Scores scale by config.attentionScale
// (the family's qk_head_dim^-0.5 with yarn's mscale). The rows an engine decodes in the absorbed
// form (AttentionContext::absorbsLatent) attend over the latent rows directly through kv_b_proj
// split per head; the rows marked by the mla_absorb fault (or the audit's hypothesis) in the
// absorbed form with kv_b_proj split by matrix halves rather than per head.
#include <algorithm>

#include "model/ModelImpl.hpp"
#include "model/Norms.hpp"

namespace kvscope {

namespace {

// transformers builds q_a_layernorm and kv_a_layernorm with DeepseekV3RMSNorm's default eps,
// not rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

}  // namespace

torch::Tensor ModelImpl::latentAttentionBlock(int64_t layer, const torch::Tensor& x, const torch::Tensor& cos,
                                              const torch::Tensor& sin, detail::AttentionContext& attention,
                                              detail::TorchTapSink* taps) const {
  const auto& w = layers[static_cast<size_t>(layer)];
  const MlaConfig& m = config.mla;
  const int64_t B = x.size(0), s = x.size(1), nh = config.numHeads;
  const torch::Tensor qFlat =
      m.qLoraRank > 0 ? project(detail::rmsNorm(project(x, w.qAW, w.qAB), w.qANormW, kLatentNormEps), w.qBW, {})
                      : project(x, w.qW, w.qB);
  const auto q = qFlat.view({B, s, nh, m.queryDim()}).transpose(1, 2);  // [B, nh, s, nope + rope]
  const torch::Tensor compressed = rowSplitProduct(layer, x, w.kvAW, w.kvAB, attention);  // [B, s, Rkv + rope]
  torch::Tensor latent = detail::rmsNorm(compressed.narrow(-1, 0, m.kvLoraRank), w.kvANormW, kLatentNormEps);
  torch::Tensor qRope = q.narrow(-1, m.nopeDim, m.ropeDim);
  torch::Tensor kRope = compressed.narrow(-1, m.kvLoraRank, m.ropeDim).unsqueeze(1);  // [B, 1, s, rope]
  if (config.ropeOn(layer)) {
    // Deinterleaved (V3's rope_interleave): the (even, odd) pairs turn together and come out
    // evens first, which is the half-split rotation of the features put in that order.
    auto turn = [&](const torch::Tensor& t) {
      using Pairs = MlaConfig::RopePairs;
      if (m.ropePairs == Pairs::InPlacePairs) return detail::RotaryEmbedding::apply(t, cos, sin, true);
      const torch::Tensor ordered =
          m.ropePairs == Pairs::Deinterleaved
              ? torch::cat({t.slice(-1, 0, c10::nullopt, 2), t.slice(-1, 1, c10::nullopt, 2)}, -1)
              : t;
      return detail::RotaryEmbedding::apply(ordered, cos, sin);
    };
    qRope = turn(qRope);
    kRope = turn(kRope);
  }
  torch::Tensor keyRows = latent.unsqueeze(1).contiguous(), valueRows = kRope.contiguous();
  attention.roundRecords(layer, keyRows, valueRows);
  detail::tapTensor(taps, layer, "k_proj", keyRows);
  detail::tapTensor(taps, layer, "v_proj", valueRows);
  const detail::KvView kv = attention.attend(layer, keyRows, valueRows);
  const auto [keys, values] = decompressedHeads(layer, kv.keys, kv.values);
  const torch::Tensor qNope = q.narrow(-1, 0, m.nopeDim);
  torch::Tensor context = attendInChunks(layer, torch::cat({qNope, qRope}, -1), keys, values, kv.allowed,
                                         attention);  // [B, nh, s, v]
  std::vector<uint8_t> absorbing(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) absorbing[static_cast<size_t>(b)] = attention.absorbsLatent(layer, b) ? 1 : 0;
  if (std::find(absorbing.begin(), absorbing.end(), 1) != absorbing.end()) {
    const auto rows = torch::tensor(absorbing, torch::kBool).view({B, 1, 1, 1});
    context = torch::where(rows, absorbedContext(layer, qNope, qRope, kv, attention, /*perHeadSplit=*/true), context);
  }
  const torch::Tensor misSplit = attention.droppedQueries(detail::AttentionFeature::LatentHeadSplit, layer, B, s);
  if (misSplit.defined())
    context = torch::where(misSplit, absorbedContext(layer, qNope, qRope, kv, attention, /*perHeadSplit=*/false),
                           context);
  auto out = project(context.transpose(1, 2).reshape({B, s, nh * m.valueDim}), w.oW, w.oB);
  detail::tapTensor(taps, layer, "attn_out", out);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> ModelImpl::decompressedHeads(int64_t layer, const torch::Tensor& latentRows,
                                                                     const torch::Tensor& ropedParts) const {
  const MlaConfig& m = config.mla;
  const int64_t B = latentRows.size(0), t = latentRows.size(2), nh = config.numHeads;
  // Every head's key nope part and value from the latent rows: [B, nh, t, nope + v].
  const auto expanded = project(latentRows.select(1, 0), layers[static_cast<size_t>(layer)].kvBW, {})
                            .view({B, t, nh, m.nopeDim + m.valueDim})
                            .transpose(1, 2);
  return {torch::cat({expanded.narrow(-1, 0, m.nopeDim), ropedParts.expand({B, nh, t, m.ropeDim})}, -1),
          expanded.narrow(-1, m.nopeDim, m.valueDim)};
}

torch::Tensor ModelImpl::absorbedContext(int64_t layer, const torch::Tensor& qNope, const torch::Tensor& qRope,
                                         const detail::KvView& kv, const detail::AttentionContext& attention,
                                         bool perHeadSplit) const {
  const MlaConfig& m = config.mla;
  const int64_t B = qNope.size(0), nh = qNope.size(1), t = kv.keys.size(2);
  const int64_t nope = m.nopeDim, v = m.valueDim, R = m.kvLoraRank;
  const torch::Tensor w = layers[static_cast<size_t>(layer)].kvBW.to(torch::kFloat);  // [nh (nope + v), R]
  // The checkpoint holds per head [nope key rows | v value rows]; the mla_absorb fault (or the
  // audit's hypothesis of it) takes the matrix's first nh * nope rows as the key rows and the
  // rest as the value rows instead.
  torch::Tensor keyRows, valueRows;  // [nh, nope, R], [nh, v, R]
  if (perHeadSplit) {
    const auto perHead = w.view({nh, nope + v, R});
    keyRows = perHead.narrow(1, 0, nope);
    valueRows = perHead.narrow(1, nope, v);
  } else {
    keyRows = w.narrow(0, 0, nh * nope).view({nh, nope, R});
    valueRows = w.narrow(0, nh * nope, nh * v).view({nh, v, R});
  }
  // Scores q_nope W_k c^T + q_pe k_pe^T over the latent rows; the context in the latent, then
  // through the value rows.
  const auto queries = torch::cat({torch::matmul(qNope, keyRows), qRope}, -1);  // [B, nh, s, R + rope]
  const auto keys = torch::cat({kv.keys, kv.values}, -1).expand({B, nh, t, R + m.ropeDim});
  const auto latentContext =
      attendInChunks(layer, queries, keys, kv.keys.expand({B, nh, t, R}), kv.allowed, attention);
  return torch::matmul(latentContext, valueRows.transpose(-1, -2));  // [B, nh, s, v]
}

}  // namespace kvscope
