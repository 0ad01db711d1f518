// The JSON side files of a save_pretrained directory, built from a CheckpointSpec:
// config.json (transformers 4 or 5 style), generation_config.json and
// tokenizer_config.json. Keys are sorted, as transformers writes them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/CheckpointSpec.hpp"

namespace kvscope::hf {

nlohmann::json configJson(const CheckpointSpec& spec);
nlohmann::json generationConfigJson(const CheckpointSpec& spec);
/// `tokens`: the tokenizer's tokens in id order (names the BOS/EOS tokens).
nlohmann::json tokenizerConfigJson(const CheckpointSpec& spec,
                                   const std::vector<std::string>& tokens);
/// The `dtype` / `torch_dtype` name of a stored dtype ("float32", "float16", "bfloat16").
std::string torchDtypeName(SafetensorsDtype d);
/// JSON text as Python's json.dumps(indent=2) writes it, plus a final newline.
std::string dumpPretty(const nlohmann::json& doc);

}  // namespace kvscope::hf
