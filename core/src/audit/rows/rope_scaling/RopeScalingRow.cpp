// `rope_scaling` (KV Scope's): keys cached with one RoPE scaling and queries rotated with
// another (a prefill and a decode path that build their rotary tables differently).
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/rope_scaling/RopeScalingEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class RopeScalingRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::RopeScaling,
        "key error grows with position while values at layer 0 are exact",
        "the RoPE scaling (rope_scaling factor and type) of the path that computed the keys",
        MatrixOrigin::KvScope,
        105,
        AuditStage::Positions,
        {},
        {"prefill and decode paths (or a fused kernel and the model code) that build their "
         "rotary tables differently (docs/audit.md)"},
        {{"rope_scaling",
          "from step `step` on, the cached path rotates the queries and keys of `layer` (-1 = "
          "every layer) with the unscaled RoPE frequencies: the checkpoint's rope_scaling "
          "(linear, llama3, yarn with its attention factor, dynamic) is dropped on that path; needs a RoPE checkpoint with "
          "rope_scaling (not gpt2, which has no RoPE)",
          "key error grows with position while values at layer 0 are exact",
          {{"step", "first step affected (0 = prefill)", "1"},
           {"layer", "layer affected (-1 = all)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    auto rope = RopeScalingEvidence::forAudit(ctx.refs.modelConfig(), ctx.trace.model, ctx.tol);
    if (!rope) return false;
    const std::vector<const StepAnalysis*> from = ctx.stepsFrom(r, a);
    const auto m = rope->explain(from, own);
    if (!m) return false;
    ctx.add(rope->finding(a, *m, ev), a);
    return true;
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "rope_scaling",
                          "layer " + std::to_string(f.layer) + " keys at another RoPE scaling",
                          true};
  }
};

}  // namespace

const FailureRow& ropeScaling() {
  static const RopeScalingRow row;
  return row;
}

}  // namespace kvscope::detail::rows
