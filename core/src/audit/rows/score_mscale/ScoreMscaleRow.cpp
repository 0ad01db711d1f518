// `score_mscale` (KV Scope's, issue 26): on a checkpoint whose attention scales its scores by
// qk_head_dim^-0.5 times yarn's mscale(factor, mscale_all_dim)^2 (DeepSeek V2 and V3 as shipped,
// with a yarn rope_scaling), a path scores with qk_head_dim^-0.5 alone: transformers 4.57's
// DeepseekV2Attention does (DeepseekV3Attention applies the mscale; transformers 5 applies it to
// both). Every record exact up to the layer whose attention it changed, the next layer's wrong
// from the prefill on (position 0 right), or only the logits.
#include "audit/ReferenceSet.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/DroppedFeatureRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/score_mscale/ScoreMscaleEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class ScoreMscaleRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::ScoreMscale,
        "on a checkpoint whose softmax scale carries yarn's mscale, a layer's records exact, the "
        "next layer's wrong from position 1 on (or only the logits); an uncached pass scoring with "
        "qk_head_dim^-0.5 alone reproduces them",
        "the attention's softmax scale (qk_head_dim^-0.5 x mscale(factor, mscale_all_dim)^2 with a "
        "yarn rope_scaling)",
        MatrixOrigin::KvScope,
        124,
        AuditStage::Numerics,
        {},
        {"transformers 4.57's DeepseekV2Attention scales by qk_head_dim^-0.5 only (its "
         "DeepseekV3Attention and transformers 5's yarn_apply_mscale multiply in mscale^2; "
         "docs/audit.md)"},
        {{"score_mscale",
          "from step `step` on (0: the prefill), the cached path scores `layer`'s attention with "
          "qk_head_dim^-0.5 alone, without yarn's mscale(factor, mscale_all_dim)^2 (-1 = every "
          "layer); needs a checkpoint whose softmax scale carries it (deepseek_v2 / deepseek_v3 "
          "with a yarn rope_scaling and mscale_all_dim)",
          "the next layer's records wrong from position 1 on, the layer's own exact",
          {{"step", "first step affected (0 = the prefill)", "0"},
           {"layer", "layer affected (-1 = all)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "softmax scale without mscale"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
               bool logitsOnly) const override {
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || config->mla.scoreMscale == 1.0) return false;
    return explainDroppedFeature(ctx, r, a, ev, logitsOnly, AttentionFeature::ScoreMscale,
                                 ScoreMscaleEvidence::finding);
  }
};

}  // namespace

const FailureRow& scoreMscale() {
  static const ScoreMscaleRow row;
  return row;
}

}  // namespace kvscope::detail::rows
