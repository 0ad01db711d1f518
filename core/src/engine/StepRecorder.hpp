// Turns one forward of the cached engine into TraceSteps: copies (never views) of the
// records each layer appended, cache lengths, checksums and optional snapshots.
#pragma once

#include <torch/torch.h>

#include "cache/KvCache.hpp"
#include "engine/RequestState.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class StepRecorder {
 public:
  StepRecorder(const KvCache& cache, bool checksums, bool snapshots)
      : cache_(cache), checksums_(checksums), snapshots_(snapshots) {}

  /// Layer records for `r` after a forward that started at `lengthsBefore`.
  std::vector<TraceLayerRecord> layers(const RequestState& r,
                                       const std::vector<int64_t>& lengthsBefore) const;

 private:
  const KvCache& cache_;
  bool checksums_;
  bool snapshots_;
};

}  // namespace kvscope::detail
