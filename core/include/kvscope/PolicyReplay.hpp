// Re-applies a recorded run's sampling policy to its recorded logits, without a model, and
// explains what it finds. Used by the audit's stage 5 (findings `tie_rule` and `rng_order`).
//
// A sequence of steps is one request: one RequestRng, seeded with the policy's seed, whose
// draw count runs across the whole sequence. A sampled step takes exactly one draw, a greedy
// step none, so step i is expected to use draw number e_i = (sampled steps before i). For
// each step the replay reports the probability mass of the kept tokens, whether the chosen
// token was eligible, the tie at the top and which greedy tie rule explains the choice, and
// whether the straight replay (draw e_i) reproduces the token. When it does not, it tests
// two explanations over the whole run:
//   - an RNG-order shift: from some step on the recorded run used draw e_i + d for a small d
//     (|d| <= Options::maxOffset; e.g. an extra draw before step 5 gives d = +1 from step 5);
//     several shifts can follow one another;
//   - re-seeding: every sampled step used the first draw of a freshly seeded generator.
// The recorded draws-before counts are compared with e_i as well and, when they agree with
// the tokens, pin the step where a shift started.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kvscope/SamplingPolicy.hpp"

namespace kvscope {

/// Which greedy tie rule explains a greedy step's token.
enum class TieAttribution {
  NotGreedy,   // a sampled step
  Ambiguous,   // one maximum: every tie rule picks this token
  Lowest,      // tie at the top, chosen = lowest tied id (torch.argmax)
  Highest,     // tie at the top, chosen = highest tied id
  Neither,     // tie at the top, chosen is a tied id that neither rule picks
  NotMaximal,  // the chosen token's logit is below the maximum
};

/// The run's verdict on greedy ties.
enum class TieRuleVerdict {
  NoGreedySteps,
  Undetermined,  // greedy steps, but none with a tie at the top that was decided
  Lowest,        // every decided tie went to the lowest id
  Highest,       // every decided tie went to the highest id
  Inconsistent,  // ties went both ways, or to a middle id
};

/// The run's verdict on the random generator.
enum class RngVerdict {
  NoSampledSteps,
  Straight,     // a straight replay from the seed reproduces every sampled token
  Offset,       // shifted draw counts (see `shifts`) explain every sampled token
  Reseeded,     // every sampled token is the first draw of a freshly seeded generator
  Unexplained,  // neither explains the tokens (shifts found so far are still listed)
};

const char* toString(TieAttribution a);
const char* toString(TieRuleVerdict v);
const char* toString(RngVerdict v);

/// From step `fromStep` on (until the next shift), the recorded run used draw e_i + offset.
struct RngShift {
  size_t fromStep = 0;      // first step the evidence places the shift at
  size_t earliestStep = 0;  // earliest step at which the shift is consistent with the tokens
  int64_t offset = 0;       // draws, relative to the straight count
  bool fromRecordedCount = false;  // fromStep comes from the recorded draws-before counts
  bool operator==(const RngShift& o) const;
  bool operator!=(const RngShift& o) const { return !(*this == o); }
};

struct PolicyReplayStep {
  size_t index = 0;
  bool greedy = false;
  std::string error;             // non-empty: the step could not be evaluated (bad logits,
                                 // token out of range, invalid policy)
  double probabilitySum = 0.0;   // sum of the kept tokens' float probabilities (greedy: 1)
  double sumError = 0.0;         // |probabilitySum - 1|
  size_t eligibleCount = 0;      // sampled: tokens kept by the warpers; greedy: tiedAtTop
  bool chosenEligible = false;
  std::vector<int64_t> tiedAtTop;
  TieAttribution tie = TieAttribution::NotGreedy;
  uint64_t expectedDrawsBefore = 0;  // e_i
  uint64_t recordedDrawsBefore = 0;
  int64_t replayedToken = -1;    // straight replay (greedy: argmax with the policy's rule)
  bool reproduced = false;
  std::vector<int64_t> matchingOffsets;  // sampled: offsets d whose draw e_i + d gives token
  bool reseedMatches = false;    // sampled: draw 0 of a fresh generator gives the token
  bool operator==(const PolicyReplayStep& o) const;
  bool operator!=(const PolicyReplayStep& o) const { return !(*this == o); }
};

struct PolicyReplayReport {
  std::vector<PolicyReplayStep> steps;
  size_t sampledSteps = 0;
  size_t greedySteps = 0;
  std::vector<size_t> errorSteps;
  double maxSumError = 0.0;
  std::vector<size_t> ineligibleSteps;  // chosen token outside the eligible set

  TieRuleVerdict tieRule = TieRuleVerdict::NoGreedySteps;
  size_t decidedTies = 0;                // greedy steps with a tie at the top
  SamplingPolicy::TieRule declaredTieRule = SamplingPolicy::TieRule::Lowest;
  bool tieRuleAnomaly = false;           // verdict contradicts the declared rule, or is
                                         // Inconsistent

  RngVerdict rng = RngVerdict::NoSampledSteps;
  std::optional<size_t> firstMismatch;   // first sampled step the straight replay misses
  std::vector<RngShift> shifts;          // Offset / Unexplained
  std::optional<size_t> firstRecordedCountMismatch;  // recorded drawsBefore != e_i
  bool rngAnomaly() const { return rng == RngVerdict::Offset || rng == RngVerdict::Reseeded ||
                                   rng == RngVerdict::Unexplained; }

  /// No errors, no ineligible choices, no tie-rule or RNG anomaly, recorded counts agree.
  bool clean() const;
  std::string describe() const;  // a few human-readable lines
  bool operator==(const PolicyReplayReport& o) const;
  bool operator!=(const PolicyReplayReport& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const RngShift& s);
std::ostream& operator<<(std::ostream& os, const PolicyReplayStep& s);
std::ostream& operator<<(std::ostream& os, const PolicyReplayReport& r);

class PolicyReplay {
 public:
  /// One recorded generation step: the logits row that chose `token` under `policy`, and
  /// the generator's draw count before the choice as the recorder saw it. Steps normally
  /// share one seed; each step draws from its own policy's seed at the sequence's count.
  struct RecordedStep {
    std::vector<float> logits;
    int64_t token = -1;
    SamplingPolicy policy;
    uint64_t drawsBefore = 0;
  };
  struct Options {
    int64_t maxOffset = 3;  // RNG shifts tried: -maxOffset..+maxOffset draws
  };
  PolicyReplay() = default;
  explicit PolicyReplay(Options options) : options_(options) {}
  /// Never throws for bad step data (it is reported per step); throws UsageError for a
  /// negative maxOffset.
  PolicyReplayReport replay(const std::vector<RecordedStep>& steps) const;

 private:
  Options options_;
};

}  // namespace kvscope
