// Turns one forward of the cached engine into TraceSteps: copies (never views) of the
// records each layer appended, cache lengths, checksums and optional snapshots.
#pragma once

#include <torch/torch.h>

#include "cache/KvCache.hpp"
#include "engine/RequestState.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// The records a forward gave each ring layer ([layer] [h, n, d]; undefined: not a ring).
struct RingRecords {
  std::vector<torch::Tensor> keys, values;
};

class StepRecorder {
 public:
  StepRecorder(const KvCache& cache, bool checksums, bool snapshots)
      : cache_(cache), checksums_(checksums), snapshots_(snapshots) {}

  /// Layer records for `r` after a forward that started at `lengthsBefore`. `appendedUntil`
  /// (per layer, optional) is where the forward's appends ended when a speculative rollback
  /// shortened the cache since: the records are [lengthsBefore, appendedUntil), the cache
  /// length, checksum and snapshot those of the cache after the rollback. A ring layer's
  /// records come from `ring`; its length, checksum and snapshot cover its occupied slots in
  /// slot order, and its slot map is recorded.
  std::vector<TraceLayerRecord> layers(const RequestState& r,
                                       const std::vector<int64_t>& lengthsBefore,
                                       const std::vector<int64_t>& appendedUntil = {},
                                       const RingRecords& ring = {}) const;

 private:
  const KvCache& cache_;
  bool checksums_;
  bool snapshots_;
};

}  // namespace kvscope::detail
