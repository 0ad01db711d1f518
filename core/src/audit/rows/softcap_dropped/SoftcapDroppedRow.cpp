// `softcap_dropped` (KV Scope's): on a checkpoint with an attention soft-cap (Gemma 2's
// attn_logit_softcapping), the cached path computes a layer's scores without it, as attention
// kernel paths without soft-capping did (vllm-project/vllm#7022, sgl-project/sglang#33915).
// Every K/V record of that layer matches; what differs is its attention output, so the
// records of the layers after it (or only the logits).
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DroppedFeatureRow.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/softcap_dropped/SoftcapDroppedEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class SoftcapDroppedRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::SoftcapDropped,
        "a layer's K/V records exact, the next layer's keys and values wrong from position 1 "
        "on (or only the logits), on a checkpoint with an attention soft-cap; an uncached pass "
        "without the cap on that layer reproduces them",
        "whether the attention kernel applies attn_logit_softcapping (tanh(s / cap) * cap "
        "before the mask) on every path",
        MatrixOrigin::KvScope,
        112,
        AuditStage::Numerics,
        {},
        {"Gemma 2's attention soft-cap dropped by a kernel path (vllm-project/vllm#7022, "
         "sgl-project/sglang#33915; docs/audit.md)"},
        {{"softcap_dropped",
          "from step `step` on, the cached path computes `layer`'s attention scores without "
          "the soft-cap (-1 = every layer); needs a checkpoint with attn_logit_softcapping "
          "(gemma2)",
          "the next layer's keys and values wrong from position 1 on, the layer's own exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "soft-cap dropped"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
               bool logitsOnly) const override {
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || !(config->attnLogitSoftcap > 0)) return false;
    const double cap = config->attnLogitSoftcap;
    return explainDroppedFeature(ctx, r, a, ev, logitsOnly, AttentionFeature::Softcap,
                                 [cap](const StepAnalysis& s, const DroppedFeatureMatch& m, const Evidence& e) {
                                   return SoftcapDroppedEvidence::finding(s, m, cap, e);
                                 });
  }
};

}  // namespace

const FailureRow& softcapDropped() {
  static const SoftcapDroppedRow row;
  return row;
}

}  // namespace kvscope::detail::rows
