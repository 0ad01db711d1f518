// The rows whose cause sits in one layer's attention output (softcap_dropped, sink_dropped,
// chunk_mask): that layer's K/V records exact (they come before its attention), the next
// layer's wrong, or only the logits when it is the last. Each answers both questions of the
// walk with one re-derivation, explain(.., logitsOnly), and marks the timeline at the
// finding's layer.
#pragma once

#include <string>

#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail::rows {

class AttentionOutputRow : public FailureRow {
 public:
  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference&,
                      const Evidence& ev) const final {
    return explain(ctx, r, a, ev, false);
  }
  bool explainLogits(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev) const final {
    return explain(ctx, r, a, ev, true);
  }
  std::optional<TimelineMarker> marker(const Finding& f) const final {
    return TimelineMarker{f.step, spec().id, "layer " + std::to_string(f.layer) + " " + markerWords(), true};
  }

 protected:
  /// The row's re-derivation of the request's first divergence at `a`; adds its finding.
  virtual bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
                       bool logitsOnly) const = 0;
  /// After "layer L " on the timeline: "soft-cap dropped".
  virtual std::string markerWords() const = 0;
};

}  // namespace kvscope::detail::rows
