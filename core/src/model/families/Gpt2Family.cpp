// GPT-2 (`gpt2`): learned positions, LayerNorm with bias, Conv1D weights stored [in, out], one
// fused q|k|v projection, a plain GELU MLP, scores divided by sqrt(d) (and optionally by the
// layer index + 1). transformers: models/gpt2/modeling_gpt2.py.
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
