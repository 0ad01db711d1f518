#include "audit/PolicyStage.hpp"

#include <algorithm>
#include <sstream>

#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/PolicyReplay.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope::detail {

namespace {

Finding makeFinding(const char* id, int64_t request, int64_t step, double confidence,
                    std::string explanation, std::map<std::string, double> evidence) {
  return FindingDraft(id)
      .request(request)
      .step(step)
      .confidence(confidence)
      .explanation(std::move(explanation))
      .evidence(std::move(evidence))
      .finish();
}
}  // namespace

StageResult policyStage(const Trace& trace, std::vector<Finding>& findings) {
  StageResult st = StageResult::of(AuditStage::Policy);
  st.status = StageStatus::Pass;
  int anomalies = 0, checked = 0;
  bool drawsUnchecked = false;  // another engine's generator: no replay
  for (const auto& req : trace.requests) {
    try {
      req.policy.validate();
      st.checks.push_back("ok: request " + std::to_string(req.id) + " policy " + req.policy.describe() + " is in the domain");
    } catch (const UsageError& e) {
      st.checks.push_back("FAIL: request " + std::to_string(req.id) + ": " + e.what());
      ++anomalies;
      continue;
    }
    std::vector<PolicyReplay::RecordedStep> steps;
    std::vector<const TraceStep*> order;
    for (const TraceStep* s : trace.stepsOf(req.id)) {
      if (s->chosenToken < 0 || s->logits.empty()) continue;
      steps.push_back({s->logits.data, s->chosenToken, req.policy, s->rngDrawsBefore});
      order.push_back(s);
    }
    if (steps.empty()) continue;
    ++checked;
    PolicyReplayReport rep = PolicyReplay().replay(steps);
    const bool replayable = req.policy.replayableBy(trace.engine);
    std::ostringstream sum;
    const bool sumsToOne = rep.maxSumError <= 1e-5;
    sum << (sumsToOne ? "ok: request " : "FAIL: request ") << req.id
        << (sumsToOne ? ": " : ": the probabilities do not sum to 1; ") << rep.greedySteps
        << " greedy, " << rep.sampledSteps << " sampled steps; max |sum(p) - 1| "
        << rep.maxSumError;
    st.checks.push_back(sum.str());
    if (!rep.ineligibleSteps.empty()) {
      ++anomalies;
      st.checks.push_back("FAIL: request " + std::to_string(req.id) + ": chosen token outside the eligible set at step " +
                          std::to_string(order[rep.ineligibleSteps.front()]->step));
    }
    if (rep.tieRuleAnomaly) {
      ++anomalies;
      // The first greedy step whose tie was broken against the declared rule.
      size_t at = 0;
      for (size_t i = 0; i < rep.steps.size(); ++i)
        if (rep.steps[i].greedy && !rep.steps[i].reproduced) {
          at = i;
          break;
        }
      const auto& ps = rep.steps[at];
      std::ostringstream ex;
      ex << "the logits tie at the top between ids";
      for (int64_t id : ps.tiedAtTop) ex << " " << id;
      ex << "; the declared rule (" << (req.policy.tieRule == SamplingPolicy::TieRule::Lowest ? "lowest index, as torch.argmax" : "highest index")
         << ") picks " << ps.replayedToken << " but the run chose " << order[at]->chosenToken
         << "; verdict: " << toString(rep.tieRule);
      findings.push_back(
          makeFinding(finding::TieRule, req.id, order[at]->step, 0.95, ex.str(),
                      {{"tied_tokens", static_cast<double>(ps.tiedAtTop.size())},
                       {"declared_choice", static_cast<double>(ps.replayedToken)},
                       {"recorded_choice", static_cast<double>(order[at]->chosenToken)},
                       {"decided_ties", static_cast<double>(rep.decidedTies)}}));
      st.checks.push_back("FAIL: request " + std::to_string(req.id) + ": " + ex.str());
    } else if (rep.greedySteps > 0) {
      st.checks.push_back(std::string("ok: request ") + std::to_string(req.id) + ": greedy tie rule " + toString(rep.tieRule));
    }
    if (rep.sampledSteps > 0 && !replayable) {
      // Another engine's generator: check what the recorded logits prove, not the draws.
      double minChosen = 1.0;
      for (size_t i = 0; i < order.size(); ++i) {
        if (req.policy.greedy()) break;
        const auto p = Sampler::warpedProbabilitiesDouble(order[i]->logits.data, req.policy);
        const auto t = static_cast<size_t>(order[i]->chosenToken);
        if (t < p.size()) minChosen = std::min(minChosen, p[t]);
      }
      st.checks.push_back(std::string(rep.ineligibleSteps.empty() ? "ok: " : "FAIL: ") +
                          "request " + std::to_string(req.id) +
                          (rep.ineligibleSteps.empty()
                               ? ": every sampled token is eligible under the recorded policy"
                               : ": a sampled token is not eligible under the recorded policy") +
                          " (lowest probability of a chosen token " + numberText(minChosen, 3) +
                          ")");
      drawsUnchecked = true;
      st.checks.push_back("not checked: request " + std::to_string(req.id) +
                          ": the replay of the random draws: the trace's generator is " +
                          (req.policy.generator.empty() ? std::string("not named")
                                                        : "'" + req.policy.generator + "'") +
                          ", which KV Scope cannot replay from the seed (only generator \"" +
                          SamplingPolicy::kKvScopeGenerator +
                          "\" is); audit it against a second run of the same engine (trace+trace) "
                          "to check the draw order");
    } else if (rep.rngAnomaly()) {
      ++anomalies;
      const size_t at = rep.firstMismatch.value_or(0);
      std::ostringstream ex;
      ex << "the probabilities are reproduced from the recorded logits, but a straight replay from seed "
         << req.policy.seed << " first picks a different token at step " << order[at]->step << "; ";
      std::map<std::string, double> ev{{"seed", static_cast<double>(req.policy.seed)},
                                       {"first_mismatch_step", static_cast<double>(order[at]->step)}};
      if (rep.rng == RngVerdict::Reseeded) {
        ex << "every sampled token is the first draw of a freshly seeded generator: the generator is re-seeded each step";
        ev["reseeded"] = 1;
      } else if (rep.rng == RngVerdict::Offset && !rep.shifts.empty()) {
        ex << "shifting the draw count by " << rep.shifts.front().offset << " from step "
           << order[std::min(rep.shifts.front().fromStep, order.size() - 1)]->step << " explains every token (extra or missing draws)";
        ev["draw_offset"] = static_cast<double>(rep.shifts.front().offset);
      } else {
        ex << "no draw shift or re-seeding explains the tokens";
      }
      if (rep.firstRecordedCountMismatch)
        ev["recorded_draw_count_mismatch_step"] = static_cast<double>(order[*rep.firstRecordedCountMismatch]->step);
      findings.push_back(makeFinding(finding::RngOrder, req.id, order[at]->step,
                                     rep.rng == RngVerdict::Unexplained ? 0.6 : 0.95, ex.str(),
                                     ev));
      st.checks.push_back("FAIL: request " + std::to_string(req.id) + ": " + ex.str());
    } else if (rep.sampledSteps > 0) {
      st.checks.push_back("ok: request " + std::to_string(req.id) + ": a replay from seed " + std::to_string(req.policy.seed) +
                          " reproduces every sampled token");
    }
  }
  st.status = anomalies ? StageStatus::Fail : (checked ? StageStatus::Pass : StageStatus::Skipped);
  st.summary = anomalies ? std::to_string(anomalies) + " policy anomalies (logits held fixed)"
               : drawsUnchecked ? "every chosen token is eligible under the recorded policy; the "
                                  "random draws were not checked "
                                  "(another engine's generator)"
               : checked
                   ? "the recorded policy reproduces every chosen token from the recorded logits"
                   : "no chosen tokens to check";
  return st;
}

StageResult stoppingStage(const Trace& trace, std::vector<Finding>& findings, std::string& summary) {
  StageResult st = StageResult::of(AuditStage::Stopping);
  st.status = StageStatus::Pass;
  int problems = 0;
  std::ostringstream all;
  for (const auto& req : trace.requests) {
    const auto& gen = req.generated;
    const auto& eos = req.eosIds;
    auto isEos = [&](int64_t t) { return std::find(eos.begin(), eos.end(), t) != eos.end(); };
    auto firstEos = std::find_if(gen.begin(), gen.end(), isEos);
    std::string expected;
    const int64_t streamEnd = static_cast<int64_t>(req.promptIds.size() + gen.size()) - 1;  // position of the next feed
    if (firstEos != gen.end()) expected = "eos";
    else if (req.maxNewTokens > 0 && static_cast<int64_t>(gen.size()) >= req.maxNewTokens) expected = "max_new_tokens";
    else if (trace.model.maxPositions > 0 && streamEnd >= trace.model.maxPositions) expected = "context_limit";
    std::ostringstream line;
    line << "request " << req.id << " ended: " << req.stopReason << " after " << gen.size() << " tokens";
    bool ok = true;
    if (firstEos != gen.end() && firstEos + 1 != gen.end()) {
      ok = false;
      line << "; but EOS " << *firstEos << " at generated index " << (firstEos - gen.begin()) << " was not honoured";
    } else if (!expected.empty() && req.stopReason != expected && req.stopReason != "unknown") {
      ok = false;
      line << "; expected '" << expected << "'";
    } else if (expected.empty() && req.stopReason != "unknown") {
      ok = req.stopReason == "running" ? false : ok;
      if (req.stopReason == "eos" || req.stopReason == "max_new_tokens" || req.stopReason == "context_limit") {
        ok = false;
        line << "; but nothing required stopping here";
      }
    }
    if (req.stopReason == "context_limit" && ok)
      line << " (the next token would need position " << streamEnd << " of " << trace.model.maxPositions << ": refused correctly)";
    // Positions beyond the context that were fed anyway.
    bool contextFlagged = false;
    for (const TraceStep* s : trace.stepsOf(req.id))
      for (int64_t p : s->positions)
        if (trace.model.maxPositions > 0 && p >= trace.model.maxPositions) {
          ok = false;
          if (!contextFlagged) {
            line << "; step " << s->step << " fed position " << p << " beyond the " << trace.model.maxPositions << "-position context";
            findings.push_back(
                FindingDraft(finding::ContextLimit)
                    .request(req.id)
                    .step(s->step)
                    .position(p)
                    .confidence(1.0)
                    .explanation("a token was fed at position " + std::to_string(p) +
                                 " but the model has only " +
                                 std::to_string(trace.model.maxPositions) +
                                 " position rows: the engine must refuse before the lookup")
                    .evidence({{"position", static_cast<double>(p)},
                               {"max_positions", static_cast<double>(trace.model.maxPositions)}})
                    .finish());
            contextFlagged = true;
          }
        }
    if (!ok) ++problems;
    st.checks.push_back((ok ? "ok: " : "FAIL: ") + line.str());
    all << line.str() << (ok ? " (correct)" : "") << ". ";
  }
  st.status = problems ? StageStatus::Fail : StageStatus::Pass;
  st.summary = problems ? std::to_string(problems) + " request(s) stopped wrongly" : "every request stopped for the right reason";
  summary = all.str();
  return st;
}

}  // namespace kvscope::detail
