// `state_rollback` (KV Scope's): speculative decoding rejected drafts but a recurrent layer kept
// its state after them (vllm#43559: speculative decoding poisoned the Mamba/DeltaNet state
// blocks). The attention layers roll back by trimming rows; a recurrent state cannot be trimmed,
// so an engine must keep the state after each draft and take back the one after the accepted
// tokens. Claimed at a request's first wrong state when a step since its last recorded state
// rejected drafts; with a model, the recorded state is held against the reference's after the
// accepted tokens followed by the rejected drafts.
#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/StateOrigin.hpp"
#include "audit/StepAnalysis.hpp"

namespace kvscope::detail::rows {
namespace {

class StateRollbackRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::StateRollback,
        "after a speculative step that rejected drafts, a recurrent layer's state is the state after the rejected "
        "drafts, not after the accepted tokens, while every attention layer's rows are right",
        "the recurrent state's rollback after draft verification (keep the state after each draft; take back the "
        "one after the last accepted token)",
        MatrixOrigin::KvScope,
        121,
        AuditStage::Cache,
        {},
        {"vllm#43559 / vllm#48375 (speculative decoding + prefix caching poisoned the recurrent state blocks of "
         "Qwen3.5 / Qwen3-Next)"},
        {{"state_rollback",
          "speculative decoding (`draft` draft tokens per step, enabled if --speculative is not given) on a "
          "model with recurrent layers whose state is not rolled back from step `step` on: `layer` (-1 = every "
          "recurrent layer) keeps its state after the rejected drafts; the attention layers roll back right",
          "the recurrent state after a step that rejected drafts equals the reference's after those drafts, the "
          "next step's logits and the attention layers above it wrong",
          {{"draft", "draft tokens proposed per decode step (when speculation is not on already)", "3"},
           {"step", "first step whose state rollback is skipped", "1"},
           {"layer", "recurrent layer not rolled back (-1 = every one)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  bool explainState(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                    const Evidence& base) const override {
    const int64_t l = a.firstBadStateLayer;
    const TraceStep* spec = stepSinceLastState(ctx.trace, r, *a.step, l,
                                               [](const TraceStep& st) { return st.rejectedCount() > 0; });
    if (!spec) return false;
    const int64_t rejected = spec->rejectedCount();
    Evidence ev = base;
    ev["speculative_step"] = static_cast<double>(spec->step);
    ev["draft_tokens"] = static_cast<double>(spec->draftCount);
    ev["accepted"] = static_cast<double>(spec->acceptedCount);
    ev["rejected"] = static_cast<double>(rejected);
    ev["tokens_consumed"] = static_cast<double>(a.stateLength);
    std::string ex = "step " + std::to_string(spec->step) + " verified " + std::to_string(spec->draftCount) +
                     " draft token(s) and rejected " + std::to_string(rejected) + "; " + stateDifferenceText(a, l);
    double confidence = 0.8;
    bool rederived = false;
    // The hypothesis: the state the forward ended in, after the rejected drafts too.
    const TraceRequest* req = ctx.trace.findRequest(r);
    if (spec == a.step && req) {
      std::vector<int64_t> ids = req->stream();
      if (static_cast<int64_t>(ids.size()) >= a.stateLength) {
        ids.resize(static_cast<size_t>(a.stateLength));
        ids.insert(ids.end(), spec->fedIds.end() - rejected, spec->fedIds.end());
        if (const auto run = ctx.refs.branch(ids, a.version)) {
          const double d = stateDistance(spec->layers[static_cast<size_t>(l)], *run, l);
          if (d >= 0) {
            rederived = true;
            ev["state_vs_rejected_reference"] = d;
            const bool fits = d <= a.stateTol[static_cast<size_t>(l)];
            confidence = fits ? 0.99 : 0.7;
            ex += fits ? "; it equals the reference's state after those tokens and the " + std::to_string(rejected) +
                             " rejected draft(s) (max diff " + numberText(d, 3) +
                             "): the rejected drafts were not rolled back out of the recurrence"
                       : "; it is not the state after the rejected drafts either (max diff " + numberText(d, 3) + ")";
          }
        }
      }
    }
    if (!rederived)
      ex += ": a recurrent state kept after the rejected drafts is the likeliest cause (not re-derived: " +
            std::string(ctx.refs.hasModel() ? "the state was recorded at a later step" : "no model, trace+trace mode") +
            ")";
    ex += "; the attention layers' rows roll back by trimming, a recurrent state must be taken back from the one "
          "kept after the last accepted token";
    addStateFinding(ctx, finding::StateRollback, a, l, confidence, ex, std::move(ev));
    return true;
  }

  // The step records no state (states every N steps): the first wrong records sit above
  // recurrent layers and a step since their last recorded state rejected drafts.
  bool nearestRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                      const Evidence& base) const override {
    const std::vector<int64_t> below = recurrentLayersBelowRecords(ctx.trace, a);
    if (below.empty()) return false;
    const TraceStep* spec = stepSinceLastState(ctx.trace, r, *a.step, below.front(),
                                               [](const TraceStep& st) { return st.rejectedCount() > 0; });
    if (!spec) return false;
    Evidence ev = base;
    ev["speculative_step"] = static_cast<double>(spec->step);
    ev["rejected"] = static_cast<double>(spec->rejectedCount());
    ev["first_wrong_record_layer"] = static_cast<double>(a.firstBadLayer);
    const std::string ex = recordsAboveStatesText(a, below) + ", and step " + std::to_string(spec->step) +
                           " rejected " + std::to_string(spec->rejectedCount()) +
                           " draft(s) since their last recorded state: a recurrent state kept after rejected drafts "
                           "is the likeliest cause (record the states every step to check it)";
    addStateFinding(ctx, finding::StateRollback, a, below.front(), 0.6, ex, std::move(ev));
    return true;
  }
};

}  // namespace

const FailureRow& stateRollback() {
  static const StateRollbackRow row;
  return row;
}

}  // namespace kvscope::detail::rows
