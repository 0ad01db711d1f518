// `rng_order` (the method's row 6): sampled tokens that the recorded probabilities allow but
// the seed's draws do not give (extra or missing draws, re-seeding), by replay from the seed
// (KV Scope's own generator) or against a second run of the same engine (trace+trace).
#include <algorithm>
#include <sstream>

#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/rng_order/RngPairCheck.hpp"
#include "kvscope/PolicyReplay.hpp"
#include "kvscope/Sampler.hpp"

namespace kvscope::detail::rows {
namespace {

class RngOrderRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::RngOrder,
        "sampled runs differ but probabilities match",
        "seed and RNG call order",
        MatrixOrigin::Method,
        6,
        AuditStage::Policy,
        {},
        {"RNG re-seeded every step or a per-request seed ignored inside a batch (the method's "
         "list of bugs seen in the wild)"},
        {{"rng_extra_draw",
          "one extra random draw happens before step `step` (sampled runs)",
          "sampled runs differ but probabilities match",
          {{"step", "step before which the extra draw happens", "2"},
           {"request", "request affected (-1 = all)", "-1"}}},
         {"rng_reseed",
          "the random generator is re-seeded with the request seed before every step from "
          "`step` on",
          "sampled runs differ but probabilities match",
          {{"step", "first step re-seeded", "1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void policy(const PolicyRequestReplay& in, PolicyStageState& out) const override {
    const PolicyReplayReport& rep = in.replay;
    const TraceRequest& req = in.request;
    const auto& order = in.order;
    if (rep.sampledSteps > 0 && !in.replayable) {
      // Another engine's generator: check what the recorded logits prove, not the draws.
      double minChosen = 1.0;
      for (size_t i = 0; i < order.size(); ++i) {
        if (req.policy.greedy()) break;
        const auto p = Sampler::warpedProbabilitiesDouble(order[i]->logits.data, req.policy);
        const auto t = static_cast<size_t>(order[i]->chosenToken);
        if (t < p.size()) minChosen = std::min(minChosen, p[t]);
      }
      out.stage.checks.push_back(
          std::string(rep.ineligibleSteps.empty() ? "ok: " : "FAIL: ") + "request " +
          std::to_string(req.id) +
          (rep.ineligibleSteps.empty()
               ? ": every sampled token is eligible under the recorded policy"
               : ": a sampled token is not eligible under the recorded policy") +
          " (lowest probability of a chosen token " + numberText(minChosen, 3) + ")");
      out.drawsUnchecked = true;
      out.stage.checks.push_back(
          "not checked: request " + std::to_string(req.id) +
          ": the replay of the random draws: the trace's generator is " +
          (req.policy.generator.empty() ? std::string("not named")
                                        : "'" + req.policy.generator + "'") +
          ", which KV Scope cannot replay from the seed (only generator \"" +
          SamplingPolicy::kKvScopeGenerator +
          "\" is); audit it against a second run of the same engine (trace+trace) to check the "
          "draw order");
    } else if (rep.rngAnomaly()) {
      ++out.anomalies;
      const size_t at = rep.firstMismatch.value_or(0);
      std::ostringstream ex;
      ex << "the probabilities are reproduced from the recorded logits, but a straight replay "
            "from seed "
         << req.policy.seed << " first picks a different token at step " << order[at]->step
         << "; ";
      Evidence ev{{"seed", static_cast<double>(req.policy.seed)},
                  {"first_mismatch_step", static_cast<double>(order[at]->step)}};
      if (rep.rng == RngVerdict::Reseeded) {
        ex << "every sampled token is the first draw of a freshly seeded generator: the "
              "generator is re-seeded each step";
        ev["reseeded"] = 1;
      } else if (rep.rng == RngVerdict::Offset && !rep.shifts.empty()) {
        ex << "shifting the draw count by " << rep.shifts.front().offset << " from step "
           << order[std::min(rep.shifts.front().fromStep, order.size() - 1)]->step
           << " explains every token (extra or missing draws)";
        ev["draw_offset"] = static_cast<double>(rep.shifts.front().offset);
      } else {
        ex << "no draw shift or re-seeding explains the tokens";
      }
      if (rep.firstRecordedCountMismatch)
        ev["recorded_draw_count_mismatch_step"] =
            static_cast<double>(order[*rep.firstRecordedCountMismatch]->step);
      out.findings.push_back(FindingDraft(finding::RngOrder)
                                 .request(req.id)
                                 .step(order[at]->step)
                                 .confidence(rep.rng == RngVerdict::Unexplained ? 0.6 : 0.95)
                                 .explanation(ex.str())
                                 .evidence(ev)
                                 .finish());
      out.stage.checks.push_back("FAIL: request " + std::to_string(req.id) + ": " + ex.str());
    } else if (rep.sampledSteps > 0) {
      out.stage.checks.push_back("ok: request " + std::to_string(req.id) +
                                 ": a replay from seed " + std::to_string(req.policy.seed) +
                                 " reproduces every sampled token");
    }
  }

  void pairedPolicy(const PairedRuns& runs, PolicyStageState& out) const override {
    checkRngAgainstReference(runs.reference, runs.audited, runs.analyses, out.stage,
                             out.findings);
  }
};

}  // namespace

const FailureRow& rngOrder() {
  static const RngOrderRow row;
  return row;
}

}  // namespace kvscope::detail::rows
