// Evidence for a RoPE scaling mismatch (rope_scaling): a layer's new keys differ from the
// reference while its values are exact, and they equal the reference keys with the
// reference rotation undone and redone with another scaling of the checkpoint's RoPE
// frequencies (the factor dropped, applied twice, inverted, or linear instead of llama3; yarn:
// its frequencies dropped, with or without its attention factor).
// Records are compared at the same, recorded, position ids: with linear factor f a dropped
// factor puts a key at position p where the checkpoint puts f x p, which the layer-0
// position probe alone would read as a position offset.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct RopeScalingMatch {
  int hypothesis = 0;  // 1 factor dropped, 2 applied twice, 3 linear instead of llama3, 4 inverted,
                       // 5 yarn's frequencies dropped with its attention factor kept
  std::string description;    // "the scaling dropped (default frequencies of rope_theta)"
  double rerotatedError = 0;  // max |record - re-rotated reference key| over the records
  double tolerance = 0;       // the largest record tolerance among them
  double ownError = 0;        // max |record key - reference key|
  int64_t records = 0;        // diverged key records compared (columns over steps)
  int64_t firstPosition = -1, lastPosition = -1;  // stream positions of the first and last
  double firstKeyError = 0, lastKeyError = 0;     // their key error against the reference
  double valueError = 0;           // max value error of the layer over the compared steps
  double layer0ValueError = 0;     // max value error of layer 0 over the compared steps
  double radiansPerPosition = 0;   // max |w_alt - w| over the frequencies
  double amplitude = 1;            // the path's key length over the reference's (yarn: 1 / its
                                   // attention factor where the path drops it)
  double equivalentPosition = -1;  // linear, factor dropped: f x the first position
};

class RopeScalingEvidence {
 public:
  RopeScalingEvidence(ModelConfig config, const Tolerance& tol)
      : config_(std::move(config)), tol_(tol) {}
  /// The check for an audit: the checkpoint's RoPE (`model`, model modes) or, in
  /// trace+trace mode, the trace's model.rope_parameters; nullopt when neither has a scaling
  /// it can re-derive.
  static std::optional<RopeScalingEvidence> forAudit(const ModelConfig* model,
                                                     const TraceModelInfo& trace,
                                                     const Tolerance& tol);

  /// Whether the checkpoint's RoPE has a scaling this check can re-derive (linear, llama3, yarn).
  bool applies() const;
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  std::optional<RopeScalingMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                          const RequestReference& own) const;
  /// The rope_scaling finding at the first step's first bad record.
  FindingDraft finding(const StepAnalysis& a, const RopeScalingMatch& m,
                       std::map<std::string, double> evidence) const;
  /// The checkpoint's scaling in words: "llama3 (factor 8, original context 64)".
  std::string scalingText() const;

 private:
  ModelConfig config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
