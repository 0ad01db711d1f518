// Turns one forward of the cached engine into TraceSteps: copies (never views) of the
// records each layer appended, cache lengths, checksums and optional snapshots.
#pragma once

#include <torch/torch.h>

#include "cache/KvCache.hpp"
#include "engine/RequestState.hpp"
#include "model/KvTapCollector.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// The records a forward gave each ring layer ([layer] [h, n, d]; undefined: not a ring).
struct RingRecords {
  std::vector<torch::Tensor> keys, values;
};

class StepRecorder {
 public:
  /// `statesEvery`: a recurrent layer's state is recorded after step 0 and every N-th step (0:
  /// never).
  StepRecorder(const KvCache& cache, bool checksums, bool snapshots, int64_t statesEvery = 1)
      : cache_(cache), checksums_(checksums), snapshots_(snapshots), statesEvery_(statesEvery) {}

  /// Layer records for `r` after a forward that started at `lengthsBefore`. `appendedUntil`
  /// (per layer, optional) is where the forward's appends ended when a speculative rollback
  /// shortened the cache since: the records are [lengthsBefore, appendedUntil), the cache
  /// length, checksum and snapshot those of the cache after the rollback. A ring layer's
  /// records come from `ring`; its length, checksum and snapshot cover its occupied slots in
  /// slot order, and its slot map is recorded.
  /// The uncached engine's records of one forward over W entries: each layer's last `s`
  /// records from `taps` (its cache length W; a recurrent layer: none, length 0).
  static std::vector<TraceLayerRecord> uncachedLayers(const KvTapCollector& taps, int64_t layers, int64_t W,
                                                      int64_t s);
  std::vector<TraceLayerRecord> layers(const RequestState& r,
                                       const std::vector<int64_t>& lengthsBefore,
                                       const std::vector<int64_t>& appendedUntil = {},
                                       const RingRecords& ring = {}) const;

 private:
  const KvCache& cache_;
  bool checksums_;
  bool snapshots_;
  int64_t statesEvery_;
};

}  // namespace kvscope::detail
