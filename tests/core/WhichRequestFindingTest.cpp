// A bug that several requests show is one finding per request: each with its own onset
// (step, layer, evidence), the earliest first, consequences linked to the root of their own
// request; the report's text, Markdown and JSON list each; the views' grouping
// (kvscope::groupFindings) lists the bug once with every request's onset.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "TestSupport.hpp"
#include "audit/FindingBuilder.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/FindingGroups.hpp"

using namespace kvscope;

namespace {

AuditResult threeRequests(const std::vector<std::string>& faults) {
  auto m = Model::load(test::hfModel("llama"));
  const std::vector<std::vector<int64_t>> prompts{{0, 34, 86, 69, 301, 291}, {0, 316, 284, 117}, {0, 55, 17, 240, 8}};
  std::vector<RequestSpec> specs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec s;
    s.promptIds = prompts[i];
    s.maxNewTokens = 7;
    s.stopAtEos = false;
    s.arrivalTick = static_cast<int64_t>(i) * 2;
    specs.push_back(s);
  }
  EngineOptions o;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  Trace t = Engine(m).run(specs, o);
  auto fresh = Model::load(test::hfModel("llama"));
  return Auditor::audit(*fresh, t);
}

std::vector<const Finding*> withId(const AuditReport& rep, const std::string& id) {
  std::vector<const Finding*> out;
  for (const auto& f : rep.findings)
    if (f.id == id) out.push_back(&f);
  return out;
}

}  // namespace

// duplicate_append in request 0 at step 2 and in request 2 at step 4: two findings, each at
// its own request's onset, the earliest first; the run's first divergence stays request 0's.
TEST(WhichRequestFinding, EachRequestsOnsetIsItsOwnFinding) {
  const auto r = threeRequests({"duplicate_append:request=0,step=2,layer=1",
                                "duplicate_append:request=2,step=4,layer=2"});
  const AuditReport& rep = r.report;
  const auto dups = withId(rep, finding::DuplicateAppend);
  ASSERT_EQ(dups.size(), 2u) << rep.toText();
  EXPECT_EQ(dups[0]->request, 0);
  EXPECT_EQ(dups[0]->step, 2);
  EXPECT_EQ(dups[0]->layer, 1);
  EXPECT_EQ(dups[1]->request, 2);
  EXPECT_EQ(dups[1]->step, 4);
  EXPECT_EQ(dups[1]->layer, 2);
  for (const Finding* f : dups) EXPECT_EQ(f->evidence.at("requests_affected"), 2.0);
  EXPECT_EQ(rep.finding(finding::DuplicateAppend), dups[0]);  // by id: the earliest
  EXPECT_TRUE(rep.firstDivergence.present);
  EXPECT_EQ(rep.firstDivergence.request, 0);
  EXPECT_EQ(rep.firstDivergence.step, 2);
  EXPECT_TRUE(std::none_of(rep.findings.begin(), rep.findings.end(),
                           [](const Finding& f) { return f.request == 1; }))
      << "request 1 is clean\n" << rep.toText();

  // A consequence links to the root of its own request, and follows it in the list.
  for (size_t i = 0; i < rep.findings.size(); ++i) {
    const Finding& c = rep.findings[i];
    if (c.causedBy.empty()) continue;
    size_t root = i;
    while (root > 0 && !rep.findings[root].causedBy.empty()) --root;
    EXPECT_EQ(rep.findings[root].id, c.causedBy) << rep.toText();
    EXPECT_EQ(rep.findings[root].request, c.request) << rep.toText();
  }

  // Text, Markdown and JSON list both onsets.
  const std::string text = rep.toText();
  EXPECT_NE(text.find("[duplicate_append] request 0, step 2, layer 1"), std::string::npos) << text;
  EXPECT_NE(text.find("[duplicate_append] request 2, step 4, layer 2"), std::string::npos) << text;
  const std::string md = rep.toMarkdown();
  EXPECT_NE(md.find("- Where: request 2, step 4, layer 2"), std::string::npos) << md;
  int inJson = 0;
  const auto json = rep.toJson();
  for (const auto& f : json["findings"])
    if (f["id"] == "duplicate_append") {
      EXPECT_EQ(f["where"]["request"].get<int64_t>(), inJson == 0 ? 0 : 2);
      ++inJson;
    }
  EXPECT_EQ(inJson, 2);

  // The views' grouping: one group, both onsets, the earliest first.
  const auto groups = groupFindings(rep.findings);
  const auto g = std::find_if(groups.begin(), groups.end(),
                              [](const FindingGroup& x) { return x.id == finding::DuplicateAppend; });
  ASSERT_NE(g, groups.end());
  EXPECT_EQ(g->onsets(), "2 requests: 0 at step 2, 2 at step 4");
  EXPECT_EQ(std::count_if(groups.begin(), groups.end(),
                          [](const FindingGroup& x) { return x.id == finding::DuplicateAppend; }),
            1);
}

// Without request= the fault hits every request: one finding for each.
TEST(WhichRequestFinding, AFaultInEveryRequestIsFoundInEach) {
  const auto r = threeRequests({"duplicate_append:step=3,layer=1"});
  const auto dups = withId(r.report, finding::DuplicateAppend);
  ASSERT_EQ(dups.size(), 3u) << r.report.toText();
  std::vector<int64_t> requests;
  for (const Finding* f : dups) {
    requests.push_back(f->request);
    EXPECT_EQ(f->step, 3);
    EXPECT_EQ(f->layer, 1);
    EXPECT_EQ(f->evidence.at("requests_affected"), 3.0);
  }
  std::sort(requests.begin(), requests.end());
  EXPECT_EQ(requests, (std::vector<int64_t>{0, 1, 2}));
}

// The builder keeps each request's earliest occurrence, orders by tick, and puts each
// consequence right after the root of its own request.
TEST(WhichRequestFinding, BuilderKeepsOneFindingPerRequest) {
  auto draft = [](const char* id, int64_t request, int64_t step) {
    return kvscope::detail::FindingDraft(id).request(request).step(step).tick(step * 3 + request);
  };
  kvscope::detail::FindingBuilder b;
  b.add(draft(finding::DuplicateAppend, 2, 5));
  b.add(draft(finding::DuplicateAppend, 0, 3));
  b.add(draft(finding::DuplicateAppend, 0, 4));  // later in request 0: not its onset
  b.add(kvscope::detail::FindingDraft(finding::Position).request(2).step(6).tick(20).causedBy(finding::DuplicateAppend));
  b.add(kvscope::detail::FindingDraft(finding::Position).request(0).step(4).tick(12).causedBy(finding::DuplicateAppend));
  EXPECT_TRUE(b.hasFor(finding::DuplicateAppend, 2));
  EXPECT_FALSE(b.hasFor(finding::DuplicateAppend, 1));
  const auto out = b.finish();
  ASSERT_EQ(out.size(), 4u);
  const std::vector<std::pair<std::string, int64_t>> want{
      {finding::DuplicateAppend, 0}, {finding::Position, 0}, {finding::DuplicateAppend, 2}, {finding::Position, 2}};
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].id, want[i].first) << i;
    EXPECT_EQ(out[i].request, want[i].second) << i;
  }
  EXPECT_EQ(out[0].step, 3);
  EXPECT_EQ(out[0].evidence.at("requests_affected"), 2.0);
  const auto groups = groupFindings(out);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].onsets(), "2 requests: 0 at step 3, 2 at step 5");
  EXPECT_EQ(groups[1].depth, 1);
  EXPECT_EQ(groups[1].onsets(), "2 requests: 0 at step 4, 2 at step 6");
  // One count wording for the views: rows listed, and the requests when a row stands for
  // several (the dock and the headline counted rows, the status bar findings: 1 and 2).
  EXPECT_EQ(findingCountText(out), "2 findings (2 requests)");
  EXPECT_EQ(findingCountText({out[0]}), "1 finding");
  EXPECT_EQ(findingCountText({}), "0 findings");
}
