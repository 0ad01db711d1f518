// `yarn_attention_factor` (KV Scope's): on a yarn (or longrope) checkpoint the cached path
// turns queries and keys with another attention factor than transformers' attention_scaling:
// none at all (turboderp-org/exllamav3#259), or the default 0.1 ln(factor) + 1 in place of the
// checkpoint's attention_factor or mscale / mscale_all_dim (vllm-project/vllm#48351,
// sgl-project/sglang#22711). The keys' rotated features are off by one constant at every
// position; the values are exact.
#include "audit/rows/KeyRecordRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/yarn_attention_factor/YarnAttentionFactorEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class YarnAttentionFactorRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::YarnAttentionFactor,
        "keys wrong at every position (position 0 too), values exact, on a yarn or longrope "
        "checkpoint; each record is the reference key with its rotated features scaled by one "
        "constant",
        "the attention factor the path's RoPE multiplies cos and sin by (transformers: "
        "attention_factor, else the mscale / mscale_all_dim ratio, else 0.1 ln(factor) + 1)",
        MatrixOrigin::KvScope,
        116,
        AuditStage::Numerics,
        {},
        {"YaRN's attention factor dropped or mis-derived (turboderp-org/exllamav3#259; "
         "vllm-project/vllm#48351; sgl-project/sglang#22711; docs/audit.md)"},
        {{"yarn_attention_factor",
          "from step `step` on, the cached path turns `layer`'s queries and keys without the "
          "RoPE's attention factor (-1 = every layer); needs a yarn or longrope checkpoint "
          "whose factor is not 1",
          "keys wrong at every position, values exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    // Latent attention recorded per head: the rotated features are each key's last
    // qk_rope_head_dim, neither a whole record nor the value records this check reads.
    if (ctx.trace.model.latentHeads) return false;
    return explainKeyRecords<YarnAttentionFactorEvidence>(ctx, r, a, own, ev);
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "yarn_attention_factor",
                          "layer " + std::to_string(f.layer) + " attention factor", true};
  }
};

}  // namespace

const FailureRow& yarnAttentionFactor() {
  static const YarnAttentionFactorRow row;
  return row;
}

}  // namespace kvscope::detail::rows
