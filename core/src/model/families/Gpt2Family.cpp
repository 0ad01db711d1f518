// GPT-2 (`gpt2`): learned positions, LayerNorm with bias, Conv1D weights stored [in, out], one
// fused q|k|v projection, a plain GELU MLP, scores divided by sqrt(d) (and optionally by the
// layer index + 1). transformers: models/gpt2/modeling_gpt2.py.
#include <cmath>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

class Gpt2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Gpt2; }
  std::string modelType() const override { return "gpt2"; }
  const char* layerCountKey() const override { return "n_layer"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    const std::string& file = r.file();
    c.hiddenSize = r.requireSize("n_embd", limits::kHiddenSize);
    c.numHeads = r.requireSize("n_head", limits::kHeads);
    c.numLayers = r.requireSize("n_layer", limits::kLayers);
    c.maxPositions = r.requireSize("n_positions", limits::kPositions);
    if (c.hiddenSize % c.numHeads != 0)
      throw InputError(file, "n_head", "n_embd " + std::to_string(c.hiddenSize) +
                                           " is not divisible by n_head " + std::to_string(c.numHeads));
    c.numKvHeads = c.numHeads;
    c.headDim = c.hiddenSize / c.numHeads;
    c.intermediateSize = r.intOr("n_inner", 4 * c.hiddenSize);  // hidden <= 2^20: no overflow
    r.checkSize("n_inner", c.intermediateSize, limits::kIntermediateSize);
    c.normEps = r.doubleOr("layer_norm_epsilon", 1e-5);
    c.activation = r.activation("activation_function", "gelu_new");
    c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", true);
    c.qkvBias = c.outputProjBias = c.mlpBias = true;
    c.scaleAttnByInverseLayerIdx = r.boolOr("scale_attn_by_inverse_layer_idx", false);
    if (!r.boolOr("scale_attn_weights", true))
      throw InputError(file, "scale_attn_weights", "only true is supported");
    c.recipe.norm = BlockRecipe::Norm::LayerNorm;
    c.recipe.positions = BlockRecipe::Positions::Learned;
    c.recipe.layout = BlockRecipe::Layout::Conv1d;
    c.recipe.fusedQkv = true;
    c.recipe.mlp = BlockRecipe::Mlp::Plain;
    c.recipe.divideScoresBySqrtD = true;
    c.slidingLayers.assign(static_cast<size_t>(c.numLayers), false);
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    using nlohmann::json;
  json c = json::object();
  c["activation_function"] = "gelu_new";
  c["add_cross_attention"] = false;
  c["architectures"] = json::array({"GPT2LMHeadModel"});
  c["attn_pdrop"] = 0.1;
  c["embd_pdrop"] = 0.1;
  c["layer_norm_epsilon"] = s.normEps > 0 ? s.normEps : 1e-05;
  c["model_type"] = "gpt2";
  c["n_embd"] = s.hiddenSize;
  c["n_head"] = s.numHeads;
  c["n_inner"] = s.intermediateSize == 4 * s.hiddenSize ? json(nullptr) : json(s.intermediateSize);
  c["n_layer"] = s.numLayers;
  c["n_positions"] = s.maxPositions;
  c["reorder_and_upcast_attn"] = false;
  c["resid_pdrop"] = 0.1;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["scale_attn_weights"] = true;
  c["summary_activation"] = nullptr;
  c["summary_first_dropout"] = 0.1;
  c["summary_proj_to_labels"] = true;
  c["summary_type"] = "cls_index";
  c["summary_use_proj"] = true;
  return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    using Init = CheckpointWriter::Init;
    const WeightNames& n = weightNames();
    const int64_t H = s.hiddenSize, I = s.intermediateSize;
    const double bias = CheckpointWriter::kBiasFraction * s.initStd;
    // transformers scales residual projections by 1/sqrt(2 * n_layer) at init.
    const double proj = s.initStd / std::sqrt(2.0 * static_cast<double>(s.numLayers));
    std::vector<CheckpointWriter::TensorPlan> p;
    p.push_back({n.embed, {s.vocabSize, H}, Init::Normal, s.initStd});
    p.push_back({n.positionEmbed, {s.maxPositions, H}, Init::Normal, s.initStd});
    for (int64_t i = 0; i < s.numLayers; ++i) {
      p.push_back({n.layer(i, n.attnNorm), {H}, Init::NormWeight, 0.0});
      p.push_back({n.layer(i, n.attnNormBias), {H}, Init::Bias, bias});
      p.push_back({n.layer(i, n.qkv), {H, 3 * H}, Init::Normal, s.initStd});  // Conv1D [in, out]
      p.push_back({n.layer(i, n.qkvBias), {3 * H}, Init::Bias, bias});
      p.push_back({n.layer(i, n.o), {H, H}, Init::Normal, proj});
      p.push_back({n.layer(i, n.oBias), {H}, Init::Bias, bias});
      p.push_back({n.layer(i, n.mlpNorm), {H}, Init::NormWeight, 0.0});
      p.push_back({n.layer(i, n.mlpNormBias), {H}, Init::Bias, bias});
      p.push_back({n.layer(i, n.up), {H, I}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.upBias), {I}, Init::Bias, bias});
      p.push_back({n.layer(i, n.down), {I, H}, Init::Normal, proj});
      p.push_back({n.layer(i, n.downBias), {H}, Init::Bias, bias});
    }
    p.push_back({n.finalNorm, {H}, Init::NormWeight, 0.0});
    p.push_back({n.finalNormBias, {H}, Init::Bias, bias});
    return p;  // GPT-2 ties lm_head to wte: save_pretrained does not store it
  }

  std::string demoTokenizerClass() const override { return "GPT2Tokenizer"; }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.numKvHeads = s.numHeads;
    s.headDim = 0;
    s.tieWordEmbeddings = true;
    s.attentionBias = false;
    s.slidingWindow = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
    s.ropeType = "default";
    s.ropeFactor = 1.0;
    s.ropeOriginalMaxPositions = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    require(s.numKvHeads == s.numHeads, "num_kv_heads", "GPT-2 has no grouped-query attention");
    require(s.headDim == 0, "head_dim", "GPT-2 derives head_dim from n_embd / n_head");
    require(s.tieWordEmbeddings, "tie_word_embeddings", "GPT-2 checkpoints are always tied");
    require(s.slidingWindow == 0, "sliding_window", "GPT-2 has no sliding window");
    require(s.ropeType == "default", "rope_type", "GPT-2 uses learned positions, not RoPE");
    require(!s.attentionBias, "attention_bias", "GPT-2 always has biases; leave it false");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w;
      w.embed = "transformer.wte.weight";
      w.positionEmbed = "transformer.wpe.weight";
      w.finalNorm = "transformer.ln_f.weight", w.finalNormBias = "transformer.ln_f.bias";
      w.lmHead = "lm_head.weight";
      w.layerPrefix = "transformer.h.";
      w.attnNorm = "ln_1.weight", w.attnNormBias = "ln_1.bias";
      w.mlpNorm = "ln_2.weight", w.mlpNormBias = "ln_2.bias";
      w.qkv = "attn.c_attn.weight", w.qkvBias = "attn.c_attn.bias";
      w.o = "attn.c_proj.weight", w.oBias = "attn.c_proj.bias";
      w.up = "mlp.c_fc.weight", w.upBias = "mlp.c_fc.bias";
      w.down = "mlp.c_proj.weight", w.downBias = "mlp.c_proj.bias";
      return w;
    }();
    return n;
  }
};

}  // namespace

const ModelFamily& gpt2Family() {
  static const Gpt2Family f;
  return f;
}

}  // namespace kvscope
