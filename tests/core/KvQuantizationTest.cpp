// A quantised KV cache (int8 / fp8 with a scale per token and kv head; ggml's q8_0 / q4_0
// with a scale per 32-element block): the element types' rounding, the trace's kv_cache field and its validation, the rounded reference, and the
// kv_quantization finding with its evidence in model and trace+trace audits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "cache/KvQuantizer.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/KvQuantization.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceMinimizer.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path kvquantDir() { return test::scratchDir("kvquant"); }

KvQuantization format(const std::string& dtype) {
  KvQuantization q;
  q.dtype = dtype;
  return q;
}

// One row [1, 1, d] through the quantiser.
std::vector<float> roundRow(const std::string& dtype, const std::vector<float>& row,
                            double factor = 1.0) {
  kvscope::detail::KvQuantizer q(format(dtype));
  auto t = torch::tensor(row).view({1, 1, static_cast<int64_t>(row.size())});
  auto out = q.roundTrip(t, 0, true, factor).contiguous();
  return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
}

Trace runQuantized(const std::string& model, const std::string& kvCache,
                   const std::vector<std::string>& faults = {}, bool uncached = false) {
  auto m = Model::load(test::hfModel(model));
  RequestSpec s;
  s.promptIds = test::goldenJson(model)["prompts"][0]["ids"].get<std::vector<int64_t>>();
  s.maxNewTokens = 8;
  s.stopAtEos = false;
  EngineOptions o;
  o.kvCacheDtype = kvCache;
  o.uncached = uncached;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run({s}, o);
}

std::string write(const Trace& t, const std::string& name) {
  const auto path = (kvquantDir() / name).string();
  TraceFile::write(t, path, true);
  return path;
}

std::string readErrorField(const std::string& path) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.field();
  }
  ADD_FAILURE() << "no InputError for " << path;
  return "";
}

}  // namespace

TEST(KvQuantization, ElementTypesRoundAsTheirFormatsDefine) {
  // int8: absmax 127 gives scale 1; halves round to even.
  EXPECT_EQ(roundRow("int8", {127.f, 2.5f, -3.5f, 0.4f}),
            (std::vector<float>{127.f, 2.f, -4.f, 0.f}));
  // fp8_e4m3 with absmax 448 (scale 1): 3 mantissa bits, so spacing 0.125 in [1, 2) and 0.25
  // in [2, 4); 1.0625 is a tie (to even: 1.0); below 2^-6 the spacing stays 2^-9.
  const auto e4 = roundRow("fp8_e4m3", {448.f, 1.0625f, 3.3f, 0.001f, -500.f / 1.2f});
  EXPECT_FLOAT_EQ(e4[0], 448.f);
  EXPECT_FLOAT_EQ(e4[1], 1.0f);
  EXPECT_FLOAT_EQ(e4[2], 3.25f);
  EXPECT_FLOAT_EQ(e4[3], std::ldexp(1.f, -9));
  EXPECT_FLOAT_EQ(e4[4], -416.f);  // 416.67: spacing 32 in [256, 512)
  // fp8_e5m2 with absmax 57344: 2 mantissa bits, spacing 0.5 in [2, 4).
  const auto e5 = roundRow("fp8_e5m2", {57344.f, 3.3f, 2.25f});
  EXPECT_FLOAT_EQ(e5[1], 3.5f);
  EXPECT_FLOAT_EQ(e5[2], 2.0f);  // a tie: to even
  // The row's absmax is stored exactly; a wrong scale multiplies every element.
  const auto scaled = roundRow("int8", {0.5f, -0.25f, 0.125f}, 2.0);
  EXPECT_FLOAT_EQ(scaled[0], 1.0f);
}

TEST(KvQuantization, GgmlBlockTypesRoundAsGgmlDoes) {
  // llama.cpp's q8_0 / q4_0 caches: rows through the quantiser equal gguf-py's quantize then
  // dequantize (ggml's reference, tests/fixtures/llama_state/make_llama_state_fixtures.py).
  auto golden = SafetensorsFile::open(test::fixture("llama_state/blocks.safetensors"));
  const FloatTensor rows = golden->readFloat("rows");
  const auto x = torch::from_blob(const_cast<float*>(rows.data.data()), rows.shape, torch::kFloat32);
  for (const char* dtype : {"q8_0", "q4_0"}) {
    SCOPED_TRACE(dtype);
    KvQuantization f = format(dtype);
    f.scale = "per_block";
    EXPECT_TRUE(f.blockwise());
    EXPECT_NO_THROW(f.validate(2));
    const auto got = kvscope::detail::KvQuantizer(f).roundTrip(x, 0, true).contiguous();
    const FloatTensor want = golden->readFloat(dtype);
    const float* g = got.data_ptr<float>();
    double worst = 0;
    for (size_t i = 0; i < want.data.size(); ++i) {
      ASSERT_EQ(g[i], want.data[i]) << "element " << i;
      worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - rows.data[i]));
    }
    // Within the budget the audit gives such a record, and not far inside it.
    const double budget = f.halfStep(0, rows.maxAbs());
    EXPECT_LE(worst, budget);
    EXPECT_GT(worst, 0.25 * budget);
  }
  KvQuantization wrong = format("q8_0");  // per_token_head is not a block type's scale
  EXPECT_THROW(wrong.validate(2), std::invalid_argument);
  KvQuantization notBlocks = format("int8");
  notBlocks.scale = "per_block";
  EXPECT_THROW(notBlocks.validate(2), std::invalid_argument);
}

TEST(KvQuantization, GgmlBlockCachesAuditCleanAndRefuseHeadsTheirBlocksSpan) {
  auto m = Model::load(test::fixture("llama_state/llama-hd32.gguf"));  // head_dim 32
  for (const char* dtype : {"q8_0", "q4_0"}) {
    RequestSpec s;
    s.promptIds = {5, 17, 300, 41, 99, 7, 12, 250};
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    EngineOptions o;
    o.kvCacheDtype = dtype;
    const Trace t = Engine(m).run({s}, o);
    EXPECT_EQ(t.kvCache.scale, "per_block");
    const auto r = Auditor::audit(*Model::load(test::fixture("llama_state/llama-hd32.gguf")), t).report;
    EXPECT_TRUE(r.clean()) << dtype << "\n" << r.toText();
  }
  EngineOptions o;
  o.kvCacheDtype = "q8_0";
  RequestSpec s;
  s.promptIds = {1, 2, 3};
  s.maxNewTokens = 2;
  try {
    Engine(Model::load(test::hfModel("llama"))).run({s}, o);  // head_dim 16
    ADD_FAILURE() << "q8_0 blocks spanning two heads were accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim a multiple of 32"), std::string::npos) << e.what();
  }
}

TEST(KvQuantization, BudgetIsHalfAStepOfTheDeclaredType) {
  EXPECT_DOUBLE_EQ(format("int8").halfStep(0, 2.54), 0.01);
  EXPECT_DOUBLE_EQ(format("fp8_e4m3").halfStep(3, 8.0), 0.5);
  EXPECT_DOUBLE_EQ(format("fp8_e5m2").relativeHalfStep(), 0.125);
  EXPECT_DOUBLE_EQ(KvQuantization{}.halfStep(0, 8.0), 0.0);
  KvQuantization staticScales = format("int8");
  staticScales.scale = "per_layer";
  staticScales.keyScales = {0.02, 0.04};
  staticScales.valueScales = {0.01, 0.05};
  EXPECT_NO_THROW(staticScales.validate(2));
  EXPECT_DOUBLE_EQ(staticScales.halfStep(1, 100.0), 0.025);
  EXPECT_THROW(staticScales.validate(3), std::invalid_argument);
  EXPECT_THROW(format("int4").validate(2), std::invalid_argument);
  EXPECT_THROW(Engine(Model::load(test::hfModel("gpt2")))
                   .run({},
                        [] {
                          EngineOptions o;
                          o.kvCacheDtype = "int4";
                          return o;
                        }()),
               UsageError);
}

TEST(KvQuantization, TraceDeclaresTheCacheAndTheReaderValidatesIt) {
  const Trace t = runQuantized("gpt2", "fp8_e4m3");
  EXPECT_EQ(t.kvCache.dtype, "fp8_e4m3");
  const auto path = write(t, "fp8.kvtrace");
  const Trace back = TraceFile::read(path);
  EXPECT_EQ(back, t);
  EXPECT_EQ(back.kvCache.scale, "per_token_head");
  // A plain run writes no kv_cache field.
  const Trace plain = TraceFile::read(write(runQuantized("gpt2", ""), "plain.kvtrace"));
  EXPECT_FALSE(plain.kvCache.quantized());
  struct Bad {
    const char* name;
    std::function<void(json&)> edit;
    const char* field;
  };
  const std::vector<Bad> bad = {
      {"unknown-dtype", [](json& d) { d["kv_cache"]["dtype"] = "int4"; }, "kv_cache.dtype"},
      {"not-object", [](json& d) { d["kv_cache"] = 8; }, "kv_cache"},
      {"bad-scale", [](json& d) { d["kv_cache"]["scale"] = "per_channel"; }, "kv_cache.scale"},
      {"short-scales",
       [](json& d) {
         d["kv_cache"]["scale"] = "per_layer";
         d["kv_cache"]["k_scales"] = {0.1};
         d["kv_cache"]["v_scales"] = {0.1, 0.1, 0.1};
       },
       "kv_cache.k_scales"},
      {"negative-scale",
       [](json& d) {
         d["kv_cache"]["scale"] = "per_layer";
         d["kv_cache"]["k_scales"] = {0.1, 0.1, 0.1};
         d["kv_cache"]["v_scales"] = {0.1, -1.0, 0.1};
       },
       "kv_cache.v_scales"},
  };
  for (const auto& b : bad) {
    const auto out = (kvquantDir() / (std::string(b.name) + ".kvtrace")).string();
    test::rewriteTrace(path, out, b.edit);
    EXPECT_EQ(readErrorField(out), b.field) << b.name;
  }
}

TEST(KvQuantization, CorrectCachesAuditCleanAgainstTheRoundedReference) {
  for (const char* model : {"gpt2", "llama"})
    for (const char* dtype : {"int8", "fp8_e4m3", "fp8_e5m2"}) {
      const Trace t = runQuantized(model, dtype);
      auto m = Model::load(test::hfModel(model));
      const auto r = Auditor::audit(*m, t).report;
      EXPECT_TRUE(r.clean()) << model << " " << dtype << "\n" << r.toText();
      EXPECT_NE(r.toleranceRule.find("quantised cache"), std::string::npos) << r.toleranceRule;
      const auto& numerics = r.stages[3].checks;
      EXPECT_TRUE(std::any_of(numerics.begin(), numerics.end(), [](const std::string& c) {
        return c.rfind("ok: layer-0 records of the quantised cache", 0) == 0;
      })) << r.toText();
    }
}

TEST(KvQuantization, TheFloatReferenceIsNotTheQuantisedOne) {
  // The rounding is real: the same int8 run against an unrounded reference (its uncached
  // float32 run) differs from it at layer 0 by up to half a step, never more.
  const Trace cached = runQuantized("gpt2", "int8");
  const Trace floatRef = runQuantized("gpt2", "", {}, /*uncached=*/true);
  const Trace roundedRef = runQuantized("gpt2", "int8", {}, /*uncached=*/true);
  EXPECT_FALSE(floatRef.kvCache.quantized());
  EXPECT_TRUE(roundedRef.kvCache.quantized());
  const auto& a = cached.steps[0].layers[0].keys.data;
  const auto& b = floatRef.steps[0].layers[0].keys.data;
  const auto& c = roundedRef.steps[0].layers[0].keys.data;
  double vsFloat = 0, vsRounded = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    vsFloat = std::max(vsFloat, static_cast<double>(std::fabs(a[i] - b[i])));
    vsRounded = std::max(vsRounded, static_cast<double>(std::fabs(a[i] - c[i])));
  }
  EXPECT_GT(vsFloat, 1e-4);
  EXPECT_LT(vsRounded, 1e-6);
  EXPECT_TRUE(Auditor::auditTraces(roundedRef, cached).report.clean());
}

TEST(KvQuantization, WrongScaleIsDiagnosedWithStepsAndRatio) {
  const Trace t = runQuantized("llama", "int8", {"kv_quantization:scale=200,layer=1,step=2"});
  auto m = Model::load(test::hfModel("llama"));
  const auto r = Auditor::audit(*m, TraceFile::read(write(t, "wrong-scale.kvtrace"))).report;
  ASSERT_EQ(r.findings.size(), 1u) << r.toText();
  const Finding& f = r.findings.front();
  EXPECT_EQ(f.id, finding::KvQuantization);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 1);
  EXPECT_NEAR(f.evidence.at("row_magnitude_ratio"), 2.0, 1e-3);
  EXPECT_GT(f.evidence.at("error_in_steps"), 10.0);
  EXPECT_NE(f.explanation.find("wrong scale"), std::string::npos) << f.explanation;
  EXPECT_EQ(r.stages[1].status, StageStatus::Fail);
  // The minimal reproducer keeps the declared cache, so it still shows the finding.
  TraceCut cut;
  cut.lastTick = 2;
  cut.layers = {1};
  const Trace small = cutTrace(t, cut);
  EXPECT_EQ(small.kvCache, t.kvCache);
  const auto again =
      Auditor::audit(*m, TraceFile::read(write(small, "wrong-scale-min.kvtrace"))).report;
  ASSERT_FALSE(again.findings.empty()) << again.toText();
  EXPECT_EQ(again.findings.front().id, finding::KvQuantization) << again.toText();
  EXPECT_EQ(again.findings.front().layer, 1);
  // trace+trace against the rounded uncached run: the same finding.
  const auto pair = Auditor::auditTraces(runQuantized("llama", "int8", {}, true), t).report;
  ASSERT_FALSE(pair.findings.empty()) << pair.toText();
  EXPECT_EQ(pair.findings.front().id, finding::KvQuantization) << pair.toText();
  EXPECT_EQ(pair.findings.front().step, 2);
  EXPECT_EQ(pair.findings.front().layer, 1);
}

TEST(KvQuantization, FaultIsDocumentedValidatedAndTurnsOnInt8) {
  EXPECT_NE(FaultSpec::helpText().find("kv_quantization"), std::string::npos);
  EXPECT_NO_THROW(FailureMatrix::row(finding::KvQuantization));
  const Trace t = runQuantized("gpt2", "", {"kv_quantization:layer=0,step=1"});
  EXPECT_EQ(t.kvCache.dtype, "int8");
  EXPECT_THROW(runQuantized("gpt2", "", {"kv_quantization:scale=100"}), UsageError);
  EXPECT_THROW(runQuantized("gpt2", "", {"kv_quantization:layer=9"}), UsageError);
}
