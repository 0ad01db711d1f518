// `kv_quantization` (KV Scope's): a quantised cache whose records sit more than a
// quantisation step from the projection (a wrong scale or element type).
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/kv_quantization/QuantizationEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class KvQuantizationRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::KvQuantization,
        "a quantised cache's records sit more than a quantisation step from the projection",
        "the quantisation scale and element type of the cache",
        MatrixOrigin::KvScope,
        104,
        AuditStage::Cache,
        {},
        {"quantised KV caches dequantised with the wrong scale (docs/audit.md)"},
        {{"kv_quantization",
          "a quantised KV cache (int8 per token and kv head when --kv-cache is not given) whose "
          "records of `layer` are dequantised with `scale` percent of their scale from step "
          "`step` on (a wrong scale)",
          "the error of a record exceeds its quantisation step",
          {{"scale", "the dequantisation scale used, in percent of the right one", "200"},
           {"step", "first step affected (0 = prefill)", "1"},
           {"layer", "layer affected (-1 = all)", "0"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    if (!ctx.tol.cache().quantized()) return false;
    const auto q = measureQuantization(a, own, ctx.tol);
    if (!q) return false;
    ctx.add(quantizationFinding(a, *q, ctx.tol, ev), a);
    return true;
  }

  // Stage 4: the worst record error in quantisation steps among the records within tolerance.
  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage == AuditStage::Numerics && in.tolerance.cache().quantized())
      checks.push_back(quantizationBudgetCheck(in.tolerance, in.analyses));
  }
};

}  // namespace

const FailureRow& kvQuantization() {
  static const KvQuantizationRow row;
  return row;
}

}  // namespace kvscope::detail::rows
