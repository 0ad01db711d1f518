#include "model/families/LatentAttentionKit.hpp"

#include <cmath>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

constexpr int64_t kDemoExperts = 4, kDemoGroups = 2, kDemoTopK = 2;

// Whether `key` is written as null (q_lora_rank null: no query LoRA), not merely absent.
bool writtenNull(const ConfigReader& r, const char* key) { return r.doc().contains(key) && r.doc()[key].is_null(); }

// yarn's attention temperature for a factor (transformers' yarn_get_mscale).
double yarnMscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

int64_t demoRopeDim(const CheckpointSpec& s) { return (s.resolvedHeadDim() / 2) & ~int64_t{1}; }

void demoRequire(bool ok, const std::string& field, const std::string& what) {
  if (!ok) throw UsageError("checkpoint spec: " + field + ": " + what);
}

}  // namespace

void readLatentAttentionConfig(const ConfigReader& r, ModelConfig& c, MlaConfig::RopePairs pairs) {
  MlaConfig m;
  m.ropeDim = r.intOr("qk_rope_head_dim", 64);
  r.checkSize("qk_rope_head_dim", m.ropeDim, limits::kHeadDim);
  if (m.ropeDim % 2 != 0)
    throw InputError(r.file(), "qk_rope_head_dim", "the roped part turns in pairs: must be even, found " +
                                                       std::to_string(m.ropeDim));
  // transformers sets head_dim to qk_rope_head_dim (the rotary embedding's width).
  readDecoderConfig(r, c, DecoderDefaults{0, m.ropeDim, 10000.0});
  m.nopeDim = r.intOr("qk_nope_head_dim", 128);
  r.checkSize("qk_nope_head_dim", m.nopeDim, limits::kHeadDim);
  m.valueDim = r.intOr("v_head_dim", 128);
  r.checkSize("v_head_dim", m.valueDim, limits::kHeadDim);
  m.kvLoraRank = r.intOr("kv_lora_rank", 512);
  r.checkSize("kv_lora_rank", m.kvLoraRank, limits::kHiddenSize);
  m.qLoraRank = writtenNull(r, "q_lora_rank") ? 0 : r.intOr("q_lora_rank", 1536);
  if (m.qLoraRank != 0) r.checkSize("q_lora_rank", m.qLoraRank, limits::kHiddenSize);
  m.ropePairs = pairs;
  if (c.rope.partialRotaryFactor != 1.0)
    throw InputError(r.file(), "partial_rotary_factor",
                     "DeepSeek rotates all qk_rope_head_dim features of its roped part; found " +
                         std::to_string(c.rope.partialRotaryFactor));
  if (c.rope.type != "default" && c.rope.mscaleAllDim != 0)
    m.scoreMscale = std::pow(yarnMscale(c.rope.factor, c.rope.mscaleAllDim), 2);
  c.mla = m;
  // The cache's geometry: one latent row (keys) and one roped key part (values) per token.
  c.numKvHeads = 1;
  c.headDim = m.kvLoraRank;
  c.valueHeadDim = m.ropeDim;
  c.attentionScale = m.scoreMscale / std::sqrt(static_cast<double>(m.queryDim()));
  c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
}

void readLatentMoe(const ConfigReader& r, ModelConfig& c, const LatentMoeDefaults& d, bool grouped,
                   int64_t minPerGroup) {
  MoeConfig& moe = c.moe;
  const std::string& file = r.file();
  readExpertCounts(r, moe, "n_routed_experts", "num_local_experts", d.experts, d.topK);
  moe.intermediateSize = r.intOr("moe_intermediate_size", d.width);
  r.checkSize("moe_intermediate_size", moe.intermediateSize, limits::kIntermediateSize);
  const int64_t shared = r.intOr("n_shared_experts", d.sharedExperts);
  r.checkSize("n_shared_experts", shared, limits::kLayers);
  moe.sharedIntermediateSize = moe.intermediateSize * shared;
  moe.routedScale = positiveNumber(r, "routed_scaling_factor", d.routedScale);
  if (grouped) {
    const char* missing = "missing: a group-limited routing needs it, and this family has no default";
    if (d.groups == 0 && !r.has("n_group")) throw InputError(file, "n_group", missing);
    moe.groups = r.intOr("n_group", d.groups);
    if (moe.groups <= 0 || moe.numExperts % moe.groups != 0)
      throw InputError(file, "n_group", std::to_string(moe.groups) + " groups do not divide n_routed_experts " +
                                            std::to_string(moe.numExperts));
    if (moe.numExperts / moe.groups < minPerGroup)
      throw InputError(file, "n_group", "each group needs at least " + std::to_string(minPerGroup) + " experts" +
                                            (minPerGroup > 1 ? " (a group's score is the sum of its two best)" : ""));
    if (d.topGroups == 0 && !r.has("topk_group")) throw InputError(file, "topk_group", missing);
    moe.topGroups = r.intOr("topk_group", d.topGroups);
    if (moe.topGroups <= 0 || moe.topGroups > moe.groups)
      throw InputError(file, "topk_group", std::to_string(moe.topGroups) + " must be in [1, n_group " +
                                               std::to_string(moe.groups) + "]");
    if (moe.topK > moe.topGroups * (moe.numExperts / moe.groups))
      throw InputError(file, "num_experts_per_tok",
                       std::to_string(moe.topK) + " experts per token, but the " + std::to_string(moe.topGroups) +
                           " chosen groups hold only " + std::to_string(moe.topGroups * (moe.numExperts / moe.groups)));
  }
  const int64_t dense = r.intOr("first_k_dense_replace", d.denseLayers);
  if (dense < 0) throw InputError(file, "first_k_dense_replace", "must not be negative");
  moe.layers.assign(static_cast<size_t>(c.numLayers), false);
  for (int64_t i = dense; i < c.numLayers; ++i) moe.layers[static_cast<size_t>(i)] = true;
}

WeightNames latentAttentionWeightNames(bool scoreBias) {
  WeightNames w = hfDecoderWeightNames();
  w.k = w.v = w.kBias = w.vBias = w.qBias = "";
  w.qA = "self_attn.q_a_proj.weight";
  w.qABias = "self_attn.q_a_proj.bias";
  w.qANorm = "self_attn.q_a_layernorm.weight";
  w.qB = "self_attn.q_b_proj.weight";
  w.kvA = "self_attn.kv_a_proj_with_mqa.weight";
  w.kvABias = "self_attn.kv_a_proj_with_mqa.bias";
  w.kvANorm = "self_attn.kv_a_layernorm.weight";
  w.kvB = "self_attn.kv_b_proj.weight";
  w.router = "mlp.gate.weight";
  if (scoreBias) w.routerScoreBias = "mlp.gate.e_score_correction_bias";
  w.expertPrefix = "mlp.experts.";
  w.expertGate = "gate_proj.weight";
  w.expertUp = "up_proj.weight";
  w.expertDown = "down_proj.weight";
  w.sharedGate = "mlp.shared_experts.gate_proj.weight";
  w.sharedUp = "mlp.shared_experts.up_proj.weight";
  w.sharedDown = "mlp.shared_experts.down_proj.weight";
  return w;
}

nlohmann::json latentAttentionDemoConfig(const CheckpointSpec& s) {
  const int64_t d = s.resolvedHeadDim();
  nlohmann::json c = hfDecoderDemoConfig(s);
  c["num_key_value_heads"] = s.numHeads;
  c["attention_bias"] = false;
  c["qk_rope_head_dim"] = demoRopeDim(s);
  c["head_dim"] = demoRopeDim(s);
  c["qk_nope_head_dim"] = d - demoRopeDim(s);
  c["v_head_dim"] = d;
  c["kv_lora_rank"] = 2 * d;
  c["q_lora_rank"] = s.hiddenSize / 2;
  c["n_routed_experts"] = kDemoExperts;
  c["n_group"] = kDemoGroups;
  c["topk_group"] = 1;
  c["num_experts_per_tok"] = kDemoTopK;
  c["n_shared_experts"] = 1;
  c["moe_intermediate_size"] = demoExpertWidth(s);
  c["first_k_dense_replace"] = 1;
  c["routed_scaling_factor"] = 2.5;
  return c;
}

std::vector<CheckpointWriter::TensorPlan> latentAttentionDemoTensors(const CheckpointSpec& s, const WeightNames& n) {
  using Init = CheckpointWriter::Init;
  const int64_t H = s.hiddenSize, I = s.intermediateSize, nh = s.numHeads, d = s.resolvedHeadDim();
  const int64_t rope = demoRopeDim(s), R = 2 * d, Q = H / 2, Im = demoExpertWidth(s);
  const double sd = s.initStd;
  std::vector<CheckpointWriter::TensorPlan> p;
  p.push_back({n.embed, {s.vocabSize, H}, Init::Normal, sd});
  for (int64_t i = 0; i < s.numLayers; ++i) {
    auto add = [&](const std::string& suffix, std::vector<int64_t> shape, Init init) {
      p.push_back({n.layer(i, suffix), std::move(shape), init, sd});
    };
    add(n.qA, {Q, H}, Init::Normal);
    add(n.qANorm, {Q}, Init::NormWeight);
    add(n.qB, {nh * d, Q}, Init::Normal);
    add(n.kvA, {R + rope, H}, Init::Normal);
    add(n.kvANorm, {R}, Init::NormWeight);
    add(n.kvB, {nh * (d - rope + d), R}, Init::Normal);
    add(n.o, {H, nh * d}, Init::Normal);
    if (i == 0) {
      add(n.gate, {I, H}, Init::Normal);
      add(n.up, {I, H}, Init::Normal);
      add(n.down, {H, I}, Init::Normal);
    } else {
      add(n.router, {kDemoExperts, H}, Init::Normal);
      if (!n.routerScoreBias.empty()) add(n.routerScoreBias, {kDemoExperts}, Init::Bias);
      for (int64_t e = 0; e < kDemoExperts; ++e) {
        const std::string ex = n.expertPrefix + std::to_string(e) + ".";
        add(ex + n.expertGate, {Im, H}, Init::Normal);
        add(ex + n.expertUp, {Im, H}, Init::Normal);
        add(ex + n.expertDown, {H, Im}, Init::Normal);
      }
      add(n.sharedGate, {Im, H}, Init::Normal);
      add(n.sharedUp, {Im, H}, Init::Normal);
      add(n.sharedDown, {H, Im}, Init::Normal);
    }
    add(n.attnNorm, {H}, Init::NormWeight);
    add(n.mlpNorm, {H}, Init::NormWeight);
  }
  p.push_back({n.finalNorm, {H}, Init::NormWeight, sd});
  if (!s.tieWordEmbeddings) p.push_back({n.lmHead, {s.vocabSize, H}, Init::Normal, sd});
  return p;
}

void adjustLatentAttentionDemoSpec(CheckpointSpec& s) {
  s.numKvHeads = s.numHeads;
  s.attentionBias = false;
  s.useSlidingWindow = false;
  s.maxWindowLayers = 0;
  s.slidingWindow = 0;
}

void validateLatentAttentionDemoSpec(const CheckpointSpec& s, const std::string& family) {
  validateHfDecoderDemoSpec(s);
  demoRequire(s.slidingWindow == 0, "sliding_window", family + " has no sliding window");
  demoRequire(s.numKvHeads == s.numHeads, "num_kv_heads",
              "DeepSeek's latent attention decompresses every head's key and value (num_key_value_heads = heads)");
  demoRequire(s.resolvedHeadDim() >= 6, "head_dim",
              "the demo splits head_dim into a nope part and an even roped part of at least 2 each: at least 6");
  demoRequire(s.numLayers >= 2, "num_layers", "the demo has a dense first layer and MoE layers: at least 2");
}

}  // namespace kvscope
