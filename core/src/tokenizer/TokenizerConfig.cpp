#include "tokenizer/TokenizerConfig.hpp"

#include <algorithm>
#include <filesystem>

#include "tokenizer/JsonFields.hpp"
#include "util/InputLimits.hpp"

namespace kvscope::tok {

namespace {
// A special token is a string or an AddedToken object {"content": ...}.
std::optional<std::string> tokenValue(const JsonFields& jf, const Json& obj, const std::string& key) {
  const Json* v = jf.find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return jf.str(*v, key, "content");
  jf.fail(key, "expected a token string or an object with \"content\"");
}

std::optional<bool> optBool(const JsonFields& jf, const Json& obj, const std::string& key) {
  const Json* v = jf.find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) jf.fail(key, "expected true or false");
  return v->get<bool>();
}

void readSpecials(const JsonFields& jf, const Json& root, TokenizerConfig& cfg) {
  if (auto v = tokenValue(jf, root, "bos_token")) cfg.bosToken = v;
  if (auto v = tokenValue(jf, root, "eos_token")) cfg.eosToken = v;
  if (auto v = tokenValue(jf, root, "unk_token")) cfg.unkToken = v;
  if (auto v = tokenValue(jf, root, "pad_token")) cfg.padToken = v;
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    const Json* list = jf.find(root, key);
    if (list == nullptr || !list->is_array()) continue;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Json& item = (*list)[i];
      const std::string path = JsonFields::index(key, i);
      cfg.additionalSpecialTokens.push_back(item.is_object() ? jf.str(item, path, "content")
                                                             : jf.asString(item, path));
    }
  }
}
}  // namespace

TokenizerConfig TokenizerConfig::load(const std::string& dir) {
  namespace fs = std::filesystem;
  TokenizerConfig cfg;
  const fs::path mapPath = fs::path(dir) / "special_tokens_map.json";
  if (fs::exists(mapPath)) {
    const JsonFields jf(mapPath.string());
    const Json root = JsonFields::parseFile(mapPath.string());
    jf.requireObject(root, "");
    readSpecials(jf, root, cfg);
  }
  const fs::path path = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(path)) return cfg;
  cfg.present = true;
  const JsonFields jf(path.string());
  const Json root = JsonFields::parseFile(path.string());
  jf.requireObject(root, "");
  cfg.addBosToken = optBool(jf, root, "add_bos_token");
  cfg.addEosToken = optBool(jf, root, "add_eos_token");
  cfg.addPrefixSpace = optBool(jf, root, "add_prefix_space");
  cfg.cleanUpTokenizationSpaces = optBool(jf, root, "clean_up_tokenization_spaces");
  cfg.legacy = optBool(jf, root, "legacy");
  readSpecials(jf, root, cfg);
  if (const Json* dec = jf.find(root, "added_tokens_decoder")) {
    jf.requireObject(*dec, "added_tokens_decoder");
    for (const auto& [key, value] : dec->items()) {
      const std::string p = JsonFields::join("added_tokens_decoder", key);
      AddedToken t;
      try {
        std::size_t used = 0;
        t.id = std::stoll(key, &used);
        if (used != key.size()) throw std::invalid_argument(key);
      } catch (const std::exception&) {
        jf.fail(p, "expected an integer token id as the key");
      }
      if (t.id < 0 || t.id >= limits::kVocab)
        jf.fail(p, "token id " + std::to_string(t.id) + " is outside [0, " +
                       std::to_string(limits::kVocab) + ")");
      readAddedTokenSettings(jf, value, p, t);
      cfg.addedTokensDecoder.push_back(t);
    }
  }
  return cfg;
}

std::vector<std::string> TokenizerConfig::specialTokens() const {
  std::vector<std::string> out;
  auto push = [&out](const std::optional<std::string>& t) {
    if (t && !t->empty() && std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
  };
  push(bosToken);
  push(eosToken);
  push(unkToken);
  push(padToken);
  for (const auto& t : additionalSpecialTokens) push(t);
  return out;
}

void readAddedTokenSettings(const JsonFields& jf, const Json& obj, const std::string& path, AddedToken& t) {
  t.content = jf.str(obj, path, "content");
  t.singleWord = jf.boolean(obj, path, "single_word", false);
  t.lstrip = jf.boolean(obj, path, "lstrip", false);
  t.rstrip = jf.boolean(obj, path, "rstrip", false);
  t.special = jf.boolean(obj, path, "special", false);
  t.normalized = jf.boolean(obj, path, "normalized", !t.special);
}

}  // namespace kvscope::tok
