// `tie_rule` (the method's row 5): greedy ties broken against the declared rule (the logits
// held fixed, so a policy finding, never a cache one).
#include <sstream>

#include "audit/FindingBuilder.hpp"
#include "audit/rows/Rows.hpp"
#include "kvscope/PolicyReplay.hpp"

namespace kvscope::detail::rows {
namespace {

class TieRuleRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::TieRule,
        "greedy token differs but logits match",
        "policy or tie rule",
        MatrixOrigin::Method,
        5,
        AuditStage::Policy,
        {},
        {"greedy ties broken toward the last index in one path and the first in another (the "
         "method's list of bugs seen in the wild)"},
        {{"tie_rule_last",
          "greedy ties go to the highest index while the recorded policy says lowest",
          "greedy token differs but logits match",
          {{"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void policy(const PolicyRequestReplay& in, PolicyStageState& out) const override {
    const PolicyReplayReport& rep = in.replay;
    const TraceRequest& req = in.request;
    if (!rep.tieRuleAnomaly) {
      if (rep.greedySteps > 0)
        out.stage.checks.push_back(std::string("ok: request ") + std::to_string(req.id) +
                                   ": greedy tie rule " + toString(rep.tieRule));
      return;
    }
    ++out.anomalies;
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
    ex << "; the declared rule ("
       << (req.policy.tieRule == SamplingPolicy::TieRule::Lowest ? "lowest index, as torch.argmax"
                                                                 : "highest index")
       << ") picks " << ps.replayedToken << " but the run chose " << in.order[at]->chosenToken
       << "; verdict: " << toString(rep.tieRule);
    out.findings.push_back(
        FindingDraft(finding::TieRule)
            .request(req.id)
            .step(in.order[at]->step)
            .confidence(0.95)
            .explanation(ex.str())
            .evidence({{"tied_tokens", static_cast<double>(ps.tiedAtTop.size())},
                       {"declared_choice", static_cast<double>(ps.replayedToken)},
                       {"recorded_choice", static_cast<double>(in.order[at]->chosenToken)},
                       {"decided_ties", static_cast<double>(rep.decidedTies)}})
            .finish());
    out.stage.checks.push_back("FAIL: request " + std::to_string(req.id) + ": " + ex.str());
  }
};

}  // namespace

const FailureRow& tieRule() {
  static const TieRuleRow row;
  return row;
}

}  // namespace kvscope::detail::rows
