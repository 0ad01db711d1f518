// Long work reports progress and stops on Cancel: the uncached reference between layers
// (Model::reference's PassWatch), the audit through it, and an audit job between loading
// the checkpoint, the tokenizer and the run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "TestSupport.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;

namespace {
const std::vector<int64_t> kLongPassIds = {1, 15, 27, 3, 44, 9, 61, 12, 5, 30};

bool containsText(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST(LongPassProgress, TheReferenceReportsEveryLayerAndGivesTheSameResult) {
  auto model = Model::load(test::hfModel("llama"));
  const int64_t layers = model->config().numLayers;
  std::vector<std::pair<int64_t, int64_t>> seen;
  PassWatch watch;
  watch.progress = [&](int64_t done, int64_t total) { seen.emplace_back(done, total); };
  const ReferenceRun watched = model->reference(kLongPassIds, {}, watch);
  ASSERT_EQ(static_cast<int64_t>(seen.size()), layers);
  for (int64_t l = 0; l < layers; ++l) EXPECT_EQ(seen[l], std::make_pair(l + 1, layers));
  const ReferenceRun plain = model->reference(kLongPassIds);
  EXPECT_EQ(watched.logits.data, plain.logits.data);
  ASSERT_EQ(watched.keys.size(), plain.keys.size());
  EXPECT_EQ(watched.keys.back().data, plain.keys.back().data);
}

TEST(LongPassProgress, CancelStopsTheReferenceBetweenLayers) {
  auto model = Model::load(test::hfModel("llama"));
  ASSERT_GE(model->config().numLayers, 2);
  int reported = 0;
  PassWatch watch;
  watch.progress = [&](int64_t, int64_t) { ++reported; };
  watch.cancelled = [&] { return reported >= 1; };  // Cancel pressed during layer 0
  EXPECT_THROW(model->reference(kLongPassIds, {}, watch), AuditCancelled);
  EXPECT_EQ(reported, 1);  // stopped after the first layer, not at the end of the pass
}

TEST(LongPassProgress, AnAuditReportsItsReferencePassLayerByLayerAndCancelsInIt) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec req;
  req.promptIds = kLongPassIds;
  req.maxNewTokens = 4;
  const Trace trace = Engine(model).run({req}, {});
  std::vector<std::string> messages;
  AuditOptions options;
  options.progress = [&](double, const std::string& what) { messages.push_back(what); };
  const auto result = Auditor::audit(*model, trace, options);
  const std::string last = "uncached reference, layer " +
                           std::to_string(model->config().numLayers) + " of " +
                           std::to_string(model->config().numLayers);
  EXPECT_TRUE(containsText(messages, "request 0: uncached reference, layer 1 of "))
      << messages.size();
  EXPECT_TRUE(containsText(messages, last));

  messages.clear();
  options.cancelled = [&] { return containsText(messages, "uncached reference, layer 1 of"); };
  EXPECT_THROW(Auditor::audit(*model, trace, options), AuditCancelled);
  EXPECT_FALSE(containsText(messages, last));
}

// Each request's reference is one uncached pass over its whole stream, whatever its number of
// steps (stage 1's own check of the logits reads that pass too); re-derivations run only where
// a row tests a cause. The report says how many it took.
TEST(LongPassProgress, AnAuditTakesOnePassPerRequestAndSaysHowMany) {
  auto model = Model::load(test::hfModel("llama"));
  std::vector<RequestSpec> reqs(2);
  reqs[0].promptIds = {5, 17, 300, 41};
  reqs[1].promptIds = {9, 8, 7};
  for (auto& r : reqs) r.maxNewTokens = 5;
  const AuditReport clean = Auditor::audit(*model, Engine(model).run(reqs, {})).report;
  // Streams of 4 + 5 and 3 + 5 tokens: 9 and 8 positions, one pass each.
  EXPECT_TRUE(containsText(clean.stages.front().checks,
                           "note: 2 uncached reference passes over 17 positions for 2 requests (one per request and "
                           "weights version), 0 re-derivations of a diverged run"))
      << clean.toText();
  EngineOptions faulty;
  const auto gemma = Model::load(test::fixture("families/models/gemma2"));
  faulty.faults = {FaultSpec::parse("softcap_dropped:layer=1,step=1")};
  const AuditReport rep = Auditor::audit(*gemma, Engine(gemma).run({reqs[0]}, faulty)).report;
  ASSERT_TRUE(rep.hasFinding("softcap_dropped")) << rep.toText();
  EXPECT_TRUE(containsText(rep.stages.front().checks, "note: 1 uncached reference pass over 9 positions")) << rep.toText();
  EXPECT_FALSE(containsText(rep.stages.front().checks, ", 0 re-derivations")) << rep.toText();
}

TEST(LongPassProgress, AnAuditJobSaysWhatItLoadsAndCancelsBeforeTheNextPiece) {
  AuditJobSpec spec;
  spec.modelDir = test::hfModel("llama");
  spec.promptIds = {kLongPassIds};
  spec.maxNewTokens = 3;
  std::vector<std::string> messages;
  spec.options.progress = [&](double, const std::string& what) { messages.push_back(what); };
  spec.options.cancelled = [&] { return containsText(messages, "opening the checkpoint"); };
  EXPECT_THROW(runAuditJob(spec), AuditCancelled);
  EXPECT_FALSE(containsText(messages, "reading the tokenizer"));  // cancelled right after the load

  messages.clear();
  spec.options.cancelled = [&] { return containsText(messages, "reading the tokenizer"); };
  EXPECT_THROW(runAuditJob(spec), AuditCancelled);
  EXPECT_FALSE(containsText(messages, "generating"));

  messages.clear();
  spec.options.cancelled = {};
  const auto out = runAuditJob(spec);
  EXPECT_TRUE(containsText(messages, "opening the checkpoint"));
  EXPECT_TRUE(containsText(messages, "reading the tokenizer"));
  EXPECT_EQ(out.result.report.findings.size(), 0u);
}
