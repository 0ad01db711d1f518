// The accuracy suite: every engine fault at two layers and two steps on the gpt2 and llama
// fixtures (plus the combined wrong-layer + cross-request run), each expected to yield the
// right finding id, first step and first layer; and clean runs (float32, F16, BF16
// checkpoints) with zero findings. Prints the whole table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "RopeScalingCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string name;
  std::string model;                 // fixture name or a directory
  std::vector<std::string> faults;
  std::vector<std::string> expectIds;  // all must be present (empty: clean)
  int64_t expectRequest = 0;
  int64_t expectStep = -1;           // first divergence step (-1: not checked)
  int64_t expectLayer = -2;          // first divergence layer (-2: not checked)
  int requests = 1;
  int64_t secondArrival = 2;
  bool batch = false;
  double temperature = 0.0;
  int64_t speculative = 0;      // draft tokens per step (speculative decoding)
  std::string kvCache = "";     // a quantised cache (int8, fp8_e4m3, fp8_e5m2)
  std::vector<int64_t> prompt = {};  // request 0's prompt instead of the golden one
  int64_t prefillChunk = 0;          // chunked prefill: prompt tokens per forward
};

// Prompts whose prompt-lookup drafts are partly accepted (3 drafts: accepted 2 of 3 at step 1
// on gpt2, 1 of 3 at step 3 on llama), so the rollback keeps accepted rows and drops the rest.
std::vector<int64_t> speculativePrompt(const std::string& model) {
  return model == "gpt2" ? std::vector<int64_t>{324, 86, 78, 422, 324, 86, 78}
                         : std::vector<int64_t>{138, 494, 478, 121, 138, 494, 478};
}

struct Row {
  std::string name, model, expected, got;
  int64_t step, layer;
  bool pass;
};
std::vector<Row>& table() {
  static std::vector<Row> rows;
  return rows;
}

std::vector<int64_t> goldenPrompt(const std::string& model, int i) {
  return test::goldenJson(model)["prompts"][static_cast<size_t>(i)]["ids"].get<std::vector<int64_t>>();
}

// "llama-linear" / "llama-llama3": the llama fixture with that rope_scaling (scratch copy).
std::string modelDir(const std::string& model) {
  if (model.rfind("llama-", 0) == 0) return test::ropeScalingLlama(model.substr(6));
  return fs::exists(model) ? model : test::hfModel(model);
}

AuditResult runCase(const Case& c) {
  const std::string dir = modelDir(c.model);
  auto model = Model::load(dir);
  const std::string golden =
      fs::exists(c.model) || c.model.rfind("llama-", 0) == 0 ? "llama" : c.model;
  std::vector<RequestSpec> specs;
  for (int i = 0; i < c.requests; ++i) {
    RequestSpec s;
    s.promptIds = i == 0 && !c.prompt.empty() ? c.prompt : goldenPrompt(golden, i);
    for (auto& id : s.promptIds) id %= model->config().vocabSize;
    s.maxNewTokens = 8;
    s.stopAtEos = false;
    s.arrivalTick = (i == 0 || c.batch) ? 0 : c.secondArrival;
    s.batchGroup = c.batch ? 0 : -1;
    s.policy.temperature = c.temperature;
    s.policy.seed = 1234 + static_cast<uint64_t>(i);
    specs.push_back(s);
  }
  EngineOptions o;
  for (const auto& f : c.faults) o.faults.push_back(FaultSpec::parse(f));
  o.speculativeDrafts = c.speculative;
  o.kvCacheDtype = c.kvCache;
  o.prefillChunk = c.prefillChunk;
  Trace trace = Engine(model).run(specs, o);
  auto fresh = Model::load(dir);
  return Auditor::audit(*fresh, trace);
}

void check(const Case& c) {
  AuditResult r = runCase(c);
  const auto& rep = r.report;
  std::string got;
  for (const auto& f : rep.findings) got += (got.empty() ? "" : ",") + f.id;
  std::string expected;
  for (const auto& id : c.expectIds) expected += (expected.empty() ? "" : ",") + id;
  bool pass = true;
  if (c.expectIds.empty()) {
    EXPECT_TRUE(rep.clean()) << c.name << "\n" << rep.toText();
    EXPECT_TRUE(rep.findings.empty()) << c.name << "\n" << rep.toText();
    pass = rep.clean() && rep.findings.empty();
  } else {
    EXPECT_FALSE(rep.clean()) << c.name;
    for (const auto& id : c.expectIds) {
      EXPECT_TRUE(rep.hasFinding(id)) << c.name << ": missing " << id << "\n" << rep.toText();
      pass = pass && rep.hasFinding(id);
    }
    // Nothing unexpected besides the expected ids (a cache fault must not be blamed on policy).
    for (const auto& f : rep.findings) {
      const bool expectedId = std::find(c.expectIds.begin(), c.expectIds.end(), f.id) != c.expectIds.end();
      EXPECT_TRUE(expectedId) << c.name << ": unexpected finding " << f << "\n" << rep.toText();
      pass = pass && expectedId;
    }
    const auto& fd = rep.firstDivergence;
    EXPECT_TRUE(fd.present) << c.name;
    if (c.expectStep >= 0) {
      EXPECT_EQ(fd.request, c.expectRequest) << c.name << "\n" << rep.toText();
      EXPECT_EQ(fd.step, c.expectStep) << c.name << "\n" << rep.toText();
      pass = pass && fd.request == c.expectRequest && fd.step == c.expectStep;
    }
    if (c.expectLayer > -2) {
      EXPECT_EQ(fd.layer, c.expectLayer) << c.name << "\n" << rep.toText();
      pass = pass && fd.layer == c.expectLayer;
    }
  }
  table().push_back({c.name, fs::path(c.model).filename().string(), expected.empty() ? "clean" : expected,
                     got.empty() ? "clean" : got, rep.firstDivergence.step, rep.firstDivergence.layer, pass});
}

std::vector<Case> faultCases(const std::string& m) {
  std::vector<Case> cs;
  for (int64_t step : {1, 3}) {
    cs.push_back({"wrong_position offset=3 step=" + std::to_string(step), m, {"wrong_position:offset=3,step=" + std::to_string(step)},
                  {"position"}, 0, step, 0});
  }
  cs.push_back({"wrong_position restart step=2", m, {"wrong_position:restart=1,step=2"}, {"position"}, 0, 2, 0});
  for (int64_t layer : {1, 2})
    for (int64_t step : {0, 2})
      cs.push_back({"wrong_layer layer=" + std::to_string(layer) + " step=" + std::to_string(step), m,
                    {"wrong_layer:layer=" + std::to_string(layer) + ",source=" + std::to_string(layer - 1) + ",step=" + std::to_string(step)},
                    {"wrong_layer"}, 0, step, layer});
  for (int64_t layer : {0, 2})
    for (int64_t step : {1, 3})
      cs.push_back({"duplicate_append layer=" + std::to_string(layer) + " step=" + std::to_string(step), m,
                    {"duplicate_append:layer=" + std::to_string(layer) + ",step=" + std::to_string(step)},
                    {"duplicate_append"}, 0, step, layer});
  cs.push_back({"duplicate_prompt_token", m, {"duplicate_prompt_token"}, {"duplicate_append"}, 0, 1, -2});
  for (int64_t arrival : {2, 4}) {
    Case c{"cross_request arrival=" + std::to_string(arrival), m, {"cross_request:request=1,victim=0"}, {"cross_request"}, 0, arrival, 0, 2};
    c.secondArrival = arrival;
    cs.push_back(c);
  }
  for (int64_t layer : {0, 2})
    for (int64_t step : {1, 3}) {
      Case c{"batch_row_mix layer=" + std::to_string(layer) + " step=" + std::to_string(step), m,
             {"batch_row_mix:from=0,to=1,layer=" + std::to_string(layer) + ",step=" + std::to_string(step)},
             {"cross_request"}, 1, step, layer, 2};
      c.batch = true;
      cs.push_back(c);
    }
  for (int64_t layer : {0, 1})
    for (int64_t tick : {2, 4})
      cs.push_back({"stale_cache layer=" + std::to_string(layer) + " tick=" + std::to_string(tick), m,
                    {"stale_cache:layer=" + std::to_string(layer) + ",tick=" + std::to_string(tick)}, {"stale_cache"}, 0, tick, -2});
  for (int64_t step : {2, 4}) {
    Case extra{"rng_extra_draw step=" + std::to_string(step), m, {"rng_extra_draw:step=" + std::to_string(step)}, {"rng_order"}, 0, -1, -2};
    extra.temperature = 1.5;
    cs.push_back(extra);
    Case reseed{"rng_reseed step=" + std::to_string(step), m, {"rng_reseed:step=" + std::to_string(step)}, {"rng_order"}, 0, -1, -2};
    reseed.temperature = 1.5;
    cs.push_back(reseed);
  }
  // KV Scope's additions.
  for (int64_t layer : {0, 2})
    for (int64_t step : {1, 3}) {
      Case c{
          "speculative_rollback layer=" + std::to_string(layer) + " step=" + std::to_string(step),
          m,
          {"speculative_rollback:draft=3,layer=" + std::to_string(layer) +
           ",step=" + std::to_string(step)},
          {"speculative_rollback"},
          0,
          step,
          layer};
      c.prompt = speculativePrompt(m);
      cs.push_back(c);
    }
  for (const char* dtype : {"int8", "fp8_e4m3"})
    for (int64_t layer : {0, 2})
      for (int64_t step : {1, 3}) {
        Case c{std::string("kv_quantization ") + dtype + " layer=" + std::to_string(layer) +
                   " step=" + std::to_string(step),
               m,
               {"kv_quantization:layer=" + std::to_string(layer) + ",step=" + std::to_string(step)},
               {"kv_quantization"},
               0,
               step,
               layer};
        c.kvCache = dtype;
        cs.push_back(c);
      }
  // A scale 10% off is below one fp8 step per element; the row's exact absmax still shows it.
  Case subStep{"kv_quantization fp8_e4m3 scale=90 layer=1 step=2",
               m,
               {"kv_quantization:scale=90,layer=1,step=2"},
               {"kv_quantization"},
               0,
               2,
               1};
  subStep.kvCache = "fp8_e4m3";
  cs.push_back(subStep);
  Case quantWrongLayer{"wrong_layer layer=2 step=2 in an fp8_e4m3 cache",
                       m,
                       {"wrong_layer:layer=2,source=1,step=2"},
                       {"wrong_layer"},
                       0,
                       2,
                       2};
  quantWrongLayer.kvCache = "fp8_e4m3";
  cs.push_back(quantWrongLayer);
  Case both{"wrong_layer + cross_request (worked case)", m, {"wrong_layer:layer=2,source=1", "cross_request:request=1,victim=0"},
            {"wrong_layer", "cross_request"}, 0, 0, 2, 2};
  cs.push_back(both);
  return cs;
}

// chunk_position (KV Scope's addition): prompts of 15 (gpt2) and 16 (llama) tokens prefilled 4
// tokens per forward, steps 0..3; the first generated token is fed at step 4.
std::vector<Case> chunkedPrefillCases(const std::string& m) {
  std::vector<Case> cs;
  auto chunked = [](Case c) {
    c.prefillChunk = 4;
    return c;
  };
  cs.push_back(chunked({"clean chunked prefill (4 tokens per chunk)", m, {}, {}}));
  cs.push_back(chunked({"clean chunked prefill, two requests", m, {}, {}, 0, -1, -2, 2}));
  Case sampled = chunked({"clean chunked prefill, sampled T=1.5", m, {}, {}});
  sampled.temperature = 1.5;
  cs.push_back(sampled);
  Case quantized = chunked({"clean chunked prefill, int8 KV cache", m, {}, {}});
  quantized.kvCache = "int8";
  cs.push_back(quantized);
  // Positions restart at the boundary: the ids themselves (every layer), and on llama the
  // ids right but one layer rotated at the chunk-local positions (gpt2 adds its learned
  // position embeddings once, at the input: no per-layer position there).
  std::vector<int64_t> layers = {-1};
  if (m == "llama") layers.insert(layers.end(), {0, 2});
  for (int64_t layer : layers)
    for (int64_t chunk : {1, 2})
      cs.push_back(chunked(
          {"chunk_position chunk=" + std::to_string(chunk) + " layer=" + std::to_string(layer),
           m,
           {"chunk_position:chunk=" + std::to_string(chunk) + ",layer=" + std::to_string(layer)},
           {"chunk_position"},
           0,
           chunk,
           std::max<int64_t>(layer, 0)}));
  // The fault turns chunking on by itself (its size), and a second request is unaffected.
  cs.push_back({"chunk_position chunk=2 size=5, two requests",
                m,
                {"chunk_position:chunk=2,size=5,request=0"},
                {"chunk_position"},
                0,
                2,
                0,
                2});
  // Plain position bugs in a chunked run stay position: in the first chunk, and in decode.
  cs.push_back(chunked({"wrong_position offset=3 step=0, chunk 0",
                        m,
                        {"wrong_position:offset=3,step=0"},
                        {"position"},
                        0,
                        0,
                        0}));
  cs.push_back(chunked({"wrong_position offset=3 step=5, decode",
                        m,
                        {"wrong_position:offset=3,step=5"},
                        {"position"},
                        0,
                        5,
                        0}));
  return cs;
}

class AuditAccuracy : public ::testing::TestWithParam<Case> {};

TEST_P(AuditAccuracy, FindsTheInjectedFault) { check(GetParam()); }

std::vector<Case> allCases() {
  std::vector<Case> cs;
  for (const char* m : {"gpt2", "llama"}) {
    cs.push_back({"clean float32", m, {}, {}});
    Case sampled{"clean sampled T=1.5", m, {}, {}};
    sampled.temperature = 1.5;
    cs.push_back(sampled);
    Case two{"clean two requests", m, {}, {}, 0, -1, -2, 2};
    cs.push_back(two);
    Case batch{"clean left-padded batch", m, {}, {}, 0, -1, -2, 2};
    batch.batch = true;
    cs.push_back(batch);
    Case speculative{"clean speculative decoding (3 drafts, rollback)", m, {}, {}};
    speculative.speculative = 3;
    speculative.prompt = speculativePrompt(m);
    cs.push_back(speculative);
    Case specTwo{"clean speculative decoding, two requests", m, {}, {}, 0, -1, -2, 2};
    specTwo.speculative = 3;
    cs.push_back(specTwo);
    for (const char* dtype : {"int8", "fp8_e4m3", "fp8_e5m2"}) {
      Case quantized{std::string("clean ") + dtype + " KV cache", m, {}, {}};
      quantized.kvCache = dtype;
      cs.push_back(quantized);
    }
    Case quantizedTwo{"clean int8 KV cache, two requests", m, {}, {}, 0, -1, -2, 2};
    quantizedTwo.kvCache = "int8";
    cs.push_back(quantizedTwo);
    for (auto& c : faultCases(m)) cs.push_back(c);
    for (auto& c : chunkedPrefillCases(m)) cs.push_back(c);
  }
  // rope_scaling (KV Scope's addition): llama with a linear or llama3 rope_scaling. gpt2 has
  // no RoPE, so the row does not apply to it (AuditAccuracyRope.RopeScalingDoesNotApplyToGpt2).
  for (const char* m : {"llama-linear", "llama-llama3"}) {
    cs.push_back({"clean rope_scaling checkpoint", m, {}, {}});
    cs.push_back({"clean rope_scaling, two requests", m, {}, {}, 0, -1, -2, 2});
    for (int64_t layer : {0, 2})
      for (int64_t step : {1, 3})
        cs.push_back(
            {"rope_scaling layer=" + std::to_string(layer) + " step=" + std::to_string(step),
             m,
             {"rope_scaling:layer=" + std::to_string(layer) + ",step=" + std::to_string(step)},
             {"rope_scaling"},
             0,
             step,
             layer});
    cs.push_back({"rope_scaling prefill (step=0) every layer",
                  m,
                  {"rope_scaling:step=0"},
                  {"rope_scaling"},
                  0,
                  0,
                  0});
  }
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Faults, AuditAccuracy, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = std::to_string(i.index) + "_" + i.param.model + "_" + i.param.name;
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// A model whose lm_head has two identical rows, so the greedy token ties exactly.
std::string tiedHeadModel() {
  auto dir = fs::temp_directory_path() / ("kvscope-tied-" + std::to_string(::getpid()));
  if (fs::exists(dir / "model.safetensors")) return dir.string();
  fs::create_directories(dir);
  fs::copy_file(test::hfModel("llama") + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  auto src = SafetensorsFile::open(test::hfModel("llama") + "/model.safetensors");
  // Clean greedy token at step 0 of prompt 0 is 422 (golden); duplicate it into row 900.
  SafetensorsWriter w;
  for (const auto& name : src->names()) {
    FloatTensor t = src->readFloat(name);
    if (name == "lm_head.weight") {
      const int64_t H = t.shape[1];
      std::copy(t.data.begin() + 422 * H, t.data.begin() + 423 * H, t.data.begin() + 900 * H);
    }
    w.addFloat(name, t);
  }
  w.write((dir / "model.safetensors").string());
  return dir.string();
}

TEST(AuditAccuracyPolicy, TieRuleLastIsDiagnosedAsTieRule) {
  const std::string dir = tiedHeadModel();
  check({"clean exact tie (lowest wins)", dir, {}, {}});
  check({"tie_rule_last", dir, {"tie_rule_last"}, {"tie_rule"}, 0, -1, -2});
}

TEST(AuditAccuracyPolicy, WindowOffByOneOnMistral) {
  auto dir = fs::temp_directory_path() / ("kvscope-mistral-" + std::to_string(::getpid()));
  CheckpointSpec spec = CheckpointSpec::demo();
  spec.setArchitecture(Architecture::Mistral);
  spec.slidingWindow = 6;
  spec.vocabSize = 1200;
  CheckpointWriter(spec).write(dir.string(), true);
  check({"clean mistral window=6", dir.string(), {}, {}});
  check({"window_off_by_one", dir.string(), {"window_off_by_one"}, {"sliding_window"}, 0, -1, -2});
}

TEST(AuditAccuracyClean, HalfPrecisionCheckpointsHaveNoFindings) {
  for (auto dtype : {SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
    auto dir = fs::temp_directory_path() /
               ("kvscope-" + safetensorsDtypeName(dtype) + "-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(test::hfModel("llama") + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
    auto src = SafetensorsFile::open(test::hfModel("llama") + "/model.safetensors");
    SafetensorsWriter w;
    for (const auto& name : src->names()) w.addFloat(name, src->readFloat(name), dtype);
    w.write((dir / "model.safetensors").string());
    EXPECT_EQ(Model::load(dir.string())->storedDtype(), safetensorsDtypeName(dtype));
    check({"clean " + safetensorsDtypeName(dtype) + " checkpoint", dir.string(), {}, {}, 0, -1, -2, 2});
  }
}

// The row needs RoPE: on gpt2 (learned position embeddings) and on a llama checkpoint
// without rope_scaling the engine refuses the fault instead of running a no-op.
TEST(AuditAccuracyRope, RopeScalingDoesNotApplyToGpt2) {
  for (const char* m : {"gpt2", "llama"}) {
    auto model = Model::load(test::hfModel(m));
    RequestSpec s;
    s.promptIds = goldenPrompt(m, 0);
    s.maxNewTokens = 2;
    EngineOptions o;
    o.faults.push_back(FaultSpec::parse("rope_scaling"));
    bool refused = false;
    try {
      Engine(model).run({s}, o);
    } catch (const UsageError& e) {
      refused = std::string(e.what()).find("rope_scaling") != std::string::npos;
    }
    EXPECT_TRUE(refused) << m;
    table().push_back({std::string("rope_scaling: n/a, ") +
                           (std::string(m) == "gpt2" ? "no RoPE" : "no rope_scaling"),
                       m, "fault refused", refused ? "fault refused" : "ran", -1, -2, refused});
  }
}

class TablePrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (table().empty()) return;
    std::cout << "\nAudit accuracy (expected finding ids vs found; first divergence step/layer)\n";
    std::cout << std::left << std::setw(44) << "case" << std::setw(14) << "model" << std::setw(28)
              << "expected" << std::setw(28) << "found" << std::setw(6) << "step" << std::setw(6)
              << "layer"
              << "ok\n";
    int ok = 0;
    for (const auto& r : table()) {
      std::cout << std::setw(44) << r.name << std::setw(14) << r.model << std::setw(28)
                << r.expected << std::setw(28) << r.got << std::setw(6) << r.step << std::setw(6)
                << r.layer << (r.pass ? "yes" : "NO") << "\n";
      ok += r.pass;
    }
    std::cout << ok << " of " << table().size() << " cases diagnosed correctly\n";
  }
};
const auto* const kPrinter = ::testing::AddGlobalTestEnvironment(new TablePrinter);

}  // namespace
