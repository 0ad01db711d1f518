#include "kvscope/PolicyReplay.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "kvscope/Error.hpp"
#include "kvscope/RequestRng.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope {

const char* toString(TieAttribution a) {
  switch (a) {
    case TieAttribution::NotGreedy: return "not-greedy";
    case TieAttribution::Ambiguous: return "ambiguous";
    case TieAttribution::Lowest: return "lowest";
    case TieAttribution::Highest: return "highest";
    case TieAttribution::Neither: return "neither";
    case TieAttribution::NotMaximal: return "not-maximal";
  }
  return "?";
}

const char* toString(TieRuleVerdict v) {
  switch (v) {
    case TieRuleVerdict::NoGreedySteps: return "no-greedy-steps";
    case TieRuleVerdict::Undetermined: return "undetermined";
    case TieRuleVerdict::Lowest: return "lowest";
    case TieRuleVerdict::Highest: return "highest";
    case TieRuleVerdict::Inconsistent: return "inconsistent";
  }
  return "?";
}

const char* toString(RngVerdict v) {
  switch (v) {
    case RngVerdict::NoSampledSteps: return "no-sampled-steps";
    case RngVerdict::Straight: return "straight";
    case RngVerdict::Offset: return "offset";
    case RngVerdict::Reseeded: return "reseeded";
    case RngVerdict::Unexplained: return "unexplained";
  }
  return "?";
}

bool RngShift::operator==(const RngShift& o) const {
  return fromStep == o.fromStep && earliestStep == o.earliestStep && offset == o.offset &&
         fromRecordedCount == o.fromRecordedCount;
}

bool PolicyReplayStep::operator==(const PolicyReplayStep& o) const {
  return index == o.index && greedy == o.greedy && error == o.error &&
         probabilitySum == o.probabilitySum && sumError == o.sumError &&
         eligibleCount == o.eligibleCount && chosenEligible == o.chosenEligible &&
         tiedAtTop == o.tiedAtTop && tie == o.tie &&
         expectedDrawsBefore == o.expectedDrawsBefore &&
         recordedDrawsBefore == o.recordedDrawsBefore && replayedToken == o.replayedToken &&
         reproduced == o.reproduced && matchingOffsets == o.matchingOffsets &&
         reseedMatches == o.reseedMatches;
}

bool PolicyReplayReport::operator==(const PolicyReplayReport& o) const {
  return steps == o.steps && sampledSteps == o.sampledSteps && greedySteps == o.greedySteps &&
         errorSteps == o.errorSteps && maxSumError == o.maxSumError &&
         ineligibleSteps == o.ineligibleSteps && tieRule == o.tieRule &&
         decidedTies == o.decidedTies && declaredTieRule == o.declaredTieRule &&
         tieRuleAnomaly == o.tieRuleAnomaly && rng == o.rng &&
         firstMismatch == o.firstMismatch && shifts == o.shifts &&
         firstRecordedCountMismatch == o.firstRecordedCountMismatch;
}

bool PolicyReplayReport::clean() const {
  return errorSteps.empty() && ineligibleSteps.empty() && !tieRuleAnomaly && !rngAnomaly() &&
         !firstRecordedCountMismatch;
}

namespace {

std::string signedOffset(int64_t d) { return (d > 0 ? "+" : "") + std::to_string(d); }

std::string listSteps(const std::vector<size_t>& v, size_t max = 8) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max) out += ", ... (" + std::to_string(v.size()) + " in all)";
  return out;
}

const char* ruleName(SamplingPolicy::TieRule r) {
  return r == SamplingPolicy::TieRule::Lowest ? "lowest" : "highest";
}

// Uniforms of fresh generators, by seed, extended on demand.
class UniformTable {
 public:
  double at(uint64_t seed, uint64_t index) {
    auto it = table_.find(seed);
    if (it == table_.end()) it = table_.emplace(seed, Entry{RequestRng(seed), {}}).first;
    Entry& e = it->second;
    while (e.values.size() <= index) e.values.push_back(e.rng.nextUniform());
    return e.values[index];
  }

 private:
  struct Entry {
    RequestRng rng;
    std::vector<double> values;
  };
  std::map<uint64_t, Entry> table_;
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const RngShift& s) {
  os << "offset " << signedOffset(s.offset) << " from step " << s.fromStep
     << " (earliest consistent step " << s.earliestStep
     << (s.fromRecordedCount ? ", placed by the recorded draw counts" : "") << ")";
  return os;
}

std::ostream& operator<<(std::ostream& os, const PolicyReplayStep& s) {
  os << "step " << s.index << (s.greedy ? " greedy" : " sampled");
  if (!s.error.empty()) return os << " error: " << s.error;
  os << " sum " << s.probabilitySum << " eligible " << s.eligibleCount
     << (s.chosenEligible ? "" : " (chosen token NOT eligible)") << " tied-at-top [";
  for (size_t i = 0; i < s.tiedAtTop.size(); ++i) os << (i ? "," : "") << s.tiedAtTop[i];
  os << "]";
  if (s.greedy) os << " tie " << toString(s.tie);
  os << " draws expected " << s.expectedDrawsBefore << " recorded " << s.recordedDrawsBefore
     << " replayed " << s.replayedToken << (s.reproduced ? " (reproduced)" : " (differs)");
  if (!s.greedy) {
    os << " offsets {";
    for (size_t i = 0; i < s.matchingOffsets.size(); ++i)
      os << (i ? "," : "") << signedOffset(s.matchingOffsets[i]);
    os << "}" << (s.reseedMatches ? " reseed-matches" : "");
  }
  return os;
}

std::string PolicyReplayReport::describe() const {
  std::ostringstream os;
  os << "policy replay: " << steps.size() << " steps (" << sampledSteps << " sampled, "
     << greedySteps << " greedy)";
  if (!errorSteps.empty())
    os << "; " << errorSteps.size() << " could not be evaluated (steps "
       << listSteps(errorSteps) << ": " << steps[errorSteps.front()].error << ")";
  os << "\n  probabilities: kept mass sums to 1 within " << maxSumError << "\n";
  if (ineligibleSteps.empty())
    os << "  eligibility: every chosen token was eligible\n";
  else
    os << "  eligibility: chosen token outside the eligible set at steps "
       << listSteps(ineligibleSteps) << "\n";
  os << "  tie rule: " << toString(tieRule);
  if (tieRule != TieRuleVerdict::NoGreedySteps)
    os << " (" << decidedTies << " greedy ties decided; declared " << ruleName(declaredTieRule)
       << ")";
  if (tieRuleAnomaly) os << " -- ANOMALY";
  os << "\n  rng: " << toString(rng);
  if (firstMismatch) os << " (straight replay first differs at step " << *firstMismatch << ")";
  for (const RngShift& s : shifts) os << "\n    " << s;
  if (firstRecordedCountMismatch)
    os << "\n  recorded draw counts differ from the replay from step "
       << *firstRecordedCountMismatch;
  os << "\n  verdict: " << (clean() ? "clean" : "anomalies found") << "\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const PolicyReplayReport& r) {
  return os << r.describe();
}

PolicyReplayReport PolicyReplay::replay(const std::vector<RecordedStep>& recorded) const {
  if (options_.maxOffset < 0) throw UsageError("PolicyReplay: maxOffset must be >= 0");
  const int64_t K = options_.maxOffset;
  PolicyReplayReport report;
  UniformTable uniforms;
  std::vector<std::vector<double>> probabilities(recorded.size());
  // matches[i][d + K]: draw e_i + d reproduces the token (sampled steps without error)
  std::vector<std::vector<bool>> matches(recorded.size());
  std::vector<size_t> sampled;  // sampled steps that could be evaluated

  uint64_t expected = 0;
  bool haveDeclared = false;
  for (size_t i = 0; i < recorded.size(); ++i) {
    const RecordedStep& rec = recorded[i];
    PolicyReplayStep st;
    st.index = i;
    st.greedy = rec.policy.greedy();
    st.expectedDrawsBefore = expected;
    st.recordedDrawsBefore = rec.drawsBefore;
    st.tie = TieAttribution::NotGreedy;
    try {
      rec.policy.validate();
      if (rec.logits.empty()) throw UsageError("empty logits row");
      st.tiedAtTop = Sampler::tiedAtTop(rec.logits);
      const int64_t V = static_cast<int64_t>(rec.logits.size());
      if (rec.token < 0 || rec.token >= V)
        throw UsageError("token " + std::to_string(rec.token) + " outside the vocabulary [0, " +
                         std::to_string(V) + ")");
      if (st.greedy) {
        st.probabilitySum = 1.0;
        st.eligibleCount = st.tiedAtTop.size();
        st.chosenEligible = std::binary_search(st.tiedAtTop.begin(), st.tiedAtTop.end(),
                                               rec.token);
        if (!st.chosenEligible)
          st.tie = TieAttribution::NotMaximal;
        else if (st.tiedAtTop.size() == 1)
          st.tie = TieAttribution::Ambiguous;
        else if (rec.token == st.tiedAtTop.front())
          st.tie = TieAttribution::Lowest;
        else if (rec.token == st.tiedAtTop.back())
          st.tie = TieAttribution::Highest;
        else
          st.tie = TieAttribution::Neither;
        st.replayedToken = Sampler::argmax(rec.logits, rec.policy.tieRule);
        st.reproduced = st.replayedToken == rec.token;
      } else {
        probabilities[i] = Sampler::warpedProbabilitiesDouble(rec.logits, rec.policy);
        const std::vector<double>& p = probabilities[i];
        double sum = 0.0;
        for (double v : p) {
          if (v > 0.0) {
            sum += static_cast<double>(static_cast<float>(v));
            ++st.eligibleCount;
          }
        }
        st.probabilitySum = sum;
        st.chosenEligible = p[static_cast<size_t>(rec.token)] > 0.0;
        st.replayedToken = Sampler::inverseCdf(p, uniforms.at(rec.policy.seed, expected));
        st.reproduced = st.replayedToken == rec.token;
        matches[i].assign(static_cast<size_t>(2 * K + 1), false);
        for (int64_t d = -K; d <= K; ++d) {
          const int64_t draw = static_cast<int64_t>(expected) + d;
          if (draw < 0) continue;
          if (Sampler::inverseCdf(p, uniforms.at(rec.policy.seed, static_cast<uint64_t>(draw))) ==
              rec.token) {
            matches[i][static_cast<size_t>(d + K)] = true;
            st.matchingOffsets.push_back(d);
          }
        }
        st.reseedMatches = Sampler::inverseCdf(p, uniforms.at(rec.policy.seed, 0)) == rec.token;
        sampled.push_back(i);
      }
      st.sumError = std::fabs(st.probabilitySum - 1.0);
      report.maxSumError = std::max(report.maxSumError, st.sumError);
      if (!st.chosenEligible) report.ineligibleSteps.push_back(i);
      if (rec.drawsBefore != expected && !report.firstRecordedCountMismatch)
        report.firstRecordedCountMismatch = i;
      if (st.greedy && !haveDeclared) {
        report.declaredTieRule = rec.policy.tieRule;
        haveDeclared = true;
      }
    } catch (const UsageError& e) {
      st.error = e.what();
      report.errorSteps.push_back(i);
    }
    if (st.greedy)
      ++report.greedySteps;
    else
      ++report.sampledSteps;
    if (!st.greedy) ++expected;  // a sampled step takes one draw, even one we cannot replay
    report.steps.push_back(std::move(st));
  }

  // ---- tie rule over the greedy steps
  size_t greedyEvaluated = 0, lowest = 0, highest = 0, neither = 0;
  for (const PolicyReplayStep& st : report.steps) {
    if (!st.greedy || !st.error.empty()) continue;
    ++greedyEvaluated;
    lowest += st.tie == TieAttribution::Lowest;
    highest += st.tie == TieAttribution::Highest;
    neither += st.tie == TieAttribution::Neither;
  }
  report.decidedTies = lowest + highest + neither;
  if (greedyEvaluated == 0)
    report.tieRule = TieRuleVerdict::NoGreedySteps;
  else if (report.decidedTies == 0)
    report.tieRule = TieRuleVerdict::Undetermined;
  else if (lowest == report.decidedTies)
    report.tieRule = TieRuleVerdict::Lowest;
  else if (highest == report.decidedTies)
    report.tieRule = TieRuleVerdict::Highest;
  else
    report.tieRule = TieRuleVerdict::Inconsistent;
  const bool declaredLowest = report.declaredTieRule == SamplingPolicy::TieRule::Lowest;
  report.tieRuleAnomaly = report.tieRule == TieRuleVerdict::Inconsistent ||
                          (report.tieRule == TieRuleVerdict::Lowest && !declaredLowest) ||
                          (report.tieRule == TieRuleVerdict::Highest && declaredLowest);

  // ---- random generator over the sampled steps
  if (sampled.empty()) {
    report.rng = RngVerdict::NoSampledSteps;
    return report;
  }
  size_t pos = 0;
  while (pos < sampled.size() && report.steps[sampled[pos]].reproduced) ++pos;
  if (pos == sampled.size()) {
    report.rng = RngVerdict::Straight;
    return report;
  }
  report.firstMismatch = sampled[pos];
  if (std::all_of(sampled.begin(), sampled.end(),
                  [&](size_t i) { return report.steps[i].reseedMatches; })) {
    report.rng = RngVerdict::Reseeded;
    return report;
  }

  auto match = [&](size_t i, int64_t d) { return matches[i][static_cast<size_t>(d + K)]; };
  auto recordedOffset = [&](size_t i) {
    return static_cast<int64_t>(report.steps[i].recordedDrawsBefore) -
           static_cast<int64_t>(report.steps[i].expectedDrawsBefore);
  };
  // Split the run into segments, each explained by one offset: at the first step the current
  // offset misses, take the offset that explains the longest run from there (preferring the
  // one the recorded count shows, then the smallest |d|, then +d before -d). Offset 0 can
  // come back after a shift (a lost draw made up later).
  std::vector<int64_t> candidates{0};
  for (int64_t m = 1; m <= K; ++m) {
    candidates.push_back(m);
    candidates.push_back(-m);
  }
  int64_t current = 0;
  size_t floor = 0;  // an earlier segment's evidence: a new one cannot reach back past it
  bool explained = true;
  while (pos < sampled.size()) {
    int64_t best = 0;
    size_t bestLen = 0;
    bool bestRecorded = false;
    for (int64_t d : candidates) {
      if (d == current || !match(sampled[pos], d)) continue;
      size_t len = 0;
      while (pos + len < sampled.size() && match(sampled[pos + len], d)) ++len;
      const bool rec = recordedOffset(sampled[pos]) == d;
      if (len > bestLen || (len == bestLen && rec && !bestRecorded)) {
        best = d;
        bestLen = len;
        bestRecorded = rec;
      }
    }
    // One token agreeing with a shifted draw is chance, not evidence: a shift must explain
    // at least two sampled tokens, unless the recorded draw counts show it.
    if (bestLen == 0 || (bestLen < 2 && !bestRecorded)) {
      explained = false;
      break;
    }
    size_t earliest = pos;
    while (earliest > floor && match(sampled[earliest - 1], best)) --earliest;
    RngShift shift;
    shift.offset = best;
    shift.earliestStep = sampled[earliest];
    shift.fromStep = sampled[pos];
    if (bestRecorded) {
      size_t q = pos;
      while (q > earliest && recordedOffset(sampled[q - 1]) == best) --q;
      shift.fromStep = sampled[q];
      shift.fromRecordedCount = true;
    }
    report.shifts.push_back(shift);
    current = best;
    floor = pos + 1;
    pos += bestLen;
  }
  report.rng = explained ? RngVerdict::Offset : RngVerdict::Unexplained;
  return report;
}

}  // namespace kvscope
