// Stage 1's lines about the reference itself: which LongRoPE factor set each request's
// records were turned with, and how many uncached forwards the audit took.
#pragma once

#include <string>
#include <vector>

#include "audit/ReferenceSet.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// LongRoPE turns each forward with short_factor while the forward is at most
/// original_max_position_embeddings positions long and with long_factor beyond (per forward,
/// as transformers does): which set each request's records were turned with, for the report.
std::vector<std::string> longRopeFactorSets(const ModelConfig& c, const Trace& trace);

/// "note: N uncached reference passes over P positions for R requests (...), M
/// re-derivations of a diverged run": each request's reference is one pass over its stream
/// whatever its number of steps; re-derivations run only where a row tests a cause.
std::string referencePassLine(const ReferenceSet::PassCount& n, const Trace& trace);

/// The trace's layer_kinds against the checkpoint's attention per layer (its sliding window
/// or its chunk): "ok" when they agree, a "note" naming the first layer that does not (the
/// audit computes the checkpoint's; a recorder that states another span is wrong, or its
/// engine runs another mask, which the records then show); nothing when the trace has none.
std::vector<std::string> layerKindLines(const ModelConfig& c, const Trace& trace);

/// Why the trace cannot be of this checkpoint's run by its layers' kinds ("" when it can): the
/// checkpoint keeps a state on some layers and the trace does not declare layer_kinds, or the
/// two differ on which layers are recurrent (a state cannot stand in for K/V rows) or latent
/// (latent rows cannot stand in for per-head K/V, nor the other way round).
std::string layerKindMismatch(const ModelConfig& c, const Trace& trace);

}  // namespace kvscope::detail
