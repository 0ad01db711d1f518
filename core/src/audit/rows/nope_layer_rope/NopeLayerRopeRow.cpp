// `nope_layer_rope` (KV Scope's): on a checkpoint with NoPE layers (SmolLM3's no_rope_layers,
// Llama 4's every fourth layer), the cached path reads the list inverted: the NoPE layers
// rotate and the rotary ones do not (transformers issue 43756). Only the rotation differs, so
// the keys at position 0 (where RoPE is the identity) and every value are right. Where the
// NoPE choice carries more (Llama 4's q/k L2 norm, query temperature, chunking), an uncached
// re-derivation with the layers run as the other kind (NopeLayerRederivation).
#include "audit/rows/KeyRecordRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/nope_layer_rope/NopeLayerRederivation.hpp"
#include "audit/rows/nope_layer_rope/NopeLayerRopeEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class NopeLayerRopeRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::NopeLayerRope,
        "keys wrong from position 1 on, exact at position 0, values exact, on a checkpoint with "
        "NoPE layers; each record is the reference key with its rotation toggled (Llama 4: keys "
        "wrong from position 0, an uncached pass with the layer run as the other kind reproduces "
        "them)",
        "how the path reads no_rope_layers (1 = rotary, 0 = NoPE; transformers' SmolLM3 sets "
        "use_rope = no_rope_layers[layer]; mlx-lm's Llama 4 takes every fourth layer as NoPE "
        "whatever the list says)",
        MatrixOrigin::KvScope,
        111,
        AuditStage::Numerics,
        {},
        {"no_rope_layers read inverted in a port of SmolLM3 (huggingface/transformers#43756; "
         "docs/audit.md)"},
        {{"nope_layer_rope",
          "from step `step` on, the cached path reads `layer`'s no_rope_layers entry inverted "
          "(-1 = every layer): a NoPE layer rotates, a rotary one does not; needs a checkpoint "
          "with NoPE layers (smollm3)",
          "keys wrong from position 1 on, exact at position 0, values exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    return explainKeyRecords<NopeLayerRopeEvidence>(ctx, r, a, own, ev) ||
           explainNopeLayersByRederivation(ctx, r, a, ev);
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "nope_layer_rope",
                          "layer " + std::to_string(f.layer) + " rotation toggled", true};
  }
};

}  // namespace

const FailureRow& nopeLayerRope() {
  static const NopeLayerRopeRow row;
  return row;
}

}  // namespace kvscope::detail::rows
