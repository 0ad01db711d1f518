#include "audit/rows/rng_order/RngPairCheck.hpp"

#include <sstream>

#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope::detail {

namespace {

// Which generated token a step chose (its index in `generated`), -1 for none: steps pair up
// by their choices, not their numbers (a chunked prefill takes several steps to choose the
// first token).
int64_t choiceIndex(const Trace& t, const TraceStep& step) {
  int64_t chosen = 0;
  for (const TraceStep* s : t.stepsOf(step.request)) {
    if (s == &step) return s->chosenToken >= 0 ? chosen + s->acceptedCount : -1;
    if (s->chosenToken >= 0) chosen += 1 + s->acceptedCount;
  }
  return -1;
}

const TraceStep* choosing(const Trace& t, int64_t request, int64_t index) {
  int64_t chosen = 0;
  for (const TraceStep* s : t.stepsOf(request)) {
    if (s->chosenToken < 0) continue;
    if (chosen + s->acceptedCount == index) return s;
    chosen += 1 + s->acceptedCount;
  }
  return nullptr;
}

double probabilityOf(const TraceStep& s, const SamplingPolicy& policy) {
  const auto p = Sampler::warpedProbabilitiesDouble(s.logits.data, policy);
  const auto t = static_cast<size_t>(s.chosenToken);
  return s.chosenToken >= 0 && t < p.size() ? p[t] : 0.0;
}
}  // namespace

void checkRngAgainstReference(const Trace& reference, const Trace& cached,
                              const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                              StageResult& stage, std::vector<Finding>& findings) {
  for (const auto& req : cached.requests) {
    const TraceRequest* ref = reference.findRequest(req.id);
    auto it = analyses.find(req.id);
    if (!ref || req.policy.greedy() || it == analyses.end()) continue;
    const std::string who = "request " + std::to_string(req.id);
    // The first step whose chosen token differs from the reference run's.
    const StepAnalysis* at = nullptr;
    const TraceStep* refStep = nullptr;
    for (const auto& a : it->second) {
      const int64_t index = choiceIndex(cached, *a.step);
      const TraceStep* r = index < 0 ? nullptr : choosing(reference, req.id, index);
      if (!r || a.step->chosenToken < 0 || r->chosenToken < 0) continue;
      if (r->chosenToken != a.step->chosenToken) {
        at = &a;
        refStep = r;
        break;
      }
    }
    if (!at) {
      stage.checks.push_back("ok: " + who + ": every sampled token equals the reference run's");
      continue;
    }
    const TraceStep& st = *at->step;
    if (ref->policy.seed != req.policy.seed || ref->policy.temperature != req.policy.temperature) {
      stage.checks.push_back(
          "not checked: " + who + ": the runs first choose differently at step " +
          std::to_string(st.step) + " but were sampled with different seeds or temperatures (" +
          ref->policy.describe() + " vs " + req.policy.describe() +
          "): their tokens are not comparable");
      continue;
    }
    if (!at->logitsCompared || at->logitsDiverged) {
      stage.checks.push_back("ok: " + who + ": the runs first choose differently at step " +
                             std::to_string(st.step) +
                             (at->logitsCompared ? " where the logits already differ beyond "
                                                   "tolerance (a cache finding, not the generator)"
                                                 : " where the logits could not be compared"));
      continue;
    }
    const double pc = probabilityOf(st, req.policy), pr = probabilityOf(*refStep, ref->policy);
    if (pc <= 0 || pr <= 0) {
      stage.checks.push_back("FAIL: " + who + ": at step " + std::to_string(st.step) +
                             " a chosen token is not eligible under the policy");
      continue;
    }
    std::ostringstream ex;
    ex << "same seed " << req.policy.seed << " and logits equal within tolerance (max diff "
       << numberText(at->logitError, 3) << " <= " << numberText(at->logitTol, 3) << ") at step "
       << st.step
       << ", yet the runs chose different tokens that are both eligible: " << st.chosenToken
       << " (p=" << numberText(pc, 3) << ") vs the reference's " << refStep->chosenToken
       << " (p=" << numberText(pr, 3)
       << "): the generator was drawn in another order (an extra or missing draw, or a re-seed)";
    findings.push_back(
        FindingDraft(finding::RngOrder)
            .request(req.id)
            .step(st.step)
            .position(at->lastRealStreamIndex())
            .confidence(0.9)
            .explanation(ex.str())
            .evidence({{"seed", static_cast<double>(req.policy.seed)},
                       {"chosen_token", static_cast<double>(st.chosenToken)},
                       {"reference_token", static_cast<double>(refStep->chosenToken)},
                       {"chosen_probability", pc},
                       {"reference_probability", pr},
                       {"max_logit_error", at->logitError},
                       {"tolerance", at->logitTol}})
            .finish());
    stage.checks.push_back("FAIL: " + who + ": " + ex.str());
    stage.status = StageStatus::Fail;
    stage.summary =
        "the run and the reference run drew their random numbers in another order (rng_order)";
  }
}

}  // namespace kvscope::detail
