#include "kvscope/ModelConfig.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/ModelFamily.hpp"
#include "util/InputLimits.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

using nlohmann::json;

std::string architectureName(Architecture a) { return familyOf(a).modelType(); }

std::vector<std::string> supportedModelTypeList() {
  std::vector<std::string> out;
  for (const ModelFamily* f : modelFamilies()) out.push_back(f->modelType());
  return out;
}

std::string supportedModelTypes() {
  std::string out;
  for (const ModelFamily* f : modelFamilies()) out += (out.empty() ? "" : ", ") + f->modelType();
  return out;
}

bool BlockRecipe::operator==(const BlockRecipe& o) const {
  return norm == o.norm && positions == o.positions && layout == o.layout &&
         fusedQkv == o.fusedQkv && mlp == o.mlp && divideScoresBySqrtD == o.divideScoresBySqrtD &&
         qkNormOverHeads == o.qkNormOverHeads && fusedGateUp == o.fusedGateUp &&
         embeddingScaleInWeightDtype == o.embeddingScaleInWeightDtype &&
         ropeInterleaved == o.ropeInterleaved;
}

bool ModelConfig::ropeOn(int64_t layer) const {
  if (!usesRope()) return false;
  return ropeLayers.empty() || layer < 0 || layer >= static_cast<int64_t>(ropeLayers.size()) ||
         ropeLayers[static_cast<size_t>(layer)];
}

bool ModelConfig::isMoeLayer(int64_t layer) const {
  return moe.numExperts > 0 && layer >= 0 && layer < static_cast<int64_t>(moe.layers.size()) &&
         moe.layers[static_cast<size_t>(layer)];
}

const RopeConfig& ModelConfig::ropeFor(int64_t layer) const {
  return slidingRope && isSlidingLayer(layer) ? *slidingRope : rope;
}

bool RopeConfig::operator==(const RopeConfig& o) const {
  return type == o.type && theta == o.theta && factor == o.factor &&
         lowFreqFactor == o.lowFreqFactor && highFreqFactor == o.highFreqFactor &&
         originalMaxPositions == o.originalMaxPositions &&
         partialRotaryFactor == o.partialRotaryFactor && attentionFactor == o.attentionFactor &&
         betaFast == o.betaFast && betaSlow == o.betaSlow && mscale == o.mscale &&
         mscaleAllDim == o.mscaleAllDim && truncate == o.truncate &&
         shortFactor == o.shortFactor && longFactor == o.longFactor &&
         frequencyFactors == o.frequencyFactors;
}

bool ModelConfig::isSlidingLayer(int64_t layer) const {
  return slidingWindow > 0 && layer >= 0 && layer < static_cast<int64_t>(slidingLayers.size()) &&
         slidingLayers[static_cast<size_t>(layer)];
}

bool ModelConfig::isChunkedLayer(int64_t layer) const {
  return attentionChunk > 0 && layer >= 0 && layer < static_cast<int64_t>(chunkedLayers.size()) &&
         chunkedLayers[static_cast<size_t>(layer)];
}

bool ModelConfig::isRecurrentLayer(int64_t layer) const {
  return layer >= 0 && layer < static_cast<int64_t>(deltaNet.layers.size()) && deltaNet.layers[static_cast<size_t>(layer)];
}

bool ModelConfig::hasRecurrentLayers() const {
  return std::find(deltaNet.layers.begin(), deltaNet.layers.end(), true) != deltaNet.layers.end();
}

namespace {
std::string shortNumber(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
}  // namespace

std::string ModelConfig::layerDescription(int64_t layer) const {
  std::vector<std::string> parts;
  if (isRecurrentLayer(layer)) {
    parts.push_back("Gated DeltaNet (recurrent state " + std::to_string(deltaNet.valueHeads) + " x " +
                    std::to_string(deltaNet.keyHeadDim) + " x " + std::to_string(deltaNet.valueHeadDim) +
                    ", conv " + std::to_string(deltaNet.convKernel) + ")");
    if (isMoeLayer(layer)) parts.push_back("MoE");
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
  }
  parts.push_back(isSlidingLayer(layer)   ? "sliding window " + std::to_string(slidingWindow)
                 : isChunkedLayer(layer) ? "chunks of " + std::to_string(attentionChunk)
                                         : "full attention");
  if (mla.enabled())
    parts.push_back("latent (cache: c_kv " + std::to_string(mla.kvLoraRank) + " + roped k_pe " +
                    std::to_string(mla.ropeDim) + ")");
  if (usesRope()) {
    if (!ropeOn(layer)) {
      parts.push_back("NoPE");
    } else {
      const RopeConfig& r = ropeFor(layer);
      std::string rope = r.type == "default" ? "RoPE" : r.type + " RoPE";
      if (r.type != "default" && r.type != "longrope") rope += " x" + shortNumber(r.factor);
      if (slidingRope && !(*slidingRope == this->rope)) rope += " theta " + shortNumber(r.theta);
      if (r.partialRotaryFactor < 1.0) rope += ", partial " + shortNumber(r.partialRotaryFactor);
      if (mla.ropePairs == MlaConfig::RopePairs::Deinterleaved) rope += ", interleaved pairs de-interleaved";
      if (mla.ropePairs == MlaConfig::RopePairs::InPlacePairs) rope += ", pairs (2i, 2i+1)";
      if (recipe.ropeInterleaved) rope += ", pairs (2i, 2i+1)";
      if (qkL2Norm) rope += ", q/k L2 norm";
      parts.push_back(rope);
    }
  } else {
    parts.push_back("learned positions");
  }
  if (attentionSinks) parts.push_back("sinks");
  if (attnLogitSoftcap > 0) parts.push_back("soft-cap " + shortNumber(attnLogitSoftcap));
  if (queryScaleBeta > 0 && (!queryScaleNopeOnly || !ropeOn(layer))) parts.push_back("query temperature");
  if (isMoeLayer(layer))
    parts.push_back("MoE " + std::to_string(moe.topK) + " of " + std::to_string(moe.numExperts) + " experts" +
                    (moe.sharedIntermediateSize > 0 ? " + shared" : ""));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

ModelConfig ModelConfig::fromJson(const json& doc, const std::string& file) {
  if (!doc.is_object()) throw InputError(file, "", "expected a JSON object");
  ConfigReader r(doc, file);
  ModelConfig c;
  c.sourceFile = file;
  c.modelType = r.stringOr("model_type", "");
  if (c.modelType.empty())
    throw InputError(file, "model_type", "missing (supported: " + supportedModelTypes() + ")");
  const ModelFamily* family = familyForModelType(c.modelType);
  if (!family && doc.contains("text_config") && doc["text_config"].is_object())
    return fromTextConfig(doc, file);
  if (!family)
    throw InputError(file, "model_type",
                     "unsupported model type '" + c.modelType +
                         "' (supported: " + supportedModelTypes() + ")");
  c.architecture = family->architecture();
  c.dtype = r.stringOr("dtype", r.stringOr("torch_dtype", "float32"));
  c.vocabSize = r.requireInt("vocab_size");
  r.checkSize("vocab_size", c.vocabSize, limits::kVocab);
  c.eosTokenIds = r.intList("eos_token_id");
  c.bosTokenId = r.optionalInt("bos_token_id");
  c.padTokenId = r.optionalInt("pad_token_id");

  family->readConfig(r, c);
  for (int64_t id : c.eosTokenIds)
    if (id < 0 || id >= c.vocabSize)
      throw InputError(file, "eos_token_id", std::to_string(id) + " is outside the vocabulary");
  return c;
}

ModelConfig ModelConfig::fromTextConfig(const json& doc, const std::string& file) {
  // A multimodal checkpoint (Gemma 3's gemma3, Mistral 3's mistral3): the language model is
  // the config under text_config; what the wrapper says at its top level (the tie of the
  // head, the dtype, the special tokens) applies where text_config leaves it out.
  ConfigReader r(doc, file);
  json text = doc["text_config"];
  for (const char* key : {"dtype", "torch_dtype", "tie_word_embeddings", "eos_token_id", "bos_token_id",
                          "pad_token_id"})
    if (r.has(key) && (!text.contains(key) || text[key].is_null())) text[key] = doc[key];
  if (!text.contains("model_type"))
    throw InputError(file, "text_config.model_type",
                     "missing: the language model's type (supported: " + supportedModelTypes() + ")");
  ModelConfig c = fromJson(text, file + " (text_config)");
  c.sourceFile = file;
  c.wrapperModelType = r.stringOr("model_type", "");
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  {
    std::ifstream in(path);
    if (!in) throw InputError(path, "", "cannot open config file");
  }
  return fromJson(parseUntrustedJsonFile(path), path);
}

void ModelConfig::mergeGenerationConfig(const std::string& path) {
  if (!std::filesystem::exists(path)) return;
  const json doc = parseUntrustedJsonFile(path);
  if (!doc.is_object()) throw InputError(path, "", "expected a JSON object");
  ConfigReader r(doc, path);
  for (int64_t id : r.intList("eos_token_id")) {
    if (id < 0 || id >= vocabSize)
      throw InputError(path, "eos_token_id", std::to_string(id) + " is outside the vocabulary");
    if (std::find(eosTokenIds.begin(), eosTokenIds.end(), id) == eosTokenIds.end())
      eosTokenIds.push_back(id);
  }
}

}  // namespace kvscope
