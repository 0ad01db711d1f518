#include "kvscope/ModelConfig.hpp"

#include <cmath>
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
         embeddingScaleInWeightDtype == o.embeddingScaleInWeightDtype;
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
         partialRotaryFactor == o.partialRotaryFactor;
}

bool ModelConfig::isSlidingLayer(int64_t layer) const {
  return slidingWindow > 0 && layer >= 0 && layer < static_cast<int64_t>(slidingLayers.size()) &&
         slidingLayers[static_cast<size_t>(layer)];
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
