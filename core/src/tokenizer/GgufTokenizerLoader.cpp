#include "tokenizer/GgufTokenizerLoader.hpp"

#include <cstring>

#include "kvscope/Error.hpp"
#include "tokenizer/HfJsonLoader.hpp"
#include "tokenizer/SentencePieceTokenizer.hpp"

namespace kvscope::tok {

namespace {

// llama.cpp's BPE pre-tokenizers (llm_tokenizer_bpe, by tokenizer.ggml.pre): the expressions
// each piece of text is split by, one after the other, and whether a pre-token found whole
// in the vocabulary skips the merges (ignore_merges).
struct LlamaCppPreTokenizer {
  std::vector<const char*> names;
  std::vector<const char*> expressions;
  bool ignoreMerges;
};

const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const std::vector<LlamaCppPreTokenizer>& llamaCppPreTokenizers() {
  static const std::vector<LlamaCppPreTokenizer> all = {
      {{"default"},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
       false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       true},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"},
       {kGpt2},
       false},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open"}, {kQwen2}, false},
      {{"qwen35"}, {kQwen35}, false},
      {{"refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"}, {"\\p{N}", kGpt2}, false},
  };
  return all;
}

std::string knownPreTokenizers() {
  std::string s;
  for (const auto& p : llamaCppPreTokenizers())
    for (const char* n : p.names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

const GgufValue& arrayOf(const GgufFile& f, const std::string& key, GgufValue::Kind element) {
  const GgufValue* v = f.find(key);
  if (!v) throw InputError(f.path(), key, "missing: the vocabulary needs it");
  const bool numeric = element != GgufValue::Kind::String;
  if (v->kind != GgufValue::Kind::Array ||
      (numeric ? !v->items.empty() && !v->items.front().isNumber() : v->elementKind != element))
    throw InputError(f.path(), key, std::string("expected an array of ") + (numeric ? "numbers" : "strings"));
  return *v;
}

int64_t optionalId(const GgufFile& f, const std::string& key, int64_t vocab) {
  const GgufValue* v = f.find(key);
  if (!v) return -1;
  const int64_t id = f.integer(key);
  if (id < 0 || id >= vocab)
    throw InputError(f.path(), key, "token id " + std::to_string(id) + " outside the vocabulary of " +
                                        std::to_string(vocab));
  return id;
}

bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  const GgufValue* v = f.find(key);
  return v && v->kind == GgufValue::Kind::Bool ? v->u != 0 : fallback;
}

// llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte.
constexpr int64_t kControl = 3, kUserDefined = 4;

std::unique_ptr<Tokenizer> bpe(const GgufFile& f, const std::vector<std::string>& tokens,
                               const std::vector<int64_t>& types) {
  const GgufValue* preValue = f.find("tokenizer.ggml.pre");
  const std::string pre = preValue ? f.string("tokenizer.ggml.pre") : "default";
  const LlamaCppPreTokenizer* p = nullptr;
  for (const auto& x : llamaCppPreTokenizers())
    for (const char* n : x.names)
      if (pre == n) p = &x;
  if (!p)
    throw InputError(f.path(), "tokenizer.ggml.pre",
                     "'" + pre + "' is a pre-tokenizer KV Scope does not build (it builds " + knownPreTokenizers() +
                         "); put the model's tokenizer.json in a folder with the .gguf and open the folder");
  Json root;
  Json vocab = Json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int64_t>(i);
  Json merges = Json::array();
  if (const GgufValue* m = f.find("tokenizer.ggml.merges")) {
    const GgufValue& a = arrayOf(f, "tokenizer.ggml.merges", GgufValue::Kind::String);
    (void)m;
    for (size_t i = 0; i < a.items.size(); ++i) {
      const std::string& s = a.items[i].s;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw InputError(f.path(), "tokenizer.ggml.merges[" + std::to_string(i) + "]",
                         "expected \"left right\", found \"" + s + "\"");
      merges.push_back(s);
    }
  }
  root["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)},
                   {"ignore_merges", p->ignoreMerges}};
  Json steps = Json::array();
  for (const char* e : p->expressions)
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", e}}}, {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}});
  root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
  root["decoder"] = {{"type", "ByteLevel"}};
  Json added = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == kControl || types[i] == kUserDefined)
      added.push_back({{"id", static_cast<int64_t>(i)}, {"content", tokens[i]}, {"special", types[i] == kControl}});
  root["added_tokens"] = std::move(added);
  const auto V = static_cast<int64_t>(tokens.size());
  const int64_t bos = optionalId(f, "tokenizer.ggml.bos_token_id", V);
  const int64_t eos = optionalId(f, "tokenizer.ggml.eos_token_id", V);
  const bool addBos = bos >= 0 && flag(f, "tokenizer.ggml.add_bos_token", false);
  const bool addEos = eos >= 0 && flag(f, "tokenizer.ggml.add_eos_token", false);
  if (addBos || addEos) {
    Json single = Json::array(), special = Json::object();
    const auto add = [&](int64_t id) {
      single.push_back({{"SpecialToken", {{"id", tokens[static_cast<size_t>(id)]}, {"type_id", 0}}}});
      special[tokens[static_cast<size_t>(id)]] = {{"id", tokens[static_cast<size_t>(id)]},
                                                 {"ids", {id}},
                                                 {"tokens", {tokens[static_cast<size_t>(id)]}}};
    };
    if (addBos) add(bos);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (addEos) add(eos);
    root["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single},
                              {"special_tokens", special}};
  }
  const JsonFields jf(f.path());
  HfPipeline pipeline = HfJsonLoader::build(jf, root);
  pipeline.description = "GGUF vocabulary (" + pipeline.description + ", pre-tokenizer " + pre + ")";
  return std::make_unique<HfTokenizer>(std::move(pipeline));
}

std::unique_ptr<Tokenizer> sentencePiece(const GgufFile& f, const std::vector<std::string>& tokens,
                                         const std::vector<int64_t>& types) {
  const GgufValue& scores = arrayOf(f, "tokenizer.ggml.scores", GgufValue::Kind::F32);
  if (scores.items.size() != tokens.size())
    throw InputError(f.path(), "tokenizer.ggml.scores",
                     std::to_string(scores.items.size()) + " scores for " + std::to_string(tokens.size()) + " tokens");
  SentencePieceModel m;
  m.modelType = SentencePieceModel::kBpe;  // llama.cpp's SPM tokenizer merges by score
  m.byteFallback = true;
  m.removeExtraWhitespaces = false;
  m.addDummyPrefix = flag(f, "tokenizer.ggml.add_space_prefix", true);
  const auto V = static_cast<int64_t>(tokens.size());
  m.unkId = static_cast<int32_t>(optionalId(f, "tokenizer.ggml.unknown_token_id", V));
  m.bosId = static_cast<int32_t>(optionalId(f, "tokenizer.ggml.bos_token_id", V));
  m.eosId = static_cast<int32_t>(optionalId(f, "tokenizer.ggml.eos_token_id", V));
  for (size_t i = 0; i < tokens.size(); ++i) {
    SentencePieceModel::Piece p;
    p.piece = tokens[i];
    p.score = static_cast<float>(scores.items[i].asNumber());
    p.type = types[i] >= 1 && types[i] <= 6 ? static_cast<int>(types[i]) : SentencePieceModel::kNormal;
    m.pieces.push_back(std::move(p));
  }
  SentencePieceOptions opt;
  opt.addBos = m.bosId >= 0 && flag(f, "tokenizer.ggml.add_bos_token", true);
  opt.addEos = m.eosId >= 0 && flag(f, "tokenizer.ggml.add_eos_token", false);
  opt.legacy = false;
  opt.source = "GGUF vocabulary";
  return std::make_unique<SentencePieceTokenizer>(std::move(m), f.path(), std::move(opt));
}

}  // namespace

std::unique_ptr<Tokenizer> GgufTokenizerLoader::load(const GgufFile& f) {
  if (!f.find("tokenizer.ggml.model"))
    throw InputError(f.path(), "tokenizer.ggml.model", "the file carries no vocabulary");
  const std::string& model = f.string("tokenizer.ggml.model");
  const GgufValue& tokenArray = arrayOf(f, "tokenizer.ggml.tokens", GgufValue::Kind::String);
  std::vector<std::string> tokens;
  tokens.reserve(tokenArray.items.size());
  for (const auto& t : tokenArray.items) tokens.push_back(t.s);
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.find("tokenizer.ggml.token_type")) {
    const GgufValue& a = arrayOf(f, "tokenizer.ggml.token_type", GgufValue::Kind::I32);
    if (a.items.size() != tokens.size())
      throw InputError(f.path(), "tokenizer.ggml.token_type",
                       std::to_string(a.items.size()) + " types for " + std::to_string(tokens.size()) + " tokens");
    for (size_t i = 0; i < types.size(); ++i) types[i] = a.items[i].isInteger() ? a.items[i].asInt() : 1;
  }
  if (tokens.empty()) throw InputError(f.path(), "tokenizer.ggml.tokens", "an empty vocabulary");
  if (model == "gpt2") return bpe(f, tokens, types);
  if (model == "llama") return sentencePiece(f, tokens, types);
  throw InputError(f.path(), "tokenizer.ggml.model",
                   "'" + model + "' vocabularies are not built from GGUF (KV Scope builds gpt2 and llama); "
                   "put the model's tokenizer files in a folder with the .gguf and open the folder");
}

}  // namespace kvscope::tok
