// ModelImpl::forward: the decoder block composed from the kit by the family's recipe
// (ModelConfig::recipe: norm, positions, weight layout, fused or separate q/k/v, MLP kind),
// eager attention, float32. Nothing here asks which family a model is.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kvscope/Error.hpp"
#include "model/ExpertRouter.hpp"
#include "model/ModelImpl.hpp"
#include "model/Mxfp4.hpp"
#include "model/Norms.hpp"
#include "model/WeightMatmul.hpp"

namespace kvscope {

namespace F = torch::nn::functional;

namespace {
// Weights stay in their stored dtype; see WeightMatmul.hpp.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return detail::linearStored(x, w, b);
}
torch::Tensor conv1d(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return detail::conv1dStored(x, w, b);
}

torch::Tensor activation(const std::string& name, const torch::Tensor& x) {
  if (name == "silu") return torch::silu(x);
  if (name == "relu") return torch::relu(x);
  if (name == "gelu") return torch::gelu(x);
  // gelu_new / gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
}

// The batch rows for which `holds(row)` is true (a fault's rows), as a bool tensor [B];
// undefined when no row is, so a forward without faults selects nothing.
template <class Holds>
torch::Tensor rowsWhere(int64_t B, Holds holds) {
  std::vector<int64_t> on(static_cast<size_t>(B), 0);
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    if (!holds(b)) continue;
    on[static_cast<size_t>(b)] = 1;
    any = true;
  }
  return any ? torch::tensor(on, torch::kLong).to(torch::kBool) : torch::Tensor();
}
}  // namespace

torch::Tensor ModelImpl::norm(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b) const {
  if (config.recipe.norm == BlockRecipe::Norm::LayerNorm)
    return detail::layerNorm(x, w, b, config.normEps);
  return detail::rmsNorm(x, rmsWeight(w), config.normEps);
}

torch::Tensor ModelImpl::rmsWeight(const torch::Tensor& w) const {
  return detail::rmsMultiplier(w, config.recipe.norm);
}

torch::Tensor ModelImpl::project(const torch::Tensor& x, const torch::Tensor& w,
                                 const torch::Tensor& b) const {
  return config.recipe.layout == BlockRecipe::Layout::Conv1d ? conv1d(x, w, b) : linear(x, w, b);
}

torch::Tensor ModelImpl::headNorm(const torch::Tensor& x, const torch::Tensor& w) const {
  if (!w.defined()) return x;
  if (!config.recipe.qkNormOverHeads) return detail::rmsNorm(x, rmsWeight(w), config.normEps);
  const int64_t B = x.size(0), h = x.size(1), s = x.size(2), d = x.size(3);
  auto flat = x.transpose(1, 2).reshape({B, s, h * d});  // the projection as computed
  return detail::rmsNorm(flat, rmsWeight(w), config.normEps).view({B, s, h, d}).transpose(1, 2);
}

torch::Tensor ModelImpl::rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) const {
  return detail::RotaryEmbedding::apply(x, cos, sin, config.recipe.ropeInterleaved);
}

void ModelImpl::checkInputs(const torch::Tensor& ids, const torch::Tensor& positions) const {
  if (ids.numel() == 0) throw UsageError("no input tokens");
  const int64_t rows = embed.size(0);
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= rows)
    throw UsageError("token id " + std::to_string(lo < 0 ? lo : hi) +
                     " is outside the embedding's " + std::to_string(rows) + " rows (" +
                     checkpoint->directory() + ")");
  const int64_t maxPos = positions.max().item<int64_t>();
  if (maxPos >= config.maxPositions) throw ContextLimitError(maxPos, config.maxPositions);
  if (positions.min().item<int64_t>() < 0) throw UsageError("negative position id");
}

torch::Tensor ModelImpl::attentionBlock(int64_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                                        const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& wholeCos, const torch::Tensor& wholeSin,
                                        detail::AttentionContext& attention,
                                        detail::TorchTapSink* taps) const {
  if (config.mla.enabled()) return latentAttentionBlock(layer, x, cos, sin, attention, taps);
  const auto& w = layers[static_cast<size_t>(layer)];
  const int64_t B = x.size(0), s = x.size(1), d = config.headDim;
  const int64_t nh = config.numHeads, nkv = config.numKvHeads;
  auto product = [&](const torch::Tensor& wt, const torch::Tensor& bias) {
    return rowSplitProduct(layer, x, wt, bias, attention);
  };
  torch::Tensor qRaw, kRaw, v;  // [B, h, s, d], before q/k norm and RoPE
  torch::Tensor outputGate;     // [B, s, nh * d] (config.attentionOutputGate)
  if (config.recipe.fusedQkv) {
    auto parts = product(w.qkvW, w.qkvB).split_with_sizes({nh * d, nkv * d, nkv * d}, -1);
    qRaw = parts[0].reshape({B, s, nh, d}).transpose(1, 2);
    kRaw = parts[1].reshape({B, s, nkv, d}).transpose(1, 2);
    v = parts[2].reshape({B, s, nkv, d}).transpose(1, 2);
  } else {
    if (config.attentionOutputGate) {  // each head's query, then its gate (Qwen3.5)
      const auto both = product(w.qW, w.qB).view({B, s, nh, 2 * d});
      qRaw = both.narrow(-1, 0, d).transpose(1, 2);
      outputGate = both.narrow(-1, d, d).reshape({B, s, nh * d});
    } else {
      qRaw = product(w.qW, w.qB).view({B, s, nh, d}).transpose(1, 2);
    }
    kRaw = product(w.kW, w.kB).view({B, s, nkv, d}).transpose(1, 2);
    v = product(w.vW, w.vB).view({B, s, nkv, d}).transpose(1, 2);
  }
  // q/k norm (when the checkpoint has one) over each head's d features, before RoPE.
  torch::Tensor q = headNorm(qRaw, w.qNormW), k = headNorm(kRaw, w.kNormW);
  // Rows that read the layer's no_rope_layers entry inverted (nope_layer_rope) turn where
  // the layer does not, and the other way round.
  const torch::Tensor flipped =
      cos.defined() ? rowsWhere(B, [&](int64_t b) { return attention.flipsRope(layer, b); }) : torch::Tensor();
  torch::Tensor qPlain = q, kPlain = k;  // before any rotation
  // What a rotary layer does to its queries and keys: RoPE, then (Llama 4) their RMS over each
  // head without a weight, which transformers applies on the rotary layers only.
  auto turned = [&](const torch::Tensor& x) {
    const torch::Tensor r = rotate(x, cos, sin);
    return config.qkL2Norm ? detail::rmsNorm(r, {}, config.normEps) : r;
  };
  if (config.ropeOn(layer)) {
    q = turned(q);
    k = turned(k);
    if (w.kNormW.defined()) {
      // Rows that norm after RoPE (qk_norm_order).
      const auto late = rowsWhere(B, [&](int64_t b) { return attention.normsAfterRope(layer, b); });
      if (late.defined()) {
        auto rows = late.view({-1, 1, 1, 1});
        q = torch::where(rows, headNorm(rotate(qRaw, cos, sin), w.qNormW), q);
        k = torch::where(rows, headNorm(rotate(kRaw, cos, sin), w.kNormW), k);
      }
    }
  }
  if (wholeCos.defined()) {  // rows that rotate the whole head (partial_rotary)
    auto rows = rowsWhere(B, [&](int64_t b) { return attention.rotatesWholeHead(layer, b); }).view({-1, 1, 1, 1});
    q = torch::where(rows, rotate(qPlain, wholeCos, wholeSin), q);
    k = torch::where(rows, rotate(kPlain, wholeCos, wholeSin), k);
  }
  if (flipped.defined()) {
    auto rows = flipped.view({-1, 1, 1, 1});
    const bool turns = config.ropeOn(layer);
    q = torch::where(rows, turns ? qPlain : turned(qPlain), q);
    k = torch::where(rows, turns ? kPlain : turned(kPlain), k);
  }
  // The rows whose queries take the attention temperature: every row, or (Llama 4) the rows
  // that run the layer as a NoPE layer, flipped rows included.
  torch::Tensor tempered;  // [B, 1, 1, 1] bool; undefined: every row
  if (config.queryScaleNopeOnly) {
    const bool nope = !config.ropeOn(layer);
    tempered = torch::full({B, 1, 1, 1}, nope, torch::kBool);
    if (flipped.defined()) tempered = flipped.view({-1, 1, 1, 1}).logical_xor(tempered);
  }
  if (config.queryScaleBeta > 0 && (!tempered.defined() || tempered.any().item<bool>())) {
    // The attention temperature: the (rotated) queries times 1 + beta ln(1 + floor((p +
    // offset) / context)) at their position p (Ministral 3: offset 0, every layer; Llama 4:
    // offset 1, the NoPE layers); keys and values untouched.
    const auto p = (attention.temperaturePositions(layer, positions).to(torch::kFloat) +
                    static_cast<float>(config.queryScaleOffset)) /
                   static_cast<float>(config.queryScaleContext);
    const auto scale = 1 + config.queryScaleBeta * torch::log(1 + torch::floor(p));
    const auto factor = scale.unsqueeze(1).unsqueeze(-1).to(q.scalar_type());  // [B, 1, s, 1]
    q = tempered.defined() ? torch::where(tempered, q * factor, q) : q * factor;
  }
  k = k.contiguous();
  v = v.contiguous();
  attention.roundRecords(layer, k, v);
  detail::tapTensor(taps, layer, "k_proj", k);
  detail::tapTensor(taps, layer, "v_proj", v);
  detail::KvView kv = attention.attend(layer, k, v);
  auto keys = kv.keys, values = kv.values;
  if (nkv != nh) {  // repeat_kv for grouped-query attention
    keys = keys.repeat_interleave(nh / nkv, 1);
    values = values.repeat_interleave(nh / nkv, 1);
  }
  const torch::Tensor context = attendInChunks(layer, q, keys, values, kv.allowed, attention);  // [B, nh, s, d]
  auto out = context.transpose(1, 2).reshape({B, s, nh * d});
  if (outputGate.defined()) out = out * torch::sigmoid(outputGate);
  out = project(out, w.oW, w.oB);
  detail::tapTensor(taps, layer, "attn_out", out);
  return out;
}

torch::Tensor ModelImpl::rowSplitProduct(int64_t layer, const torch::Tensor& x, const torch::Tensor& w,
                                         const torch::Tensor& b, const detail::AttentionContext& attention) const {
  torch::Tensor y = project(x, w, b);
  const bool conv1dLayout = config.recipe.layout == BlockRecipe::Layout::Conv1d;
  for (int64_t row = 0; row < x.size(0); ++row)
    if (const int64_t parts = attention.projectionSplits(layer, row); parts > 1)
      y.select(0, row).copy_(detail::splitKProduct(x.select(0, row), w, b, parts, conv1dLayout));
  return y;
}

torch::Tensor ModelImpl::attendInChunks(int64_t layer, const torch::Tensor& q, const torch::Tensor& keys,
                                        const torch::Tensor& values, const torch::Tensor& allowed,
                                        const detail::AttentionContext& attention) const {
  // The queries in row chunks, so that a long forward never holds its whole [B, h, s, t]
  // scores (AttentionContext::queryChunk; a short one is one chunk).
  const int64_t B = q.size(0), nh = q.size(1), s = q.size(2);
  const int64_t rows = attention.queryChunk(B, nh, s, keys.size(2));
  if (rows >= s) return attendQueries(layer, q, keys, values, allowed, attention, 0, s);
  std::vector<torch::Tensor> parts;
  for (int64_t first = 0; first < s; first += rows) {
    const int64_t n = std::min(rows, s - first);
    torch::Tensor mask = allowed.narrow(2, first, n), k = keys, v = values;
    // The keys no query of the chunk may see (a causal chunk's later keys, a window's earlier
    // ones) stay out of its products: their softmax weights are exactly 0, so only the order
    // of the sums changes, and a long causal prefill does half the score arithmetic. A chunk
    // with a fully masked query row (padding) keeps every key: that row's softmax is uniform
    // over all of them.
    if (mask.any(-1).all().item<bool>()) {
      const torch::Tensor seen = mask.any(2).reshape({-1, mask.size(-1)}).any(0).nonzero();  // [m, 1]
      const int64_t lo = seen[0][0].item<int64_t>(), hi = seen[-1][0].item<int64_t>() + 1;
      if (lo > 0 || hi < keys.size(2)) {
        k = keys.narrow(2, lo, hi - lo);
        v = values.narrow(2, lo, hi - lo);
        mask = mask.narrow(-1, lo, hi - lo);
      }
    }
    parts.push_back(attendQueries(layer, q.narrow(2, first, n), k, v, mask, attention, first, s));
  }
  return torch::cat(parts, 2);
}

torch::Tensor ModelImpl::attendQueries(int64_t layer, const torch::Tensor& q, const torch::Tensor& keys,
                                       const torch::Tensor& values, const torch::Tensor& allowed,
                                       const detail::AttentionContext& attention, int64_t first, int64_t s) const {
  const auto& w = layers[static_cast<size_t>(layer)];
  const int64_t B = q.size(0), nh = q.size(1), n = q.size(2), d = config.headDim;
  // A feature's per-query rows [B, 1, s, 1] narrowed to these queries.
  auto queriesOf = [&](const torch::Tensor& all) { return all.defined() && n != s ? all.narrow(2, first, n) : all; };
  torch::Tensor scores = torch::matmul(q, keys.transpose(-1, -2));  // [B, nh, n, t]
  if (config.attentionScale > 0)
    scores = scores * static_cast<float>(config.attentionScale);
  else if (config.recipe.divideScoresBySqrtD)
    scores = scores / std::sqrt(static_cast<float>(d));
  else
    scores = scores * (1.0f / std::sqrt(static_cast<float>(d)));
  if (config.scaleAttnByInverseLayerIdx) scores = scores / static_cast<float>(layer + 1);
  if (config.mla.scoreMscale != 1.0) {
    // Query rows a path scores without yarn's mscale (score_mscale, or the audit's hypothesis).
    const torch::Tensor plain = queriesOf(attention.droppedQueries(detail::AttentionFeature::ScoreMscale, layer, B, s));
    if (plain.defined()) scores = torch::where(plain, scores / static_cast<float>(config.mla.scoreMscale), scores);
  }
  if (config.attnLogitSoftcap > 0) {
    // Gemma 2's soft-cap, before the mask; query rows a path runs without it (the
    // softcap_dropped fault, or the audit's hypothesis) keep the raw scores.
    const auto cap = static_cast<float>(config.attnLogitSoftcap);
    const torch::Tensor capped = torch::tanh(scores / cap) * cap;
    const torch::Tensor raw = queriesOf(attention.droppedQueries(detail::AttentionFeature::Softcap, layer, B, s));
    scores = raw.defined() ? torch::where(raw, scores, capped) : capped;
  }
  // Finite minimum like transformers, so fully masked (padding) rows stay finite.
  scores = scores.masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest());
  torch::Tensor probs = torch::softmax(scores, -1);
  if (w.sinksW.defined()) {
    // GPT-OSS: each head's learned sink logit joins every query's softmax (after the row's
    // max is taken out) and is dropped after it, so the weights sum to less than 1. Query
    // rows a path runs without the sinks (sink_dropped, or the audit's hypothesis) keep the
    // plain softmax.
    const int64_t t = scores.size(-1);
    auto combined = torch::cat({scores, w.sinksW.to(scores.scalar_type()).view({1, nh, 1, 1}).expand({B, nh, n, 1})}, -1);
    combined = combined - std::get<0>(combined.max(-1, true));
    const torch::Tensor sunk = torch::softmax(combined, -1).narrow(-1, 0, t);
    const torch::Tensor plain = queriesOf(attention.droppedQueries(detail::AttentionFeature::Sinks, layer, B, s));
    probs = plain.defined() ? torch::where(plain, probs, sunk) : sunk;
  }
  return torch::matmul(probs, values);
}

torch::Tensor ModelImpl::moeBlock(int64_t layer, const torch::Tensor& x, const detail::AttentionContext& attention,
                                  detail::TorchTapSink* taps) const {
  const auto& w = layers[static_cast<size_t>(layer)];
  const MoeConfig& moe = config.moe;
  const int64_t B = x.size(0), H = x.size(-1);
  const auto flat = x.reshape({-1, H});  // [N, H]
  const auto logits = project(flat, w.routerW, w.routerB).to(torch::kFloat);  // [N, E]
  const detail::ExpertRouter router(moe, w.routerScoreB);
  std::vector<int64_t> perRow(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) perRow[static_cast<size_t>(b)] = attention.expertsPerToken(layer, b, moe.topK);
  torch::Tensor topE = router.topExperts(logits, perRow);  // [N, k]; -1: no expert
  if (attention.expertGuide() && B == 1 && attention.routingDecisions())
    topE = router.follow(layer, logits, topE, *attention.expertGuide(), *attention.routingDecisions());
  // The engine records the experts; no tensor is made for a forward nobody taps.
  if (taps && taps->wants("experts")) taps->onTensor(layer, "experts", topE.view({B, -1, topE.size(1)}).to(torch::kFloat));
  auto topW = router.weights(logits, topE);
  topW = topW.to(flat.scalar_type());
  // Each (token, slot)'s weighted expert output, summed over the k slots in their top-k order
  // at the end, as transformers' experts do (view(N, k, H).sum(1)).
  auto slotOut = torch::zeros({flat.size(0), topE.size(1), H}, flat.options());
  for (int64_t e = 0; e < moe.numExperts; ++e) {
    const auto hit = topE.eq(e).nonzero();  // [m, 2]: (token, slot)
    if (hit.size(0) == 0) continue;
    const auto tokens = hit.select(1, 0), slots = hit.select(1, 1);
    const auto xe = flat.index_select(0, tokens);  // every row routed to e, in one product
    torch::Tensor ye;
    if (moe.expert == MoeConfig::Expert::ClampedGlu) {
      // [in, out] per expert: the Conv1D layout's product; MXFP4 experts [out, in], dequantized now.
      const bool mx = w.gateUpBlocks.defined();
      // The product, then the bias added by itself (transformers' experts add it after the mm).
      const auto gateUp = (mx ? detail::linearStored(xe, detail::dequantizeMxfp4(w.gateUpBlocks, w.gateUpScales, e), {})
                              : detail::conv1dStored(xe, w.stackedGateUpW[e], {})) +
                          w.stackedGateUpB[e];
      const auto lim = moe.gluLimit;
      const auto gate = gateUp.slice(-1, 0, c10::nullopt, 2).clamp_max(lim);
      const auto up = gateUp.slice(-1, 1, c10::nullopt, 2).clamp(-lim, lim);
      const auto glu = gate * torch::sigmoid(gate * moe.gluAlpha);
      ye = (mx ? detail::linearStored((up + 1) * glu, detail::dequantizeMxfp4(w.downBlocks, w.downScales, e), {})
               : detail::conv1dStored((up + 1) * glu, w.stackedDownW[e], {})) +
           w.stackedDownB[e];
    } else if (moe.expert == MoeConfig::Expert::StackedGated) {
      // Llama 4: [in, out] per expert, gate the first half of the product and up the second;
      // the router's weight scales the expert's input.
      const auto in = moe.weightInputs ? xe * topW.index({tokens, slots}).unsqueeze(-1) : xe;
      const auto halves = detail::conv1dStored(in, w.stackedGateUpW[e], {}).chunk(2, -1);
      ye = detail::conv1dStored(halves[1] * activation(config.activation, halves[0]), w.stackedDownW[e], {});
    } else {
      const auto ue = static_cast<size_t>(e);
      ye = project(activation(config.activation, project(xe, w.expertGateW[ue], torch::Tensor())) *
                       project(xe, w.expertUpW[ue], torch::Tensor()),
                   w.expertDownW[ue], torch::Tensor());
    }
    if (!moe.weightInputs) ye = ye * topW.index({tokens, slots}).unsqueeze(-1);
    slotOut.index_put_({tokens, slots}, ye);
  }
  auto out = slotOut.sum(1);
  if (w.sharedGateW.defined()) {  // a shared expert every token takes (Llama 4, Qwen3-Next)
    auto shared = project(activation(config.activation, project(flat, w.sharedGateW, {})) * project(flat, w.sharedUpW, {}),
                          w.sharedDownW, {});
    if (w.sharedExpertGateW.defined()) shared = torch::sigmoid(project(flat, w.sharedExpertGateW, {})) * shared;
    out = shared + out;
  }
  return out.view_as(x);
}

torch::Tensor ModelImpl::mlpBlock(int64_t layer, const torch::Tensor& x, const detail::AttentionContext& attention,
                                  detail::TorchTapSink* taps) const {
  if (config.isMoeLayer(layer)) return moeBlock(layer, x, attention, taps);
  // A long forward's rows in even chunks of at most kMlpRows (each row's MLP is its own):
  // an 8,128-token prefill of the 1B shape held 1 GB of [tokens, intermediate] temporaries.
  const int64_t B = x.size(0), s = x.size(1);
  if (B * s > kMlpRows && s > 1) {
    const int64_t chunks = std::min(s, (B * s + kMlpRows - 1) / kMlpRows), rows = (s + chunks - 1) / chunks;
    std::vector<torch::Tensor> parts;
    for (int64_t first = 0; first < s; first += rows)
      parts.push_back(mlpBlock(layer, x.narrow(1, first, std::min(rows, s - first)), attention, taps));
    return torch::cat(parts, 1);
  }
  const auto& w = layers[static_cast<size_t>(layer)];
  if (config.recipe.fusedGateUp) {  // gate | up in one product, split in halves
    auto parts = project(x, w.gateUpW, torch::Tensor()).chunk(2, -1);
    return project(parts[1] * activation(config.activation, parts[0]), w.downW, w.downB);
  }
  if (config.recipe.mlp == BlockRecipe::Mlp::Plain)
    return project(activation(config.activation, project(x, w.upW, w.upB)), w.downW, w.downB);
  return project(activation(config.activation, project(x, w.gateW, w.gateB)) * project(x, w.upW, w.upB),
                 w.downW, w.downB);
}

const detail::RotaryEmbedding& ModelImpl::ropeOf(int64_t layer) const {
  return slidingRope && config.isSlidingLayer(layer) ? *slidingRope : *rope;
}

void ModelImpl::swapLayerRope(int64_t layer, const torch::Tensor& ids, const torch::Tensor& positions,
                              const detail::AttentionContext& attention, torch::Tensor& cos,
                              torch::Tensor& sin) const {
  const auto swapped = rowsWhere(ids.size(0), [&](int64_t b) { return attention.swapsLayerRope(layer, b); });
  if (!swapped.defined()) return;
  const detail::RotaryEmbedding& other = &ropeOf(layer) == rope.get() ? *slidingRope : *rope;
  const torch::Tensor& own = attention.layerPositions(layer);
  auto [otherCos, otherSin] = other.cosSin(own.defined() ? own : positions);
  auto rows = swapped.view({-1, 1, 1});
  cos = torch::where(rows, otherCos, cos);
  sin = torch::where(rows, otherSin, sin);
}

torch::Tensor ModelImpl::probeLayer0Keys(int64_t token, int64_t count) const {
  torch::InferenceMode guard;
  if (config.isRecurrentLayer(0)) return {};  // layer 0 keeps a state, no keys
  if (config.mla.enabled()) return {};        // latent rows: the position sits in the values (k_pe)
  const auto& w = layers.at(0);
  auto positions = torch::arange(count, torch::kLong);
  auto h = detail::upcastRows(embed, torch::tensor({token}, torch::kLong)).expand({count, config.hiddenSize});
  const int64_t d = config.headDim, nh = config.numHeads, nkv = config.numKvHeads;
  if (embedScale != 1.0) h = h * embedScale;
  if (posEmbed.defined()) h = h + detail::upcastRows(posEmbed, positions);
  const auto x = w.attnNormW.defined() ? norm(h, w.attnNormW, w.attnNormB) : h;
  torch::Tensor k = config.recipe.fusedQkv
                        ? project(x, w.qkvW, w.qkvB).narrow(1, nh * d, nkv * d)
                        : project(x, w.kW, w.kB);
  k = headNorm(k.reshape({count, 1, nkv, d}).transpose(1, 2), w.kNormW);  // [count, h_kv, 1, d]
  if (config.ropeOn(0)) {
    auto [cos, sin] = ropeOf(0).cosSin(positions.view({count, 1}));
    k = rotate(k, cos, sin);
  }
  return k.select(2, 0);  // [count, h_kv, d]
}

torch::Tensor ModelImpl::forward(const torch::Tensor& ids, const torch::Tensor& positions,
                                 detail::AttentionContext& attention,
                                 detail::TorchTapSink* taps, int64_t logitsFrom) const {
  torch::InferenceMode guard;
  checkInputs(ids, positions);  // before any embedding or position row is read
  attention.setLayerChunks(layerChunks);
  torch::Tensor h = detail::upcastRows(embed, ids.reshape({-1})).view({ids.size(0), ids.size(1), -1});
  if (embedScale != 1.0) h = h * embedScale;
  if (posEmbed.defined()) h = h + detail::upcastRows(posEmbed, positions.reshape({-1})).view_as(h);
  // Per RoPE (0: the full-attention layers', 1: the sliding layers' where they have their own):
  // cos/sin at the forward's positions, and the unscaled ones once a row drops rope_scaling.
  struct Tables { torch::Tensor cos, sin, cosUnscaled, sinUnscaled; };
  std::array<Tables, 2> tables;
  if (config.usesRope()) {
    std::tie(tables[0].cos, tables[0].sin) = rope->cosSin(positions);
    if (slidingRope) std::tie(tables[1].cos, tables[1].sin) = slidingRope->cosSin(positions);
  }
  detail::tapTensor(taps, -1, "embed", h);
  for (int64_t i = 0; i < config.numLayers; ++i) {
    const auto& w = layers[static_cast<size_t>(i)];
    const detail::RotaryEmbedding* layerRope = config.usesRope() ? &ropeOf(i) : nullptr;
    Tables& t = tables[layerRope && layerRope == slidingRope.get() ? 1 : 0];
    torch::Tensor layerCos = t.cos, layerSin = t.sin;
    if (layerRope) {
      // A layer rotated at other positions than the forward's (chunk_position).
      const torch::Tensor& own = attention.layerPositions(i);
      if (own.defined()) {
        checkInputs(ids, own);
        std::tie(layerCos, layerSin) = layerRope->cosSin(own);
      }
      // Rows that drop rope_scaling (the rope_scaling fault).
      const auto dropped = rowsWhere(ids.size(0), [&](int64_t b) { return attention.dropsRopeScaling(i, b); });
      if (dropped.defined()) {
        torch::Tensor cosUnscaled, sinUnscaled;
        if (own.defined()) {
          std::tie(cosUnscaled, sinUnscaled) = layerRope->cosSinUnscaled(own);
        } else {
          if (!t.cosUnscaled.defined()) std::tie(t.cosUnscaled, t.sinUnscaled) = layerRope->cosSinUnscaled(positions);
          cosUnscaled = t.cosUnscaled;
          sinUnscaled = t.sinUnscaled;
        }
        auto rows = dropped.view({-1, 1, 1});
        layerCos = torch::where(rows, cosUnscaled, layerCos);
        layerSin = torch::where(rows, sinUnscaled, layerSin);
      }
      if (slidingRope) swapLayerRope(i, ids, positions, attention, layerCos, layerSin);
      // Rows that turn without the RoPE's attention factor (yarn_attention_factor).
      if (layerRope->attentionFactor() != 1.0) {
        const auto plain = rowsWhere(ids.size(0), [&](int64_t b) { return attention.dropsAttentionFactor(i, b); });
        if (plain.defined()) {
          auto [c, sn] = layerRope->cosSin(own.defined() ? own : positions, /*withAttentionFactor=*/false);
          auto rows = plain.view({-1, 1, 1});
          layerCos = torch::where(rows, c, layerCos);
          layerSin = torch::where(rows, sn, layerSin);
        }
      }
    }
    // The whole head's rotation, for rows that ignore partial rotary (partial_rotary).
    torch::Tensor wholeCos, wholeSin;
    if (layerRope && config.ropeOn(i) && layerCos.size(-1) < config.rotaryHeadDim()) {
      if (rowsWhere(ids.size(0), [&](int64_t b) { return attention.rotatesWholeHead(i, b); }).defined()) {
        const torch::Tensor& own = attention.layerPositions(i);
        std::tie(wholeCos, wholeSin) =
            detail::RotaryEmbedding::wholeHead(config, i).cosSin(own.defined() ? own : positions);
      }
    }
    // Pre-norms where the family has them, post-norms of the sublayer outputs where it has
    // those (OLMo 2: only post-norms; Gemma: both), then the residual (Granite scales it).
    auto sublayer = [&](torch::Tensor out, const torch::Tensor& postNorm) {
      if (postNorm.defined()) out = norm(out, postNorm, torch::Tensor());
      if (config.residualMultiplier != 1.0) out = out * config.residualMultiplier;
      return out;
    };
    auto in = [&](const torch::Tensor& nw, const torch::Tensor& nb) {
      return nw.defined() ? norm(h, nw, nb) : h;
    };
    const torch::Tensor& ownPositions = attention.layerPositions(i);
    h = h + sublayer(config.isRecurrentLayer(i)
                         ? deltaNetBlock(i, in(w.attnNormW, w.attnNormB), attention, taps)
                         : attentionBlock(i, in(w.attnNormW, w.attnNormB),
                                          ownPositions.defined() ? ownPositions : positions, layerCos, layerSin,
                                          wholeCos, wholeSin, attention, taps),
                     w.postAttnNormW);
    h = h + sublayer(mlpBlock(i, in(w.mlpNormW, w.mlpNormB), attention, taps), w.postMlpNormW);
    detail::tapTensor(taps, i, "hidden", h);
  }
  h = norm(h, finalW, finalB);
  detail::tapTensor(taps, config.numLayers, "final", h);
  const int64_t from = firstLogitsColumn(logitsFrom, h.size(1));
  if (from > 0) h = h.narrow(1, from, h.size(1) - from);
  auto logits = linear(h, lmHead.narrow(0, 0, config.vocabSize), torch::Tensor());
  if (config.logitsDivisor != 1.0) logits = logits / config.logitsDivisor;
  if (config.finalLogitSoftcap > 0) {
    const auto cap = static_cast<float>(config.finalLogitSoftcap);
    logits = torch::tanh(logits / cap) * cap;
  }
  detail::tapTensor(taps, config.numLayers, "logits", logits);
  return logits;
}

}  // namespace kvscope
