#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "kvscope/Error.hpp"
#include "kvscope/PolicyReplay.hpp"
#include "kvscope/RequestRng.hpp"
#include "kvscope/Sampler.hpp"
#include "kvscope/SamplingPolicy.hpp"

using namespace kvscope;
using RecordedStep = PolicyReplay::RecordedStep;

namespace {

constexpr size_t kSteps = 20;
constexpr size_t kVocab = 50;

std::vector<std::vector<float>> randomRows(uint32_t seed, size_t n = kSteps, size_t v = kVocab) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<std::vector<float>> rows(n, std::vector<float>(v));
  for (auto& row : rows)
    for (float& x : row) x = normal(gen);
  return rows;
}

SamplingPolicy sampledPolicy(uint64_t seed = 2024) {
  SamplingPolicy p;
  p.temperature = 0.9;
  p.topK = 40;
  p.topP = 0.97;
  p.seed = seed;
  return p;
}

// Generates a run with the Sampler. `before(i, rng)` runs before step i and may disturb the
// generator the way a buggy engine would; the recorded draw count is the generator's own.
std::vector<RecordedStep> generate(const std::vector<std::vector<float>>& rows,
                                   const SamplingPolicy& policy,
                                   const std::function<void(size_t, RequestRng&)>& before = {}) {
  RequestRng rng(policy.seed);
  std::vector<RecordedStep> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (before) before(i, rng);
    const SamplingOutcome o = Sampler::choose(rows[i], policy, rng);
    out.push_back({rows[i], o.token, policy, o.drawsBefore});
  }
  return out;
}

}  // namespace

TEST(PolicyReplay, CleanSampledRunReplaysExactly) {
  const auto steps = generate(randomRows(1), sampledPolicy());
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_TRUE(r.clean()) << r;
  EXPECT_EQ(r.rng, RngVerdict::Straight);
  EXPECT_EQ(r.sampledSteps, kSteps);
  EXPECT_EQ(r.greedySteps, 0u);
  EXPECT_FALSE(r.firstMismatch.has_value());
  EXPECT_FALSE(r.firstRecordedCountMismatch.has_value());
  EXPECT_TRUE(r.shifts.empty());
  EXPECT_EQ(r.tieRule, TieRuleVerdict::NoGreedySteps);
  ASSERT_EQ(r.steps.size(), kSteps);
  for (const PolicyReplayStep& s : r.steps) {
    EXPECT_TRUE(s.reproduced) << s;
    EXPECT_TRUE(s.chosenEligible) << s;
    EXPECT_EQ(s.expectedDrawsBefore, s.index);
    EXPECT_NE(std::find(s.matchingOffsets.begin(), s.matchingOffsets.end(), 0),
              s.matchingOffsets.end());
    EXPECT_LE(s.sumError, 1e-6) << s;
    EXPECT_GT(s.eligibleCount, 1u);
    EXPECT_LE(s.eligibleCount, 40u);  // top-k 40
  }
  EXPECT_LE(r.maxSumError, 1e-6);
}

TEST(PolicyReplay, KeptProbabilitiesSumToOne) {
  // Wide rows, several policies: the float probabilities of the kept tokens sum to 1.
  const auto rows = randomRows(2, 5, 4096);
  for (double t : {0.3, 1.0, 2.5}) {
    SamplingPolicy p = sampledPolicy();
    p.temperature = t;
    p.topK.reset();
    p.topP = 0.9;
    const PolicyReplayReport r = PolicyReplay().replay(generate(rows, p));
    EXPECT_LE(r.maxSumError, 1e-6) << "T=" << t;
    for (const auto& s : r.steps) EXPECT_NEAR(s.probabilitySum, 1.0, 1e-6);
  }
}

TEST(PolicyReplay, ExtraDrawBeforeStep5IsAnRngOffset) {
  const auto rows = randomRows(3);
  const auto steps = generate(rows, sampledPolicy(), [](size_t i, RequestRng& rng) {
    if (i == 5) rng.nextUniform();  // a stray draw, e.g. another request sharing the generator
  });
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_FALSE(r.clean());
  EXPECT_TRUE(r.rngAnomaly());
  EXPECT_EQ(r.rng, RngVerdict::Offset) << r;
  ASSERT_EQ(r.shifts.size(), 1u) << r;
  EXPECT_EQ(r.shifts[0].offset, 1);
  EXPECT_EQ(r.shifts[0].fromStep, 5u) << r;
  EXPECT_TRUE(r.shifts[0].fromRecordedCount);
  EXPECT_LE(r.shifts[0].earliestStep, 5u);
  EXPECT_EQ(r.firstRecordedCountMismatch, std::optional<size_t>(5));
  ASSERT_TRUE(r.firstMismatch.has_value());
  EXPECT_GE(*r.firstMismatch, 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(r.steps[i].reproduced) << r.steps[i];
  EXPECT_NE(r.describe().find("offset +1 from step 5"), std::string::npos) << r;
}

TEST(PolicyReplay, UncountedExtraDrawIsFoundFromTheTokensAlone) {
  const auto rows = randomRows(3);
  auto steps = generate(rows, sampledPolicy(), [](size_t i, RequestRng& rng) {
    if (i == 5) rng.nextUniform();
  });
  for (size_t i = 0; i < steps.size(); ++i) steps[i].drawsBefore = i;  // recorder missed it
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.rng, RngVerdict::Offset) << r;
  ASSERT_EQ(r.shifts.size(), 1u) << r;
  EXPECT_EQ(r.shifts[0].offset, 1);
  EXPECT_FALSE(r.shifts[0].fromRecordedCount);
  EXPECT_LE(r.shifts[0].earliestStep, 5u) << r;
  EXPECT_GE(r.shifts[0].fromStep, 5u) << r;
  EXPECT_EQ(r.shifts[0].fromStep, *r.firstMismatch);
  EXPECT_FALSE(r.firstRecordedCountMismatch.has_value());
}

TEST(PolicyReplay, MissingDrawAndSecondShiftAreSegmented) {
  const auto rows = randomRows(4, 30);
  const SamplingPolicy policy = sampledPolicy(99);
  const auto steps = generate(rows, policy, [](size_t i, RequestRng& rng) {
    if (i == 8) rng.nextUniform();
    if (i == 17) {
      rng.nextUniform();
      rng.nextUniform();
    }
  });
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.rng, RngVerdict::Offset) << r;
  ASSERT_EQ(r.shifts.size(), 2u) << r;
  EXPECT_EQ(r.shifts[0], (RngShift{8, r.shifts[0].earliestStep, 1, true}));
  EXPECT_EQ(r.shifts[1], (RngShift{17, r.shifts[1].earliestStep, 3, true}));

  // A step that reused the previous uniform instead of drawing: -1 from the next step.
  RequestRng rng(policy.seed);
  std::vector<RecordedStep> lost;
  for (size_t i = 0; i < rows.size(); ++i) {
    RequestRng copy = rng;
    SamplingOutcome o = Sampler::choose(rows[i], policy, i == 10 ? copy : rng);
    lost.push_back({rows[i], o.token, policy, i <= 10 ? i : i - 1});
  }
  const PolicyReplayReport r2 = PolicyReplay().replay(lost);
  EXPECT_EQ(r2.rng, RngVerdict::Offset) << r2;
  ASSERT_EQ(r2.shifts.size(), 1u) << r2;
  EXPECT_EQ(r2.shifts[0].offset, -1);
  EXPECT_EQ(r2.shifts[0].fromStep, 11u) << r2;
}

TEST(PolicyReplay, ShiftBeyondMaxOffsetIsUnexplained) {
  const auto rows = randomRows(5);
  const auto steps = generate(rows, sampledPolicy(), [](size_t i, RequestRng& rng) {
    if (i == 3) rng.discard(40);
  });
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.rng, RngVerdict::Unexplained) << r;
  EXPECT_FALSE(r.clean());
  PolicyReplay::Options wide;
  wide.maxOffset = 40;
  const PolicyReplayReport r2 = PolicyReplay(wide).replay(steps);
  EXPECT_EQ(r2.rng, RngVerdict::Offset) << r2;
  ASSERT_FALSE(r2.shifts.empty());
  EXPECT_EQ(r2.shifts.back().offset, 40);
  EXPECT_THROW(PolicyReplay(PolicyReplay::Options{-1}).replay(steps), UsageError);
}

TEST(PolicyReplay, ReseedingEveryStepIsDetected) {
  const SamplingPolicy policy = sampledPolicy(7);
  const auto steps = generate(randomRows(6), policy,
                              [&](size_t, RequestRng& rng) { rng.reseed(policy.seed); });
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.rng, RngVerdict::Reseeded) << r;
  EXPECT_TRUE(r.rngAnomaly());
  EXPECT_FALSE(r.clean());
  EXPECT_TRUE(r.shifts.empty());
  EXPECT_EQ(r.firstRecordedCountMismatch, std::optional<size_t>(1));
  for (const auto& s : r.steps) EXPECT_TRUE(s.reseedMatches) << s;
}

namespace {
// Greedy rows where most steps have a 2- or 3-way tie at the top.
std::vector<std::vector<float>> tiedRows() {
  auto rows = randomRows(8);
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& row = rows[i];
    const float m = *std::max_element(row.begin(), row.end()) + 1.0f;
    if (i % 4 == 3) {
      row[i] = m;  // a unique maximum
      continue;
    }
    row[(i * 7) % kVocab] = m;
    row[(i * 7 + 13) % kVocab] = m;
    if (i % 2 == 0) row[(i * 7 + 29) % kVocab] = m;
  }
  return rows;
}
}  // namespace

TEST(PolicyReplay, GreedyTiesBrokenHighAreAttributedToHighest) {
  SamplingPolicy highest;
  highest.tieRule = SamplingPolicy::TieRule::Highest;
  auto steps = generate(tiedRows(), highest);
  for (auto& s : steps) s.policy = SamplingPolicy{};  // the trace declares torch's rule
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.tieRule, TieRuleVerdict::Highest) << r;
  EXPECT_EQ(r.decidedTies, 15u);
  EXPECT_EQ(r.declaredTieRule, SamplingPolicy::TieRule::Lowest);
  EXPECT_TRUE(r.tieRuleAnomaly);
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(r.rng, RngVerdict::NoSampledSteps);
  EXPECT_TRUE(r.ineligibleSteps.empty());
  for (const auto& s : r.steps) {
    EXPECT_TRUE(s.greedy);
    EXPECT_EQ(s.tie, s.tiedAtTop.size() > 1 ? TieAttribution::Highest : TieAttribution::Ambiguous)
        << s;
    EXPECT_EQ(s.reproduced, s.tiedAtTop.size() == 1) << s;
    EXPECT_EQ(s.expectedDrawsBefore, 0u);
  }

  // Declared Highest: the same run is consistent.
  for (auto& s : steps) s.policy = highest;
  const PolicyReplayReport ok = PolicyReplay().replay(steps);
  EXPECT_EQ(ok.tieRule, TieRuleVerdict::Highest);
  EXPECT_FALSE(ok.tieRuleAnomaly);
  EXPECT_TRUE(ok.clean()) << ok;
}

TEST(PolicyReplay, GreedyTieVerdicts) {
  const auto rows = tiedRows();
  const PolicyReplayReport low = PolicyReplay().replay(generate(rows, SamplingPolicy{}));
  EXPECT_EQ(low.tieRule, TieRuleVerdict::Lowest);
  EXPECT_TRUE(low.clean()) << low;

  const PolicyReplayReport none = PolicyReplay().replay(generate(randomRows(9), SamplingPolicy{}));
  EXPECT_EQ(none.tieRule, TieRuleVerdict::Undetermined);
  EXPECT_EQ(none.decidedTies, 0u);
  EXPECT_TRUE(none.clean());

  // Ties broken both ways, or to a middle id, are inconsistent.
  auto mixed = generate(rows, SamplingPolicy{});
  mixed[0].token = Sampler::argmax(rows[0], SamplingPolicy::TieRule::Highest);
  PolicyReplayReport r = PolicyReplay().replay(mixed);
  EXPECT_EQ(r.tieRule, TieRuleVerdict::Inconsistent);
  EXPECT_TRUE(r.tieRuleAnomaly);
  auto middle = generate(rows, SamplingPolicy{});
  ASSERT_EQ(Sampler::tiedAtTop(rows[0]).size(), 3u);
  middle[0].token = Sampler::tiedAtTop(rows[0])[1];
  r = PolicyReplay().replay(middle);
  EXPECT_EQ(r.steps[0].tie, TieAttribution::Neither);
  EXPECT_EQ(r.tieRule, TieRuleVerdict::Inconsistent);

  // A greedy token below the maximum is ineligible, not a tie-rule question.
  auto wrong = generate(rows, SamplingPolicy{});
  wrong[3].token = (wrong[3].token + 1) % static_cast<int64_t>(kVocab);
  r = PolicyReplay().replay(wrong);
  EXPECT_EQ(r.steps[3].tie, TieAttribution::NotMaximal);
  EXPECT_EQ(r.ineligibleSteps, (std::vector<size_t>{3}));
  EXPECT_EQ(r.tieRule, TieRuleVerdict::Lowest);
  EXPECT_FALSE(r.clean());
}

TEST(PolicyReplay, GreedyStepsTakeNoDrawsInAMixedRun) {
  const auto rows = randomRows(10);
  SamplingPolicy s = sampledPolicy(5);
  SamplingPolicy g;
  g.seed = 5;
  RequestRng rng(5);
  std::vector<RecordedStep> steps;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingPolicy& p = (i % 3 == 0) ? g : s;
    const SamplingOutcome o = Sampler::choose(rows[i], p, rng);
    steps.push_back({rows[i], o.token, p, o.drawsBefore});
  }
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_TRUE(r.clean()) << r;
  EXPECT_EQ(r.rng, RngVerdict::Straight);
  EXPECT_EQ(r.greedySteps, 7u);
  EXPECT_EQ(r.sampledSteps, 13u);
  EXPECT_EQ(r.steps.back().expectedDrawsBefore, 12u);  // step 19 is sampled
}

TEST(PolicyReplay, BadStepsAreReportedNotThrown) {
  auto steps = generate(randomRows(11), sampledPolicy());
  steps[2].logits[4] = std::numeric_limits<float>::quiet_NaN();
  steps[6].token = static_cast<int64_t>(kVocab);
  steps[9].policy.topP = 0.0;
  PolicyReplayReport r;
  ASSERT_NO_THROW(r = PolicyReplay().replay(steps));
  EXPECT_EQ(r.errorSteps, (std::vector<size_t>{2, 6, 9}));
  EXPECT_FALSE(r.steps[2].error.empty());
  EXPECT_NE(r.steps[6].error.find("outside the vocabulary"), std::string::npos);
  // The other steps still replay straight: the bad steps count their draw.
  EXPECT_EQ(r.rng, RngVerdict::Straight) << r;
  EXPECT_FALSE(r.clean());
}

TEST(PolicyReplay, IneligibleSampledTokenIsReported) {
  const auto rows = randomRows(12);
  SamplingPolicy p = sampledPolicy();
  p.topK = 1;
  auto steps = generate(rows, p);
  const int64_t top = Sampler::argmax(rows[4], SamplingPolicy::TieRule::Lowest);
  steps[4].token = (top + 1) % static_cast<int64_t>(kVocab);
  const PolicyReplayReport r = PolicyReplay().replay(steps);
  EXPECT_EQ(r.ineligibleSteps, (std::vector<size_t>{4}));
  EXPECT_FALSE(r.steps[4].chosenEligible);
  EXPECT_EQ(r.steps[4].eligibleCount, 1u);
  EXPECT_EQ(r.rng, RngVerdict::Unexplained);
}

TEST(PolicyReplay, ReportIsAPlainComparableValue) {
  const auto steps = generate(randomRows(3), sampledPolicy(), [](size_t i, RequestRng& rng) {
    if (i == 5) rng.nextUniform();
  });
  const PolicyReplayReport a = PolicyReplay().replay(steps);
  const PolicyReplayReport b = PolicyReplay().replay(steps);
  EXPECT_EQ(a, b);
  PolicyReplayReport c = b;
  c.shifts[0].offset = 2;
  EXPECT_NE(a, c);
  c = b;
  c.steps[7].reproduced = !c.steps[7].reproduced;
  EXPECT_NE(a, c);
  std::ostringstream os;
  os << a << a.steps[5] << a.shifts[0];
  EXPECT_NE(os.str().find("rng: offset"), std::string::npos) << os.str();
  EXPECT_STREQ(toString(RngVerdict::Reseeded), "reseeded");
  EXPECT_STREQ(toString(TieRuleVerdict::Highest), "highest");
  EXPECT_STREQ(toString(TieAttribution::Ambiguous), "ambiguous");
}
