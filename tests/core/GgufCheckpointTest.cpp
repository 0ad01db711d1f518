// GGUF checkpoints (tests/fixtures/gguf, written by llama.cpp's own convert_hf_to_gguf.py and
// gguf-py: make_gguf_fixtures.py): every block type KV Scope reads dequantises to exactly what
// gguf-py's dequantize gives; the converted Llama (q/k rows permuted by the converter) and
// Qwen3 run the reference within 1e-4 of transformers' own GGUF loader running the same file;
// the llama F16 file is the HF checkpoint read back (same config, same logits within F16's
// rounding); damaged or unsupported files are refused naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "TestSupport.hpp"
#include "gguf/GgmlBlocks.hpp"
#include "kvscope/Checkpoint.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/GgufFile.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;

namespace {

std::string ggufFixture(const std::string& name) { return test::fixture("gguf/" + name); }

std::vector<int64_t> ggufPrompt() {
  std::ifstream in(ggufFixture("goldens.json"));
  return nlohmann::json::parse(in)["prompt"].get<std::vector<int64_t>>();
}

TEST(GgufBlocks, EveryTypeDequantisesAsGgufPyDoes) {
  auto file = GgufFile::open(ggufFixture("blocks.gguf"));
  auto golden = SafetensorsFile::open(ggufFixture("goldens.safetensors"));
  int checked = 0;
  for (const GgufTensorInfo& t : file->tensors()) {
    SCOPED_TRACE(t.name);
    const kvscope::detail::GgmlType* g = kvscope::detail::ggmlType(t.type);
    ASSERT_NE(g, nullptr);
    const FloatTensor want = golden->readFloat("blocks." + t.name);
    std::vector<float> got(static_cast<size_t>(t.numel()));
    kvscope::detail::ggmlDequantize(*g, file->bytes(t), t.numel(), got.data());
    ASSERT_EQ(got.size(), want.data.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want.data[i]) << "element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16
}

class GgufReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufReference, LogitsEqualTransformersGgufLoader) {
  const std::string name = GetParam();
  auto model = Model::load(ggufFixture(name + ".gguf"));
  EXPECT_TRUE(model->checkpoint().isGguf());
  const ReferenceRun run = model->reference(ggufPrompt());
  const FloatTensor want =
      SafetensorsFile::open(ggufFixture("goldens.safetensors"))->readFloat(name + ".prompt_logits");
  float mag = 0;
  for (float v : want.data) mag = std::max(mag, std::fabs(v));
  EXPECT_TRUE(test::closeTo(run.logits, want, 1e-4f + 1e-5f * mag));
}

INSTANTIATE_TEST_SUITE_P(Converted, GgufReference, ::testing::Values("llama-f16", "llama-q8_0", "qwen3-q8_0"));

TEST(GgufCheckpoint, TheConvertedLlamaIsTheHfCheckpointReadBack) {
  auto gguf = Checkpoint::open(ggufFixture("llama-f16.gguf"));
  auto hf = Checkpoint::open(test::hfModel("llama"));
  const ModelConfig &g = gguf->config(), &h = hf->config();
  EXPECT_EQ(g.architecture, h.architecture);
  EXPECT_EQ(g.numLayers, h.numLayers);
  EXPECT_EQ(g.hiddenSize, h.hiddenSize);
  EXPECT_EQ(g.numHeads, h.numHeads);
  EXPECT_EQ(g.numKvHeads, h.numKvHeads);
  EXPECT_EQ(g.headDim, h.headDim);
  EXPECT_EQ(g.intermediateSize, h.intermediateSize);
  EXPECT_EQ(g.vocabSize, h.vocabSize);
  EXPECT_EQ(g.maxPositions, h.maxPositions);
  EXPECT_EQ(g.tieWordEmbeddings, h.tieWordEmbeddings);
  EXPECT_DOUBLE_EQ(g.rope.theta, h.rope.theta);
  EXPECT_NEAR(g.normEps, h.normEps, 1e-12);
  EXPECT_EQ(gguf->storedDtype(), "F16");
  EXPECT_EQ(gguf->weightFiles(), std::vector<std::string>{ggufFixture("llama-f16.gguf")});
  // The q rows come back in HF's order: F16 rounding apart, the HF reference's logits.
  const auto ids = ggufPrompt();
  const ReferenceRun a = Model::load(ggufFixture("llama-f16.gguf"))->reference(ids);
  const ReferenceRun b = Model::load(test::hfModel("llama"))->reference(ids);
  EXPECT_TRUE(test::closeTo(a.logits, b.logits, 2e-2f));
  // A directory holding the one GGUF file (and no config.json) opens it.
  const auto dir = test::freshDir("gguf-dir");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ggufFixture("llama-q8_0.gguf"), dir / "model.gguf");
  EXPECT_EQ(Checkpoint::open(dir.string())->storedDtype(), "Q8_0");
  std::filesystem::copy_file(ggufFixture("llama-f16.gguf"), dir / "other.gguf");
  EXPECT_THROW(Checkpoint::open(dir.string()), InputError);
}

// Llama 3's scaling as llama.cpp stores it (rope_freqs.weight, a factor per frequency):
// the reference turns as transformers' rope_type llama3 does, 39 positions past an original
// context of 16 (without the factors the low frequencies would turn 8x faster).
TEST(GgufCheckpoint, Llama3FrequencyFactorsTurnAsTransformersLlama3Rope) {
  auto model = Model::load(ggufFixture("llama3-f32.gguf"));
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.rope.frequencyFactors.size(), static_cast<size_t>(c.headDim / 2));
  // Wavelengths past the original 16 positions take the whole factor; the highest frequency
  // (wavelength 2 pi, between 16 / 4 and 16) a smoothed one.
  EXPECT_DOUBLE_EQ(c.rope.frequencyFactors.back(), 8.0);
  EXPECT_GT(c.rope.frequencyFactors.front(), 1.0);
  EXPECT_LT(c.rope.frequencyFactors.front(), 8.0);
  std::ifstream in(ggufFixture("goldens.json"));
  const auto ids = nlohmann::json::parse(in)["prompt_long"].get<std::vector<int64_t>>();
  const FloatTensor want =
      SafetensorsFile::open(ggufFixture("goldens.safetensors"))->readFloat("llama3-f32.prompt_logits");
  float mag = 0;
  for (float v : want.data) mag = std::max(mag, std::fabs(v));
  EXPECT_TRUE(test::closeTo(model->reference(ids).logits, want, 1e-4f + 1e-5f * mag));
}

// A GGUF file written byte by byte: header, metadata, tensor infos, data.
class GgufBytes {
 public:
  explicit GgufBytes(uint32_t version = 3) { u32(0x46554747), u32(version); }
  GgufBytes& u32(uint32_t v) { return raw(&v, 4); }
  GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
  GgufBytes& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
  GgufBytes& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  std::string write(const std::string& name) const {
    const auto path = test::freshDir("gguf-bytes") / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }
  std::vector<uint8_t> bytes;
};

void expectRefused(const std::string& path, const std::string& field, const std::string& words) {
  try {
    (void)GgufFile::open(path);
    FAIL() << "opened " << path;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(GgufFile, DamagedFilesAreRefusedNamingTheField) {
  expectRefused(GgufBytes().u64(0).write("short.gguf"), "header", "24-byte header");
  GgufBytes notGguf;
  notGguf.bytes[0] = 'X';
  expectRefused(notGguf.u64(0).u64(0).u64(0).write("magic.gguf"), "magic", "not a GGUF file");
  expectRefused(GgufBytes(1).u64(0).u64(0).write("v1.gguf"), "version", "versions 2 and 3");
  // Counts that cannot fit are refused before anything is sized by them.
  expectRefused(GgufBytes().u64(0).u64(uint64_t{1} << 60).write("kv.gguf"), "metadata_kv_count", "cannot fit");
  expectRefused(GgufBytes().u64(uint64_t{1} << 60).u64(0).write("tensors.gguf"), "tensor_count", "cannot fit");
  expectRefused(GgufBytes().u64(0).u64(1).str("k").u32(9).u32(4).u64(uint64_t{1} << 50).write("array.gguf"), "k",
                "cannot fit");
  expectRefused(GgufBytes().u64(0).u64(1).str("general.name").u32(8).u64(1000).write("string.gguf"), "general.name",
                "truncated");
  expectRefused(GgufBytes().u64(0).u64(1).str("odd").u32(13).write("type.gguf"), "odd", "not a GGUF type");
  // A tensor whose bytes lie past the end of the file, and one with five dimensions.
  GgufBytes past;
  past.u64(1).u64(0).str("w").u32(2).u64(32).u64(4).u32(0).u64(0);
  expectRefused(past.write("past.gguf"), "w", "past the end of the file");
  GgufBytes five;
  five.u64(1).u64(0).str("w").u32(5).raw(std::vector<uint8_t>(64, 0).data(), 64);
  expectRefused(five.write("dims.gguf"), "w", "1 to 4");
}

TEST(GgufFile, WhatKvScopeCannotReadIsNamed) {
  // An architecture it does not read from GGUF.
  GgufBytes arch;
  arch.u64(0).u64(1).str("general.architecture").u32(8).str("mamba");
  try {
    (void)Checkpoint::open(arch.write("mamba.gguf"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama, qwen2, qwen3"), std::string::npos) << e.what();
  }
  // A tensor of a type it does not dequantise: named when it is read, not when listed.
  GgufBytes iq;
  iq.u64(1).u64(0).str("w").u32(1).u64(256).u32(23).u64(0);
  while (iq.bytes.size() % 32) iq.bytes.push_back(0);
  iq.bytes.resize(iq.bytes.size() + 256, 0);
  auto f = GgufFile::open(iq.write("iq4.gguf"));
  try {
    (void)f->bytes(f->tensors().at(0));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("IQ4_XS"), std::string::npos) << e.what();
  }
}

}  // namespace
