// Checkpoint shapes the HF fixtures do not cover, written with CheckpointWriter: shards,
// F16/BF16 storage, transformers 4 vs 5 config styles and RoPE scaling, Qwen2 biases and
// tied heads, sliding windows (Mistral, Qwen2 max_window_layers), a head_dim override.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;
using kvscope::test::closeTo;

namespace {

const char* kCoverageTag = "coverage";

std::shared_ptr<Model> writeAndLoad(const std::string& name, const CheckpointSpec& spec) {
  return Model::load(test::writeScratchCheckpoint(kCoverageTag, name, spec));
}

std::vector<int64_t> someIds(size_t n) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int64_t>((i * 37 + 11) % 299));
  return ids;
}

// Rows of a [h_kv, T, d] tensor at position p: [h_kv, d].
FloatTensor atPosition(const FloatTensor& kv, int64_t p) {
  const int64_t h = kv.dim(0), T = kv.dim(1), d = kv.dim(2);
  FloatTensor out;
  out.shape = {h, d};
  for (int64_t i = 0; i < h; ++i) {
    const auto begin = kv.data.begin() + (i * T + p) * d;
    out.data.insert(out.data.end(), begin, begin + d);
  }
  return out;
}

FloatTensor lastRow(const FloatTensor& t) { return test::rows(t, t.dim(0) - 1, 1); }

}  // namespace

TEST(ModelCoverage, ShardedCheckpointGivesBitIdenticalLogits) {
  CheckpointSpec spec = test::smallSpec();
  const auto single = writeAndLoad("single", spec);
  spec.numShards = 3;
  const auto sharded = writeAndLoad("sharded", spec);
  ASSERT_EQ(sharded->checkpoint().weightFiles().size(), 3u);
  const auto ids = someIds(12);
  const ReferenceRun a = single->reference(ids), b = sharded->reference(ids);
  EXPECT_EQ(a.logits, b.logits) << FloatTensor::maxAbsDiff(a.logits, b.logits);
  EXPECT_EQ(a.hiddenStates, b.hiddenStates);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
}

TEST(ModelCoverage, HalfAndBfloat16CheckpointsMatchFloat32OfTheRoundedWeights) {
  for (const SafetensorsDtype dtype : {SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
    const std::string name = safetensorsDtypeName(dtype);
    SCOPED_TRACE(name);
    CheckpointSpec spec = test::smallSpec();
    spec.storedDtype = dtype;
    const std::string lowDir = test::writeScratchCheckpoint(kCoverageTag, "low-" + name, spec);
    const auto low = Model::load(lowDir);
    EXPECT_EQ(low->storedDtype(), name);

    // The same spec stored as F32, then every tensor replaced by the rounded values.
    spec.storedDtype = SafetensorsDtype::F32;
    const std::string f32Dir = test::writeScratchCheckpoint(kCoverageTag, "f32-of-" + name, spec);
    const auto unrounded = Model::load(f32Dir);
    const auto ids = someIds(10);
    const FloatTensor unroundedLogits = unrounded->reference(ids).logits;
    {
      auto lowFile = SafetensorsFile::open(lowDir + "/model.safetensors");
      test::rewriteTensors(f32Dir, [&](const std::string& n, FloatTensor& t) {
        t = lowFile->readFloat(n);
        return true;
      });
    }
    const auto rounded = Model::load(f32Dir);
    EXPECT_EQ(rounded->storedDtype(), "F32");
    const FloatTensor lowLogits = low->reference(ids).logits;
    EXPECT_TRUE(closeTo(lowLogits, rounded->reference(ids).logits, 1e-5f));
    // The rounding itself is visible, so the comparison above is not vacuous.
    EXPECT_GT(FloatTensor::maxAbsDiff(lowLogits, unroundedLogits), 1e-5f);
  }
}

TEST(ModelCoverage, ConfigStylesV4AndV5GiveIdenticalLogits) {
  struct Case {
    std::string rope;
    double factor;
    int64_t originalMax;
  };
  const std::vector<Case> cases = {
      {"default", 1.0, 0}, {"linear", 2.0, 0}, {"dynamic", 2.0, 8}, {"llama3", 4.0, 16}};
  const auto ids = someIds(20);  // beyond the dynamic case's original 8 positions
  FloatTensor defaultLogits;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rope);
    CheckpointSpec spec = test::smallSpec();
    spec.ropeType = c.rope;
    spec.ropeFactor = c.factor;
    spec.ropeOriginalMaxPositions = c.originalMax;
    spec.configStyle = ConfigStyle::V4;
    const auto v4 = writeAndLoad("v4-" + c.rope, spec);
    spec.configStyle = ConfigStyle::V5;
    const auto v5 = writeAndLoad("v5-" + c.rope, spec);
    EXPECT_EQ(v4->config().rope, v5->config().rope);
    EXPECT_EQ(v4->config().rope.type, c.rope);
    const FloatTensor a = v4->reference(ids).logits, b = v5->reference(ids).logits;
    EXPECT_EQ(a, b) << FloatTensor::maxAbsDiff(a, b);
    if (c.rope == "default")
      defaultLogits = a;
    else  // the scaling is applied, not dropped by both parsers alike
      EXPECT_GT(FloatTensor::maxAbsDiff(a, defaultLogits), 1e-4f);
  }
}

TEST(ModelCoverage, WindowedConfigsV4AndV5GiveIdenticalLogits) {
  for (const Architecture arch : {Architecture::Mistral, Architecture::Qwen2}) {
    SCOPED_TRACE(architectureName(arch));
    CheckpointSpec spec = test::smallSpec(arch);
    spec.slidingWindow = 4;
    if (arch == Architecture::Qwen2) {
      spec.useSlidingWindow = true;
      spec.maxWindowLayers = 1;  // layer 0 full, layer 1 windowed
    }
    spec.configStyle = ConfigStyle::V4;
    const auto v4 = writeAndLoad("win-v4-" + architectureName(arch), spec);
    spec.configStyle = ConfigStyle::V5;
    const auto v5 = writeAndLoad("win-v5-" + architectureName(arch), spec);
    for (int64_t l = 0; l < spec.numLayers; ++l)
      EXPECT_EQ(v4->config().isSlidingLayer(l), v5->config().isSlidingLayer(l)) << "layer " << l;
    const auto ids = someIds(12);
    EXPECT_EQ(v4->reference(ids).logits, v5->reference(ids).logits);
  }
}

TEST(ModelCoverage, LinearRopeAtPositionPEqualsDefaultRopeAtPOverFactor) {
  CheckpointSpec spec = test::smallSpec();
  const auto plain = writeAndLoad("rope-default", spec);
  spec.ropeType = "linear";
  spec.ropeFactor = 2.0;
  const auto linear = writeAndLoad("rope-linear", spec);
  // One token repeated: layer-0 keys differ only by the rotation of their position.
  const std::vector<int64_t> ids(16, 42);
  const FloatTensor kPlain = plain->reference(ids).keys.at(0);
  const FloatTensor kLinear = linear->reference(ids).keys.at(0);
  for (int64_t q = 0; q < 8; ++q)
    EXPECT_TRUE(closeTo(atPosition(kLinear, 2 * q), atPosition(kPlain, q), 1e-6f)) << "p=" << 2 * q;
  for (int64_t p = 1; p < 16; p += 2)  // same position, different angle
    EXPECT_GT(FloatTensor::maxAbsDiff(atPosition(kLinear, p), atPosition(kPlain, p)), 1e-4f)
        << "p=" << p;
}

TEST(ModelCoverage, DynamicRopeScalesOnlyBeyondTheOriginalContext) {
  CheckpointSpec spec = test::smallSpec();
  const auto plain = writeAndLoad("dyn-default", spec);
  spec.ropeType = "dynamic";
  spec.ropeFactor = 2.0;
  spec.ropeOriginalMaxPositions = 8;
  const auto dynamic = writeAndLoad("dyn-dynamic", spec);
  const auto shortIds = someIds(8), longIds = someIds(20);
  EXPECT_EQ(plain->reference(shortIds).logits, dynamic->reference(shortIds).logits);
  EXPECT_GT(
      FloatTensor::maxAbsDiff(plain->reference(longIds).logits, dynamic->reference(longIds).logits),
      1e-4f);
}

TEST(ModelCoverage, Qwen2QkvBiasesAreLoadedAndUsed) {
  CheckpointSpec spec = test::smallSpec(Architecture::Qwen2);
  const std::string dir = test::writeScratchCheckpoint(kCoverageTag, "qwen-bias", spec);
  const auto withBias = Model::load(dir);
  const auto names = withBias->weightNames();
  for (const char* n : {"q_proj", "k_proj", "v_proj"}) {
    const std::string bias = std::string("model.layers.0.self_attn.") + n + ".bias";
    EXPECT_NE(std::find(names.begin(), names.end(), bias), names.end()) << bias;
  }
  const std::string zeroDir = test::writeScratchCheckpoint(kCoverageTag, "qwen-zero-bias", spec);
  int zeroed = 0;
  test::rewriteTensors(zeroDir, [&](const std::string& n, FloatTensor& t) {
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0) {
      t.data.assign(t.data.size(), 0.0f);
      ++zeroed;
    }
    return true;
  });
  EXPECT_EQ(zeroed, 3 * spec.numLayers);  // q, k, v per layer; no o_proj or MLP bias
  const auto noBias = Model::load(zeroDir);
  const auto ids = someIds(10);
  const ReferenceRun a = withBias->reference(ids), b = noBias->reference(ids);
  EXPECT_GT(FloatTensor::maxAbsDiff(a.logits, b.logits), 1e-3f);
  EXPECT_GT(FloatTensor::maxAbsDiff(a.keys.at(0), b.keys.at(0)), 1e-3f);
}

TEST(ModelCoverage, Qwen2TiedLmHeadIsTheEmbedding) {
  CheckpointSpec spec = test::smallSpec(Architecture::Qwen2);
  spec.tieWordEmbeddings = true;
  const std::string dir = test::writeScratchCheckpoint(kCoverageTag, "qwen-tied", spec);
  const auto model = Model::load(dir);
  EXPECT_TRUE(model->config().tieWordEmbeddings);
  EXPECT_FALSE(model->checkpoint().contains("lm_head.weight"));
  const auto ids = someIds(6);
  const ReferenceRun run = model->reference(ids);
  // logits = final hidden state . embedding rows
  const FloatTensor embed =
      SafetensorsFile::open(dir + "/model.safetensors")->readFloat("model.embed_tokens.weight");
  const FloatTensor& final = run.hiddenStates.back();  // [T, H]
  const int64_t T = final.dim(0), H = final.dim(1), V = run.logits.dim(1);
  FloatTensor want = FloatTensor::zeros({T, V});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0.0;
      for (int64_t h = 0; h < H; ++h)
        s += static_cast<double>(final.data[static_cast<size_t>(t * H + h)]) *
             embed.data[static_cast<size_t>(v * H + h)];
      want.data[static_cast<size_t>(t * V + v)] = static_cast<float>(s);
    }
  EXPECT_TRUE(closeTo(run.logits, want, 1e-4f));
}

TEST(ModelCoverage, MistralWindowSeesOnlyTheLastWTokens) {
  const int64_t W = 4;
  CheckpointSpec spec = test::smallSpec(Architecture::Mistral);
  spec.numLayers = 1;
  spec.slidingWindow = W;
  const auto windowed = writeAndLoad("mistral-window", spec);
  ASSERT_TRUE(windowed->config().isSlidingLayer(0));
  spec.slidingWindow = 0;
  const auto full = writeAndLoad("mistral-nowindow", spec);
  ASSERT_FALSE(full->config().isSlidingLayer(0));

  const auto ids = someIds(12);
  const FloatTensor logits = windowed->reference(ids).logits;
  const FloatTensor fullLogits = full->reference(ids).logits;
  for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); ++p) {
    const int64_t from = std::max<int64_t>(0, p - W + 1);
    const std::vector<int64_t> tail(ids.begin() + from, ids.begin() + p + 1);
    // RoPE is relative: tokens p-W+1..p alone, at positions 0..W-1, look the same.
    EXPECT_TRUE(closeTo(test::rows(logits, p, 1), lastRow(windowed->reference(tail).logits), 1e-4f))
        << "p=" << p;
    if (p < W)
      EXPECT_TRUE(closeTo(test::rows(logits, p, 1), test::rows(fullLogits, p, 1), 1e-6f))
          << "p=" << p;
    else
      EXPECT_GT(FloatTensor::maxAbsDiff(test::rows(logits, p, 1), test::rows(fullLogits, p, 1)),
                1e-4f)
          << "p=" << p;
  }
}

TEST(ModelCoverage, Qwen2WindowAppliesOnlyFromMaxWindowLayers) {
  const int64_t W = 4;
  for (const ConfigStyle style : {ConfigStyle::V4, ConfigStyle::V5}) {
    SCOPED_TRACE(style == ConfigStyle::V4 ? "v4" : "v5");
    CheckpointSpec spec = test::smallSpec(Architecture::Qwen2);
    spec.configStyle = style;
    spec.numLayers = 2;
    spec.slidingWindow = W;
    spec.useSlidingWindow = true;
    spec.maxWindowLayers = 1;
    const std::string tag = style == ConfigStyle::V4 ? "-v4" : "-v5";
    const auto windowed = writeAndLoad("qwen-window" + tag, spec);
    EXPECT_FALSE(windowed->config().isSlidingLayer(0));
    EXPECT_TRUE(windowed->config().isSlidingLayer(1));
    spec.useSlidingWindow = false;
    const auto full = writeAndLoad("qwen-nowindow" + tag, spec);
    EXPECT_FALSE(full->config().isSlidingLayer(1));

    const auto ids = someIds(10);
    const ReferenceRun a = windowed->reference(ids), b = full->reference(ids);
    EXPECT_EQ(a.hiddenStates.at(1), b.hiddenStates.at(1)) << "layer 0 output";
    EXPECT_EQ(a.keys.at(1), b.keys.at(1)) << "layer 1 keys come from layer 0's output";
    const FloatTensor& lastA = a.hiddenStates.at(2);
    const FloatTensor& lastB = b.hiddenStates.at(2);
    for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); ++p) {
      const float diff = FloatTensor::maxAbsDiff(test::rows(lastA, p, 1), test::rows(lastB, p, 1));
      if (p < W)
        EXPECT_LE(diff, 1e-6f) << "p=" << p << " is within the window";
      else
        EXPECT_GT(diff, 1e-4f) << "p=" << p << " exceeds the window";
    }
  }
}

TEST(ModelCoverage, GqaHeadDimOverrideLoadsAndRuns) {
  for (const Architecture arch :
       {Architecture::Llama, Architecture::Qwen2, Architecture::Mistral}) {
    SCOPED_TRACE(architectureName(arch));
    CheckpointSpec spec = test::smallSpec(arch);
    spec.headDim = 16;  // hidden 32 / 4 heads would be 8
    const auto model = writeAndLoad("headdim-" + architectureName(arch), spec);
    EXPECT_EQ(model->config().headDim, 16);
    EXPECT_EQ(model->config().numKvHeads, 2);
    const auto ids = someIds(7);
    const ReferenceRun run = model->reference(ids);
    ASSERT_EQ(run.logits.shape, (std::vector<int64_t>{7, 300}));
    ASSERT_EQ(run.keys.size(), 2u);
    EXPECT_EQ(run.keys[0].shape, (std::vector<int64_t>{2, 7, 16}));
    EXPECT_EQ(run.values[1].shape, (std::vector<int64_t>{2, 7, 16}));
    for (float x : run.logits.data) ASSERT_TRUE(std::isfinite(x));
    EXPECT_GT(run.logits.maxAbs(), 0.1f);
  }
}
