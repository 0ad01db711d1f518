#include "gguf/GgufModelView.hpp"

#include <algorithm>

#include "gguf/GgmlBlocks.hpp"
#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {

// The GGUF architectures whose tensors are the HF decoder's one for one (llama.cpp's
// LLM_ARCH_LLAMA, _QWEN2, _QWEN3), and whether the converter permuted their q/k rows
// (LlamaModel.permute; the Qwen models rotate NeoX-style in llama.cpp and keep HF's order).
// A GGUF file loads as the first entry of its architecture; the later ones are the HF
// families the converter writes as an earlier one's architecture (MistralModel is a
// LlamaModel). Gemma 2 and 3 (conversion/gemma.py: no permutation; llama.cpp's iswa cache)
// are read from their sequence states only: their GGUF tensors are not mapped here.
constexpr LlamaCppArchitecture kGgufArchitectures[] = {
    {"llama", "llama", true},
    {"qwen2", "qwen2", false},
    {"qwen3", "qwen3", false},
    {"llama", "mistral", true},
    {"gemma2", "gemma2", false, false},
    {"gemma3", "gemma3_text", false, false},
};

// GGUF tensor name (after "blk.N.") -> the HF decoder layer's tensor name.
const std::pair<const char*, const char*> kLayerTensors[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

const std::pair<const char*, const char*> kModelTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// The entry a GGUF file of architecture `gguf` loads as: its first.
const LlamaCppArchitecture* llamaCppArchitectureOfGguf(const std::string& gguf) {
  for (const auto& a : kGgufArchitectures)
    if (a.weights && gguf == a.gguf) return &a;
  return nullptr;
}

}  // namespace

std::string GgufModelView::supportedArchitectures() {
  std::string s;
  // An architecture once, however many HF families it stands for.
  for (const auto& a : kGgufArchitectures)
    if (a.weights && llamaCppArchitectureOfGguf(a.gguf) == &a) s += (s.empty() ? "" : ", ") + std::string(a.gguf);
  return s;
}

const LlamaCppArchitecture* llamaCppArchitectureOf(const std::string& modelType) {
  for (const auto& a : kGgufArchitectures)
    if (modelType == a.modelType) return &a;
  return nullptr;
}

std::string llamaCppModelTypes() {
  std::string s;
  for (const auto& a : kGgufArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.modelType);
  return s;
}

GgufModelView::GgufModelView(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {
  const GgufFile& f = *file_;
  const std::string& arch = f.string("general.architecture");
  const LlamaCppArchitecture* a = llamaCppArchitectureOfGguf(arch);
  if (!a)
    throw InputError(f.path(), "general.architecture",
                     "'" + arch + "' is not an architecture KV Scope reads from GGUF (it reads " +
                         supportedArchitectures() + "); give the HuggingFace checkpoint it was converted from");
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key) {
    const GgufValue* v = f.find(key);
    if (v && v->kind == GgufValue::Kind::Array)
      throw InputError(f.path(), key, "differs per layer (an array); KV Scope reads one value for all layers");
    const int64_t n = f.integer(key);
    if (n <= 0) throw InputError(f.path(), key, "must be positive, not " + std::to_string(n));
    return n;
  };
  const int64_t hidden = positive(p + "embedding_length");
  const int64_t layers = positive(p + "block_count");
  const int64_t heads = positive(p + "attention.head_count");
  const int64_t kvHeads = f.find(p + "attention.head_count_kv") ? positive(p + "attention.head_count_kv") : heads;
  const int64_t headDim = f.find(p + "attention.key_length") ? positive(p + "attention.key_length") : hidden / heads;
  if (f.find(p + "attention.value_length") && positive(p + "attention.value_length") != headDim)
    throw InputError(f.path(), p + "attention.value_length", "differs from the key length; KV Scope reads one head width");
  if (f.find(p + "rope.dimension_count") && positive(p + "rope.dimension_count") != headDim)
    throw InputError(f.path(), p + "rope.dimension_count", "rotates part of the head; the " + arch +
                                                               " architecture rotates all " + std::to_string(headDim) + " features");
  if (const GgufTensorInfo* t = f.tensor("rope_freqs.weight")) {  // Llama 3's scaling, per frequency
    if (t->type != kGgmlF32 || t->dims.size() != 1 || t->dims[0] != headDim / 2)
      throw InputError(f.path(), "rope_freqs.weight",
                       "expected F32 [" + std::to_string(headDim / 2) + "] (one factor per rotary frequency), found " +
                           ggmlTypeName(t->type) + " with " + std::to_string(t->numel()) + " values");
    const auto* p4 = reinterpret_cast<const float*>(f.bytes(*t));
    for (int64_t i = 0; i < t->dims[0]; ++i) {
      if (!(p4[i] > 0.0f)) throw InputError(f.path(), "rope_freqs.weight", "factor " + std::to_string(i) + " is not positive");
      frequencyFactors_.push_back(p4[i]);
    }
  }

  nlohmann::json c;
  c["model_type"] = a->modelType;
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kvHeads;
  c["head_dim"] = headDim;
  c["intermediate_size"] = positive(p + "feed_forward_length");
  c["max_position_embeddings"] = positive(p + "context_length");
  c["rms_norm_eps"] = f.number(p + "attention.layer_norm_rms_epsilon");
  c["rope_theta"] = f.find(p + "rope.freq_base") ? f.number(p + "rope.freq_base") : 10000.0;
  c["hidden_act"] = "silu";
  if (const GgufValue* t = f.find(p + "rope.scaling.type"); t && t->kind == GgufValue::Kind::String && t->s != "none") {
    if (t->s != "linear")
      throw InputError(f.path(), p + "rope.scaling.type", "'" + t->s + "' scaling is not read from GGUF yet (linear is)");
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", f.number(p + "rope.scaling.factor")}};
  }
  if (f.find("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = f.integer("tokenizer.ggml.bos_token_id");
  if (f.find("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = f.integer("tokenizer.ggml.eos_token_id");

  // Tensors: HF names, HF shapes (dimensions reversed).
  auto add = [&](const GgufTensorInfo& t, const std::string& hf, int64_t permuted) {
    GgufWeight w{&t, std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()), permuted};
    if (permuted && (w.shape[0] % (2 * permuted) != 0))
      throw InputError(f.path(), t.name, "its " + std::to_string(w.shape[0]) + " rows do not split into " +
                                             std::to_string(permuted) + " heads of rotary pairs");
    weights_[hf] = std::move(w);
  };
  for (const GgufTensorInfo& t : f.tensors()) {
    for (const auto& [g, hf] : kModelTensors)
      if (t.name == g) add(t, hf, 0);
    if (t.name.rfind("blk.", 0) != 0) continue;
    const size_t dot = t.name.find('.', 4);
    if (dot == std::string::npos) continue;
    const std::string layer = t.name.substr(4, dot - 4);
    if (layer.empty() || layer.size() > 6 || !std::all_of(layer.begin(), layer.end(), ::isdigit)) continue;
    const std::string rest = t.name.substr(dot + 1);
    for (const auto& [g, hf] : kLayerTensors) {
      if (rest != g) continue;
      const int64_t permuted = !a->permutesQk                  ? 0
                               : rest == "attn_q.weight" || rest == "attn_q.bias" ? heads
                               : rest == "attn_k.weight" || rest == "attn_k.bias" ? kvHeads
                                                                                  : 0;
      add(t, "model.layers." + layer + "." + hf, permuted);
    }
  }
  if (!weights_.count("model.embed_tokens.weight"))
    throw InputError(f.path(), "token_embd.weight", "missing tensor (the token embedding)");
  c["vocab_size"] = weights_["model.embed_tokens.weight"].shape[0];
  c["tie_word_embeddings"] = !weights_.count("lm_head.weight");
  c["attention_bias"] = weights_.count("model.layers.0.self_attn.q_proj.bias") > 0;
  config_ = std::move(c);
}

}  // namespace kvscope::detail
