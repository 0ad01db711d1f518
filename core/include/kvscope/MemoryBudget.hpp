// What a run needs in memory, against what the machine (or the process's limits) can give,
// checked before anything large is allocated, so a run that cannot fit is refused with a
// sentence that names the numbers and what to do, never a library stack dump or a kill.
#pragma once

#include <cstdint>
#include <string>

#include "kvscope/Error.hpp"

namespace kvscope {

/// A run that does not fit in memory (or an allocation that failed anyway).
class OutOfMemoryError : public UsageError {
 public:
  explicit OutOfMemoryError(const std::string& message) : UsageError(message) {}
};

/// How much memory this process may still use, in bytes, and which limit decides it.
struct MemoryAvailable {
  uint64_t ram = 0;            // min(MemAvailable, cgroup memory.max - its non-file usage)
  std::string ramSource;       // "MemAvailable" or "cgroup memory.max"
  uint64_t addressSpace = 0;   // RLIMIT_AS - VmSize (UINT64_MAX when unlimited)
  static MemoryAvailable now();
};

/// What one run needs. `weights` are the mapped weight files (they must be resident to run
/// at memory speed; they are already mapped, so they count against RAM, not against the
/// address-space limit); everything else is allocated by the run.
struct MemoryNeed {
  uint64_t weights = 0;
  uint64_t activations = 0;  // one forward over the longest fed sequence
  uint64_t kvCache = 0;      // K/V kept for the run
  uint64_t kept = 0;         // logits rows, recorded K/V and hidden states the result keeps
  uint64_t allocated() const { return activations + kvCache + kept; }
  uint64_t total() const { return weights + allocated(); }

  /// Throws OutOfMemoryError naming the figures and `advice` when the run cannot fit.
  void check(const MemoryAvailable& available, const std::string& what,
             const std::string& advice) const;
};

/// "1.23 GB", "420 MB" or "12 kB" (decimal units, as the messages quote memory sizes).
std::string gigabytes(uint64_t bytes);

}  // namespace kvscope
