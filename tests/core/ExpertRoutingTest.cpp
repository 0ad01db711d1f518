// A mixture of experts' routing in the trace and the audit (the expert_routing row): the
// built-in engine records each token's experts per layer (a dense layer -1), the file keeps
// them and refuses damaged ones naming the field, a clean run's choices are the reference
// router's own, the engine's fault (another expert count) is found at the step and layer it
// fires, and a routing difference inside the near-tie margin is followed, not reported.
// The bf16 near ties of real transformers: FamilyGoldenTest; recorded by kvscope-record:
// tests/scenarios/test_live_transformers.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "AuditExpectations.hpp"
#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsFile.hpp"

using namespace kvscope;

namespace {

std::string family(const std::string& f) { return test::fixture("families/models/" + f); }

std::string numericsLine(const AuditReport& rep, const std::string& what) {
  for (const auto& st : rep.stages)
    for (const auto& c : st.checks)
      if (c.find(what) != std::string::npos) return c;
  return "";
}

TEST(ExpertRouting, TheEngineRecordsEveryTokensExpertsPerLayerAndTheFileKeepsThem) {
  auto model = Model::load(family("qwen3_moe"));  // layer 1 is dense (mlp_only_layers)
  const ModelConfig& c = model->config();
  const Trace t = test::runWithFaults(family("qwen3_moe"), {});
  ASSERT_FALSE(t.steps.empty());
  for (const auto& st : t.steps) {
    ASSERT_EQ(st.experts.slots, c.moe.topK);
    ASSERT_EQ(st.experts.layers, c.numLayers);
    ASSERT_EQ(st.experts.ids.size(), st.fedIds.size() * static_cast<size_t>(c.numLayers * c.moe.topK));
    for (size_t e = 0; e < st.fedIds.size(); ++e)
      for (int64_t l = 0; l < c.numLayers; ++l) {
        const auto ids = st.experts.of(e, l);
        if (!c.isMoeLayer(l)) {
          EXPECT_TRUE(ids.empty()) << "dense layer " << l;
          continue;
        }
        ASSERT_EQ(static_cast<int64_t>(ids.size()), c.moe.topK);
        for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < c.moe.numExperts) << id;
      }
  }
  EXPECT_EQ(t.steps.front().fedIds.size(), 10u);  // the prefill: one row per prompt token
  const Trace back = test::writtenAndRead(t, "expert_routing", "recorded.kvtrace");
  EXPECT_EQ(back.steps, t.steps);
  // A dense model's trace has no expert column or tensor: its files stay as they were.
  const Trace dense = test::runWithFaults(family("qwen3"), {});
  for (const auto& st : dense.steps) EXPECT_TRUE(st.experts.empty());
}

TEST(ExpertRouting, AFileWithDamagedExpertsIsRefusedNamingTheField) {
  const Trace t = test::runWithFaults(family("mixtral"), {});
  const auto dir = test::scratchDir("expert_routing_bad");
  // An expert id below -1 written into the file's tensor (as a damaged file holds it).
  const auto path = (dir / "negative.kvtrace").string();
  std::filesystem::remove(path);
  TraceFile::write(t, path);
  uint64_t at = 0;
  {
    auto file = SafetensorsFile::open(path);
    std::ifstream in(path, std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);
    at = 8 + header + file->entry("experts").begin + 4 * 5;
  }
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(static_cast<std::streamoff>(at));
    const int32_t bad = -7;
    out.write(reinterpret_cast<const char*>(&bad), 4);
  }
  try {
    TraceFile::read(path);
    FAIL() << "a negative expert id was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("experts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expert -7"), std::string::npos) << e.what();
  }
  // Choices that do not cover the fed entries, or ids below -1, cannot be written.
  Trace shortRows = t;
  shortRows.steps[0].experts.ids.resize(4);
  EXPECT_THROW(TraceFile::write(shortRows, (dir / "short.kvtrace").string()), UsageError);
  Trace negative = t;
  negative.steps[1].experts.ids[0] = -3;
  EXPECT_THROW(TraceFile::write(negative, (dir / "negative-write.kvtrace").string()), UsageError);
}

TEST(ExpertRouting, ACleanRunAuditsCleanWithEveryChoiceTheRoutersOwn) {
  for (const char* f : {"mixtral", "qwen3_moe", "gpt_oss"}) {
    auto model = Model::load(family(f));
    const AuditReport rep = Auditor::audit(*model, test::runWithFaults(family(f), {})).report;
    EXPECT_EQ(rep.verdict, "clean") << f << rep.toText();
    const std::string line = numericsLine(rep, "expert routing");
    EXPECT_EQ(line.rfind("ok: expert routing of 17 tokens", 0), 0u) << f << ": " << line;
    EXPECT_NE(line.find("every recorded choice is the reference router's own"), std::string::npos) << line;
  }
}

TEST(ExpertRouting, ATraceWithoutChoicesSaysTheRoutingIsNotChecked) {
  auto model = Model::load(family("mixtral"));
  Trace t = test::runWithFaults(family("mixtral"), {});
  for (auto& st : t.steps) st.experts = {};
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_EQ(rep.verdict, "clean") << rep.toText();
  EXPECT_EQ(numericsLine(rep, "expert routing").rfind("not checked: expert routing", 0), 0u) << rep.toText();
}

TEST(ExpertRouting, AnotherExpertCountIsFoundAtTheStepAndLayerItFires) {
  auto model = Model::load(family("mixtral"));
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(family("mixtral"), {"expert_routing:layer=1,step=2,experts=3"}))
          .report;
  const Finding& f = test::onlyFinding(rep, finding::ExpertRouting);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.position, 11);  // step 2 feeds the second generated token, at position 11
  EXPECT_EQ(f.evidence.at("engine_experts_per_token"), 3.0);
  EXPECT_EQ(f.evidence.at("checkpoint_experts_per_token"), 2.0);
  EXPECT_EQ(f.evidence.count("router_gap"), 0u);  // counts differ: no gap to name
  EXPECT_NE(f.explanation.find("num_experts_per_tok is 2"), std::string::npos) << f.explanation;
  EXPECT_EQ(numericsLine(rep, "expert routing").rfind("FAIL: expert routing", 0), 0u) << rep.toText();
  // Every layer from the prefill on (experts 0: one more than the checkpoint's): layer 0.
  const AuditReport all =
      Auditor::audit(*model, test::runWithFaults(family("mixtral"), {"expert_routing"})).report;
  const Finding& g = test::onlyFinding(all, finding::ExpertRouting);
  EXPECT_EQ(g.step, 0);
  EXPECT_EQ(g.layer, 0);
  EXPECT_EQ(g.position, 0);
}

TEST(ExpertRouting, AChoiceBeyondTheMarginIsFoundWithItsGap) {
  // The engine's layer-0 experts of token 3 swapped for the router's lowest-ranked one: the
  // engine really computed with the router's own experts, so the recorded choice alone
  // differs; with a run that did use it, the records after layer 0 differ too (above). Here
  // the records match: the stage says the choice moved nothing rather than a finding.
  auto model = Model::load(family("mixtral"));
  Trace t = test::runWithFaults(family("mixtral"), {});
  auto& ids = t.steps[0].experts.ids;
  const int64_t L = t.steps[0].experts.layers, K = t.steps[0].experts.slots;
  const auto at = static_cast<size_t>((3 * L + 0) * K);
  std::vector<int64_t> own(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + K));
  int64_t other = 0;
  while (std::find(own.begin(), own.end(), other) != own.end()) ++other;
  ids[at + 1] = other;
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_EQ(rep.verdict, "clean") << rep.toText();
  const std::string line = numericsLine(rep, "expert routing");
  EXPECT_NE(line.find("1 choices differ beyond the near-tie margin without moving any record"), std::string::npos)
      << line;
}

TEST(ExpertRouting, ADifferenceInsideTheMarginIsFollowed) {
  // With a tolerance scale that makes everything noise, the margin is its cap (half the
  // router row's largest logit): a prefill token whose next-ranked expert lies within it is a
  // near tie. The recorded choice swapped to that expert: the reference takes it and says so.
  auto model = Model::load(family("mixtral"));
  const Trace clean = test::runWithFaults(family("mixtral"), {});
  const int64_t L = clean.steps[0].experts.layers, K = clean.steps[0].experts.slots;
  AuditOptions o;
  o.toleranceScale = 1e6;
  int tried = 0, followed = 0, refused = 0;
  for (int64_t token = 0; token < 10; ++token)
    for (int64_t other = 0; other < model->config().moe.numExperts; ++other) {
      Trace t = clean;
      auto& ids = t.steps[0].experts.ids;
      const auto at = static_cast<size_t>((token * L + 0) * K);
      if (std::find(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + K),
                    other) != ids.begin() + static_cast<std::ptrdiff_t>(at + K))
        continue;
      ids[at + 1] = other;
      ++tried;
      const AuditResult res = Auditor::audit(*model, t, o);
      ASSERT_EQ(res.references.size(), 1u);
      // Ours comes first (layer 0); a followed one reroutes the token, so later layers may
      // differ from the engine's (which computed with its own experts) as well.
      ASSERT_GE(res.references[0].routing.size(), 1u) << "token " << token << " expert " << other;
      const RoutingDecision& d = res.references[0].routing.front();
      EXPECT_EQ(d.layer, 0);
      EXPECT_EQ(d.token, token);
      EXPECT_EQ(d.followed, d.gap <= d.margin);
      if (!d.followed) {
        ++refused;
        continue;
      }
      ++followed;
      EXPECT_GT(d.gap, 0.0);
      EXPECT_NE(numericsLine(res.report, "expert routing").find("took the engine's experts at"),
                std::string::npos)
          << res.report.toText();
    }
  EXPECT_EQ(tried, 20);
  EXPECT_GT(followed, 0);
  EXPECT_GT(refused, 0);
}

TEST(ExpertRouting, TheFaultNeedsAMixtureOfExpertsAndAnotherCount) {
  try {
    test::runWithFaults(family("qwen3"), {"expert_routing"});
    FAIL() << "a dense checkpoint has no router";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("mixture-of-experts"), std::string::npos) << e.what();
  }
  try {
    test::runWithFaults(family("mixtral"), {"expert_routing:experts=2"});
    FAIL() << "2 is mixtral's own count";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("num_experts_per_tok"), std::string::npos) << e.what();
  }
}

TEST(ExpertRouting, IsKvScopesAdditionAfterTheYarnRow) {
  test::expectAdditionAfter(finding::ExpertRouting, finding::YarnAttentionFactor);
}

}  // namespace
