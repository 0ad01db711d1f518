// Fills a parsed trace's steps with their tensors, whichever format version they came from:
// logits rows, appended K/V records (derived from full snapshots when only those were
// stored: the columns new since the request's previous step) and per-layer cache lengths.
#pragma once

#include <string>

#include "kvscope/Trace.hpp"
#include "trace/TraceTensorSource.hpp"

namespace kvscope::detail {

/// Throws InputError(file, tensor) unless `shape` is [model.num_kv_heads, t, model.head_dim]
/// (`values`: value_head_dim where the model block gives one), the shape of every stored K/V
/// tensor whatever the format version.
void checkRecordShape(const std::string& file, const std::string& tensor, const std::vector<int64_t>& shape,
                      const TraceModelInfo& model, bool values);

/// `trace.steps[i].layers` may already hold declared cache lengths and checksums from the
/// document; they are kept. Errors are InputError naming `path` and the source's field.
void resolveStepTensors(Trace& trace, const TraceTensorSource& source, const std::string& path);

}  // namespace kvscope::detail
