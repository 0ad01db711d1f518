// `mla_absorb` (KV Scope's, issue 26): on a checkpoint with multi-head latent attention
// (DeepSeek V3), the decode path attends in the absorbed form (kv_b_proj folded into the
// queries and the output, scores taken against the cached latent rows) with weights that do not
// match the latent: the per-head [key rows | value rows] layout of kv_b_proj read as all key rows,
// then all value rows, the class of LMCache issue 2881 (MLA cache layout wrong under concurrency)
// and of engines' absorbed-weight preparation. Prefill right, decode wrong, every latent row
// exact; what differs is the attention output, so the next layer's rows (or only the logits).
#include "audit/ReferenceSet.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/DroppedFeatureRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/mla_absorb/MlaAbsorbEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class MlaAbsorbRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::MlaAbsorb,
        "on a checkpoint with latent attention, a layer's latent rows exact, the next layer's "
        "wrong from the first decode step (or only the logits), the prefill right; an uncached "
        "pass attending in the absorbed form with kv_b_proj's key and value rows split by "
        "matrix halves instead of per head reproduces them",
        "how the decode path builds its absorbed weights from kv_b_proj (per head: "
        "qk_nope_head_dim key rows, then v_head_dim value rows)",
        MatrixOrigin::KvScope,
        123,
        AuditStage::Numerics,
        {},
        {"DeepSeek's MLA cache and absorbed decode weights out of step with the latent "
         "(LMCache/LMCache#2881; docs/audit.md)"},
        {{"mla_absorb",
          "from step `step` on (1: the first decode step), the cached path attends `layer` in the "
          "absorbed form with kv_b_proj split as all heads' key rows, then all value rows (-1 = "
          "every layer); needs a checkpoint with latent attention (deepseek_v3)",
          "the next layer's latent rows wrong from the first decode step, the layer's own exact",
          {{"step", "first step affected (1 = the first decode step)", "1"},
           {"layer", "layer affected (-1 = all)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "absorbed weights wrong"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
               bool logitsOnly) const override {
    const ModelConfig* config = ctx.refs.modelConfig();
    // A trace of decompressed heads (model.latent_records "heads") is a decompressing engine's:
    // it never decodes in the absorbed form.
    if (!config || !config->mla.enabled() || ctx.trace.model.latentHeads) return false;
    return explainDroppedFeature(ctx, r, a, ev, logitsOnly, AttentionFeature::LatentHeadSplit,
                                 MlaAbsorbEvidence::finding);
  }
};

}  // namespace

const FailureRow& mlaAbsorb() {
  static const MlaAbsorbRow row;
  return row;
}

}  // namespace kvscope::detail::rows
