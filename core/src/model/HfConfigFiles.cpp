#include "model/HfConfigFiles.hpp"

#include "model/ByteLevelBpeBuilder.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope::hf {

using nlohmann::json;

namespace {

const char* versionFor(ConfigStyle s) { return s == ConfigStyle::V4 ? "4.46.3" : "5.0.0"; }

std::string tokenString(const std::vector<std::string>& tokens, int64_t id) {
  return tokens.at(static_cast<size_t>(id));
}

}  // namespace

std::string torchDtypeName(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::F16:
      return "float16";
    case SafetensorsDtype::BF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

json configJson(const CheckpointSpec& s) {
  json c = familyOf(s.architecture).demoConfig(s);
  c["bos_token_id"] = s.resolvedBosId();
  c["eos_token_id"] = s.resolvedEosId();
  c["pad_token_id"] = nullptr;
  c["initializer_range"] = s.initStd;
  c["tie_word_embeddings"] = s.tieWordEmbeddings;
  c["use_cache"] = true;
  c["vocab_size"] = s.vocabSize;
  c[s.configStyle == ConfigStyle::V4 ? "torch_dtype" : "dtype"] = torchDtypeName(s.storedDtype);
  c["transformers_version"] = versionFor(s.configStyle);
  return c;
}

json generationConfigJson(const CheckpointSpec& s) {
  json g = json::object();
  g["_from_model_config"] = true;
  g["bos_token_id"] = s.resolvedBosId();
  g["eos_token_id"] = s.resolvedEosId();
  g["transformers_version"] = versionFor(s.configStyle);
  if (s.configStyle == ConfigStyle::V5) {
    g["output_attentions"] = false;
    g["output_hidden_states"] = false;
    g["use_cache"] = true;
  }
  return g;
}

json tokenizerConfigJson(const CheckpointSpec& s, const std::vector<std::string>& tokens) {
  const std::string special = ByteLevelBpeBuilder::specialToken();
  json t = json::object();
  t["add_prefix_space"] = false;
  json added = json::object();
  added["content"] = special;
  added["lstrip"] = false;
  added["normalized"] = false;
  added["rstrip"] = false;
  added["single_word"] = false;
  added["special"] = true;
  t["added_tokens_decoder"] = {{std::to_string(s.specialTokenId()), added}};
  t["bos_token"] = tokenString(tokens, s.resolvedBosId());
  t["eos_token"] = tokenString(tokens, s.resolvedEosId());
  t["unk_token"] = special;
  t["clean_up_tokenization_spaces"] = false;
  t["model_max_length"] = s.maxPositions;
  t["tokenizer_class"] = familyOf(s.architecture).demoTokenizerClass();
  return t;
}

std::string dumpPretty(const json& doc) { return doc.dump(2) + "\n"; }

}  // namespace kvscope::hf
