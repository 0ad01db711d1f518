// ModelImpl::loadWeights: maps checkpoint tensors into torch tensors with shape checks.
// Matrices stay in their stored dtype as views of the mapping (no float32 copy of the
// model; WeightMatmul computes from them in float32); vectors (norms, biases) are small
// and are converted to float32.
#include <algorithm>
#include <cstdint>

#include "kvscope/Error.hpp"
#include "kvscope/FloatTensor.hpp"
#include "model/ModelImpl.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

namespace {

class TensorLoader {
 public:
  explicit TensorLoader(const Checkpoint& ck) : ck_(ck) {}

  // The tensor `name` with the expected shape: a view of the mapping for F32, for BF16/F16
  // matrices and for GGUF's block-quantised ones; vectors and F64 as float32 copies.
  torch::Tensor load(const std::string& name, const std::vector<int64_t>& expected) const {
    const StoredWeight w = ck_.stored(name);
    if (w.shape != expected)
      throw InputError(w.file, w.storedName,
                       "shape " + shapeString(w.shape) + " does not match the config, which needs " +
                           shapeString(expected) + " (config: " + ck_.config().sourceFile + ")");
    return toTensor(w);
  }

  // Like load(), but only the first dimension may be larger (padded vocabulary rows).
  torch::Tensor loadRows(const std::string& name, int64_t minRows, int64_t cols) const {
    const StoredWeight w = ck_.stored(name);
    if (w.shape.size() != 2 || w.shape[1] != cols || w.shape[0] < minRows)
      throw InputError(w.file, w.storedName,
                       "shape " + shapeString(w.shape) + " does not fit the config, which needs [" +
                           std::to_string(minRows) + " (or more), " + std::to_string(cols) +
                           "] (vocab_size " + std::to_string(minRows) +
                           ", config: " + ck_.config().sourceFile + ")");
    return toTensor(w);
  }

  torch::Tensor optional(const std::string& name, const std::vector<int64_t>& expected) const {
    return ck_.contains(name) ? load(name, expected) : torch::Tensor();
  }

  // A uint8 tensor (MXFP4 blocks and scales) with the expected shape, a view of the mapping.
  torch::Tensor loadBytes(const std::string& name, const std::vector<int64_t>& expected) const {
    const StoredWeight w = ck_.stored(name);
    if (w.dtype != "U8")
      throw InputError(w.file, w.storedName, "dtype " + w.dtype + ", MXFP4 blocks and scales are U8");
    if (w.shape != expected)
      throw InputError(w.file, w.storedName,
                       "shape " + shapeString(w.shape) + " does not match the config, which needs " +
                           shapeString(expected) + " (config: " + ck_.config().sourceFile + ")");
    return torch::from_blob(const_cast<uint8_t*>(w.bytes), w.shape, torch::TensorOptions().dtype(torch::kByte));
  }

 private:
  static torch::Tensor toTensor(const StoredWeight& w) {
    torch::Tensor t = w.blockQuantized() ? blockQuantized(w) : toFloat(w);
    return w.permutedHeads ? unpermuteRows(t, w.permutedHeads) : t;
  }

  // GGUF's block-quantised matrix as uint8 [rows, blocks per row, block bytes] (WeightMatmul
  // dequantises it a block of rows at a time); a vector cannot be one.
  static torch::Tensor blockQuantized(const StoredWeight& w) {
    if (w.shape.size() != 2)
      throw InputError(w.file, w.storedName, "a " + w.dtype + " tensor of " + std::to_string(w.shape.size()) +
                                                 " dimensions; KV Scope reads block-quantised matrices only");
    const int64_t blocks = w.shape[1] / w.blockElements;
    return torch::from_blob(const_cast<uint8_t*>(w.bytes), {w.shape[0], blocks, w.blockBytes},
                            torch::TensorOptions().dtype(torch::kByte));
  }

  // convert_hf_to_gguf.py's LlamaModel.permute undone: within each head the rows were
  // reordered from (pair half, index) to (index, pair half); back to HF's order (a copy in
  // the stored dtype: the q and k matrices only).
  static torch::Tensor unpermuteRows(const torch::Tensor& t, int64_t heads) {
    std::vector<int64_t> split{heads, t.size(0) / heads / 2, 2};
    for (int64_t i = 1; i < t.dim(); ++i) split.push_back(t.size(i));
    return t.reshape(split).transpose(1, 2).reshape(t.sizes()).contiguous();
  }

  static torch::Tensor toFloat(const StoredWeight& w) {
    void* p = const_cast<uint8_t*>(w.bytes);
    torch::ScalarType st;
    size_t elementBytes;
    if (w.dtype == "F32") st = torch::kFloat, elementBytes = 4;
    else if (w.dtype == "F16") st = torch::kHalf, elementBytes = 2;
    else if (w.dtype == "BF16") st = torch::kBFloat16, elementBytes = 2;
    else if (w.dtype == "F64") st = torch::kDouble, elementBytes = 8;
    else
      throw InputError(w.file, w.storedName, "dtype " + w.dtype + " is not a float weight type");
    auto t = torch::from_blob(p, w.shape, torch::TensorOptions().dtype(st));
    const bool aligned = reinterpret_cast<uintptr_t>(p) % elementBytes == 0;
    const bool keep = st == torch::kFloat || ((st == torch::kHalf || st == torch::kBFloat16) &&
                                              w.shape.size() >= 2);
    if (keep) return aligned ? t : t.clone();  // zero-copy view of the mapping
    return t.to(torch::kFloat);
  }
  const Checkpoint& ck_;
};

}  // namespace

uint64_t ModelImpl::weightBytes() const { return checkpoint->weightBytes(); }

MemoryNeed ModelImpl::forwardMemory(int64_t B, int64_t s, int64_t t, int64_t logitRows) const {
  const ModelConfig& c = config;
  const auto f = [](int64_t n) { return static_cast<uint64_t>(n) * sizeof(float); };
  const int64_t rows = B * s;
  MemoryNeed m;
  m.weights = weightBytes();
  m.weightsWorkingSet = checkpoint->largestTensorBytes();
  // Live at once in the widest step: the residual stream and a few [B, s, H] temporaries,
  // q/k/v, repeated K/V, one query chunk's scores + probabilities + mask, the MLP's [B, s, I] temporaries,
  // the logits, and the blocked-upcast buffer.
  m.activations = f(6 * rows * c.hiddenSize) + f(rows * (c.numHeads + 2 * c.numKvHeads) * c.headDim) +
                  f(2 * B * c.numHeads * t * c.headDim) +
                  f(3 * B * c.numHeads * detail::AttentionContext::queryRows(B, c.numHeads, s, t) * t) +
                  static_cast<uint64_t>(B * s * t) + f(4 * std::min(rows, kMlpRows) * c.intermediateSize) +
                  f(B * (logitRows < 0 ? s : logitRows) * c.vocabSize) + (16u << 20);
  return m;
}

void ModelImpl::loadWeights() {
  const ModelConfig& c = config;
  const BlockRecipe& recipe = c.recipe;
  const ModelFamily& family = familyOf(c.architecture);
  const WeightNames& n = family.weightNames();
  TensorLoader L(*checkpoint);
  const int64_t H = c.hiddenSize, I = c.intermediateSize, d = c.headDim;
  const int64_t nh = c.numHeads, nkv = c.numKvHeads;
  const bool conv1d = recipe.layout == BlockRecipe::Layout::Conv1d;
  const bool layerNorm = recipe.norm == BlockRecipe::Norm::LayerNorm;
  // A matrix of `out` x `in` features in the recipe's layout.
  auto matrix = [&](int64_t out, int64_t in) {
    return conv1d ? std::vector<int64_t>{in, out} : std::vector<int64_t>{out, in};
  };
  // The config's layer count must be backed by tensors before anything is sized by it (a
  // wrong num_hidden_layers would otherwise ask for billions of layer slots).
  const std::string lastLayer = n.layerPrefix + std::to_string(c.numLayers - 1) + ".";
  const auto names = checkpoint->tensorNames();
  if (std::none_of(names.begin(), names.end(),
                   [&](const std::string& name) { return name.rfind(lastLayer, 0) == 0; }))
    throw InputError(c.sourceFile, family.layerCountKey(),
                     std::to_string(c.numLayers) + " layers, but the weights hold no '" +
                         lastLayer + "*' tensors (" + checkpoint->directory() + ")");
  layers.resize(static_cast<size_t>(c.numLayers));
  byName.clear();
  auto track = [&](const std::string& name, torch::Tensor& t) {
    if (t.defined()) byName[name] = &t;
  };
  embed = L.loadRows(n.embed, c.vocabSize, H);
  track(n.embed, embed);
  if (recipe.positions == BlockRecipe::Positions::Learned) {
    posEmbed = L.load(n.positionEmbed, {c.maxPositions, H});
    track(n.positionEmbed, posEmbed);
  }
  for (int64_t i = 0; i < c.numLayers; ++i) {
    auto& w = layers[static_cast<size_t>(i)];
    // (suffix, member, shape, required): a suffix the family does not name is skipped.
    struct Item { std::string suffix; torch::Tensor* t; std::vector<int64_t> shape; bool required; };
    std::vector<Item> items = {
        {n.attnNorm, &w.attnNormW, {H}, true}, {n.attnNormBias, &w.attnNormB, {H}, layerNorm},
        {n.mlpNorm, &w.mlpNormW, {H}, true}, {n.mlpNormBias, &w.mlpNormB, {H}, layerNorm},
        {n.postAttnNorm, &w.postAttnNormW, {H}, true}, {n.postMlpNorm, &w.postMlpNormW, {H}, true}};
    const bool recurrent = c.isRecurrentLayer(i);  // a Gated DeltaNet in the attention's place
    if (recurrent) {
      const DeltaNetConfig& dn = c.deltaNet;
      const int64_t C = dn.convDim(), Vd = dn.valueDim(), Hv = dn.valueHeads;
      for (Item it : std::vector<Item>{{n.dnQkv, &w.dnQkvW, matrix(C, H), true},
                                       {n.dnZ, &w.dnZW, matrix(Vd, H), true},
                                       {n.dnB, &w.dnBW, matrix(Hv, H), true},
                                       {n.dnA, &w.dnAW, matrix(Hv, H), true},
                                       {n.dnQkvz, &w.dnQkvzW, matrix(C + Vd, H), true},
                                       {n.dnBa, &w.dnBaW, matrix(2 * Hv, H), true},
                                       {n.dnConv, &w.dnConvW, {C, 1, dn.convKernel}, true},
                                       {n.dnALog, &w.dnALog, {Hv}, true},
                                       {n.dnDtBias, &w.dnDtBias, {Hv}, true},
                                       {n.dnNorm, &w.dnNormW, {dn.valueHeadDim}, true},
                                       {n.dnOut, &w.dnOutW, matrix(H, Vd), true}})
        items.push_back(std::move(it));
    } else {
      items.push_back({n.o, &w.oW, matrix(H, nh * (c.mla.enabled() ? c.mla.valueDim : d)), true});
      items.push_back({n.oBias, &w.oB, {H}, c.outputProjBias});
    }
    const bool moe = c.isMoeLayer(i);  // its experts stand in the dense MLP's place
    if (!moe) {
      items.push_back({n.down, &w.downW, matrix(H, I), true});
      items.push_back({n.downBias, &w.downB, {H}, c.mlpBias});
      items.push_back({n.up, &w.upW, matrix(I, H), true});
      items.push_back({n.upBias, &w.upB, {I}, c.mlpBias});
      items.push_back({n.gateUp, &w.gateUpW, matrix(2 * I, H), true});
      if (recipe.mlp == BlockRecipe::Mlp::Gated) {
        items.push_back({n.gate, &w.gateW, matrix(I, H), true});
        items.push_back({n.gateBias, &w.gateB, {I}, c.mlpBias});
      }
    } else {  // the router [E, H] and each expert's gate/up [Im, H], down [H, Im]
      int64_t E = c.moe.numExperts;
      const int64_t Im = c.moe.intermediateSize;
      items.push_back({n.router, &w.routerW, matrix(E, H), true});
      items.push_back({n.routerBias, &w.routerB, {E}, c.moe.routerBias});
      items.push_back({n.routerScoreBias, &w.routerScoreB, {E}, true});
      if (c.moe.expert == MoeConfig::Expert::ClampedGlu) {  // stacked [E, in, out] with biases
        items.push_back({n.stackedGateUpBias, &w.stackedGateUpB, {E, 2 * Im}, true});
        items.push_back({n.stackedDownBias, &w.stackedDownB, {E, H}, true});
        if (checkpoint->contains(n.layer(i, n.stackedGateUp + "_blocks"))) {
          // MXFP4 (GPT-OSS as released): blocks and scales, dequantized per expert when used.
          if (H % 32 != 0 || Im % 32 != 0)
            throw InputError(c.sourceFile, "hidden_size", "MXFP4 experts need hidden_size and intermediate_size divisible by 32");
          const auto bytes = [&](const std::string& suffix, std::vector<int64_t> shape, torch::Tensor& t) {
            t = L.loadBytes(n.layer(i, suffix), shape);
          };
          bytes(n.stackedGateUp + "_blocks", {E, 2 * Im, H / 32, 16}, w.gateUpBlocks);
          bytes(n.stackedGateUp + "_scales", {E, 2 * Im, H / 32}, w.gateUpScales);
          bytes(n.stackedDown + "_blocks", {E, H, Im / 32, 16}, w.downBlocks);
          bytes(n.stackedDown + "_scales", {E, H, Im / 32}, w.downScales);
        } else {
          items.push_back({n.stackedGateUp, &w.stackedGateUpW, {E, H, 2 * Im}, true});
          items.push_back({n.stackedDown, &w.stackedDownW, {E, Im, H}, true});
        }
        E = 0;  // no per-expert tensors
      } else if (c.moe.expert == MoeConfig::Expert::StackedGated) {  // [E, in, out], no biases
        items.push_back({n.stackedGateUp, &w.stackedGateUpW, {E, H, 2 * Im}, true});
        items.push_back({n.stackedDown, &w.stackedDownW, {E, Im, H}, true});
        E = 0;
      }
      if (const int64_t Is = c.moe.sharedIntermediateSize; Is > 0) {
        items.push_back({n.sharedGate, &w.sharedGateW, matrix(Is, H), true});
        items.push_back({n.sharedUp, &w.sharedUpW, matrix(Is, H), true});
        items.push_back({n.sharedDown, &w.sharedDownW, matrix(H, Is), true});
        if (c.moe.sharedExpertGate) items.push_back({n.sharedExpertGate, &w.sharedExpertGateW, matrix(1, H), true});
      }
      w.expertGateW.resize(static_cast<size_t>(E));
      w.expertUpW.resize(static_cast<size_t>(E));
      w.expertDownW.resize(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const auto ue = static_cast<size_t>(e);
        const std::string expert = n.expertPrefix + std::to_string(e) + ".";
        items.push_back({expert + n.expertGate, &w.expertGateW[ue], matrix(Im, H), true});
        items.push_back({expert + n.expertUp, &w.expertUpW[ue], matrix(Im, H), true});
        items.push_back({expert + n.expertDown, &w.expertDownW[ue], matrix(H, Im), true});
      }
    }
    if (!recurrent && c.mla.enabled()) {  // latent attention: the LoRA'd query, kv_a, kv_b
      const MlaConfig& m = c.mla;
      const int64_t q = nh * m.queryDim(), kvA = m.kvLoraRank + m.ropeDim;
      if (m.qLoraRank > 0) {
        items.push_back({n.qA, &w.qAW, matrix(m.qLoraRank, H), true});
        items.push_back({n.qABias, &w.qAB, {m.qLoraRank}, c.qkvBias});
        items.push_back({n.qANorm, &w.qANormW, {m.qLoraRank}, true});
        items.push_back({n.qB, &w.qBW, matrix(q, m.qLoraRank), true});
      } else {
        items.push_back({n.q, &w.qW, matrix(q, H), true});
      }
      items.push_back({n.kvA, &w.kvAW, matrix(kvA, H), true});
      items.push_back({n.kvABias, &w.kvAB, {kvA}, c.qkvBias});
      items.push_back({n.kvANorm, &w.kvANormW, {m.kvLoraRank}, true});
      items.push_back({n.kvB, &w.kvBW, matrix(nh * (m.nopeDim + m.valueDim), m.kvLoraRank), true});
    } else if (!recurrent) {  // the attention projections (a recurrent layer has the DeltaNet's above)
      if (recipe.fusedQkv) {
        const int64_t qkv = (nh + 2 * nkv) * d;
        items.push_back({n.qkv, &w.qkvW, matrix(qkv, H), true});
        items.push_back({n.qkvBias, &w.qkvB, {qkv}, c.qkvBias});
      } else {
        // With an output gate, each head's query rows are followed by as many gate rows.
        const int64_t q = (c.attentionOutputGate ? 2 : 1) * nh * d;
        items.push_back({n.q, &w.qW, matrix(q, H), true});
        items.push_back({n.k, &w.kW, matrix(nkv * d, H), true});
        items.push_back({n.v, &w.vW, matrix(nkv * d, H), true});
        items.push_back({n.qBias, &w.qB, {q}, c.qkvBias});
        items.push_back({n.kBias, &w.kB, {nkv * d}, c.qkvBias});
        items.push_back({n.vBias, &w.vB, {nkv * d}, c.qkvBias});
      }
      if (c.attentionSinks) items.push_back({n.sinks, &w.sinksW, {nh}, true});
      if (c.qkNorm) {  // per head [d], or over the whole projection [h * d]
        const bool whole = recipe.qkNormOverHeads;
        items.push_back({n.qNorm, &w.qNormW, {whole ? nh * d : d}, true});
        items.push_back({n.kNorm, &w.kNormW, {whole ? nkv * d : d}, true});
      }
    }
    for (auto& it : items) {
      if (it.suffix.empty()) continue;
      const std::string name = n.layer(i, it.suffix);
      *it.t = it.required ? L.load(name, it.shape) : L.optional(name, it.shape);
      track(name, *it.t);
    }
  }
  finalW = L.load(n.finalNorm, {H});
  track(n.finalNorm, finalW);
  if (layerNorm) {
    finalB = L.load(n.finalNormBias, {H});
    track(n.finalNormBias, finalB);
  }
  // Tied embeddings: the output head is the embedding (transformers' tie_weights), whatever
  // the file also holds; otherwise the head is required.
  if (c.tieWordEmbeddings) {
    lmHead = embed;
  } else {
    lmHead = L.loadRows(n.lmHead, c.vocabSize, H);  // throws naming the file when missing
    track(n.lmHead, lmHead);
  }
  // Gemma: torch.tensor(hidden_size ** 0.5).to(embed dtype), so bf16 weights scale by the
  // bf16 rounding of the multiplier.
  embedScale = recipe.embeddingScaleInWeightDtype
                   ? torch::tensor(static_cast<float>(c.embeddingMultiplier))
                         .to(embed.scalar_type())
                         .to(torch::kDouble)
                         .item<double>()
                   : c.embeddingMultiplier;
  if (recipe.positions == BlockRecipe::Positions::Rope) {
    rope = std::make_unique<detail::RotaryEmbedding>(c);
    if (c.slidingRope)
      slidingRope = std::make_unique<detail::RotaryEmbedding>(*c.slidingRope, c.rotaryHeadDim(), c.maxPositions);
  }
  layerWindows.assign(static_cast<size_t>(c.numLayers), 0);
  for (int64_t i = 0; i < c.numLayers; ++i)
    if (c.isSlidingLayer(i)) layerWindows[static_cast<size_t>(i)] = c.slidingWindow;
  if (!n.dnQkvz.empty() && c.hasRecurrentLayers()) fusedDeltaNetOrder();
  layerChunks.assign(static_cast<size_t>(c.numLayers), 0);
  for (int64_t i = 0; i < c.numLayers; ++i)
    if (c.isChunkedLayer(i)) layerChunks[static_cast<size_t>(i)] = c.attentionChunk;
}

void ModelImpl::fusedDeltaNetOrder() {
  // Per key-head group: [q Dk | k Dk | v g Dv | z g Dv] and [b g | a g], g = Hv / Hk
  // (transformers' Qwen3NextGatedDeltaNet.fix_query_key_value_ordering).
  const DeltaNetConfig& d = config.deltaNet;
  const int64_t g = d.valueHeads / d.keyHeads, group = 2 * d.keyHeadDim + 2 * g * d.valueHeadDim;
  const int64_t offsets[4] = {0, d.keyHeadDim, 2 * d.keyHeadDim, 2 * d.keyHeadDim + g * d.valueHeadDim};
  const int64_t lengths[4] = {d.keyHeadDim, d.keyHeadDim, g * d.valueHeadDim, g * d.valueHeadDim};
  std::vector<int64_t> qkvz, ba;
  for (int part = 0; part < 4; ++part)
    for (int64_t k = 0; k < d.keyHeads; ++k)
      for (int64_t j = 0; j < lengths[part]; ++j) qkvz.push_back(k * group + offsets[part] + j);
  for (int part = 0; part < 2; ++part)
    for (int64_t k = 0; k < d.keyHeads; ++k)
      for (int64_t j = 0; j < g; ++j) ba.push_back(k * 2 * g + part * g + j);
  dnQkvzOrder = torch::tensor(qkvz, torch::kLong);
  dnBaOrder = torch::tensor(ba, torch::kLong);
}

}  // namespace kvscope
