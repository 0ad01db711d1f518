// A model family: one file per family under families/ reads its config.json keys, names its
// checkpoint tensors and says which pieces of the shared kit its block is made of
// (ModelConfig::recipe). The loader and the forward compose the block from the kit by the
// recipe; no shared code asks which family a model is. Torch-free (the parser fuzz build
// compiles it). Adding a family: its file, its Architecture value, its line in
// FamilyRegistry.cpp, its fixtures (tests/fixtures/families) and its line in the docs.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope {

class ConfigReader;

/// Where a family keeps its tensors: full names of the model-wide ones, and per-layer
/// suffixes after `layerPrefix` + the layer index + ".". Empty: the family has no such tensor.
struct WeightNames {
  std::string embed, positionEmbed, finalNorm, finalNormBias, lmHead;
  std::string layerPrefix;                  // e.g. "model.layers."
  std::string attnNorm, attnNormBias, mlpNorm, mlpNormBias;  // before each sublayer (pre-norm)
  std::string postAttnNorm, postMlpNorm;    // on each sublayer's output (OLMo 2, Gemma)
  std::string qkv, qkvBias;                 // a fused projection (recipe.fusedQkv)
  std::string q, qBias, k, kBias, v, vBias;
  std::string o, oBias;
  std::string qNorm, kNorm;                 // q/k RMSNorm weights (config.qkNorm)
  // Latent attention (config.mla): the query LoRA q_a [Rq, H] (+ bias), its norm [Rq] and q_b
  // [nh (nope + rope), Rq] (or q above without the LoRA); kv_a [Rkv + rope, H] (+ bias), its
  // norm [Rkv], kv_b [nh (nope + v), Rkv].
  std::string qA, qABias, qANorm, qB, kvA, kvABias, kvANorm, kvB;
  std::string sinks;                        // per-head attention sinks (config.attentionSinks)
  std::string gate, gateBias, up, upBias, down, downBias;
  std::string gateUp;                       // a fused gate|up projection (recipe.fusedGateUp)
  // A MoE layer (config.moe): the router [E, H], and expert e's gated MLP under
  // expertPrefix + e + "." + expertGate / expertUp / expertDown.
  std::string router, expertPrefix, expertGate, expertUp, expertDown;
  std::string routerBias;
  std::string routerScoreBias;              // DeepSeek's e_score_correction_bias [E]: added to
                                            // the scores that choose, not to the weights
  // Stacked experts (MoeConfig::Expert::ClampedGlu): one [E, in, out] tensor for every
  // expert's interleaved gate|up product and one for the down products, each with a bias [E, out].
  std::string stackedGateUp, stackedGateUpBias, stackedDown, stackedDownBias;
  // A shared expert beside the routed ones (MoeConfig::sharedIntermediateSize): a gated MLP.
  std::string sharedGate, sharedUp, sharedDown;
  // A Gated DeltaNet layer (ModelConfig::deltaNet) in the attention's place: q|k|v [C, H], the
  // output gate z [Vd, H], b and a [Hv, H], the causal conv [C, 1, K], A_log and dt_bias [Hv],
  // the output norm [Dv], out_proj [H, Vd]. Qwen3-Next fuses q|k|v|z and b|a per key-head
  // group instead (dnQkvz [2 Kd + 2 Vd, H], dnBa [2 Hv, H]).
  std::string dnQkv, dnZ, dnB, dnA, dnConv, dnALog, dnDtBias, dnNorm, dnOut;
  std::string dnQkvz, dnBa;
  // Qwen3-Next: the sigmoid gate [1, H] on the shared expert's output (MoeConfig::sharedExpertGate).
  std::string sharedExpertGate;
  std::string expert(int64_t layer, int64_t e, const std::string& suffix) const {
    return this->layer(layer, expertPrefix + std::to_string(e) + "." + suffix);
  }
  /// layerPrefix + layer + "." + suffix.
  std::string layer(int64_t layer, const std::string& suffix) const {
    return layerPrefix + std::to_string(layer) + "." + suffix;
  }
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual Architecture architecture() const = 0;
  /// The config.json `model_type` this family loads.
  virtual std::string modelType() const = 0;
  /// Reads the family's keys into `c` (sizes, norms, RoPE, windows, biases, the recipe);
  /// ModelConfig::fromJson has read model_type, dtype, vocab_size and the special tokens.
  /// Throws InputError naming the file and the key.
  virtual void readConfig(const ConfigReader& r, ModelConfig& c) const = 0;
  virtual const WeightNames& weightNames() const = 0;
  /// The config key the number of layers is read from (for the loader's error message).
  virtual const char* layerCountKey() const = 0;
  // -- make-demo: a random checkpoint of the family, as save_pretrained writes it

  /// The family's config.json keys for `spec` (hf::configJson adds the shared ones: vocab,
  /// special tokens, dtype, tie, init range, version).
  virtual nlohmann::json demoConfig(const CheckpointSpec& spec) const = 0;
  /// The tensors transformers' state_dict lists, in its order (the writer draws them so).
  virtual std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& spec) const = 0;
  /// tokenizer_config.json's tokenizer_class for the demo's byte-level BPE tokenizer.
  virtual std::string demoTokenizerClass() const { return "PreTrainedTokenizerFast"; }
  /// Sets the fields the family fixes when a spec switches to it (GPT-2: kv heads = heads,
  /// tied, no window, default RoPE).
  virtual void adjustDemoSpec(CheckpointSpec& spec) const = 0;
  /// Throws UsageError naming a field the family cannot have.
  virtual void validateDemoSpec(const CheckpointSpec& spec) const = 0;
  /// What make-demo's --sliding-window means for the family (a window on every layer, or
  /// the window switched on from max_window_layers).
  virtual void setDemoWindow(CheckpointSpec& spec, int64_t window) const { spec.slidingWindow = window; }

  /// The tensor whose noise a stale_cache weight update adds to layer `layer`'s keys.
  std::string keyProjection(int64_t layer) const {
    const WeightNames& n = weightNames();
    return n.layer(layer, !n.kvA.empty() ? n.kvA : n.k.empty() ? n.qkv : n.k);
  }

 protected:
  static void require(bool ok, const std::string& field, const std::string& what) {
    if (!ok) throw UsageError("checkpoint spec: " + field + ": " + what);
  }
};

/// Every family, in the order --help and errors list them.
const std::vector<const ModelFamily*>& modelFamilies();
/// The family loading `modelType`, or nullptr.
const ModelFamily* familyForModelType(const std::string& modelType);
/// The family of `a` (every Architecture has one).
const ModelFamily& familyOf(Architecture a);

}  // namespace kvscope
