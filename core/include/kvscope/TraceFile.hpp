// Reads and writes traces as one safetensors file: tensors plus a JSON document in the
// metadata (docs/trace-format.md). Other engines write the same format (tools/kvtrace.py).
#pragma once

#include <string>

#include "kvscope/Trace.hpp"

namespace kvscope {

class TraceFile {
 public:
  /// The version written. Version 1 files (per-step tensors) are still read.
  static constexpr int kFormatVersion = 2;
  /// Writes format version 2 (packed tensors, the step table as JSON columns) atomically
  /// (temporary file + rename). Refuses to replace an existing file unless `overwrite`.
  /// Throws InputError naming the path.
  static void write(const Trace& trace, const std::string& path, bool overwrite = false);
  /// Reads and validates a trace: a truncated file, a wrong format or version, a step
  /// referring to a missing tensor or a shape that contradicts the model block gives an
  /// InputError naming the file and the field (e.g. "layer1.k", "steps.positions[3]").
  /// Full-snapshot traces (snapshots only) get their appended records derived from them.
  static Trace read(const std::string& path);
};

}  // namespace kvscope
