// `recurrent_state` (KV Scope's): a recurrent (Gated DeltaNet) layer's state, recorded after a
// step, differs from the reference's after the same tokens while every layer below it is exact:
// the recurrence read something the reference did not (a left-padded row's pads not zeroed, as
// transformers#46190's zero-padded chunks; a stale state from the slot's previous request).
// Claimed at the request's first divergence; without recorded states, the nearest row where the
// first wrong records sit above a recurrent layer whose state the trace does not hold.
#include <algorithm>

#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/rows/StateOrigin.hpp"

namespace kvscope::detail::rows {
namespace {

// Pads the request's first step fed before its first token.
int64_t requestLeftPads(const Trace& trace, int64_t request) {
  const auto steps = trace.stepsOf(request);
  int64_t pads = 0;
  if (!steps.empty())
    for (const uint8_t real : steps.front()->fedMask) {
      if (real) break;
      ++pads;
    }
  return pads;
}

std::string leftPadsText(int64_t pads) {
  return pads > 0 ? "; this request ran left-padded by " + std::to_string(pads) +
                        " (pads whose inputs are not zeroed enter the conv and the recurrence, as "
                        "transformers#46190's zero-padded chunks did)"
                  : "";
}

class RecurrentStateRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::RecurrentState,
        "a recurrent layer's state differs from the reference's after the same tokens while every layer below it "
        "is exact (the attention layers above it wrong as a consequence)",
        "what enters the recurrence: padding masked before the conv and the delta rule, the state reset for a new "
        "request, restored after rejected drafts, rebuilt on a prefix hit",
        MatrixOrigin::KvScope,
        120,
        AuditStage::Cache,
        {},
        {"transformers#46190 (Qwen3.5: zero-padded chunks updated the recurrent state; a full forward and prefill + "
         "cached decode diverge)",
         "vllm#43559 / vllm#48375 (speculative decoding + prefix caching poisoned the recurrent state blocks)",
         "modular#6681 (a prefix-cache hit reused the attention blocks but never rebuilt the DeltaNet state)"},
        {{"recurrent_state",
          "the cached path lets a left-padded request's pads into `layer`'s recurrence (-1 = every recurrent "
          "layer): their inputs are not zeroed before the conv and the delta rule; needs a checkpoint with "
          "recurrent layers (qwen3_5_text) and --batch with prompts of different lengths",
          "the padded request's recurrent state wrong from its prefill on, the attention layers above it and the "
          "logits with it",
          {{"layer", "recurrent layer affected (-1 = every one)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  bool explainState(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                    const Evidence& base) const override {
    const int64_t l = a.firstBadStateLayer;
    const int64_t pads = requestLeftPads(ctx.trace, r);
    Evidence ev = base;
    ev["left_pads"] = static_cast<double>(pads);
    ev["tokens_consumed"] = static_cast<double>(a.stateLength);
    if (a.firstBadLayer >= 0) ev["first_wrong_record_layer"] = static_cast<double>(a.firstBadLayer);
    const std::string ex =
        stateDifferenceText(a, l) + " while every layer below it is exact" +
        (a.firstBadLayer >= 0 ? "; the K/V records from layer " + std::to_string(a.firstBadLayer) + " up differ with it"
                              : "") +
        ": the recurrence read something the uncached reference did not" + leftPadsText(pads);
    addStateFinding(ctx, finding::RecurrentState, a, l, pads > 0 ? 0.9 : 0.75, ex, std::move(ev));
    return true;
  }

  // Stage 2's line for the recurrent layers: their recorded states against the reference's
  // after the same tokens, or why not.
  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    const std::vector<int64_t> recurrent = in.trace.recurrentLayers();
    if (in.stage != AuditStage::Cache || recurrent.empty()) return;
    const std::string layers = std::string(recurrent.size() == 1 ? "layer " : "layers ") + listText(recurrent);
    int64_t compared = 0, bad = 0, steps = 0;
    double worst = 0;
    for (const auto& [r, list] : in.analyses)
      for (const auto& a : list) {
        if (a.statesCompared == 0) continue;
        ++steps;
        compared += a.statesCompared;
        bad += a.firstBadStateLayer >= 0 ? 1 : 0;
        for (size_t l = 0; l < a.stateTol.size(); ++l)
          if (a.stateTol[l] > 0) worst = std::max(worst, a.stateError[l] / a.stateTol[l]);
      }
    if (compared == 0)
      checks.push_back("not checked: " + layers + " keep a recurrent state (Gated DeltaNet), not K/V records, and the "
                       "trace holds no state: their effect is checked through the logits and the later layers' "
                       "records");
    else if (bad > 0)
      checks.push_back("FAIL: the recurrent state of " + layers + " differs from the reference's after the same "
                       "tokens at " + std::to_string(bad) + " of " + std::to_string(steps) + " steps");
    else
      checks.push_back("ok: the recurrent states of " + layers + " equal the reference's after the same tokens at " +
                       std::to_string(steps) + " steps (" + std::to_string(compared) + " states, worst " +
                       numberText(worst * 100, 3) + "% of the tolerance)");
  }

  // No state recorded: the first wrong records sit above a recurrent layer, every recorded layer
  // below them exact.
  bool nearestRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                      const Evidence& base) const override {
    const std::vector<int64_t> below = recurrentLayersBelowRecords(ctx.trace, a);
    if (below.empty()) return false;
    const int64_t pads = requestLeftPads(ctx.trace, r);
    Evidence ev = base;
    ev["left_pads"] = static_cast<double>(pads);
    ev["recurrent_layers_below"] = static_cast<double>(below.size());
    const std::string ex = recordsAboveStatesText(a, below) +
                           ": a wrong recurrent state is the likeliest cause (record the states to check it: "
                           "kvscope-record records them by default)" +
                           leftPadsText(pads);
    addStateFinding(ctx, finding::RecurrentState, a, below.back(), 0.5, ex, std::move(ev));
    return true;
  }
};

}  // namespace

const FailureRow& recurrentState() {
  static const RecurrentStateRow row;
  return row;
}

}  // namespace kvscope::detail::rows
