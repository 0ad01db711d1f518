// `qk_norm_order` (KV Scope's): on a checkpoint with per-head q/k RMSNorm (Qwen3; Gemma 3
// and OLMo 2 normalise too), the cached path applies the norm after RoPE instead of before
// it, as a fused norm + rotary kernel written in the wrong order does. Only the order
// differs, so the keys at position 0 (where RoPE is the identity) and every value are right.
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/qk_norm_order/QkNormOrderEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class QkNormOrderRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::QkNormOrder,
        "keys wrong from position 1 on, exact at position 0, values exact, on a checkpoint with "
        "q/k norm",
        "the order of the per-head q_norm/k_norm and RoPE on the path that computed the keys "
        "(transformers' Qwen3Attention normalises each head first, then rotates)",
        MatrixOrigin::KvScope,
        110,
        AuditStage::Numerics,
        {},
        {"fused q/k-norm + rotary kernels and ports of the Qwen3 attention that rotate first "
         "(transformers modeling_qwen3.py is the order of record; docs/audit.md)"},
        {{"qk_norm_order",
          "from step `step` on, the cached path applies `layer`'s per-head q/k RMSNorm after "
          "RoPE instead of before it (-1 = every layer); needs a checkpoint with q_norm/k_norm "
          "weights (qwen3)",
          "keys wrong from position 1 on, exact at position 0, values exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || !config->qkNorm || a.firstBadLayer < 0) return false;
    const FloatTensor weight = ctx.refs.keyNormWeight(a.firstBadLayer, a.version);
    const std::vector<const StepAnalysis*> from = ctx.stepsFrom(r, a);
    const auto m = QkNormOrderEvidence(*config, ctx.tol).explain(from, own, weight);
    if (!m) return false;
    ctx.add(QkNormOrderEvidence::finding(a, *m, ev), a);
    return true;
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "qk_norm_order",
                          "layer " + std::to_string(f.layer) + " q/k norm after RoPE", true};
  }
};

}  // namespace

const FailureRow& qkNormOrder() {
  static const QkNormOrderRow row;
  return row;
}

}  // namespace kvscope::detail::rows
