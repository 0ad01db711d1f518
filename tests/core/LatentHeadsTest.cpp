// Latent attention recorded as each head's decompressed key and value (model.latent_records
// "heads": what transformers 4.x and other decompressing engines cache). The traces here are
// KV Scope's engine runs of the DeepSeek V3 fixture with every latent row decompressed in plain
// LibTorch from the checkpoint's kv_b_proj (written here, not the core's decompressedHeads), as
// such an engine would hold them: they fit stage 1, audit clean, and a layer that holds another
// layer's heads is wrong_layer. The independent engine's runs (test_foreign_latent) and the live
// transformers 4.57 recordings (test_live_deepseek) check the same against other code.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/TraceModelFit.hpp"
#include "model/ModelImpl.hpp"
#include "trace/TraceJson.hpp"

using namespace kvscope;

namespace {

std::string latentHeadsModelDir() { return test::fixture("families/models/deepseek_v3"); }

torch::Tensor asTorchTensor(const FloatTensor& t) {
  return torch::from_blob(const_cast<float*>(t.data.data()), t.shape, torch::kFloat).clone();
}

FloatTensor asFloatTensor(const torch::Tensor& t) {
  const auto c = t.contiguous();
  return FloatTensor(c.sizes().vec(), std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel()));
}

// Every latent layer's records [1, s, R] / [1, s, rope] -> each head's key [nh, s, nope + rope]
// (kv_b_proj's nope rows of the head, then the shared roped part) and value [nh, s, v].
Trace withDecompressedHeads(const Trace& latent, const Model& model) {
  const ModelConfig& c = model.config();
  const MlaConfig& m = c.mla;
  Trace t = latent;
  t.model.numKvHeads = c.numHeads;
  t.model.headDim = m.nopeDim + m.ropeDim;
  t.model.valueHeadDim = m.valueDim;
  t.model.latentHeads = true;
  for (auto& step : t.steps)
    for (size_t l = 0; l < step.layers.size(); ++l) {
      TraceLayerRecord& r = step.layers[l];
      const torch::Tensor rows = asTorchTensor(r.keys).select(0, 0), roped = asTorchTensor(r.values).select(0, 0);
      const int64_t s = rows.size(0);
      const torch::Tensor kvB = model.impl().layers[l].kvBW.to(torch::kFloat);  // [nh (nope + v), R]
      const torch::Tensor heads = torch::mm(rows, kvB.t()).view({s, c.numHeads, m.nopeDim + m.valueDim}).permute({1, 0, 2});
      r.keys = asFloatTensor(torch::cat({heads.narrow(2, 0, m.nopeDim), roped.unsqueeze(0).expand({c.numHeads, s, m.ropeDim})}, 2));
      r.values = asFloatTensor(heads.narrow(2, m.nopeDim, m.valueDim));
      r.keyChecksum.reset();  // of the latent rows: not these
      r.valueChecksum.reset();
    }
  return t;
}

Trace decompressedRun(const Model& model) {
  return withDecompressedHeads(test::runWithFaults(latentHeadsModelDir(), {}), model);
}

TEST(LatentHeads, ARunOfDecompressedHeadsFitsAndAuditsClean) {
  auto model = Model::load(latentHeadsModelDir());
  const Trace t = test::writtenAndRead(decompressedRun(*model), "latent_heads", "heads.kvtrace");
  EXPECT_TRUE(t.model.latentHeads);  // model.latent_records "heads" written and read
  EXPECT_EQ(t.model.numKvHeads, 4);
  EXPECT_EQ(t.steps[0].layers[0].keys.shape, (std::vector<int64_t>{4, 10, 24}));
  EXPECT_EQ(t.steps[0].layers[0].values.shape, (std::vector<int64_t>{4, 10, 12}));
  EXPECT_TRUE(traceModelMismatches(t.model, model->config()).empty());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  EXPECT_NE(test::allStageChecks(rep).find("d=24 (values: d=12)"), std::string::npos) << test::allStageChecks(rep);
}

TEST(LatentHeads, ALayerHoldingAnotherLayersHeadsIsWrongLayer) {
  auto model = Model::load(latentHeadsModelDir());
  Trace t = decompressedRun(*model);
  for (auto& step : t.steps)  // from step 2 on, layer 2's records are layer 1's
    if (step.step >= 2) step.layers[2] = step.layers[1];
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, "wrong_layer");
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 2);
}

TEST(LatentHeads, StageOneNamesTheLayoutItExpects) {
  auto model = Model::load(latentHeadsModelDir());
  TraceModelInfo heads = decompressedRun(*model).model;
  heads.headDim = 16;  // the nope part alone
  const auto misfit = traceModelMismatches(heads, model->config());
  ASSERT_EQ(misfit.size(), 1u);
  EXPECT_EQ(misfit[0].field, "model.head_dim");
  EXPECT_NE(misfit[0].what.find("qk_nope_head_dim + qk_rope_head_dim"), std::string::npos) << misfit[0].what;
  // Decompressed heads of a model without latent attention.
  auto qwen3 = Model::load(test::fixture("families/models/qwen3"));
  TraceModelInfo plain = test::runWithFaults(test::fixture("families/models/qwen3"), {}).model;
  plain.latentHeads = true;
  const auto other = traceModelMismatches(plain, qwen3->config());
  ASSERT_FALSE(other.empty());
  EXPECT_EQ(other[0].field, "model.latent_records");
}

TEST(LatentHeads, AnUnknownLayoutIsRefusedNamingTheField) {
  auto model = Model::load(latentHeadsModelDir());
  nlohmann::json doc = kvscope::detail::traceHeaderToJson(decompressedRun(*model), 2);
  EXPECT_EQ(doc["model"]["latent_records"], "heads");
  doc["model"]["latent_records"] = "per_head";
  try {
    kvscope::detail::traceHeaderFromJson(doc, "run.kvtrace", 2);
    FAIL() << "an unknown latent_records was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.latent_records"), std::string::npos) << e.what();
  }
}

TEST(LatentHeads, AQuantisedCacheOfDecompressedHeadsIsRefused) {
  auto model = Model::load(latentHeadsModelDir());
  Trace t = decompressedRun(*model);
  t.kvCache.dtype = "int8";  // a scale per token and kv head
  try {
    Auditor::audit(*model, t);
    FAIL() << "a quantised cache of decompressed heads was audited";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("latent_records"), std::string::npos) << e.what();
  }
}

}  // namespace
