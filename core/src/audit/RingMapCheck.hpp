// A ring-buffer window cache's slot map against the positions its request fed
// (docs/trace-format.md, ring caches): after a step the ring must hold each of the last
// min(n, W - 1) positions fed (what the next query attends over) exactly once, and nothing
// the request never fed. The audit's window_wrap evidence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::detail {

struct RingMapProblem {
  std::string kind;        // "" none | missing | duplicate | foreign | checksum
  int64_t position = -1;   // the position missing, held twice, or never fed
  int64_t slot = -1;       // where the ring (i mod S) would keep it, or the slot holding it
  int64_t slotHolds = -1;  // the position that slot holds instead (-1: empty)
  int64_t needed = 0;      // positions the next query needs
  bool ok() const { return kind.empty(); }
  /// "position 5, which the next query needs, is in no slot (slot 5 holds position 6)".
  std::string describe() const;
};

/// `map`: per slot the position it holds (-1 empty/padding). `fed`: the request's real
/// positions fed so far, in stream order; `cacheIndexOf[i]`: the cache index fed entry i took
/// (its ring slot is that mod the slot count). `window`: the layer's sliding window W; `chunk`: a chunked layer's chunk C
/// (then the next query needs the entries of its own chunk, n mod C of them).
RingMapProblem checkRingMap(const std::vector<int64_t>& map, const std::vector<int64_t>& fed,
                            const std::vector<int64_t>& cacheIndexOf, int64_t window, int64_t chunk = 0);

}  // namespace kvscope::detail
