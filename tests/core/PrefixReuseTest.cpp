// Prefix caching and prefix_reuse (KV Scope's addition): a request whose prompt begins with an
// earlier prompt's whole blocks takes their rows and prefills the rest, and audits clean
// (model+trace and trace+trace); a lookup that compares a block without its last token hands
// a prompt differing only there the other prompt's block, which is prefix_reuse at the
// reusing request's first step, the first wrong layer and the block's last position, with the
// rows equal to the other request's reference there. Prints one table of every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"

using namespace kvscope;
using nlohmann::json;

namespace {

struct PrefixRun {
  std::string name;
  std::string model;
  int64_t differsAt = -1;  // request 1's prompt differs from request 0's at this index (-1: a
                           // longer prompt with request 0's as its prefix)
  std::vector<std::string> faults;
  int64_t arrival = 2;  // request 1's arrival tick
  int64_t block = 4;
};

std::vector<int64_t> prefixPrompt(const std::string& model) {
  auto ids = test::goldenJson(model)["prompts"][0]["ids"].get<std::vector<int64_t>>();
  ids.resize(14, 3);
  return ids;
}

Trace prefixRun(const PrefixRun& c, bool uncached = false) {
  auto m = Model::load(test::hfModel(c.model));
  const std::vector<int64_t> first = prefixPrompt(c.model);
  std::vector<int64_t> second = first;
  if (c.differsAt >= 0) {
    second[static_cast<size_t>(c.differsAt)] =
        (second[static_cast<size_t>(c.differsAt)] + 17) % 200;
  } else {
    second.push_back(44);
    second.push_back(45);
  }
  std::vector<RequestSpec> specs(2);
  for (size_t i = 0; i < 2; ++i) {
    specs[i].promptIds = i == 0 ? first : second;
    specs[i].maxNewTokens = 5;
    specs[i].stopAtEos = false;
    specs[i].arrivalTick = i == 0 ? 0 : c.arrival;
  }
  EngineOptions o;
  o.uncached = uncached;
  o.prefixCacheBlock = c.faults.empty() ? c.block : 0;  // the fault turns it on itself
  if (!uncached)
    for (const auto& f : c.faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run(specs, o);
}

test::AccuracyTable* const prefixTable =
    test::AccuracyTable::registered("prefix cache / prefix_reuse accuracy");

// Audits `c` in model+trace and trace+trace (against the uncached engine) mode; expects clean
// (layer < -1), or prefix_reuse alone at request 1, step 0, `layer`, `position`.
void expectPrefixAudit(const PrefixRun& c, int64_t layer = -2, int64_t position = -1) {
  const Trace cached =
      test::writtenAndRead(prefixRun(c), "prefix-reuse-traces", c.name + ".kvtrace");
  const auto hit = std::find_if(cached.steps.begin(), cached.steps.end(),
                                [](const TraceStep& s) { return s.reusedCount > 0; });
  EXPECT_NE(hit, cached.steps.end()) << c.name << ": no prefix-cache hit";
  const AuditReport model = Auditor::audit(*Model::load(test::hfModel(c.model)), cached).report;
  const AuditReport pair = Auditor::auditTraces(prefixRun(c, /*uncached=*/true), cached).report;
  for (const auto* rep : {&model, &pair}) {
    const std::string mode = rep == &model ? "model+trace" : "trace+trace";
    std::string got;
    for (const auto& f : rep->findings) got += (got.empty() ? "" : ",") + f.id;
    bool pass;
    int64_t at = -1;
    if (layer < -1) {
      EXPECT_TRUE(rep->clean() && rep->findings.empty()) << c.name << " " << mode << "\n"
                                                         << rep->toText();
      pass = rep->clean() && rep->findings.empty();
    } else {
      const Finding& f = test::onlyFinding(*rep, finding::PrefixReuse);
      at = f.position;
      EXPECT_EQ(f.request, 1) << c.name << " " << mode << "\n" << rep->toText();
      EXPECT_EQ(f.step, 0) << c.name << " " << mode;
      EXPECT_EQ(f.layer, layer) << c.name << " " << mode << "\n" << rep->toText();
      EXPECT_EQ(f.position, position) << c.name << " " << mode << "\n" << rep->toText();
      ASSERT_TRUE(f.evidence.count("source_request")) << c.name << " " << mode << "\n"
                                                      << rep->toText();
      EXPECT_EQ(f.evidence.at("source_request"), 0.0) << c.name << " " << mode;
      pass = rep->findings.size() == 1 && f.request == 1 && f.step == 0 && f.layer == layer &&
             f.position == position;
    }
    prefixTable->add({c.name, mode, layer < -1 ? "clean" : "prefix_reuse",
                      got.empty() ? "clean" : got, rep->firstDivergence.step,
                      rep->firstDivergence.layer, at >= 0 ? "pos " + std::to_string(at) : "",
                      pass});
  }
}

}  // namespace

TEST(PrefixReuse, MatrixRowIsKvScopesAdditionAfterBatchVariance) {
  test::expectAdditionAfter(finding::PrefixReuse, finding::BatchVariance);
}

TEST(PrefixReuse, HitTakesWholeBlocksAndGivesTheSameTokens) {
  for (const char* m : {"gpt2", "llama"}) {
    const PrefixRun c{"hit", m, -1, {}};
    const Trace t = test::writtenAndRead(prefixRun(c), "prefix-reuse-traces", "hit.kvtrace");
    PrefixRun off = c;
    off.block = 0;
    const Trace plain = prefixRun(off);
    EXPECT_EQ(t.requests[1].generated, plain.requests[1].generated) << m;
    const TraceStep& s = *t.stepsOf(1).front();
    EXPECT_EQ(s.reusedCount, 12) << m;  // 3 whole blocks of request 0's 14 tokens
    EXPECT_EQ(s.reusedFrom, 0) << m;
    EXPECT_EQ(s.reusedBlocks.size(), 3u) << m;
    EXPECT_EQ(s.fedIds.size(), 4u) << m;  // tokens 12..15 computed
    EXPECT_EQ(s.positions.front(), 12) << m;
    EXPECT_EQ(s.layers[0].keys.shape[1], 16) << m;  // the reused rows first, then the fed
    EXPECT_EQ(s.layers[0].cacheLength, 16) << m;
    // The first request took nothing; neither column is written without a hit.
    EXPECT_EQ(t.stepsOf(0).front()->reusedCount, 0) << m;
  }
}

TEST(PrefixReuse, CorrectHitsAuditClean) {
  for (const char* m : {"gpt2", "llama"}) {
    expectPrefixAudit({std::string(m) + " hit, longer prompt", m, -1, {}});
    expectPrefixAudit({std::string(m) + " hit up to a change", m, 9, {}});  // blocks 0-1 only
    expectPrefixAudit({std::string(m) + " hit, arrives at tick 4", m, -1, {}, 4});
  }
}

TEST(PrefixReuse, PartialBlockMatchIsPrefixReuseAtTheBlocksLastPosition) {
  for (const auto& [m, layers] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"gpt2", {0, 1}}, {"llama", {1, 2}}}) {
    for (int64_t differs : {7, 3})  // the last token of block 1, then of block 0
      expectPrefixAudit(
          {m + " all layers, pos " + std::to_string(differs), m, differs, {"prefix_reuse"}}, 0,
          differs);
    for (int64_t layer : layers)
      expectPrefixAudit({m + " layer " + std::to_string(layer) + ", tick 4",
                         m,
                         7,
                         {"prefix_reuse:layer=" + std::to_string(layer)},
                         4},
                        layer, 7);
  }
}

TEST(PrefixReuse, EvidenceNamesTheSpanAndTheOtherRequest) {
  const Trace t = prefixRun({"evidence", "llama", 7, {"prefix_reuse"}});
  const AuditReport rep = Auditor::audit(*Model::load(test::hfModel("llama")), t).report;
  const Finding& f = test::onlyFinding(rep, finding::PrefixReuse);
  EXPECT_EQ(f.evidence.at("reused_count"), 12.0);
  EXPECT_EQ(f.evidence.at("reused_from"), 0.0);
  EXPECT_EQ(f.evidence.at("first_wrong_position"), 7.0);
  // At layer 0 only the changed token's row is wrong: the rows after it hold the same tokens
  // at the same positions (layer 0 depends on nothing else); higher layers attend over it.
  EXPECT_EQ(f.evidence.at("wrong_rows"), 1.0);
  EXPECT_EQ(f.evidence.at("last_wrong_position"), 7.0);
  EXPECT_GT(f.evidence.at("own_reference_error"), 1e-2);
  EXPECT_LT(f.evidence.at("source_reference_error"), 1e-4);
  EXPECT_LT(f.evidence.at("fed_layer0_error"), 1e-4);  // rows outside the span are right
  EXPECT_NE(f.explanation.find("equals request 0's reference"), std::string::npos) << f.explanation;
  const auto& pos = rep.stages[2].checks;
  EXPECT_TRUE(std::any_of(pos.begin(), pos.end(), [](const std::string& c) {
    return c.rfind("FAIL: a prefix-cache hit", 0) == 0;
  })) << rep.toText();
  // The position timeline marks the hit and the finding.
  auto out = std::make_shared<AuditJobOutput>();
  out->result = Auditor::audit(*Model::load(test::hfModel("llama")), t);
  const Inspector inspector(out);
  std::vector<std::string> kinds;
  for (const auto& mk : inspector.timeline(1).markers) kinds.push_back(mk.kind);
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "prefix_hit"), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "prefix_reuse"), kinds.end());
}

TEST(PrefixReuse, EngineAndReaderRefuseWhatTheyCannotTake) {
  RequestSpec s;
  s.promptIds = {5, 6, 7, 8, 9};
  s.maxNewTokens = 2;
  EngineOptions o;
  o.prefixCacheBlock = 4;
  o.prefillChunk = 2;
  EXPECT_THROW(Engine(Model::load(test::hfModel("llama"))).run({s}, o), UsageError);
  const auto path = (test::scratchDir("prefix-reuse-traces") / "valid.kvtrace").string();
  std::filesystem::remove(path);
  const Trace valid = prefixRun({"valid", "llama", -1, {}});
  TraceFile::write(valid, path);
  const auto hitStep = std::find_if(valid.steps.begin(), valid.steps.end(),
                                    [](const TraceStep& st) { return st.reusedCount > 0; });
  ASSERT_NE(hitStep, valid.steps.end());
  const auto hit = static_cast<size_t>(hitStep - valid.steps.begin());
  const std::vector<std::pair<std::string, std::function<void(json&)>>> bad = {
      {"steps.reused_from[2]", [](json& d) { d["steps"]["reused_from"][2] = 7; }},
      {"steps.reused_count[1]", [](json& d) { d["steps"]["reused_count"][1] = -3; }},
      {"steps.reused_blocks[2]", [](json& d) { d["steps"]["reused_blocks"][2] = "abc"; }},
      // more reused entries than the hit step's records (which start with the reused rows)
      {"steps.reused_count[" + std::to_string(hit) + "]",
       [&](json& d) { d["steps"]["reused_count"][hit] = d["steps"]["appended"][hit][0].get<int64_t>() + 1; }},
  };
  for (const auto& [field, edit] : bad) {
    const auto out = (test::scratchDir("prefix-reuse-traces") / "bad.kvtrace").string();
    test::rewriteTrace(path, out, edit);
    try {
      TraceFile::read(out);
      ADD_FAILURE() << field << ": read without error";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field);
    }
  }
}
