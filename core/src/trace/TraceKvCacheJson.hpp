// The trace document's optional "kv_cache" object: the element type and scales of a
// quantised cache (docs/trace-format.md "Quantised caches"). Absent: the cache holds the
// compute dtype and its records are compared at that precision.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvscope/KvQuantization.hpp"

namespace kvscope::detail {

/// Null when the cache is not quantised (then the field is left out).
nlohmann::json kvCacheToJson(const KvQuantization& q);
/// Validates `doc["kv_cache"]` (when present) against `numLayers`; errors name `file` and
/// the field, e.g. "kv_cache.k_scales".
KvQuantization kvCacheFromJson(const nlohmann::json& doc, const std::string& file,
                               int64_t numLayers);

}  // namespace kvscope::detail
