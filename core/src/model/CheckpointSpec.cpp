#include "kvscope/CheckpointSpec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "kvscope/Error.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

namespace {

void require(bool ok, const std::string& field, const std::string& what) {
  if (!ok) throw UsageError("checkpoint spec: " + field + ": " + what);
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

CheckpointSpec CheckpointSpec::demo() {
  CheckpointSpec s;
  s.architecture = Architecture::Llama;
  s.vocabSize = 512;
  s.hiddenSize = 64;
  s.numLayers = 3;
  s.numHeads = 4;
  s.numKvHeads = 2;
  s.intermediateSize = 128;
  s.maxPositions = 256;
  s.storedDtype = SafetensorsDtype::F32;
  s.initStd = 0.25;
  return s;
}

CheckpointSpec CheckpointSpec::gpt2Small() {
  CheckpointSpec s;
  s.architecture = Architecture::Gpt2;
  s.vocabSize = 8192;
  s.hiddenSize = 768;
  s.numLayers = 12;
  s.numHeads = 12;
  s.numKvHeads = 12;
  s.intermediateSize = 4 * 768;
  s.maxPositions = 1024;
  s.tieWordEmbeddings = true;
  s.initStd = 0.02;
  return s;
}

namespace {
// The common part of the real-size presets: bf16, 5 GB shards, init std 0.02.
CheckpointSpec realSize() {
  CheckpointSpec s;
  s.storedDtype = SafetensorsDtype::BF16;
  s.maxShardBytes = 5000000000ull;  // save_pretrained's default max_shard_size "5GB"
  s.initStd = 0.02;
  s.configStyle = ConfigStyle::V4;
  return s;
}
}  // namespace

CheckpointSpec CheckpointSpec::llama32_1b() {
  CheckpointSpec s = realSize();
  s.architecture = Architecture::Llama;
  s.vocabSize = 128256;
  s.hiddenSize = 2048;
  s.numLayers = 16;
  s.numHeads = 32;
  s.numKvHeads = 8;
  s.headDim = 64;
  s.intermediateSize = 8192;
  s.maxPositions = 131072;
  s.ropeType = "llama3";
  s.ropeTheta = 500000.0;
  s.ropeFactor = 32.0;
  s.ropeLowFreqFactor = 1.0;
  s.ropeHighFreqFactor = 4.0;
  s.ropeOriginalMaxPositions = 8192;
  s.tieWordEmbeddings = true;
  s.normEps = 1e-5;
  return s;
}

CheckpointSpec CheckpointSpec::llama31_8b() {
  CheckpointSpec s = llama32_1b();
  s.hiddenSize = 4096;
  s.numLayers = 32;
  s.headDim = 128;
  s.intermediateSize = 14336;
  s.ropeFactor = 8.0;
  s.tieWordEmbeddings = false;
  return s;
}

CheckpointSpec CheckpointSpec::qwen25_7b() {
  CheckpointSpec s = realSize();
  s.architecture = Architecture::Qwen2;
  s.vocabSize = 152064;
  s.hiddenSize = 3584;
  s.numLayers = 28;
  s.numHeads = 28;
  s.numKvHeads = 4;
  s.headDim = 128;
  s.intermediateSize = 18944;
  s.maxPositions = 32768;
  s.ropeTheta = 1000000.0;
  s.slidingWindow = 131072;
  s.useSlidingWindow = false;
  s.maxWindowLayers = 28;
  s.tieWordEmbeddings = false;
  s.normEps = 1e-6;
  return s;
}

CheckpointSpec CheckpointSpec::qwen3_8b() {
  // Qwen/Qwen3-8B's config: q/k norm per head, head_dim 128, no sliding window, untied.
  CheckpointSpec s = realSize();
  s.architecture = Architecture::Qwen3;
  s.vocabSize = 151936;
  s.hiddenSize = 4096;
  s.numLayers = 36;
  s.numHeads = 32;
  s.numKvHeads = 8;
  s.headDim = 128;
  s.intermediateSize = 12288;
  s.maxPositions = 40960;
  s.ropeTheta = 1000000.0;
  s.tieWordEmbeddings = false;
  s.normEps = 1e-6;
  return s;
}

CheckpointSpec CheckpointSpec::qwen3_14b() {
  // Qwen/Qwen3-14B's config: 40 layers of 5120, 40 heads (8 KV) of 128, untied; 29.5 GB in
  // bf16, larger than a 24 GB machine's memory (docs/performance.md).
  CheckpointSpec s = qwen3_8b();
  s.hiddenSize = 5120;
  s.numLayers = 40;
  s.numHeads = 40;
  s.intermediateSize = 17408;
  return s;
}

CheckpointSpec CheckpointSpec::qwen3_5_9b() {
  // Qwen/Qwen3.5-9B's text_config: gated attention with partial rotary 0.25 every fourth layer.
  CheckpointSpec s = realSize();
  s.architecture = Architecture::Qwen3_5;
  s.vocabSize = 248320;
  s.hiddenSize = 4096;
  s.numLayers = 32;
  s.numHeads = 16;
  s.numKvHeads = 4;
  s.headDim = 256;
  s.intermediateSize = 12288;
  s.maxPositions = 262144;
  s.ropeTheta = 10000000.0;
  s.linearKeyHeads = 16;
  s.linearValueHeads = 32;
  s.linearHeadDim = 128;
  s.fullAttentionInterval = 4;
  s.tieWordEmbeddings = false;
  s.normEps = 1e-6;
  return s;
}

std::vector<std::string> CheckpointSpec::presetNames() {
  return {"demo", "gpt2-small", "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "qwen3-14b", "qwen3.5-9b"};
}

CheckpointSpec CheckpointSpec::preset(const std::string& name) {
  if (name == "demo") return demo();
  if (name == "gpt2-small") return gpt2Small();
  if (name == "llama-3.2-1b") return llama32_1b();
  if (name == "llama-3.1-8b") return llama31_8b();
  if (name == "qwen2.5-7b") return qwen25_7b();
  if (name == "qwen3-8b") return qwen3_8b();
  if (name == "qwen3-14b") return qwen3_14b();
  if (name == "qwen3.5-9b") return qwen3_5_9b();
  std::string names;
  for (const auto& n : presetNames()) names += (names.empty() ? "" : ", ") + n;
  throw UsageError("unknown preset '" + name + "' (supported: " + names + ")");
}

void CheckpointSpec::setArchitecture(Architecture a) {
  architecture = a;
  familyOf(a).adjustDemoSpec(*this);
}

void CheckpointSpec::setSlidingWindow(int64_t window) {
  familyOf(architecture).setDemoWindow(*this, window);
}

void CheckpointSpec::validate() const {
  require(vocabSize >= 257, "vocab_size",
          "must be at least 257 (256 byte tokens + <|endoftext|>), got " + str(vocabSize));
  require(hiddenSize > 0, "hidden_size", "must be positive");
  require(numLayers > 0, "num_layers", "must be positive");
  require(numHeads > 0, "num_heads", "must be positive");
  require(numKvHeads > 0, "num_kv_heads", "must be positive");
  require(numHeads % numKvHeads == 0, "num_kv_heads",
          str(numKvHeads) + " does not divide num_heads " + str(numHeads));
  require(headDim >= 0, "head_dim", "must be 0 (derived) or positive");
  require(headDim > 0 || hiddenSize % numHeads == 0, "head_dim",
          "hidden_size " + str(hiddenSize) + " is not divisible by num_heads " + str(numHeads));
  require(intermediateSize > 0, "intermediate_size", "must be positive");
  require(maxPositions > 0, "max_positions", "must be positive");
  require(slidingWindow >= 0, "sliding_window", "must be 0 (none) or positive");
  require(maxWindowLayers >= 0, "max_window_layers", "must not be negative");
  require(numShards >= 1, "shards", "must be at least 1");
  require(numShards <= 99999, "shards", "at most 99999");
  require(std::isfinite(initStd) && initStd > 0, "init_std", "must be positive");
  require(std::isfinite(normEps) && normEps >= 0, "norm_eps", "must be 0 (default) or positive");
  require(storedDtype == SafetensorsDtype::F32 || storedDtype == SafetensorsDtype::F16 ||
              storedDtype == SafetensorsDtype::BF16,
          "dtype", "must be F32, F16 or BF16");
  require(resolvedBosId() < vocabSize, "bos_token_id", "outside the vocabulary");
  require(resolvedEosId() < vocabSize, "eos_token_id", "outside the vocabulary");
  require(ropeType == "default" || ropeType == "linear" || ropeType == "dynamic" ||
              ropeType == "llama3",
          "rope_type", "'" + ropeType + "' (supported: default, linear, dynamic, llama3)");
  require(ropeTheta > 0, "rope_theta", "must be positive");
  require(ropeType == "default" || ropeFactor > 0, "rope_factor", "must be positive");
  require(ropeType != "llama3" || ropeOriginalMaxPositions > 0, "rope_original_max_positions",
          "required for llama3 RoPE scaling");
  require(ropeOriginalMaxPositions >= 0, "rope_original_max_positions", "must not be negative");

  familyOf(architecture).validateDemoSpec(*this);
}

Architecture parseArchitecture(const std::string& name) {
  if (const ModelFamily* f = familyForModelType(name)) return f->architecture();
  throw UsageError("unknown architecture '" + name + "' (supported: " + supportedModelTypes() +
                   ")");
}

ConfigStyle parseConfigStyle(const std::string& name) {
  if (name == "v4") return ConfigStyle::V4;
  if (name == "v5") return ConfigStyle::V5;
  throw UsageError("unknown config style '" + name + "' (supported: v4, v5)");
}

SafetensorsDtype parseStoredDtype(const std::string& name) {
  std::string up = name;
  std::transform(up.begin(), up.end(), up.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (up == "F32" || up == "FLOAT32") return SafetensorsDtype::F32;
  if (up == "F16" || up == "FLOAT16") return SafetensorsDtype::F16;
  if (up == "BF16" || up == "BFLOAT16") return SafetensorsDtype::BF16;
  throw UsageError("unknown stored dtype '" + name + "' (supported: F32, F16, BF16)");
}

}  // namespace kvscope
