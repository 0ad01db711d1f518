// One accessor per family file; FamilyRegistry.cpp lists them.
#pragma once

#include "model/families/ModelFamily.hpp"

namespace kvscope {

const ModelFamily& gpt2Family();
const ModelFamily& llamaFamily();
const ModelFamily& mistralFamily();
const ModelFamily& qwen2Family();
const ModelFamily& qwen3Family();
const ModelFamily& qwen3MoeFamily();
const ModelFamily& olmo2Family();
const ModelFamily& graniteFamily();
const ModelFamily& smolLm3Family();
const ModelFamily& phi3Family();
const ModelFamily& gemma2Family();
const ModelFamily& gemma3Family();
const ModelFamily& gptOssFamily();
const ModelFamily& mixtralFamily();
const ModelFamily& olmo3Family();
const ModelFamily& glm4Family();
const ModelFamily& ministral3Family();
const ModelFamily& llama4Family();
const ModelFamily& qwen3_5Family();
const ModelFamily& qwen3_5MoeFamily();
const ModelFamily& deepseekV3Family();
const ModelFamily& deepseekV2Family();
const ModelFamily& qwen3NextFamily();

}  // namespace kvscope
