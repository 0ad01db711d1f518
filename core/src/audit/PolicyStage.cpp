#include "audit/PolicyStage.hpp"

#include <algorithm>
#include <sstream>

#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "kvscope/Error.hpp"
#include "audit/rows/RowRegistry.hpp"
#include "audit/StepAnalysis.hpp"
#include "kvscope/PolicyReplay.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope::detail {

StageResult policyStage(const Trace& trace, const Trace* reference,
                        const RequestAnalyses& analyses, std::vector<Finding>& findings) {
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
    PolicyStageState state{st, findings};
    const PolicyRequestReplay replay{trace, req, rep, order, replayable};
    for (const FailureRow* row : RowRegistry::rows()) row->policy(replay, state);
    anomalies += state.anomalies;
    drawsUnchecked = drawsUnchecked || state.drawsUnchecked;
  }
  st.status = anomalies ? StageStatus::Fail : (checked ? StageStatus::Pass : StageStatus::Skipped);
  st.summary = anomalies ? std::to_string(anomalies) + " policy anomalies (logits held fixed)"
               : drawsUnchecked ? "every chosen token is eligible under the recorded policy; the "
                                  "random draws were not checked "
                                  "(another engine's generator)"
               : checked
                   ? "the recorded policy reproduces every chosen token from the recorded logits"
                   : "no chosen tokens to check";
  // Against a second run of the same engine: the rows set the stage's status where they fail.
  if (reference) {
    PolicyStageState state{st, findings};
    for (const FailureRow* row : RowRegistry::rows())
      row->pairedPolicy({trace, *reference, analyses}, state);
  }
  return st;
}

StageResult stoppingStage(const Trace& trace, std::vector<Finding>& findings, std::string& summary) {
  StageResult st = StageResult::of(AuditStage::Stopping);
  st.status = StageStatus::Pass;
  int problems = 0, unchecked = 0;
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
    if (req.stopReason == "unknown" && expected.empty() && ok) {
      // Nothing the trace holds required a stop, and it does not say why the run ended (a
      // saved cache state, a recording cut short): nothing to check.
      ++unchecked;
      st.checks.push_back("not checked: request " + std::to_string(req.id) + " ended after " +
                          std::to_string(gen.size()) + " generated tokens; the trace does not record why");
      continue;
    }
    if (req.stopReason == "context_limit" && ok)
      line << " (the next token would need position " << streamEnd << " of " << trace.model.maxPositions << ": refused correctly)";
    for (const FailureRow* row : RowRegistry::rows())
      if (auto f = row->stopping(trace, req, line, ok)) findings.push_back(*f);
    if (!ok) ++problems;
    st.checks.push_back((ok ? "ok: " : "FAIL: ") + line.str());
    all << line.str() << (ok ? " (correct)" : "") << ". ";
  }
  const bool none = unchecked == static_cast<int>(trace.requests.size());
  st.status = problems ? StageStatus::Fail : none ? StageStatus::Skipped : StageStatus::Pass;
  st.summary = problems ? std::to_string(problems) + " request(s) stopped wrongly"
               : none   ? "not checked: the trace does not record why its requests ended"
               : unchecked ? "every request whose end the trace records stopped for the right reason"
                           : "every request stopped for the right reason";
  summary = all.str();
  return st;
}

}  // namespace kvscope::detail
