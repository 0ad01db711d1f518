// Everything one request owns in the cached engine: its cache row, per-layer lengths,
// padding mask, consumed stream, sampling state and the weights version its cache holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/RingSlots.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/RequestRng.hpp"

namespace kvscope::detail {

struct RequestState {
  int64_t id = 0;
  RequestSpec spec;
  int64_t slot = -1;                 // cache row
  std::vector<int64_t> lengths;      // per layer: entries written (pads included; a ring
                                     // layer's logical length, more than its slots)
  std::vector<RingSlots> rings;      // per layer: its ring slots (0 slots: not a ring)
  std::vector<uint8_t> valid;        // per cache index: 1 real, 0 padding
  std::vector<int64_t> consumed;     // real tokens fed so far (the stream the cache holds)
  int64_t nextPosition = 0;          // position id of the next real token
  std::vector<int64_t> generated;
  RequestRng rng;
  int64_t step = 0;                  // next step number (0 = prefill)
  int64_t promptFed = 0;             // prompt tokens prefilled so far (chunked prefill)
  int64_t chunk = 0;                 // prefill chunks (forwards) of the current cache so far
  int64_t firstDecodeStep = -1;      // the step that feeds the first generated token
  uint64_t cacheVersion = 0;         // weights version the cache was built with
  bool arrived = false;
  bool done = false;
  bool needsRebuild = false;         // weights changed; cache must be rebuilt before use
  bool leftBatch = false;            // rebuilt alone (no pads): decodes alone from then on
  int64_t batchMates = 1;            // batch-invariant mode: members of its batch group in
                                     // this tick's forwards, itself included
  std::string stopReason = "running";

  /// Empties the cache (a rebuild or a restarted prefill): lengths, padding, ring slots,
  /// the stream it held and the next position.
  void clearCache() {
    std::fill(lengths.begin(), lengths.end(), 0);
    for (auto& ring : rings) ring.clear();
    valid.clear();
    nextPosition = 0;
    consumed.clear();
  }
  /// A weight update arrived while a (chunked) prefill was under way: the cache is cleared
  /// and the prompt prefilled again from its first chunk.
  void restartPrefill() {
    needsRebuild = false;
    clearCache();
    promptFed = 0;
    chunk = 0;
  }
};

}  // namespace kvscope::detail
