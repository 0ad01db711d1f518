// A model family: one file per family under families/ reads its config.json keys, names its
// checkpoint tensors and says which pieces of the shared kit its block is made of
// (ModelConfig::recipe). The loader and the forward compose the block from the kit by the
// recipe; no shared code asks which family a model is. Torch-free (the parser fuzz build
// compiles it). Adding a family: its file, its Architecture value, its line in
// FamilyRegistry.cpp, its fixtures (tests/fixtures/families) and its line in the docs.
#pragma once

#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"

namespace kvscope {

class ConfigReader;

/// Where a family keeps its tensors: full names of the model-wide ones, and per-layer
/// suffixes after `layerPrefix` + the layer index + ".". Empty: the family has no such tensor.
struct WeightNames {
  std::string embed, positionEmbed, finalNorm, finalNormBias, lmHead;
  std::string layerPrefix;                  // e.g. "model.layers."
  std::string attnNorm, attnNormBias, mlpNorm, mlpNormBias;
  std::string qkv, qkvBias;                 // a fused projection (recipe.fusedQkv)
  std::string q, qBias, k, kBias, v, vBias;
  std::string o, oBias;
  std::string qNorm, kNorm;                 // per-head RMSNorm weights (config.qkNorm)
  std::string gate, gateBias, up, upBias, down, downBias;
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
  /// The tensor whose noise a stale_cache weight update adds to layer `layer`'s keys.
  std::string keyProjection(int64_t layer) const {
    const WeightNames& n = weightNames();
    return n.layer(layer, n.k.empty() ? n.qkv : n.k);
  }
};

/// Every family, in the order --help and errors list them.
const std::vector<const ModelFamily*>& modelFamilies();
/// The family loading `modelType`, or nullptr.
const ModelFamily* familyForModelType(const std::string& modelType);
/// The family of `a` (every Architecture has one).
const ModelFamily& familyOf(Architecture a);

}  // namespace kvscope
