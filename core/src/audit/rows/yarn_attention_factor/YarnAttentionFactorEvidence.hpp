// Evidence for a RoPE attention factor dropped or mis-derived by the cached path
// (yarn_attention_factor): on a yarn (or longrope) checkpoint transformers multiplies cos and
// sin by the attention factor (attention_scaling: attention_factor, or 0.1 ln(factor) + 1, or
// its mscale / mscale_all_dim ratio), so every rotated key feature carries it. A path that uses
// another factor leaves the values exact and scales each key's rotated features by one
// constant, at every position (position 0 too). The evidence tests the factors engines
// shipped against every key record from the first divergence on:
//   1. no factor at all, 1 (turboderp-org/exllamav3#259);
//   2. 0.1 ln(factor) + 1 where the checkpoint names attention_factor or mscale /
//      mscale_all_dim (vllm-project/vllm#48351, sgl-project/sglang#22711);
//   3. the factor applied twice (to cos/sin and again to the keys).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/KeyRecordHypothesis.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct YarnAttentionFactorMatch {
  KeyRecordMatch keys;
  int hypothesis = 0;        // 1, 2 or 3 (above)
  double checkpointFactor = 1;  // what the checkpoint's RoPE multiplies cos and sin by
  double pathFactor = 1;        // what the records were turned with
};

class YarnAttentionFactorEvidence {
 public:
  YarnAttentionFactorEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// Whether the checkpoint's RoPE has an attention factor other than 1.
  bool applies() const;
  std::optional<YarnAttentionFactorMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                                  const RequestReference& own) const;
  static FindingDraft finding(const StepAnalysis& a, const YarnAttentionFactorMatch& m,
                              std::map<std::string, double> evidence);

 private:
  const ModelConfig& config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
