// A saved cache (a llama.cpp sequence state, an mlx-lm prompt cache) as a trace, the one rule
// both readers follow: one request whose prompt is the tokens the cache holds, one step
// feeding them at the cells' positions, whose records are the cells' rows; no logits, and the
// stop reason "unknown" (a saved cache does not say whether the run went on).
#pragma once

#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// The tokens the cache holds: the file's own (`named`) or, when it names none, the caller's
/// (`given`: --ids / --prompt). Both given must agree: InputError(path, field) otherwise, and
/// when there are none at all.
std::vector<int64_t> savedCacheTokens(const std::string& path, const std::string& field,
                                      const std::vector<int64_t>& named, const std::vector<int64_t>& given);

/// The trace of `config`'s model; `positions` one per token, `layers` one record per layer (a
/// recurrent layer's: its state after the tokens, no rows);
/// `latentHeads`: a latent-attention model's rows as each head's decompressed K/V
/// (TraceModelInfo::ofConfig).
Trace savedCacheTrace(const std::string& engine, const std::string& path, const ModelConfig& config,
                      const std::vector<int64_t>& tokens, std::vector<int64_t> positions,
                      std::vector<TraceLayerRecord> layers, bool latentHeads = false);

}  // namespace kvscope::detail
