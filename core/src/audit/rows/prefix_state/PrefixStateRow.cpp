// `prefix_state` (KV Scope's): a prefix-cache hit handed a request the attention layers' rows of
// its prefix but not the recurrent layers' state after it (modular#6681: a prefix hit reused the
// attention blocks but never rebuilt the DeltaNet state). The reused rows are right; the
// recurrent layers run the rest of the prompt from a fresh (or leftover) state. Claimed at a
// request's first wrong state when a step since its last recorded state took a prefix hit; with a
// model, the recorded state is held against an uncached pass whose recurrent layers restart
// from zero where the hit ends.
#include <algorithm>
#include <numeric>

#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/StateOrigin.hpp"
#include "audit/StepAnalysis.hpp"

namespace kvscope::detail::rows {
namespace {

class PrefixStateRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::PrefixState,
        "after a prefix-cache hit, a recurrent layer's state differs from the reference's while the reused "
        "attention rows are right: the state was not handed over with them",
        "what a prefix hit restores besides the attention rows (the recurrent state after the prefix, kept per "
        "block)",
        MatrixOrigin::KvScope,
        122,
        AuditStage::Cache,
        {},
        {"modular#6681 (a prefix-cache hit reused the attention blocks but never rebuilt the DeltaNet state)",
         "vllm#43559 / vllm#48375 (prefix caching + speculative decoding poisoned the recurrent state blocks)"},
        {{"prefix_state",
          "prefix caching (enabled with `block` if --prefix-cache is not given) on a model with recurrent layers "
          "whose hits hand over the attention layers' rows but not `layer`'s state (-1 = every recurrent layer): "
          "it computes the rest of the prompt from a fresh state",
          "the recurrent state after the hit's prefill differs from the reference's, the reused rows right",
          {{"layer", "recurrent layer whose state is not handed over (-1 = every one)", "-1"},
           {"block", "prefix-cache block size in tokens, when --prefix-cache is not given", "4"},
           {"request", "request whose hits drop the state (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  bool explainState(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                    const Evidence& base) const override {
    const int64_t l = a.firstBadStateLayer;
    const TraceStep* hit = stepSinceLastState(ctx.trace, r, *a.step, l,
                                              [](const TraceStep& st) { return st.reusedCount > 0; });
    if (!hit) return false;
    const auto L = static_cast<size_t>(l);
    Evidence ev = base;
    ev["hit_step"] = static_cast<double>(hit->step);
    ev["reused_entries"] = static_cast<double>(hit->reusedCount);
    ev["reused_from_request"] = static_cast<double>(hit->reusedFrom);
    ev["tokens_consumed"] = static_cast<double>(a.stateLength);
    if (hit == a.step) {
      double reusedError = 0;
      for (const double e : a.reusedError) reusedError = std::max(reusedError, e);
      ev["reused_rows_error"] = reusedError;
    }
    std::string ex = "step " + std::to_string(hit->step) + " took " + std::to_string(hit->reusedCount) +
                     " prefix entries from request " + std::to_string(hit->reusedFrom) + "'s cache" +
                     (hit == a.step && a.reusedBadLayer < 0 ? " (the attention layers' reused rows right)" : "") +
                     "; " + stateDifferenceText(a, l);
    double confidence = 0.8;
    bool rederived = false;
    // The hypothesis: the recurrent layers restarted from zero where the hit ends.
    if (hit == a.step && a.reusedBadLayer < 0) {
      std::vector<int64_t> positions(static_cast<size_t>(a.stateLength));
      std::iota(positions.begin(), positions.end(), int64_t{0});
      const TraceRequest* req = ctx.trace.findRequest(r);
      std::vector<int64_t> ids = req ? req->stream() : std::vector<int64_t>{};
      if (static_cast<int64_t>(ids.size()) >= a.stateLength) {
        ids.resize(positions.size());
        PassHypothesis change;
        change.stateRestart = hit->reusedCount;
        if (const auto run = ctx.refs.hypothesis(ids, positions, change, a.version)) {
          const double d = stateDistance(hit->layers[L], *run, l);
          if (d >= 0) {
            rederived = true;
            ev["state_vs_fresh_after_prefix"] = d;
            const bool fits = d <= a.stateTol[L];
            confidence = fits ? 0.99 : 0.7;
            ex += fits ? "; it equals the state of a pass whose recurrent layers start from zero at stream index " +
                             std::to_string(hit->reusedCount) + " (max diff " + numberText(d, 3) +
                             "): the hit handed over the rows but not the state after them"
                       : "; it is not the state of a fresh start after the prefix either (max diff " +
                             numberText(d, 3) + "): a leftover state, perhaps the slot's previous request's";
          }
        }
      }
    }
    if (!rederived)
      ex += ": a state not handed over with the reused rows is the likeliest cause (not re-derived: " +
            std::string(!ctx.refs.hasModel()        ? "no model, trace+trace mode"
                        : hit != a.step             ? "the state was recorded at a later step"
                                                    : "the reused rows are wrong too") +
            ")";
    addStateFinding(ctx, finding::PrefixState, a, l, confidence, ex, std::move(ev));
    return true;
  }

  // The step records no state: the first wrong records sit above recurrent layers and a step
  // since their last recorded state took a prefix hit.
  bool nearestRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                      const Evidence& base) const override {
    const std::vector<int64_t> below = recurrentLayersBelowRecords(ctx.trace, a);
    if (below.empty()) return false;
    const TraceStep* hit = stepSinceLastState(ctx.trace, r, *a.step, below.front(),
                                              [](const TraceStep& st) { return st.reusedCount > 0; });
    if (!hit) return false;
    Evidence ev = base;
    ev["hit_step"] = static_cast<double>(hit->step);
    ev["reused_entries"] = static_cast<double>(hit->reusedCount);
    ev["first_wrong_record_layer"] = static_cast<double>(a.firstBadLayer);
    const std::string ex = recordsAboveStatesText(a, below) + ", and step " + std::to_string(hit->step) + " took " +
                           std::to_string(hit->reusedCount) + " prefix entries from request " +
                           std::to_string(hit->reusedFrom) +
                           "'s cache since their last recorded state: a state not handed over with the reused rows "
                           "is the likeliest cause (record the states to check it)";
    addStateFinding(ctx, finding::PrefixState, a, below.front(), 0.6, ex, std::move(ev));
    return true;
  }
};

}  // namespace

const FailureRow& prefixState() {
  static const PrefixStateRow row;
  return row;
}

}  // namespace kvscope::detail::rows
