// `layer_rope_theta` (KV Scope's): on a checkpoint whose sliding layers rotate with a RoPE of
// their own (Gemma 3: rope_local_base_freq 10000, unscaled, beside the full-attention layers'
// rope_theta 1e6 and linear scaling), the cached path rotates a layer with the other layer
// type's RoPE, as vLLM's Gemma 3 did after a RoPE refactor (vllm-project/vllm#29111). Only the
// rotation differs: keys exact at position 0, wrong after it, values exact.
#include "audit/rows/KeyRecordRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/layer_rope_theta/LayerRopeThetaEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class LayerRopeThetaRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::LayerRopeTheta,
        "one layer type's keys wrong from position 1 on, exact at position 0, values exact, on "
        "a checkpoint with a RoPE per layer type; each record is the reference key rotated "
        "with the other layer type's RoPE",
        "which RoPE each layer builds (Gemma 3: rope_local_base_freq, unscaled, on the sliding "
        "layers; rope_theta and rope_scaling on the full-attention ones)",
        MatrixOrigin::KvScope,
        113,
        AuditStage::Numerics,
        {},
        {"Gemma 3's sliding layers rotated with the global RoPE (vllm-project/vllm#29111, "
         "fixing the regression of #28542; docs/audit.md)"},
        {{"layer_rope_theta",
          "from step `step` on, the cached path rotates `layer` with the other layer type's "
          "RoPE (-1 = every layer: the sliding layers with the full-attention theta and "
          "scaling, the full-attention ones with the local theta); needs a checkpoint whose "
          "sliding layers have their own RoPE (gemma3_text)",
          "keys wrong from position 1 on, exact at position 0, values exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    return explainKeyRecords<LayerRopeThetaEvidence>(ctx, r, a, own, ev);
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "layer_rope_theta",
                          "layer " + std::to_string(f.layer) + " other layer type's RoPE", true};
  }
};

}  // namespace

const FailureRow& layerRopeTheta() {
  static const LayerRopeThetaRow row;
  return row;
}

}  // namespace kvscope::detail::rows
