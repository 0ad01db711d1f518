// Phi-3 and Phi-4-mini (`phi3`): the Llama block with one fused q|k|v projection
// (self_attn.qkv_proj) and one fused gate|up projection (mlp.gate_up_proj, gate first), no
// biases, partial rotary (`partial_rotary_factor`, Phi-4-mini 0.75), a `sliding_window` on
// every layer when set. transformers: models/phi3/modeling_phi3.py.
#include <cmath>

#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class Phi3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Phi3; }
  std::string modelType() const override { return "phi3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{0, 0, 10000.0, 4096});  // Phi3Config's original context
    c.qkvBias = c.outputProjBias = false;
    c.recipe.fusedQkv = true;
    c.recipe.fusedGateUp = true;
    const int64_t window = r.intOr("sliding_window", 0);
    if (window <= 0) return;
    c.slidingWindow = window;
    c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    readLayerTypes(r, c, window);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.q = w.k = w.v = w.qBias = w.kBias = w.vBias = w.oBias = "";
      w.qkv = "self_attn.qkv_proj.weight";
      w.gate = w.up = w.gateBias = w.upBias = w.downBias = "";
      w.gateUp = "mlp.gate_up_proj.weight";
      return w;
    }();
    return n;
  }

  // The demo rotates half of each head (Phi-4-mini's kind of partial rotary).
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Phi3ForCausalLM"});
    c["model_type"] = "phi3";
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    c["original_max_position_embeddings"] = s.maxPositions;
    if (c.contains("rope_parameters"))
      c["rope_parameters"]["partial_rotary_factor"] = 0.5;
    else
      c["partial_rotary_factor"] = 0.5;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    using Init = CheckpointWriter::Init;
    const WeightNames& n = weightNames();
    const int64_t H = s.hiddenSize, I = s.intermediateSize, D = s.resolvedHeadDim();
    const int64_t qkv = (s.numHeads + 2 * s.numKvHeads) * D;
    std::vector<CheckpointWriter::TensorPlan> p;
    p.push_back({n.embed, {s.vocabSize, H}, Init::Normal, s.initStd});
    for (int64_t i = 0; i < s.numLayers; ++i) {
      p.push_back({n.layer(i, n.qkv), {qkv, H}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.o), {H, s.numHeads * D}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.gateUp), {2 * I, H}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.down), {H, I}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.attnNorm), {H}, Init::NormWeight, 0.0});
      p.push_back({n.layer(i, n.mlpNorm), {H}, Init::NormWeight, 0.0});
    }
    p.push_back({n.finalNorm, {H}, Init::NormWeight, 0.0});
    if (!s.tieWordEmbeddings) p.push_back({n.lmHead, {s.vocabSize, H}, Init::Normal, s.initStd});
    return p;
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.headDim = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    require(s.headDim == 0, "head_dim", "Phi-3 derives head_dim from hidden_size / heads");
    require(s.resolvedHeadDim() % 4 == 0, "head_dim",
            "the Phi-3 demo rotates half of each head, which needs a head_dim divisible by 4");
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& phi3Family() {
  static const Phi3Family f;
  return f;
}

}  // namespace kvscope
