// Hostile and damaged input (issue 12): deep JSON, sizes and ids out of range, raw bytes in
// error text. Every case must end in an InputError naming the file and the field, never a
// crash, and must leave the file it was given byte-identical.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ScratchCheckpoint.hpp"
#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/TraceFile.hpp"
#include "util/InputLimits.hpp"
#include "util/UntrustedJson.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path hostileDir() { return test::scratchDir("hostile-input"); }

// Runs `f`, expects an InputError naming `file`, checks `file` is unchanged; returns it.
InputError refused(const std::string& file, const std::function<void()>& f) {
  const std::string before = test::readBytes(file);
  try {
    f();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    EXPECT_EQ(test::readBytes(file), before) << file << " was modified";
    return e;
  }
  ADD_FAILURE() << "no InputError for " << file;
  return InputError("", "", "");
}

// "[[[ ... ]]]" nested `depth` deep.
std::string deepArray(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A copy of the llama fixture model whose tokenizer.json went through `edit`.
std::string tokenizerCopy(const std::string& name, const std::function<void(json&)>& edit) {
  const fs::path d = hostileDir() / name;
  fs::create_directories(d);
  json tok = json::parse(test::readBytes(test::hfModel("llama") + "/tokenizer.json"));
  edit(tok);
  test::writeBytes(d / "tokenizer.json", tok.dump());
  return (d / "tokenizer.json").string();
}

// Writes a tokenizer.json whose pre_tokenizer is `depth` Sequences inside one another
// (built as text: the document is too deep to build and dump as a json value).
std::string deepSequenceTokenizer(const std::string& name, int depth) {
  json tok = json::parse(test::readBytes(test::hfModel("llama") + "/tokenizer.json"));
  const std::string leaf = tok["pre_tokenizer"].dump();
  tok["pre_tokenizer"] = "@@";
  std::string open, close;
  for (int i = 0; i < depth; ++i) {
    open += R"({"type":"Sequence","pretokenizers":[)";
    close += "]}";
  }
  std::string text = tok.dump();
  text.replace(text.find("\"@@\""), 4, open + leaf + close);
  const fs::path d = hostileDir() / name;
  fs::create_directories(d);
  test::writeBytes(d / "tokenizer.json", text);
  return (d / "tokenizer.json").string();
}

// A copy of the llama config.json with `field` set to the raw JSON text `value`.
std::string configCopy(const std::string& name, const std::string& field,
                       const std::string& value) {
  json doc = json::parse(test::readBytes(test::hfModel("llama") + "/config.json"));
  doc[field] = "@@";
  std::string text = doc.dump();
  text.replace(text.find("\"@@\""), 4, value);
  const fs::path p = hostileDir() / (name + ".json");
  test::writeBytes(p, text);
  return p.string();
}

// A copy of trace `in` whose JSON document text went through `editText` and whose tensors
// went through `editTensors` (name -> replacement bytes, or drop by returning false).
std::string traceCopy(const std::string& in, const std::string& name,
                      const std::function<void(std::string&)>& editText,
                      const std::function<void(json&)>& editDoc = nullptr,
                      const std::map<std::string, FloatTensor>& replace = {}) {
  auto file = SafetensorsFile::open(in);
  std::string doc = file->metadata().at("kvtrace");
  if (editDoc) {
    json j = json::parse(doc);
    editDoc(j);
    doc = j.dump();
  }
  if (editText) editText(doc);
  SafetensorsWriter w;
  for (const auto& [k, v] : file->metadata()) w.setMetadata(k, v);
  w.setMetadata("kvtrace", doc);
  for (const auto& n : file->names()) {
    if (auto it = replace.find(n); it != replace.end()) {
      w.addFloat(n, it->second);
      continue;
    }
    const auto& e = file->entry(n);
    w.addRaw(n, e.dtype, e.shape,
             std::vector<uint8_t>(file->bytes(e), file->bytes(e) + (e.end - e.begin)));
  }
  const std::string out = (hostileDir() / name).string();
  w.write(out, true);
  return out;
}

const std::string& v1Trace() {
  static const std::string p = test::fixture("traces-v1/llama-engine-snapshots.kvtrace");
  return p;
}

// A version 2 copy of the v1 fixture (read and written again).
const std::string& v2Trace() {
  static const std::string p = [] {
    const std::string out = (hostileDir() / "v2.kvtrace").string();
    TraceFile::write(TraceFile::read(v1Trace()), out, true);
    return out;
  }();
  return p;
}

InputError traceRefused(const std::string& path) {
  return refused(path, [&] { TraceFile::read(path); });
}

}  // namespace

// ---- JSON nesting depth --------------------------------------------------------------

TEST(HostileInput, DeepSequencePreTokenizerIsRefusedNotAStackOverflow) {
  const auto path = deepSequenceTokenizer("deep-seq", 100000);
  const auto e = refused(path, [&] { Tokenizer::loadFile(path); });
  EXPECT_EQ(e.field().rfind("pre_tokenizer.pretokenizers[0]", 0), 0u) << e.field();
  EXPECT_NE(e.detail().find(std::to_string(limits::kJsonDepth)), std::string::npos) << e.detail();
  EXPECT_LT(std::string(e.what()).size(), 400u);
}

TEST(HostileInput, SequenceNestingWithinTheJsonLimitIsStillBounded) {
  // 40 Sequences: 81 JSON levels, under the depth limit, over the pipeline nesting limit.
  const auto path = deepSequenceTokenizer("nested-seq", 40);
  const auto e = refused(path, [&] { Tokenizer::loadFile(path); });
  EXPECT_EQ(e.field().rfind("pre_tokenizer.pretokenizers[0]", 0), 0u) << e.field();
  EXPECT_NE(e.detail().find(std::to_string(limits::kPipelineNesting)), std::string::npos)
      << e.detail();
  // A few levels, as real files have, still load.
  EXPECT_NO_THROW(Tokenizer::loadFile(deepSequenceTokenizer("shallow-seq", 3)));
}

TEST(HostileInput, DeepNormalizerDecoderAndPostProcessorSequencesAreRefused) {
  for (const auto& [key, list] :
       std::vector<std::pair<std::string, std::string>>{{"normalizer", "normalizers"},
                                                        {"decoder", "decoders"},
                                                        {"post_processor", "processors"}}) {
    json seq = {{"type", "Lowercase"}};
    if (key == "decoder") seq = {{"type", "Fuse"}};
    if (key == "post_processor") seq = {{"type", "ByteLevel"}, {"trim_offsets", false}};
    for (int i = 0; i < limits::kPipelineNesting + 2; ++i)
      seq = {{"type", "Sequence"}, {list, json::array({seq})}};
    const auto path = tokenizerCopy("deep-" + key, [&](json& t) { t[key] = seq; });
    const auto e = refused(path, [&] { Tokenizer::loadFile(path); });
    EXPECT_EQ(e.field().rfind(key + "." + list + "[0]", 0), 0u) << e.field();
  }
}

TEST(HostileInput, DeepConfigJsonIsRefusedWithFileFieldAndLimit) {
  for (const char* field : {"num_hidden_layers", "unused_field"}) {
    const auto path = configCopy(std::string("deep-config-") + field, field, deepArray(100000));
    const auto e = refused(path, [&] { ModelConfig::load(path); });
    EXPECT_EQ(e.field().rfind(std::string(field) + "[0]", 0), 0u) << e.field();
    EXPECT_NE(e.detail().find("128"), std::string::npos);
  }
  const fs::path gen = hostileDir() / "deep-generation_config.json";
  test::writeBytes(gen, R"({"eos_token_id": )" + deepArray(100000) + "}");
  ModelConfig c = ModelConfig::load(test::hfModel("llama") + "/config.json");
  const auto e = refused(gen.string(), [&] { c.mergeGenerationConfig(gen.string()); });
  EXPECT_EQ(e.field().rfind("eos_token_id[0]", 0), 0u) << e.field();
}

TEST(HostileInput, DepthLimitCountsLevelsExactly) {
  EXPECT_NO_THROW(parseUntrustedJson(deepArray(limits::kJsonDepth), "f"));
  EXPECT_THROW(parseUntrustedJson(deepArray(limits::kJsonDepth + 1), "f"), InputError);
  try {
    parseUntrustedJson(R"({"a": [1, {"b": [[]]}]})", "f.json", "", 3);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "a[1].b");
  }
}

TEST(HostileInput, DeepTraceDocumentAndSafetensorsHeaderAreRefused) {
  const auto deepDoc = traceCopy(v2Trace(), "deep-doc.kvtrace", [](std::string& d) {
    d.insert(d.size() - 1, R"(,"extra":)" + deepArray(100000));
  });
  const auto e = traceRefused(deepDoc);
  EXPECT_EQ(e.field().rfind("extra[0]", 0), 0u) << e.field();

  const fs::path st = hostileDir() / "deep-header.safetensors";
  const std::string header = R"({"__metadata__":{"x":"y"},"t":)" + deepArray(100000) + "}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  test::writeBytes(st, bytes + header);
  const auto e2 = refused(st.string(), [&] { SafetensorsFile::open(st.string()); });
  EXPECT_EQ(e2.field().rfind("t[0]", 0), 0u) << e2.field();
}

// ---- error text ----------------------------------------------------------------------

TEST(HostileInput, ErrorTextEscapesRawBytesAndStaysShort) {
  const InputError e("f.json", "na\xffme",
                     std::string("bad \x01\x1b[31m value \xc3\x28 ok \xc3\xa9"));
  const std::string what = e.what();
  EXPECT_NE(what.find("na\\xffme"), std::string::npos) << what;
  EXPECT_NE(what.find("\\x01\\x1b[31m"), std::string::npos) << what;
  EXPECT_NE(what.find("\\xc3("), std::string::npos) << what;
  EXPECT_NE(what.find("ok \xc3\xa9"), std::string::npos) << what;  // valid UTF-8 stays
  const InputError big("f", "x", std::string(100000, 'a'));
  EXPECT_LT(std::string(big.what()).size(), 5000u);

  // A field holding a large nested value is quoted in a few dozen characters.
  json wide = json::array();
  for (int i = 0; i < 1000; ++i)
    wide.push_back({{"k", std::string(100, 'v')}, {"n", json::array({1, 2, 3})}});
  const auto path = configCopy("wide-config", "num_hidden_layers", wide.dump());
  const auto e2 = refused(path, [&] { ModelConfig::load(path); });
  EXPECT_EQ(e2.field(), "num_hidden_layers");
  EXPECT_LT(e2.detail().size(), 120u) << e2.detail();
}

TEST(HostileInput, SafetensorsJsonErrorWithRawBytesIsPrintable) {
  const fs::path st = hostileDir() / "raw-bytes.safetensors";
  const std::string header = "{\"a\xff\xfe\": 1}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  test::writeBytes(st, bytes + header);
  const auto e = refused(st.string(), [&] { SafetensorsFile::open(st.string()); });
  const std::string what = e.what();
  EXPECT_EQ(what.find('\xff'), std::string::npos) << what;
}

// ---- traces: ids and sizes -----------------------------------------------------------

TEST(HostileInput, ChosenTokenOutsideTheVocabularyIsRefusedInBothVersions) {
  for (int64_t bad : {int64_t{1200}, int64_t{-2}, int64_t{1} << 40}) {
    const auto v2 = traceCopy(v2Trace(), "chosen2.kvtrace", nullptr,
                              [&](json& d) { d["steps"]["chosen"][1] = bad; });
    EXPECT_EQ(traceRefused(v2).field(), "steps.chosen[1]");
    const auto v1 = traceCopy(v1Trace(), "chosen1.kvtrace", nullptr,
                              [&](json& d) { d["steps"][1]["chosen"] = bad; });
    EXPECT_EQ(traceRefused(v1).field(), "steps[1].chosen");
  }
  // The largest id and "none" are fine.
  const auto ok = traceCopy(v2Trace(), "chosen-ok.kvtrace", nullptr,
                            [](json& d) { d["steps"]["chosen"][1] = 1199; });
  EXPECT_NO_THROW(TraceFile::read(ok));
}

TEST(HostileInput, FedIdsOutsideTheVocabularyAreRefusedWithTheField) {
  const auto v2 = traceCopy(v2Trace(), "fed2.kvtrace", nullptr,
                            [](json& d) { d["steps"]["fed_ids"][2][0] = 5000; });
  const auto e = traceRefused(v2);
  EXPECT_EQ(e.field(), "steps.fed_ids[2]");
  EXPECT_NE(e.detail().find("5000"), std::string::npos);
  const auto v1 = traceCopy(v1Trace(), "fed1.kvtrace", nullptr,
                            [](json& d) { d["steps"][0]["fed_ids"][3] = -1; });
  EXPECT_EQ(traceRefused(v1).field(), "steps[0].fed_ids");
  const auto gen = traceCopy(v2Trace(), "gen.kvtrace", nullptr,
                             [](json& d) { d["requests"][0]["generated"][0] = 1200; });
  EXPECT_EQ(traceRefused(gen).field(), "requests[0].generated");
}

// A key and a value tensor of one step and layer hold records of the same entries (their widths
// may differ: MLA's value_head_dim).
TEST(HostileInput, VersionOneKeysAndValuesHoldAsManyRecords) {
  auto file = SafetensorsFile::open(v1Trace());
  for (const char* pair : {"v", "cache_v"}) {
    const std::string name = std::string("step1.layer2.") + pair;
    const auto& e = file->entry(name);
    FloatTensor wider = FloatTensor::zeros({e.shape[0], e.shape[1] + 3, e.shape[2]});
    const auto path = traceCopy(v1Trace(), std::string("kv-") + pair + ".kvtrace", nullptr, nullptr,
                                {{name, wider}});
    const auto err = traceRefused(path);
    EXPECT_EQ(err.field(), name) << err.what();
    EXPECT_NE(err.detail().find("as many records"), std::string::npos) << err.detail();
  }
}

// value_head_dim (MLA's narrower value records) is a promise about every value tensor: one that
// does not keep it is refused naming the tensor; keys keep head_dim.
TEST(HostileInput, ValueRecordsMustHaveTheDeclaredValueWidth) {
  const auto path = traceCopy(v2Trace(), "value-width.kvtrace", nullptr,
                              [](json& d) { d["model"]["value_head_dim"] = 8; });
  const auto err = traceRefused(path);
  EXPECT_EQ(err.field().rfind("layer", 0), 0u) << err.what();
  EXPECT_NE(err.field().find(".v"), std::string::npos) << err.what();
  EXPECT_NE(err.detail().find("value_head_dim"), std::string::npos) << err.detail();
  const auto zero = traceCopy(v2Trace(), "value-width-0.kvtrace", nullptr,
                              [](json& d) { d["model"]["value_head_dim"] = 0; });
  EXPECT_EQ(traceRefused(zero).field(), "model.value_head_dim");
}

TEST(HostileInput, HeaderSizesAreBoundedBeforeAllocating) {
  struct Case {
    const char* key;
    json value;
  };
  for (const Case& c :
       {Case{"num_layers", int64_t{1} << 40}, Case{"num_layers", 0}, Case{"num_kv_heads", 1 << 20},
        Case{"head_dim", -1}, Case{"vocab_size", int64_t{1} << 50},
        Case{"num_layers", json(18446744073709551615ull)}}) {
    const auto path = traceCopy(v2Trace(), "size.kvtrace", nullptr,
                                [&](json& d) { d["model"][c.key] = c.value; });
    const auto e = traceRefused(path);
    EXPECT_EQ(e.field(), std::string("model.") + c.key) << e.what();
  }
  const auto lengths = traceCopy(v2Trace(), "lengths.kvtrace", nullptr, [](json& d) {
    d["steps"]["cache_lengths"][0] = {7, int64_t{1} << 40, 7};
  });
  EXPECT_EQ(traceRefused(lengths).field(), "steps.cache_lengths[0]");
  const auto v1lengths = traceCopy(v1Trace(), "lengths1.kvtrace", nullptr, [](json& d) {
    d["steps"][0]["cache_lengths"] = {7, -5, 7};
  });
  EXPECT_EQ(traceRefused(v1lengths).field(), "steps[0].cache_lengths");
  const auto draws = traceCopy(v2Trace(), "draws.kvtrace", nullptr,
                               [](json& d) { d["steps"]["rng_draws_before"][0] = -1; });
  EXPECT_EQ(traceRefused(draws).field(), "steps.rng_draws_before[0]");
  const auto count = traceCopy(v2Trace(), "count.kvtrace", nullptr,
                               [](json& d) { d["steps"]["count"] = 18446744073709551615ull; });
  EXPECT_EQ(traceRefused(count).field(), "steps.count");
}

// ---- configs and tokenizers: conversions ---------------------------------------------

TEST(HostileInput, ConfigSizesAndConversionsAreChecked) {
  struct Case {
    const char* field;
    std::string value;
  };
  for (const Case& c :
       {Case{"num_hidden_layers", "1000000000000"}, Case{"hidden_size", "1e300"},
        Case{"hidden_size", "-1e300"}, Case{"vocab_size", "18446744073709551615"},
        Case{"num_attention_heads", "9223372036854775807"}, Case{"head_dim", "65536"},
        Case{"intermediate_size", "4.5"}, Case{"max_position_embeddings", "1e19"}}) {
    const auto path = configCopy("conv", c.field, c.value);
    const auto e = refused(path, [&] { ModelConfig::load(path); });
    EXPECT_EQ(e.field(), c.field) << c.value << ": " << e.what();
  }
  // GPT-2: n_inner defaults to 4 * n_embd, which must not overflow.
  json gpt2 = json::parse(test::readBytes(test::hfModel("gpt2") + "/config.json"));
  gpt2["n_embd"] = int64_t{1} << 62;
  try {
    ModelConfig::fromJson(gpt2, "gpt2.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "n_embd");
  }
  // rope original_max_position_embeddings: a float beyond int64 is refused, not cast.
  json llama = json::parse(test::readBytes(test::hfModel("llama") + "/config.json"));
  llama["rope_parameters"] = {
      {"rope_type", "llama3"},   {"rope_theta", 500000.0},
      {"factor", 8.0},           {"low_freq_factor", 1.0},
      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1e300}};
  try {
    ModelConfig::fromJson(llama, "llama.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "rope_parameters.original_max_position_embeddings");
  }
}

TEST(HostileInput, TokenIdsBeyondTheLimitAreRefused) {
  const auto huge =
      tokenizerCopy("huge-id", [](json& t) { t["model"]["vocab"]["zzz"] = INT64_MAX; });
  EXPECT_EQ(refused(huge, [&] { Tokenizer::loadFile(huge); }).field(), "model.vocab.zzz");
  const auto wrap = tokenizerCopy(
      "wrap-id", [](json& t) { t["model"]["vocab"]["zzz"] = 18446744073709551615ull; });
  EXPECT_EQ(refused(wrap, [&] { Tokenizer::loadFile(wrap); }).field(), "model.vocab.zzz");
  const auto added = tokenizerCopy("added-id", [](json& t) {
    t["added_tokens"].push_back({{"id", int64_t{1} << 40}, {"content", "<x>"}, {"special", true}});
  });
  const auto e = refused(added, [&] { Tokenizer::loadFile(added); });
  EXPECT_EQ(e.field().substr(0, 13), "added_tokens[") << e.field();
}

// Found by fuzz_trace_doc: the writer let nlohmann's type_error escape on a metadata value
// that is not UTF-8 (a header that could not be read back).
TEST(HostileInput, WriterRefusesMetadataThatIsNotUtf8) {
  SafetensorsWriter w;
  w.setMetadata("kvtrace", "{\"a\": \"\x9e\"}");
  const auto path = (hostileDir() / "not-utf8.safetensors").string();
  EXPECT_THROW(w.write(path, true), UsageError);
  EXPECT_FALSE(fs::exists(path));
}

TEST(HostileInput, PolicyTopKAboveInt64IsRefusedNotWrapped) {
  const auto path = traceCopy(v2Trace(), "topk.kvtrace", nullptr, [](json& d) {
    d["requests"][0]["policy"]["top_k"] = 18446744073709551615ull;
  });
  EXPECT_EQ(traceRefused(path).field(), "requests[0].policy.top_k");
}
