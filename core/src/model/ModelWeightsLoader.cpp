// ModelImpl::loadWeights: maps checkpoint tensors into torch tensors with shape checks.
// Matrices stay in their stored dtype as views of the mapping (no float32 copy of the
// model; WeightMatmul computes from them in float32); vectors (norms, biases) are small
// and are converted to float32.
#include <algorithm>
#include <cstdint>

#include "kvscope/Error.hpp"
#include "kvscope/FloatTensor.hpp"
#include "model/ModelImpl.hpp"

namespace kvscope {

namespace {

class TensorLoader {
 public:
  explicit TensorLoader(const Checkpoint& ck) : ck_(ck) {}

  // The tensor `name` with the expected shape: a view of the mapping for F32, and for
  // BF16/F16 matrices; vectors and F64 as float32 copies.
  torch::Tensor load(const std::string& name, const std::vector<int64_t>& expected) const {
    const SafetensorsFile& file = ck_.fileFor(name);
    const SafetensorsEntry& e = file.entry(name);
    if (e.shape != expected)
      throw InputError(file.path(), name,
                       "shape " + shapeString(e.shape) + " does not match the config, which needs " +
                           shapeString(expected) + " (config: " + ck_.config().sourceFile + ")");
    return toFloat(file, e);
  }

  // Like load(), but only the first dimension may be larger (padded vocabulary rows).
  torch::Tensor loadRows(const std::string& name, int64_t minRows, int64_t cols) const {
    const SafetensorsFile& file = ck_.fileFor(name);
    const SafetensorsEntry& e = file.entry(name);
    if (e.shape.size() != 2 || e.shape[1] != cols || e.shape[0] < minRows)
      throw InputError(file.path(), name,
                       "shape " + shapeString(e.shape) + " does not fit the config, which needs [" +
                           std::to_string(minRows) + " (or more), " + std::to_string(cols) +
                           "] (vocab_size " + std::to_string(minRows) +
                           ", config: " + ck_.config().sourceFile + ")");
    return toFloat(file, e);
  }

  torch::Tensor optional(const std::string& name, const std::vector<int64_t>& expected) const {
    return ck_.contains(name) ? load(name, expected) : torch::Tensor();
  }

 private:
  static torch::Tensor toFloat(const SafetensorsFile& file, const SafetensorsEntry& e) {
    void* p = const_cast<uint8_t*>(file.bytes(e));
    torch::ScalarType st;
    switch (e.dtype) {
      case SafetensorsDtype::F32: st = torch::kFloat; break;
      case SafetensorsDtype::F16: st = torch::kHalf; break;
      case SafetensorsDtype::BF16: st = torch::kBFloat16; break;
      case SafetensorsDtype::F64: st = torch::kDouble; break;
      default:
        throw InputError(file.path(), e.name,
                         "dtype " + safetensorsDtypeName(e.dtype) + " is not a float weight type");
    }
    auto t = torch::from_blob(p, e.shape, torch::TensorOptions().dtype(st));
    const bool aligned = reinterpret_cast<uintptr_t>(p) % safetensorsDtypeSize(e.dtype) == 0;
    const bool keep = st == torch::kFloat || ((st == torch::kHalf || st == torch::kBFloat16) &&
                                              e.shape.size() >= 2);
    if (keep) return aligned ? t : t.clone();  // zero-copy view of the mapping
    return t.to(torch::kFloat);
  }
  const Checkpoint& ck_;
};

}  // namespace

uint64_t ModelImpl::weightBytes() const {
  uint64_t n = 0;
  for (const auto& name : checkpoint->tensorNames()) {
    const auto& e = checkpoint->entry(name);
    n += e.end - e.begin;
  }
  return n;
}

MemoryNeed ModelImpl::forwardMemory(int64_t B, int64_t s, int64_t t) const {
  const ModelConfig& c = config;
  const auto f = [](int64_t n) { return static_cast<uint64_t>(n) * sizeof(float); };
  const int64_t rows = B * s;
  MemoryNeed m;
  m.weights = weightBytes();
  // Live at once in the widest step: the residual stream and a few [B, s, H] temporaries,
  // q/k/v, repeated K/V, scores + probabilities + mask, the MLP's [B, s, I] temporaries,
  // the logits, and the blocked-upcast buffer.
  m.activations = f(6 * rows * c.hiddenSize) + f(rows * (c.numHeads + 2 * c.numKvHeads) * c.headDim) +
                  f(2 * B * c.numHeads * t * c.headDim) + f(3 * B * c.numHeads * s * t) +
                  static_cast<uint64_t>(B * s * t) + f(4 * rows * c.intermediateSize) +
                  f(rows * c.vocabSize) + (16u << 20);
  return m;
}

void ModelImpl::loadWeights() {
  const ModelConfig& c = config;
  TensorLoader L(*checkpoint);
  const int64_t H = c.hiddenSize, I = c.intermediateSize, d = c.headDim;
  const int64_t nh = c.numHeads, nkv = c.numKvHeads;
  // The config's layer count must be backed by tensors before anything is sized by it (a
  // wrong num_hidden_layers would otherwise ask for billions of layer slots).
  const bool gpt2 = c.architecture == Architecture::Gpt2;
  const std::string lastLayer =
      (gpt2 ? "transformer.h." : "model.layers.") + std::to_string(c.numLayers - 1) + ".";
  const auto names = checkpoint->tensorNames();
  if (std::none_of(names.begin(), names.end(),
                   [&](const std::string& n) { return n.rfind(lastLayer, 0) == 0; }))
    throw InputError(c.sourceFile, gpt2 ? "n_layer" : "num_hidden_layers",
                     std::to_string(c.numLayers) + " layers, but the weights hold no '" +
                         lastLayer + "*' tensors (" + checkpoint->directory() + ")");
  layers.resize(static_cast<size_t>(c.numLayers));
  byName.clear();
  auto track = [&](const std::string& name, torch::Tensor& t) {
    if (t.defined()) byName[name] = &t;
  };
  if (c.architecture == Architecture::Gpt2) {
    embed = L.loadRows("transformer.wte.weight", c.vocabSize, H);
    track("transformer.wte.weight", embed);
    posEmbed = L.load("transformer.wpe.weight", {c.maxPositions, H});
    track("transformer.wpe.weight", posEmbed);
    for (int64_t i = 0; i < c.numLayers; ++i) {
      auto& w = layers[static_cast<size_t>(i)];
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      struct Item { const char* suffix; torch::Tensor* t; std::vector<int64_t> shape; };
      std::vector<Item> items = {
          {"ln_1.weight", &w.ln1W, {H}}, {"ln_1.bias", &w.ln1B, {H}},
          {"attn.c_attn.weight", &w.cAttnW, {H, 3 * H}}, {"attn.c_attn.bias", &w.cAttnB, {3 * H}},
          {"attn.c_proj.weight", &w.cProjW, {H, H}}, {"attn.c_proj.bias", &w.cProjB, {H}},
          {"ln_2.weight", &w.ln2W, {H}}, {"ln_2.bias", &w.ln2B, {H}},
          {"mlp.c_fc.weight", &w.fcW, {H, I}}, {"mlp.c_fc.bias", &w.fcB, {I}},
          {"mlp.c_proj.weight", &w.projW, {I, H}}, {"mlp.c_proj.bias", &w.projB, {H}}};
      for (auto& it : items) {
        *it.t = L.load(p + it.suffix, it.shape);
        track(p + it.suffix, *it.t);
      }
    }
    finalW = L.load("transformer.ln_f.weight", {H});
    finalB = L.load("transformer.ln_f.bias", {H});
    track("transformer.ln_f.weight", finalW);
    track("transformer.ln_f.bias", finalB);
    if (!c.tieWordEmbeddings && checkpoint->contains("lm_head.weight")) {
      lmHead = L.loadRows("lm_head.weight", c.vocabSize, H);
      track("lm_head.weight", lmHead);
    } else {
      lmHead = embed;
    }
  } else {
    embed = L.loadRows("model.embed_tokens.weight", c.vocabSize, H);
    track("model.embed_tokens.weight", embed);
    for (int64_t i = 0; i < c.numLayers; ++i) {
      auto& w = layers[static_cast<size_t>(i)];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      struct Item { std::string name; torch::Tensor* t; std::vector<int64_t> shape; bool required; };
      std::vector<Item> items = {
          {"input_layernorm.weight", &w.ln1W, {H}, true},
          {"post_attention_layernorm.weight", &w.ln2W, {H}, true},
          {"self_attn.q_proj.weight", &w.qW, {nh * d, H}, true},
          {"self_attn.k_proj.weight", &w.kW, {nkv * d, H}, true},
          {"self_attn.v_proj.weight", &w.vW, {nkv * d, H}, true},
          {"self_attn.o_proj.weight", &w.oW, {H, nh * d}, true},
          {"self_attn.q_proj.bias", &w.qB, {nh * d}, c.qkvBias},
          {"self_attn.k_proj.bias", &w.kB, {nkv * d}, c.qkvBias},
          {"self_attn.v_proj.bias", &w.vB, {nkv * d}, c.qkvBias},
          {"self_attn.o_proj.bias", &w.oB, {H}, c.outputProjBias},
          {"self_attn.q_norm.weight", &w.qNormW, {d}, c.qkNorm},
          {"self_attn.k_norm.weight", &w.kNormW, {d}, c.qkNorm},
          {"mlp.gate_proj.weight", &w.gateW, {I, H}, true},
          {"mlp.up_proj.weight", &w.upW, {I, H}, true},
          {"mlp.down_proj.weight", &w.downW, {H, I}, true},
          {"mlp.gate_proj.bias", &w.gateB, {I}, c.mlpBias},
          {"mlp.up_proj.bias", &w.upB, {I}, c.mlpBias},
          {"mlp.down_proj.bias", &w.downB, {H}, c.mlpBias}};
      for (auto& it : items) {
        *it.t = it.required ? L.load(p + it.name, it.shape) : L.optional(p + it.name, it.shape);
        track(p + it.name, *it.t);
      }
    }
    finalW = L.load("model.norm.weight", {H});
    track("model.norm.weight", finalW);
    if (checkpoint->contains("lm_head.weight")) {
      lmHead = L.loadRows("lm_head.weight", c.vocabSize, H);
      track("lm_head.weight", lmHead);
    } else if (c.tieWordEmbeddings) {
      lmHead = embed;
    } else {
      checkpoint->fileFor("lm_head.weight");  // throws: missing tensor, names the file
    }
    rope = std::make_unique<detail::RotaryEmbedding>(c);
  }
  layerWindows.assign(static_cast<size_t>(c.numLayers), 0);
  for (int64_t i = 0; i < c.numLayers; ++i)
    if (c.isSlidingLayer(i)) layerWindows[static_cast<size_t>(i)] = c.slidingWindow;
}

}  // namespace kvscope
