// Qwen3.5-MoE text (`qwen3_5_moe_text`; a `qwen3_5_moe` checkpoint's text_config): the Qwen3.5
// layers (GatedDeltaNetKit.hpp: Gated DeltaNets with separate in_proj_qkv / _z / _b / _a and
// output-gated full attention by layer_types, zero-centred norms, partial rotary 0.25, two KV
// heads by default) with a sparse mixture of experts on every layer: softmax router (mlp.gate),
// the num_experts_per_tok most probable experts always renormalised, each a gated MLP of
// moe_intermediate_size, beside a shared expert of shared_expert_intermediate_size scaled by
// sigmoid(shared_expert_gate x). Unlike Qwen3-Next no layer is dense: transformers'
// Qwen3_5MoeTextConfig has no decoder_sparse_step, mlp_only_layers or norm_topk_prob (a config
// may still carry them, Qwen3-Next style); one that says otherwise than transformers runs (a
// dense layer, unnormalised weights) is refused naming the key. Absent keys take
// Qwen3_5MoeTextConfig's defaults.
// transformers: models/qwen3_5_moe/modeling_qwen3_5_moe.py.
#include <algorithm>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/GatedDeltaNetKit.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

constexpr int64_t kQwen35MoeDemoExperts = 4, kQwen35MoeDemoTopK = 2;

class Qwen3_5MoeFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen3_5Moe; }
  std::string modelType() const override { return "qwen3_5_moe_text"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    // No dense MLP: intermediate_size (absent) stands for the shared expert's width.
    readGatedDeltaNetConfig(r, c, "Qwen3.5-MoE", /*kvHeads=*/2,
                            std::max<int64_t>(1, r.intOr("shared_expert_intermediate_size", 512)));
    // Keys transformers' Qwen3.5-MoE ignores: accepted where they say what it does.
    const std::string ignored = "transformers' Qwen3.5-MoE ignores this key: every layer is sparse and its top-k "
                                "weights are renormalised, so a checkpoint that expects ";
    if (r.intOr("decoder_sparse_step", 1) != 1)
      throw InputError(r.file(), "decoder_sparse_step", ignored + "dense layers would not run as written");
    if (!r.intList("mlp_only_layers").empty())
      throw InputError(r.file(), "mlp_only_layers", ignored + "dense layers would not run as written");
    if (!r.boolOr("norm_topk_prob", true))
      throw InputError(r.file(), "norm_topk_prob", ignored + "unnormalised weights would not run as written");
    MoeConfig& m = c.moe;
    readExpertCounts(r, m, "num_experts", "num_local_experts", 256, 8);
    if (m.numExperts == 0)
      throw InputError(r.file(), "num_experts", "Qwen3.5-MoE needs at least one expert (every layer is sparse)");
    m.intermediateSize = r.intOr("moe_intermediate_size", 512);
    r.checkSize("moe_intermediate_size", m.intermediateSize, limits::kIntermediateSize);
    m.normTopK = true;
    m.layers.assign(static_cast<size_t>(c.numLayers), true);
    readQwenSharedExpert(r, c, 512);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      addDeltaNetWeightNames(w, /*fused=*/false);
      addQwenSharedExpertMoeNames(w);
      return w;
    }();
    return n;
  }

  // make-demo: the Qwen3.5 demo's layers with 4 experts (2 per token) half the dense MLP's width
  // beside a gated shared expert of its width on every layer.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen3_5MoeForCausalLM"});
    c["model_type"] = "qwen3_5_moe_text";
    c.erase("intermediate_size");  // not a Qwen3_5MoeTextConfig key
    addDeltaNetDemoConfig(c, s);
    c["num_experts"] = kQwen35MoeDemoExperts;
    c["num_experts_per_tok"] = kQwen35MoeDemoTopK;
    c["moe_intermediate_size"] = demoExpertWidth(s);
    c["shared_expert_intermediate_size"] = s.intermediateSize;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    const WeightNames& n = weightNames();
    return withQwenSharedExperts(
        s, n,
        moeDemoTensors(s, n, deltaNetDemoTensors(s, n, hfDecoderDemoTensors(s, n, false, false, true, false)),
                       kQwen35MoeDemoExperts, demoExpertWidth(s), {}),
        kQwen35MoeDemoExperts);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustDeltaNetDemoSpec(s); }

  void validateDemoSpec(const CheckpointSpec& s) const override { validateDeltaNetDemoSpec(s); }
};

}  // namespace

const ModelFamily& qwen3_5MoeFamily() {
  static const Qwen3_5MoeFamily f;
  return f;
}

}  // namespace kvscope
