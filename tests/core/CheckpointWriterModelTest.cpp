// End to end: what CheckpointWriter writes loads into the project's Model (which checks
// every tensor's name and shape against the config) and runs a finite forward pass.
#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

using kvscope::test::freshDir;

}  // namespace

TEST(CheckpointWriterModel, EveryArchitectureLoadsAndRuns) {
  struct Case {
    Architecture arch;
    SafetensorsDtype dtype;
    ConfigStyle style;
    int64_t shards;
  };
  const std::vector<Case> cases = {
      {Architecture::Gpt2, SafetensorsDtype::F32, ConfigStyle::V5, 1},
      {Architecture::Gpt2, SafetensorsDtype::F16, ConfigStyle::V4, 2},
      {Architecture::Llama, SafetensorsDtype::F32, ConfigStyle::V4, 3},
      {Architecture::Llama, SafetensorsDtype::BF16, ConfigStyle::V5, 1},
      {Architecture::Mistral, SafetensorsDtype::F32, ConfigStyle::V5, 2},
      {Architecture::Qwen2, SafetensorsDtype::F16, ConfigStyle::V4, 1},
      {Architecture::Qwen2, SafetensorsDtype::F32, ConfigStyle::V5, 2},
  };
  int n = 0;
  for (const auto& c : cases) {
    CheckpointSpec s = CheckpointSpec::demo();
    s.setArchitecture(c.arch);
    s.vocabSize = 320;
    s.storedDtype = c.dtype;
    s.configStyle = c.style;
    s.numShards = c.shards;
    if (c.arch == Architecture::Llama) {
      s.attentionBias = true;
      s.ropeType = "llama3";
      s.ropeFactor = 4.0;
      s.ropeOriginalMaxPositions = 64;
    }
    if (c.arch == Architecture::Mistral) s.slidingWindow = 4;
    if (c.arch == Architecture::Qwen2) {
      s.slidingWindow = 4;
      s.useSlidingWindow = true;
      s.maxWindowLayers = 1;
    }
    SCOPED_TRACE(architectureName(c.arch) + " " + safetensorsDtypeName(c.dtype));
    const fs::path dir = freshDir("m" + std::to_string(n++));
    CheckpointWriter(s).write(dir.string());
    const auto model = Model::load(dir.string());
    EXPECT_EQ(model->storedDtype(), safetensorsDtypeName(c.dtype));
    const std::vector<int64_t> ids = {319, 5, 42, 7, 300, 1, 2, 3};
    const ReferenceRun run = model->reference(ids);
    ASSERT_EQ(run.logits.shape, (std::vector<int64_t>{8, 320}));
    EXPECT_EQ(run.hiddenStates.size(), static_cast<size_t>(s.numLayers + 1));
    double sum = 0, sq = 0;
    for (float x : run.logits.data) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double count = static_cast<double>(run.logits.data.size());
    const double sd = std::sqrt(sq / count - (sum / count) * (sum / count));
    EXPECT_GT(sd, 0.1);  // random weights with std 0.25 give spread-out logits
  }
}
