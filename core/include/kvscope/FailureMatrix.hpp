// The failure matrix of the audit method: each finding id, the observation that raises it
// and the first thing to check.
#pragma once

#include <string>
#include <vector>

namespace kvscope {

/// The finding ids (the JSON contract), one constant per failure-matrix row.
namespace finding {
inline constexpr const char* Reference = "reference";
inline constexpr const char* Position = "position";
inline constexpr const char* WrongLayer = "wrong_layer";
inline constexpr const char* DuplicateAppend = "duplicate_append";
inline constexpr const char* CrossRequest = "cross_request";
inline constexpr const char* TieRule = "tie_rule";
inline constexpr const char* RngOrder = "rng_order";
inline constexpr const char* StaleCache = "stale_cache";
inline constexpr const char* ContextLimit = "context_limit";
inline constexpr const char* SlidingWindow = "sliding_window";
inline constexpr const char* Drift = "drift";
// KV Scope's additions to the method's failure matrix.
inline constexpr const char* SpeculativeRollback = "speculative_rollback";
inline constexpr const char* KvQuantization = "kv_quantization";
inline constexpr const char* RopeScaling = "rope_scaling";
inline constexpr const char* ChunkPosition = "chunk_position";
inline constexpr const char* BatchVariance = "batch_variance";
inline constexpr const char* PrefixReuse = "prefix_reuse";
inline constexpr const char* WindowWrap = "window_wrap";
inline constexpr const char* QkNormOrder = "qk_norm_order";
inline constexpr const char* NopeLayerRope = "nope_layer_rope";
inline constexpr const char* SoftcapDropped = "softcap_dropped";
inline constexpr const char* ExpertRouting = "expert_routing";
inline constexpr const char* LayerRopeTheta = "layer_rope_theta";
inline constexpr const char* PartialRotary = "partial_rotary";
inline constexpr const char* SinkDropped = "sink_dropped";
inline constexpr const char* YarnAttentionFactor = "yarn_attention_factor";
inline constexpr const char* ChunkMask = "chunk_mask";
inline constexpr const char* TemperaturePosition = "temperature_position";
inline constexpr const char* RecurrentState = "recurrent_state";
inline constexpr const char* StateRollback = "state_rollback";
inline constexpr const char* PrefixState = "prefix_state";
inline constexpr const char* MlaAbsorb = "mla_absorb";
inline constexpr const char* ScoreMscale = "score_mscale";
}  // namespace finding

/// Where a row comes from: the method's failure matrix (docs/audit-method.md, eight rows),
/// or KV Scope, which adds the audit's own outcomes (reference, sliding_window, drift) and
/// rows for bugs filed against production engines (docs/audit.md). A row appended to the
/// table without saying is KV Scope's.
enum class MatrixOrigin { Method, KvScope };

struct FailureMatrixRow {
  std::string id;           // stable finding id
  std::string observation;  // what the audit saw
  std::string firstCheck;   // where to look first
  MatrixOrigin origin = MatrixOrigin::KvScope;
  std::vector<std::string> citations;  // public reports of the bug (docs/audit.md)
  bool divergent = true;  // a finding of this row makes the verdict divergent (drift does not)
};

/// The rows come from the audit's row modules (core/src/audit/rows/), listed as the method
/// lists them: its eight rows first, then KV Scope's in the order they were added.
class FailureMatrix {
 public:
  static const std::vector<FailureMatrixRow>& rows();
  /// The matrix as a Markdown table (docs/audit.md holds it; a test keeps the two equal).
  static std::string markdown();
  /// The row for `id`; throws std::out_of_range for an unknown id.
  static const FailureMatrixRow& row(const std::string& id);
};

}  // namespace kvscope
