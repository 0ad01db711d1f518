// The model families KV Scope loads, in the order --help and errors list them.
#include <stdexcept>

#include "model/families/Families.hpp"

namespace kvscope {

const std::vector<const ModelFamily*>& modelFamilies() {
  static const std::vector<const ModelFamily*> all = {
      &gpt2Family(), &llamaFamily(), &mistralFamily(), &qwen2Family(), &qwen3Family(), &qwen3MoeFamily(),
      &olmo2Family(), &graniteFamily(), &smolLm3Family(), &phi3Family(), &gemma2Family(), &gemma3Family(), &gptOssFamily(),
      &mixtralFamily(), &olmo3Family(), &glm4Family(), &ministral3Family(), &llama4Family(), &qwen3_5Family(), &qwen3NextFamily(), &qwen3_5MoeFamily(), &deepseekV3Family(), &deepseekV2Family(),
  };
  return all;
}

const ModelFamily* familyForModelType(const std::string& modelType) {
  for (const ModelFamily* f : modelFamilies())
    if (f->modelType() == modelType) return f;
  return nullptr;
}

const ModelFamily& familyOf(Architecture a) {
  for (const ModelFamily* f : modelFamilies())
    if (f->architecture() == a) return *f;
  throw std::logic_error("an Architecture without a family file");
}

}  // namespace kvscope
