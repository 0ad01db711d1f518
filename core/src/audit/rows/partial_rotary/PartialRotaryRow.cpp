// `partial_rotary` (KV Scope's): on a checkpoint that rotates only part of each head
// (partial_rotary_factor below 1: Phi-3, Phi-4-mini), the cached path rotates over the whole
// head: the factor ignored, or the rotary width's pairs or frequencies taken over head_dim
// (pie-project/pie#603, labscommunity/cascadia#69). Only the rotation differs: keys exact at
// position 0, wrong after it, values exact.
#include "audit/rows/KeyRecordRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/partial_rotary/PartialRotaryEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class PartialRotaryRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::PartialRotary,
        "keys wrong from position 1 on, exact at position 0, values exact, on a partial-rotary "
        "checkpoint; each record is the reference key rotated over the whole head",
        "the rotary width of the path's RoPE (transformers: int(head_dim * "
        "partial_rotary_factor) features, pairs and frequencies over that width, the rest "
        "passed through)",
        MatrixOrigin::KvScope,
        114,
        AuditStage::Numerics,
        {},
        {"partial rotary rotated over the head width (pie-project/pie#603; "
         "labscommunity/cascadia#69; docs/audit.md)"},
        {{"partial_rotary",
          "from step `step` on, the cached path rotates all of each head's features at "
          "`layer` (-1 = every layer), partial_rotary_factor ignored; needs a partial-rotary "
          "checkpoint (phi3)",
          "keys wrong from position 1 on, exact at position 0, values exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    return explainKeyRecords<PartialRotaryEvidence>(ctx, r, a, own, ev);
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "partial_rotary",
                          "layer " + std::to_string(f.layer) + " whole head rotated", true};
  }
};

}  // namespace

const FailureRow& partialRotary() {
  static const PartialRotaryRow row;
  return row;
}

}  // namespace kvscope::detail::rows
