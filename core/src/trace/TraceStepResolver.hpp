// Fills a parsed trace's steps with their tensors, whichever format version they came from:
// logits rows, appended K/V records (derived from full snapshots when only those were
// stored: the columns new since the request's previous step) and per-layer cache lengths.
#pragma once

#include <string>

#include "kvscope/Trace.hpp"
#include "trace/TraceTensorSource.hpp"

namespace kvscope::detail {

/// `trace.steps[i].layers` may already hold declared cache lengths and checksums from the
/// document; they are kept. Errors are InputError naming `path` and the source's field.
void resolveStepTensors(Trace& trace, const TraceTensorSource& source, const std::string& path);

}  // namespace kvscope::detail
