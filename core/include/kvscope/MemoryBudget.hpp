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

/// What one run needs. `weights` are the mapped weight files: they run at memory speed when
/// the page cache holds them, but a model larger than the memory still runs, each pass
/// reading from the disk what the page cache could not keep (as llama.cpp runs a mapped model
/// larger than RAM). What must be resident is everything the run allocates plus the weights
/// one matmul reads at once (`weightsWorkingSet`). The weights are already mapped, so they
/// count against RAM, not against the address-space limit.
struct MemoryNeed {
  uint64_t weights = 0;
  uint64_t weightsWorkingSet = 0;  // the largest weight tensor: resident while it is used
  uint64_t activations = 0;  // one forward over the longest fed sequence
  uint64_t kvCache = 0;      // K/V kept for the run
  uint64_t kept = 0;         // logits rows, recorded K/V and hidden states the result keeps
  uint64_t allocated() const { return activations + kvCache + kept; }
  uint64_t resident() const { return allocated() + weightsWorkingSet; }
  uint64_t total() const { return weights + allocated(); }

  /// Throws OutOfMemoryError naming the figures and `advice` when what must be resident
  /// cannot fit. Returns a note (empty when everything fits) when the weights do not all fit
  /// beside the run: how much each pass then reads from the disk.
  std::string check(const MemoryAvailable& available, const std::string& what,
                    const std::string& advice) const;
};

/// "1.23 GB", "420 MB" or "12 kB" (decimal units, as the messages quote memory sizes).
std::string gigabytes(uint64_t bytes);

}  // namespace kvscope
