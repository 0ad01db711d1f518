#include <gtest/gtest.h>

#include "CliRunner.hpp"
#include "TestSupport.hpp"
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using kvscope::test::freshDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

json readJson(const fs::path& p) { return json::parse(slurp(p)); }

std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = slurp(e.path());
  return out;
}

CheckpointSpec tiny(Architecture a) {
  CheckpointSpec s = CheckpointSpec::demo();
  s.setArchitecture(a);
  s.vocabSize = 300;
  s.numLayers = 2;
  return s;
}

// The state-dict names transformers uses, written out independently of the writer.
std::set<std::string> expectedNames(const CheckpointSpec& s) {
  std::set<std::string> n;
  if (s.architecture == Architecture::Gpt2) {
    n = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
         "transformer.ln_f.bias"};
    for (int i = 0; i < s.numLayers; ++i)
      for (const char* t :
           {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
            "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
        n.insert("transformer.h." + std::to_string(i) + "." + t);
    return n;
  }
  n = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!s.tieWordEmbeddings) n.insert("lm_head.weight");
  const bool qkvBias = s.architecture == Architecture::Qwen2 || s.attentionBias;
  for (int i = 0; i < s.numLayers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* t :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      n.insert(l + t);
    if (qkvBias)
      for (const char* t :
           {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
        n.insert(l + t);
    if (s.attentionBias) n.insert(l + "self_attn.o_proj.bias");
  }
  return n;
}

}  // namespace

TEST(CheckpointWriter, SameSpecAndSeedGiveByteIdenticalFiles) {
  CheckpointSpec s = tiny(Architecture::Llama);
  s.numShards = 2;
  const fs::path a = freshDir("det-a"), b = freshDir("det-b"), c = freshDir("det-c");
  CheckpointWriter(s).write(a.string());
  CheckpointWriter(s).write(b.string());
  const auto ca = contents(a);
  EXPECT_EQ(ca.size(), 8u);  // 2 shards, index, config, generation, tokenizer x2, manifest
  EXPECT_EQ(ca, contents(b));

  s.seed = 7;
  CheckpointWriter(s).write(c.string());
  const auto cc = contents(c);
  EXPECT_NE(cc.at("model-00001-of-00002.safetensors"), ca.at("model-00001-of-00002.safetensors"));
  EXPECT_EQ(cc.at("tokenizer.json"), ca.at("tokenizer.json"));
  EXPECT_EQ(cc.at("config.json"), ca.at("config.json"));
}

TEST(CheckpointWriter, ShardingDoesNotChangeTensorValues) {
  CheckpointSpec s = tiny(Architecture::Qwen2);
  const fs::path one = freshDir("one"), four = freshDir("four");
  CheckpointWriter(s).write(one.string());
  s.numShards = 4;
  CheckpointWriter(s).write(four.string());
  const auto a = Checkpoint::open(one.string()), b = Checkpoint::open(four.string());
  ASSERT_EQ(a->tensorNames(), b->tensorNames());
  EXPECT_EQ(b->weightFiles().size(), 4u);
  for (const auto& n : a->tensorNames())
    EXPECT_EQ(a->fileFor(n).readFloat(n), b->fileFor(n).readFloat(n)) << n;
  const json index = readJson(four / "model.safetensors.index.json");
  uint64_t bytes = 0;
  for (const auto& n : b->tensorNames()) {
    const auto& e = b->entry(n);
    bytes += e.end - e.begin;
    EXPECT_EQ(index["weight_map"][n], fs::path(b->fileFor(n).path()).filename().string()) << n;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), bytes);
  EXPECT_EQ(index["weight_map"].size(), a->tensorNames().size());
}

TEST(CheckpointWriter, HalfPrecisionDtypesReadBack) {
  for (const auto dtype : {SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
    CheckpointSpec s = tiny(Architecture::Llama);
    s.storedDtype = dtype;
    const std::string name = safetensorsDtypeName(dtype);
    const fs::path dir = freshDir("dtype-" + name);
    const CheckpointWriter w(s);
    w.write(dir.string());
    const auto ck = Checkpoint::open(dir.string());
    EXPECT_EQ(ck->storedDtype(), name);
    EXPECT_EQ(ck->config().dtype, dtype == SafetensorsDtype::F16 ? "float16" : "bfloat16");
    for (const auto& t : w.tensors()) {
      EXPECT_EQ(ck->entry(t.name).dtype, dtype) << t.name;
      const FloatTensor exact = w.makeTensor(t);
      FloatTensor rounded = exact;
      for (auto& x : rounded.data)
        x = dtype == SafetensorsDtype::F16 ? halfToFloat(floatToHalf(x))
                                           : bfloat16ToFloat(floatToBfloat16(x));
      const FloatTensor stored = ck->fileFor(t.name).readFloat(t.name);
      EXPECT_EQ(stored, rounded) << t.name;
      EXPECT_LE(FloatTensor::maxAbsDiff(stored, exact), 0.01f * std::max(1.0f, exact.maxAbs()));
    }
  }
}

TEST(CheckpointWriter, EveryArchitectureRoundTripsThroughModelConfig) {
  std::vector<CheckpointSpec> specs;
  for (const auto style : {ConfigStyle::V4, ConfigStyle::V5}) {
    CheckpointSpec gpt2 = tiny(Architecture::Gpt2);
    gpt2.intermediateSize = 96;  // n_inner != 4 * n_embd
    CheckpointSpec llama = tiny(Architecture::Llama);
    llama.attentionBias = true;
    llama.headDim = 32;  // override: q_proj is [4 * 32, 64]
    llama.ropeType = "llama3";
    llama.ropeTheta = 500000.0;
    llama.ropeFactor = 8.0;
    llama.ropeLowFreqFactor = 1.0;
    llama.ropeHighFreqFactor = 4.0;
    llama.ropeOriginalMaxPositions = 64;
    llama.eosTokenId = 5;
    CheckpointSpec mistral = tiny(Architecture::Mistral);
    mistral.slidingWindow = 16;
    mistral.ropeType = "linear";
    mistral.ropeFactor = 2.0;
    CheckpointSpec qwen2 = tiny(Architecture::Qwen2);
    qwen2.numLayers = 4;
    qwen2.slidingWindow = 8;
    qwen2.useSlidingWindow = true;
    qwen2.maxWindowLayers = 1;
    qwen2.tieWordEmbeddings = true;
    qwen2.ropeType = "dynamic";
    qwen2.ropeFactor = 2.0;
    qwen2.ropeTheta = 1000000.0;
    qwen2.storedDtype = SafetensorsDtype::BF16;
    for (auto s : {gpt2, llama, mistral, qwen2}) {
      s.configStyle = style;
      specs.push_back(s);
    }
  }
  int index = 0;
  for (const auto& s : specs) {
    const std::string label =
        architectureName(s.architecture) + (s.configStyle == ConfigStyle::V4 ? "-v4" : "-v5");
    SCOPED_TRACE(label);
    const fs::path dir = freshDir("arch-" + std::to_string(index++));
    CheckpointWriter(s).write(dir.string());
    const json raw = readJson(dir / "config.json");
    EXPECT_EQ(raw.contains("rope_parameters"),
              s.configStyle == ConfigStyle::V5 && s.architecture != Architecture::Gpt2);
    EXPECT_EQ(raw.contains("torch_dtype"), s.configStyle == ConfigStyle::V4);
    EXPECT_EQ(raw.contains("dtype"), s.configStyle == ConfigStyle::V5);

    const auto ck = Checkpoint::open(dir.string());
    const ModelConfig& c = ck->config();
    EXPECT_EQ(c.architecture, s.architecture);
    EXPECT_EQ(c.vocabSize, s.vocabSize);
    EXPECT_EQ(c.hiddenSize, s.hiddenSize);
    EXPECT_EQ(c.numLayers, s.numLayers);
    EXPECT_EQ(c.numHeads, s.numHeads);
    EXPECT_EQ(c.numKvHeads, s.numKvHeads);
    EXPECT_EQ(c.headDim, s.headDim > 0 ? s.headDim : s.hiddenSize / s.numHeads);
    EXPECT_EQ(c.intermediateSize, s.intermediateSize);
    EXPECT_EQ(c.maxPositions, s.maxPositions);
    EXPECT_EQ(c.tieWordEmbeddings, s.tieWordEmbeddings);
    EXPECT_EQ(c.qkvBias, s.architecture == Architecture::Gpt2 ||
                             s.architecture == Architecture::Qwen2 || s.attentionBias);
    EXPECT_EQ(c.eosTokenIds,
              std::vector<int64_t>{s.eosTokenId < 0 ? s.vocabSize - 1 : s.eosTokenId});
    ASSERT_TRUE(c.bosTokenId.has_value());
    EXPECT_EQ(*c.bosTokenId, s.vocabSize - 1);
    EXPECT_EQ(c.dtype, s.storedDtype == SafetensorsDtype::BF16 ? "bfloat16" : "float32");
    EXPECT_EQ(ck->storedDtype(), safetensorsDtypeName(s.storedDtype));
    if (s.architecture != Architecture::Gpt2) {
      EXPECT_EQ(c.rope.type, s.ropeType);
      EXPECT_DOUBLE_EQ(c.rope.theta, s.ropeTheta);
      EXPECT_DOUBLE_EQ(c.rope.factor, s.ropeType == "default" ? 1.0 : s.ropeFactor);
      EXPECT_EQ(c.rope.originalMaxPositions, s.ropeOriginalMaxPositions);
    }
    std::vector<bool> sliding(static_cast<size_t>(s.numLayers), false);
    if (s.architecture == Architecture::Mistral && s.slidingWindow > 0)
      sliding.assign(sliding.size(), true);
    if (s.architecture == Architecture::Qwen2 && s.useSlidingWindow)
      for (int64_t i = s.maxWindowLayers; i < s.numLayers; ++i)
        sliding[static_cast<size_t>(i)] = true;
    for (int64_t i = 0; i < s.numLayers; ++i)
      EXPECT_EQ(c.isSlidingLayer(i), sliding[static_cast<size_t>(i)]) << "layer " << i;

    // Tensor names and shapes as transformers lays them out.
    const auto names = ck->tensorNames();
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expectedNames(s));
    const int64_t H = s.hiddenSize, V = s.vocabSize;
    if (s.architecture == Architecture::Gpt2) {
      EXPECT_EQ(ck->entry("transformer.wte.weight").shape, (std::vector<int64_t>{V, H}));
      EXPECT_EQ(ck->entry("transformer.wpe.weight").shape,
                (std::vector<int64_t>{s.maxPositions, H}));
      EXPECT_EQ(ck->entry("transformer.h.1.attn.c_attn.weight").shape,
                (std::vector<int64_t>{H, 3 * H}));
      EXPECT_EQ(ck->entry("transformer.h.1.attn.c_attn.bias").shape, (std::vector<int64_t>{3 * H}));
      EXPECT_EQ(ck->entry("transformer.h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{H, 96}));
      EXPECT_EQ(ck->entry("transformer.h.0.mlp.c_proj.weight").shape,
                (std::vector<int64_t>{96, H}));
    } else {
      const int64_t D = c.headDim, I = s.intermediateSize;
      const std::string l = "model.layers.1.";
      EXPECT_EQ(ck->entry("model.embed_tokens.weight").shape, (std::vector<int64_t>{V, H}));
      EXPECT_EQ(ck->entry(l + "self_attn.q_proj.weight").shape,
                (std::vector<int64_t>{s.numHeads * D, H}));
      EXPECT_EQ(ck->entry(l + "self_attn.k_proj.weight").shape,
                (std::vector<int64_t>{s.numKvHeads * D, H}));
      EXPECT_EQ(ck->entry(l + "self_attn.v_proj.weight").shape,
                (std::vector<int64_t>{s.numKvHeads * D, H}));
      EXPECT_EQ(ck->entry(l + "self_attn.o_proj.weight").shape,
                (std::vector<int64_t>{H, s.numHeads * D}));
      EXPECT_EQ(ck->entry(l + "mlp.gate_proj.weight").shape, (std::vector<int64_t>{I, H}));
      EXPECT_EQ(ck->entry(l + "mlp.down_proj.weight").shape, (std::vector<int64_t>{H, I}));
      if (c.qkvBias) {
        EXPECT_EQ(ck->entry(l + "self_attn.k_proj.bias").shape,
                  (std::vector<int64_t>{s.numKvHeads * D}));
      }
    }
  }
}

TEST(CheckpointWriter, NormWeightsNearOneAndBiasesSmall) {
  CheckpointSpec s = tiny(Architecture::Qwen2);
  const CheckpointWriter w(s);
  for (const auto& t : w.tensors()) {
    const FloatTensor v = w.makeTensor(t);
    double sum = 0, sq = 0;
    for (float x : v.data) {
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.data.size());
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    if (t.name.find("norm") != std::string::npos) {
      EXPECT_NEAR(mean, 1.0, 0.05) << t.name;
      EXPECT_LT(sd, 0.2) << t.name;
      EXPECT_GT(sd, 0.0) << t.name;  // noise, not a constant
    } else if (t.name.find(".bias") != std::string::npos) {
      EXPECT_LT(std::fabs(mean), 0.05) << t.name;
      EXPECT_LT(sd, 0.1 * s.initStd * 2) << t.name;
    } else if (v.data.size() > 2000) {
      EXPECT_NEAR(sd, s.initStd, 0.1 * s.initStd) << t.name;
      EXPECT_NEAR(mean, 0.0, 0.05 * s.initStd) << t.name;
    }
  }
}

TEST(CheckpointWriter, TokenizerJsonIsByteLevelBpe) {
  for (const int64_t vocab : {300, 512, 4000}) {
    CheckpointSpec s = tiny(Architecture::Llama);
    s.vocabSize = vocab;
    const fs::path dir = freshDir("tok-" + std::to_string(vocab));
    CheckpointWriter(s).write(dir.string());
    const json tok = readJson(dir / "tokenizer.json");
    const json& model = tok["model"];
    EXPECT_EQ(model["type"], "BPE");
    EXPECT_EQ(tok["pre_tokenizer"]["type"], "ByteLevel");
    EXPECT_EQ(tok["pre_tokenizer"]["use_regex"], true);
    EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");
    const json& vocabJson = model["vocab"];
    const json& merges = model["merges"];
    EXPECT_EQ(static_cast<int64_t>(vocabJson.size()),
              256 + static_cast<int64_t>(merges.size()) + 1);
    EXPECT_EQ(static_cast<int64_t>(vocabJson.size()), vocab);
    std::set<int64_t> ids;
    std::map<int64_t, std::string> byId;
    for (auto it = vocabJson.begin(); it != vocabJson.end(); ++it) {
      ids.insert(it.value().get<int64_t>());
      byId[it.value().get<int64_t>()] = it.key();
    }
    EXPECT_EQ(static_cast<int64_t>(ids.size()), vocab);
    EXPECT_EQ(*ids.begin(), 0);
    EXPECT_EQ(*ids.rbegin(), vocab - 1);
    // GPT-2's byte alphabet: '!' first, space as 'Ġ' (U+0120), newline as 'Ċ' (U+010A).
    EXPECT_EQ(byId[0], "!");
    EXPECT_EQ(vocabJson["Ġ"].get<int64_t>(), 188 + 32);
    EXPECT_EQ(vocabJson["Ċ"].get<int64_t>(), 188 + 10);
    ASSERT_EQ(tok["added_tokens"].size(), 1u);
    EXPECT_EQ(tok["added_tokens"][0]["id"], vocab - 1);
    EXPECT_EQ(tok["added_tokens"][0]["content"], "<|endoftext|>");
    EXPECT_EQ(tok["added_tokens"][0]["special"], true);
    EXPECT_EQ(byId[vocab - 1], "<|endoftext|>");
    // Every merge joins two known tokens into the next new id.
    int64_t next = 256;
    for (const auto& m : merges) {
      ASSERT_TRUE(m.is_array() && m.size() == 2);
      const std::string a = m[0], b = m[1];
      EXPECT_TRUE(vocabJson.contains(a) && vocabJson.contains(b)) << a << " " << b;
      ASSERT_TRUE(vocabJson.contains(a + b)) << a << b;
      EXPECT_EQ(vocabJson[a + b].get<int64_t>(), next++);
      EXPECT_LT(vocabJson[a].get<int64_t>(), vocabJson[a + b].get<int64_t>());
    }
    const json cfg = readJson(dir / "tokenizer_config.json");
    EXPECT_EQ(cfg["eos_token"], "<|endoftext|>");
    EXPECT_EQ(cfg["model_max_length"], s.maxPositions);
  }
}

TEST(CheckpointWriter, RefusesNonEmptyDirectoryAndReplacesOnlyItsOwnFiles) {
  const fs::path dir = freshDir("force");
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "notes.txt");
    out << "mine";
  }
  CheckpointSpec s = tiny(Architecture::Llama);
  s.numShards = 3;
  EXPECT_THROW(CheckpointWriter(s).write(dir.string()), InputError);
  EXPECT_EQ(contents(dir).size(), 1u);

  CheckpointWriter(s).write(dir.string(), true);
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  s.numShards = 1;
  CheckpointWriter(s).write(dir.string(), true);  // stale shards and index go
  const auto after = contents(dir);
  EXPECT_EQ(after.count("model-00001-of-00003.safetensors"), 0u);
  EXPECT_EQ(after.count("model.safetensors.index.json"), 0u);
  EXPECT_EQ(after.count("model.safetensors"), 1u);
  EXPECT_EQ(after.at("notes.txt"), "mine");
  EXPECT_EQ(Checkpoint::open(dir.string())->weightFiles().size(), 1u);

  // A weight file make-demo did not write would sit beside the new weights: refused.
  {
    std::ofstream out(dir / "pytorch_model.bin");
    out << "theirs";
  }
  const auto before = contents(dir);
  EXPECT_THROW(CheckpointWriter(s).write(dir.string(), true), InputError);
  EXPECT_EQ(contents(dir), before);
}

TEST(CheckpointWriter, InconsistentSpecsAreUsageErrors) {
  CheckpointSpec s = tiny(Architecture::Gpt2);
  s.numKvHeads = 2;
  EXPECT_THROW(CheckpointWriter{s}, UsageError);
  s = tiny(Architecture::Llama);
  s.numShards = 1000;  // more shards than tensors
  EXPECT_THROW(CheckpointWriter{s}, UsageError);
  s = tiny(Architecture::Llama);
  s.vocabSize = 256;
  EXPECT_THROW(CheckpointWriter{s}, UsageError);
  s = tiny(Architecture::Llama);
  s.ropeType = "llama3";  // needs original_max_position_embeddings
  EXPECT_THROW(CheckpointWriter{s}, UsageError);
  s = tiny(Architecture::Mistral);
  s.attentionBias = true;
  EXPECT_THROW(CheckpointWriter{s}, UsageError);
  EXPECT_THROW(CheckpointSpec::preset("huge"), UsageError);
  EXPECT_THROW(parseArchitecture("falcon"), UsageError);
}

TEST(CheckpointWriter, PresetsHaveTheDocumentedShapes) {
  const CheckpointSpec d = CheckpointSpec::demo();
  EXPECT_EQ(d.architecture, Architecture::Llama);
  EXPECT_LT(d.numKvHeads, d.numHeads);  // GQA
  EXPECT_EQ(d.storedDtype, SafetensorsDtype::F32);
  EXPECT_NO_THROW(CheckpointWriter{d});
  const CheckpointSpec g = CheckpointSpec::gpt2Small();
  EXPECT_EQ(g.architecture, Architecture::Gpt2);
  EXPECT_EQ(g.numLayers, 12);
  EXPECT_EQ(g.hiddenSize, 768);
  EXPECT_EQ(g.numHeads, 12);
  EXPECT_EQ(g.vocabSize, 8192);
  EXPECT_EQ(g.maxPositions, 1024);
  EXPECT_DOUBLE_EQ(g.initStd, 0.02);
  // GPT-2 small's parameter count with an 8192-token vocabulary (tied head).
  EXPECT_EQ(CheckpointWriter(g).parameterCount(),
            12 * (2 * 768 + 2 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 +
                  3072 * 768 + 768) +
                8192 * 768 + 1024 * 768 + 2 * 768);
}

// --- kvscope-cli make-demo ---

namespace {

// Exit code; `out` gets stdout followed by stderr.
int runCli(const std::vector<std::string>& args, std::string* out = nullptr) {
  const test::CliRun r = test::runKvscopeCli(args);
  if (out) *out = r.out + r.err;
  return r.signal == 0 ? r.exitCode : -1;
}

}  // namespace

TEST(CheckpointWriterCli, MakeDemoWritesALoadableCheckpoint) {
  const fs::path dir = freshDir("cli-demo");
  std::string out;
  ASSERT_EQ(runCli({"make-demo", dir.string()}, &out), 0) << out;
  EXPECT_NE(out.find("model.safetensors"), std::string::npos) << out;
  EXPECT_NE(out.find("tokenizer.json"), std::string::npos) << out;
  const auto ck = Checkpoint::open(dir.string());
  EXPECT_EQ(ck->config().architecture, Architecture::Llama);
  EXPECT_EQ(ck->config().numKvHeads, 2);

  const fs::path g = freshDir("cli-gpt2");
  ASSERT_EQ(runCli({"make-demo", g.string(), "--arch", "gpt2", "--dtype", "F16", "--shards", "2", "--config-style", "v4",
                    "--seed", "3"},
                   &out),
            0)
      << out;
  const auto gk = Checkpoint::open(g.string());
  EXPECT_EQ(gk->config().architecture, Architecture::Gpt2);
  EXPECT_EQ(gk->storedDtype(), "F16");
  EXPECT_EQ(gk->weightFiles().size(), 2u);
  EXPECT_TRUE(readJson(g / "config.json").contains("torch_dtype"));
}

TEST(CheckpointWriterCli, MakeDemoRefusesNonEmptyDirectoryWithoutTouchingIt) {
  const fs::path dir = freshDir("cli-nonempty");
  fs::create_directories(dir / "sub");
  {
    std::ofstream out(dir / "config.json");
    out << "{\"mine\": true}";
  }
  const auto before = contents(dir);
  const auto mtime = fs::last_write_time(dir / "config.json");
  std::string out;
  EXPECT_EQ(runCli({"make-demo", dir.string()}, &out), 2) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(contents(dir), before);
  EXPECT_EQ(fs::last_write_time(dir / "config.json"), mtime);

  EXPECT_EQ(runCli({"make-demo", dir.string(), "--preset", "nope"}, &out), 2) << out;
  EXPECT_EQ(contents(dir), before);
}
