#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;
using nlohmann::json;

namespace {

const std::string kConfigModels = std::string(KVSCOPE_FIXTURES_DIR) + "/hf/models/";

json readConfigJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

json llamaDoc() { return readConfigJson(kConfigModels + "llama/config.json"); }

// A transformers 4 style copy of a transformers 5 config: rope_parameters split into
// rope_theta + rope_scaling, dtype renamed torch_dtype.
json toV4(json doc) {
  const json params = doc["rope_parameters"];
  doc.erase("rope_parameters");
  doc["rope_theta"] = params["rope_theta"];
  json scaling = params;
  scaling.erase("rope_theta");
  doc["rope_scaling"] = scaling["rope_type"] == "default" ? json(nullptr) : scaling;
  doc["torch_dtype"] = doc["dtype"];
  doc.erase("dtype");
  return doc;
}

// The field an InputError names, or "<no error>".
std::string errorField(const json& doc, std::string* message = nullptr) {
  try {
    ModelConfig::fromJson(doc, "/models/x/config.json");
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "/models/x/config.json");
    if (message) *message = e.what();
    return e.field();
  }
  return "<no error>";
}

json qwen2Doc(int64_t layers) {
  json doc = llamaDoc();
  doc["model_type"] = "qwen2";
  doc["architectures"] = {"Qwen2ForCausalLM"};
  doc["num_hidden_layers"] = layers;
  doc["sliding_window"] = 32;
  return doc;
}

}  // namespace

TEST(ModelConfig, ParsesGpt2Fixture) {
  const auto c = ModelConfig::load(kConfigModels + "gpt2/config.json");
  EXPECT_EQ(c.architecture, Architecture::Gpt2);
  EXPECT_EQ(c.maxPositions, 64);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.numHeads, 4);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_EQ(c.hiddenSize, 64);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.numLayers, 3);
  EXPECT_EQ(c.intermediateSize, 4 * 64);  // n_inner is null
  EXPECT_EQ(c.vocabSize, 1024);
  EXPECT_EQ(c.activation, "gelu_new");
  EXPECT_EQ(c.eosTokenIds, std::vector<int64_t>{0});
  EXPECT_FALSE(c.usesRope());
  EXPECT_EQ(c.sourceFile, kConfigModels + "gpt2/config.json");
}

TEST(ModelConfig, ParsesLlamaFixtureWithGqaAndRopeParameters) {
  const auto c = ModelConfig::load(kConfigModels + "llama/config.json");
  EXPECT_EQ(c.architecture, Architecture::Llama);
  EXPECT_EQ(c.numHeads, 4);
  EXPECT_EQ(c.numKvHeads, 2);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.vocabSize, 1200);
  EXPECT_EQ(c.maxPositions, 128);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_FALSE(c.qkvBias);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-6);
  EXPECT_EQ(c.slidingWindow, 0);
  EXPECT_FALSE(c.isSlidingLayer(0));
  EXPECT_EQ(c.eosTokenIds, std::vector<int64_t>{1});
  ASSERT_TRUE(c.bosTokenId.has_value());
  EXPECT_EQ(*c.bosTokenId, 0);

  // The theta really comes from rope_parameters, not a default.
  json doc = llamaDoc();
  doc["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_DOUBLE_EQ(ModelConfig::fromJson(doc, "c.json").rope.theta, 500000.0);
}

TEST(ModelConfig, V4RopeScalingParsesLikeV5RopeParameters) {
  struct Case {
    json params;
    RopeConfig want;
  };
  RopeConfig llama3;
  llama3.type = "llama3";
  llama3.theta = 500000.0;
  llama3.factor = 8.0;
  llama3.lowFreqFactor = 1.0;
  llama3.highFreqFactor = 4.0;
  llama3.originalMaxPositions = 8192;
  RopeConfig linear;
  linear.type = "linear";
  linear.theta = 10000.0;
  linear.factor = 2.0;
  RopeConfig dynamic;
  dynamic.type = "dynamic";
  dynamic.theta = 1000000.0;
  dynamic.factor = 4.0;
  dynamic.originalMaxPositions = 2048;
  const std::vector<Case> cases = {
      {{{"rope_type", "llama3"},
        {"rope_theta", 500000.0},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}},
       llama3},
      {{{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", 2.0}}, linear},
      {{{"rope_type", "dynamic"},
        {"rope_theta", 1000000.0},
        {"factor", 4.0},
        {"original_max_position_embeddings", 2048}},
       dynamic},
  };
  for (const auto& c : cases) {
    json v5 = llamaDoc();
    v5["rope_parameters"] = c.params;
    v5["dtype"] = "bfloat16";
    const json v4 = toV4(v5);
    ASSERT_FALSE(v4.contains("rope_parameters"));
    ASSERT_TRUE(v4.contains("rope_scaling") && v4.contains("torch_dtype"));
    const auto a = ModelConfig::fromJson(v5, "v5.json");
    const auto b = ModelConfig::fromJson(v4, "v4.json");
    EXPECT_TRUE(a.rope == c.want) << c.params.dump();
    EXPECT_TRUE(b.rope == c.want) << c.params.dump();
    EXPECT_EQ(a.dtype, "bfloat16");
    EXPECT_EQ(b.dtype, "bfloat16");
  }
  // Older transformers 4 configs spell the key `type`.
  json legacy = toV4(llamaDoc());
  legacy["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_TRUE(ModelConfig::fromJson(legacy, "v4.json").rope == linear);
}

TEST(ModelConfig, MistralSlidingWindowAppliesToEveryLayer) {
  json doc = llamaDoc();
  doc["model_type"] = "mistral";
  doc["sliding_window"] = 4096;
  const auto c = ModelConfig::fromJson(doc, "m.json");
  EXPECT_EQ(c.architecture, Architecture::Mistral);
  EXPECT_EQ(c.slidingWindow, 4096);
  ASSERT_EQ(c.slidingLayers.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(c.isSlidingLayer(i)) << i;

  doc["sliding_window"] = nullptr;  // Mistral without a window
  const auto none = ModelConfig::fromJson(doc, "m.json");
  EXPECT_EQ(none.slidingWindow, 0);
  EXPECT_FALSE(none.isSlidingLayer(0));
}

TEST(ModelConfig, Qwen2SlidesLayersFromMaxWindowLayersOn) {
  // transformers' Qwen2Config: layer i slides when use_sliding_window and i >= max_window_layers.
  json doc = qwen2Doc(5);
  doc["use_sliding_window"] = true;
  doc["max_window_layers"] = 2;
  const auto c = ModelConfig::fromJson(doc, "q.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen2);
  EXPECT_TRUE(c.qkvBias);
  EXPECT_FALSE(c.outputProjBias);
  EXPECT_EQ(c.slidingWindow, 32);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{false, false, true, true, true}));

  doc["max_window_layers"] = 5;  // no layer reaches the threshold
  EXPECT_EQ(ModelConfig::fromJson(doc, "q.json").slidingLayers,
            (std::vector<bool>{false, false, false, false, false}));

  doc["max_window_layers"] = 0;
  doc["use_sliding_window"] = false;  // the window is ignored entirely
  const auto off = ModelConfig::fromJson(doc, "q.json");
  EXPECT_EQ(off.slidingWindow, 0);
  for (int64_t i = 0; i < 5; ++i) EXPECT_FALSE(off.isSlidingLayer(i));
}

TEST(ModelConfig, Qwen2LayerTypesWinOverMaxWindowLayers) {
  json doc = qwen2Doc(4);
  doc["use_sliding_window"] = true;
  doc["max_window_layers"] = 3;  // would give F F F T
  doc["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"};
  const auto c = ModelConfig::fromJson(doc, "q.json");
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, false, true, false}));

  // transformers 5 writes sliding_window null when use_sliding_window is false.
  doc["use_sliding_window"] = false;
  doc["sliding_window"] = nullptr;
  const auto off = ModelConfig::fromJson(doc, "q.json");
  EXPECT_EQ(off.slidingWindow, 0);
  EXPECT_FALSE(off.isSlidingLayer(0));

  doc["use_sliding_window"] = true;
  doc["sliding_window"] = 32;
  doc["layer_types"] = {"full_attention"};  // wrong length
  EXPECT_EQ(errorField(doc), "layer_types");
}

TEST(ModelConfig, BadConfigsNameTheKey) {
  json doc = llamaDoc();
  doc.erase("hidden_size");
  EXPECT_EQ(errorField(doc), "hidden_size");

  doc = llamaDoc();
  doc["num_attention_heads"] = "4";
  EXPECT_EQ(errorField(doc), "num_attention_heads");
  doc["num_attention_heads"] = 4.5;
  EXPECT_EQ(errorField(doc), "num_attention_heads");

  doc = llamaDoc();
  doc["model_type"] = "falcon";
  std::string message;
  EXPECT_EQ(errorField(doc, &message), "model_type");
  EXPECT_NE(message.find("falcon"), std::string::npos) << message;
  EXPECT_NE(message.find("gpt2, llama, mistral, qwen2"), std::string::npos) << message;

  doc = llamaDoc();
  doc["num_key_value_heads"] = 3;  // does not divide 4
  EXPECT_EQ(errorField(doc), "num_key_value_heads");

  doc = llamaDoc();
  doc["eos_token_id"] = 1200;  // vocab_size is 1200
  EXPECT_EQ(errorField(doc), "eos_token_id");
  doc["eos_token_id"] = {1, 5000};
  EXPECT_EQ(errorField(doc), "eos_token_id");

  doc = llamaDoc();
  doc["rope_parameters"] = {{"rope_type", "yarn-ish"}, {"rope_theta", 10000.0}, {"factor", 2.0}};
  EXPECT_EQ(errorField(doc, &message), "rope_parameters.rope_type");
  EXPECT_NE(message.find("yarn-ish"), std::string::npos) << message;
  EXPECT_EQ(errorField(toV4(doc)), "rope_scaling.rope_type");

  doc = readConfigJson(kConfigModels + "gpt2/config.json");
  doc.erase("n_head");
  EXPECT_EQ(errorField(doc), "n_head");
}

TEST(ModelConfig, LoadReportsUnreadableAndInvalidFiles) {
  const std::string missing = "/nonexistent/kvscope/config.json";
  try {
    ModelConfig::load(missing);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), missing);
  }
  const std::string bad =
      testing::TempDir() + "kvscope-bad-config-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(bad);
    out << "{\"model_type\": \"llama\",";
  }
  try {
    ModelConfig::load(bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), bad);
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
  }
  std::remove(bad.c_str());
}

TEST(ModelConfig, GenerationConfigAddsEosIds) {
  auto c = ModelConfig::load(kConfigModels + "llama/config.json");
  const std::string gen =
      testing::TempDir() + "kvscope-generation_config-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(gen);
    out << R"({"eos_token_id": [1, 7]})";
  }
  c.mergeGenerationConfig(gen);
  EXPECT_EQ(c.eosTokenIds, (std::vector<int64_t>{1, 7}));
  {
    std::ofstream out(gen);
    out << R"({"eos_token_id": 99999})";
  }
  try {
    c.mergeGenerationConfig(gen);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), gen);
    EXPECT_EQ(e.field(), "eos_token_id");
  }
  std::remove(gen.c_str());
}
