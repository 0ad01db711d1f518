#include "tokenizer/HfJsonLoader.hpp"

#include <filesystem>

#include "tokenizer/TokenizerConfig.hpp"
#include "util/InputLimits.hpp"

namespace kvscope::tok {

namespace {

bool isByteLevel(const Json* spec) {
  if (spec == nullptr || !spec->is_object()) return false;
  const auto type = spec->value("type", std::string());
  if (type == "ByteLevel") return true;
  for (const char* key : {"pretokenizers", "decoders"}) {
    auto it = spec->find(key);
    if (it != spec->end() && it->is_array()) {
      for (const auto& sub : *it) {
        if (isByteLevel(&sub)) return true;
      }
    }
  }
  return false;
}

std::optional<std::string> optionalString(const JsonFields& jf, const Json& obj, const std::string& path,
                                          const std::string& key) {
  auto v = jf.optStr(obj, path, key);
  return v;
}

BpeConfig readBpeConfig(const JsonFields& jf, const Json& model) {
  BpeConfig cfg;
  const Json& vocab = jf.require(model, "model", "vocab");
  jf.requireObject(vocab, "model.vocab");
  cfg.vocab.reserve(vocab.size());
  // A 128k-entry vocabulary and 280k merges (Llama 3): the field path of an entry is built
  // only when the entry is refused.
  for (const auto& [token, id] : vocab.items()) {
    const bool plain = id.is_number_unsigned() && id.get<uint64_t>() < static_cast<uint64_t>(limits::kVocab);
    cfg.vocab.emplace(token, plain ? id.get<int64_t>() : jf.asTokenId(id, "model.vocab." + token));
  }
  const Json* merges = jf.find(model, "merges");
  if (merges) {
    jf.requireArray(*merges, "model.merges");
    cfg.merges.reserve(merges->size());
    for (std::size_t i = 0; i < merges->size(); ++i) {
      const Json& m = (*merges)[i];
      const auto p = [i] { return JsonFields::index("model.merges", i); };
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          jf.fail(p(), "expected \"left right\" (two tokens separated by one space), found \"" + s + "\"");
        }
        cfg.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2) {
        cfg.merges.emplace_back(jf.asString(m[0], JsonFields::index(p(), 0)),
                                jf.asString(m[1], JsonFields::index(p(), 1)));
      } else {
        jf.fail(p(), "expected \"left right\" or [left, right]");
      }
    }
  }
  cfg.unkToken = optionalString(jf, model, "model", "unk_token");
  cfg.continuingSubwordPrefix = optionalString(jf, model, "model", "continuing_subword_prefix");
  cfg.endOfWordSuffix = optionalString(jf, model, "model", "end_of_word_suffix");
  cfg.fuseUnk = jf.boolean(model, "model", "fuse_unk", false);
  cfg.byteFallback = jf.boolean(model, "model", "byte_fallback", false);
  cfg.ignoreMerges = jf.boolean(model, "model", "ignore_merges", false);
  return cfg;
}

}  // namespace

HfPipeline HfJsonLoader::build(const JsonFields& jf, const Json& root,
                               const BpeModel::MergeError* onBadMerge) {
  jf.requireObject(root, "");
  const Json& model = jf.require(root, "", "model");
  jf.requireObject(model, "model");
  std::string type;
  if (const Json* t = jf.find(model, "type")) {
    type = jf.asString(*t, "model.type");
  } else if (jf.find(model, "merges")) {
    type = "BPE";  // early files omit the tag
  } else {
    jf.fail("model.type", "missing: cannot tell which model this is");
  }
  if (type != "BPE") {
    jf.fail("model.type", "unsupported model type '" + type +
                              "' (supported: BPE in tokenizer.json, BPE in vocab.json + merges.txt, "
                              "and SentencePiece BPE in tokenizer.model)");
  }

  HfPipeline p;
  BpeConfig cfg = readBpeConfig(jf, model);
  BpeModel::MergeError defaultError = [&jf](std::size_t i, const std::string& detail) {
    jf.fail(JsonFields::index("model.merges", i), detail);
  };
  p.model = std::make_unique<BpeModel>(std::move(cfg), onBadMerge ? *onBadMerge : defaultError);

  if (const Json* added = jf.find(root, "added_tokens")) {
    jf.requireArray(*added, "added_tokens");
    for (std::size_t i = 0; i < added->size(); ++i) {
      const std::string ap = JsonFields::index("added_tokens", i);
      const Json& a = (*added)[i];
      AddedToken t;
      t.id = jf.asTokenId(jf.require(a, ap, "id"), JsonFields::join(ap, "id"));
      readAddedTokenSettings(jf, a, ap, t);
      if (t.content.empty()) jf.fail(JsonFields::join(ap, "content"), "an added token cannot be empty");
      p.added.add(t);
    }
  }
  if (const Json* n = jf.find(root, "normalizer")) p.normalizer = makeNormalizer(jf, *n, "normalizer");
  if (const Json* pt = jf.find(root, "pre_tokenizer")) {
    p.preTokenizer = makePreTokenizer(jf, *pt, "pre_tokenizer");
  }
  if (const Json* pp = jf.find(root, "post_processor")) {
    p.postProcessor = makePostProcessor(jf, *pp, "post_processor");
  }
  if (const Json* d = jf.find(root, "decoder")) p.decoder = makeDecoder(jf, *d, "decoder");

  const bool byteLevel = isByteLevel(jf.find(root, "pre_tokenizer")) || isByteLevel(jf.find(root, "decoder"));
  p.description = std::string("BPE") + (byteLevel ? ", byte-level" : "") +
                  (p.model->byteFallback() ? ", byte fallback" : "");
  return p;
}

std::unique_ptr<HfTokenizer> HfJsonLoader::load(const std::string& path) {
  const JsonFields jf(path);
  const Json root = JsonFields::parseFile(path);
  HfPipeline p = build(jf, root);
  p.description = "tokenizer.json (" + p.description + ")";
  const auto dir = std::filesystem::path(path).parent_path().string();
  const TokenizerConfig cfg = TokenizerConfig::load(dir.empty() ? "." : dir);
  p.cleanUpTokenizationSpaces = cfg.cleanUpTokenizationSpaces.value_or(false);
  return std::make_unique<HfTokenizer>(std::move(p));
}

}  // namespace kvscope::tok
