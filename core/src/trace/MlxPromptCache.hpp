// readMlxPromptCacheTrace (kvscope/MlxPromptCacheTrace.hpp) for a checkpoint's config alone
// (the fuzz target has no checkpoint).
#pragma once

#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

Trace mlxPromptCacheTrace(const std::string& path, const ModelConfig& config, const std::vector<int64_t>& tokens);

}  // namespace kvscope::detail
