// make-demo's presets larger than a 24 GB machine's memory (issue 30): the released shape,
// and the size that makes the weights stream from the disk.
#include <gtest/gtest.h>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/HfConfigFiles.hpp"
#include "model/families/ModelFamily.hpp"

namespace {

using kvscope::Architecture;
using kvscope::CheckpointSpec;

// Qwen/Qwen3-14B's config: 40 layers of 5120, 40 heads (8 KV) of 128, MLP 17408, vocab 151936,
// untied embeddings: 14.77 billion parameters, 29.5 GB in bf16.
TEST(LargePresetShape, TheFourteenBillionQwen3PresetHasTheReleasedShape) {
  const CheckpointSpec s = CheckpointSpec::preset("qwen3-14b");
  kvscope::familyOf(s.architecture).validateDemoSpec(s);
  const kvscope::ModelConfig c = kvscope::ModelConfig::fromJson(kvscope::hf::configJson(s), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3);
  EXPECT_EQ(c.numLayers, 40);
  EXPECT_EQ(c.hiddenSize, 5120);
  EXPECT_EQ(c.numHeads, 40);
  EXPECT_EQ(c.numKvHeads, 8);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediateSize, 17408);
  EXPECT_EQ(c.vocabSize, 151936);
  int64_t params = 0;
  for (const auto& t : kvscope::familyOf(s.architecture).demoTensors(s)) params += t.numel();
  EXPECT_GT(params, 14'700'000'000);
  EXPECT_LT(params, 14'800'000'000);
  EXPECT_EQ(s.storedDtype, kvscope::SafetensorsDtype::BF16);
}

}  // namespace
