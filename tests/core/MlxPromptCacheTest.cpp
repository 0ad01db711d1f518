// mlx-lm prompt caches as traces (tests/fixtures/mlx, saved by mlx-lm itself with
// save_prompt_cache: make_mlx_fixtures.py): KVCache and unwrapped RotatingKVCache layers, and
// DeepSeek's latent or decompressed-head caches, audit clean against the checkpoint that made them, with the tokens from the file's metadata or
// given by the caller; a wrapped ring, a cache without tokens, another model and a damaged
// file are refused naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/MlxPromptCacheTrace.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/TraceFileSniffer.hpp"

using namespace kvscope;

namespace {

std::string mlxFixture(const std::string& name) { return test::fixture("mlx/" + name); }

std::string fieldOf(const std::function<void()>& read) {
  try {
    read();
  } catch (const InputError& e) {
    return e.field();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(MlxPromptCache, SavedCachesAuditCleanAgainstTheirCheckpoint) {
  auto model = Model::load(test::hfModel("llama"));
  for (const char* name : {"llama-kv.safetensors", "llama-rotating.safetensors"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(describeFile(mlxFixture(name)).kind, FileKind::MlxCache);
    const Trace t = readMlxPromptCacheTrace(mlxFixture(name), model->checkpoint());
    ASSERT_EQ(t.steps.size(), 1u);
    EXPECT_EQ(t.steps[0].fedIds.size(), 13u);
    EXPECT_EQ(t.steps[0].layers[0].keys.shape, (std::vector<int64_t>{2, 13, 16}));
    const auto r = Auditor::audit(*model, t);
    EXPECT_TRUE(r.report.clean()) << r.report.toText();
    EXPECT_EQ(r.report.stage(AuditStage::Cache)->status, StageStatus::Pass);
  }
}

// DeepSeek: mlx-lm's V3 caches latent rows and roped key parts (the pairs turned in place, read
// back in V3's de-interleaved order), its V2 each head's decompressed key and value.
TEST(MlxPromptCache, DeepseekCachesAuditCleanAsLatentRowsOrDecompressedHeads) {
  for (const auto& [family, heads] : {std::pair<std::string, bool>{"deepseek_v3", false}, {"deepseek_v2", true}}) {
    SCOPED_TRACE(family);
    auto model = Model::load(test::fixture("families/models/" + family));
    const Trace t = readMlxPromptCacheTrace(mlxFixture(family + (heads ? "-heads" : "-latent") + ".safetensors"),
                                            model->checkpoint());
    EXPECT_EQ(t.model.latentHeads, heads);
    ASSERT_EQ(t.layerKinds.size(), 3u);
    for (const auto& k : t.layerKinds) EXPECT_TRUE(k.latent);
    const auto& first = t.steps[0].layers[0];
    EXPECT_EQ(first.keys.shape, heads ? (std::vector<int64_t>{4, 13, 24}) : (std::vector<int64_t>{1, 13, 32}));
    EXPECT_EQ(first.values.shape, heads ? (std::vector<int64_t>{4, 13, 12}) : (std::vector<int64_t>{1, 13, 8}));
    const auto r = Auditor::audit(*model, t);
    EXPECT_TRUE(r.report.clean()) << r.report.toText();
  }
}

TEST(MlxPromptCache, TokensComeFromTheCallerWhenTheFileNamesNone) {
  auto model = Model::load(test::hfModel("llama"));
  const std::string plain = mlxFixture("llama-kv-plain.safetensors");
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(plain, model->checkpoint()); }), "0.tokens");
  const Trace named = readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint());
  const auto tokens = named.requests[0].promptIds;
  EXPECT_TRUE(Auditor::audit(*model, readMlxPromptCacheTrace(plain, model->checkpoint(), tokens)).report.clean());
  // Other tokens than the cache was made from: the first one that differs is where it diverges.
  auto other = tokens;
  other[4] = other[4] + 1;
  const auto r = Auditor::audit(*model, readMlxPromptCacheTrace(plain, model->checkpoint(), other)).report;
  ASSERT_FALSE(r.clean());
  EXPECT_EQ(r.firstDivergence.position, 4) << r.toText();
  auto shorter = tokens;
  shorter.pop_back();
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(plain, model->checkpoint(), shorter); }), "0.tokens");
  // A file that names its tokens takes no others.
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint(), other); }),
            "0.tokens");
  EXPECT_TRUE(readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint(), tokens).steps.size() == 1);
}

TEST(MlxPromptCache, WrappedRingsOtherModelsAndDamageAreRefusedByField) {
  auto model = Model::load(test::hfModel("llama"));
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-wrapped.safetensors"), model->checkpoint()); }),
            "0.5");
  auto gpt2 = Model::load(test::hfModel("gpt2"));  // 2 layers of 12 heads
  EXPECT_NE(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), gpt2->checkpoint()); }), "");
  std::ifstream in(mlxFixture("llama-rotating.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = bytes.find("\"RotatingKVCache\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 17, "\"QuantizedKVCach\"");  // same length: the header stays valid
  const auto path = std::filesystem::temp_directory_path() / "kvscope-mlx-quantized.safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(path.string(), model->checkpoint()); }), "1.0");
  std::filesystem::remove(path);
}

}  // namespace
