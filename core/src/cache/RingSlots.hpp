// One layer's ring-buffer sliding-window cache of one request: S physical slots that take
// cache index i at slot i mod S (vLLM's and llama.cpp's sliding-window caches), and which
// cache index and position id each slot holds, the map a ring trace records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvscope::detail {

class RingSlots {
 public:
  explicit RingSlots(int64_t slots = 0);
  int64_t slots() const { return static_cast<int64_t>(index_.size()); }
  /// Slots holding an entry (they fill from slot 0 before the first wrap).
  int64_t occupied() const { return occupied_; }
  /// The slot cache index `cacheIndex` goes to: cacheIndex mod S; once the ring has wrapped
  /// (cacheIndex >= S) shifted by `wrapShift` slots (the window_wrap fault; 0 = right).
  int64_t slotFor(int64_t cacheIndex, int64_t wrapShift) const;
  /// Slot `slot` now holds cache index `cacheIndex`, fed at `position` (-1: padding).
  void put(int64_t slot, int64_t cacheIndex, int64_t position);
  /// Per slot, the cache index it holds (-1: empty).
  const std::vector<int64_t>& cacheIndices() const { return index_; }
  /// Per slot, the position id it holds (-1: empty or padding): what the trace records.
  const std::vector<int64_t>& positions() const { return position_; }
  void clear();

 private:
  std::vector<int64_t> index_;
  std::vector<int64_t> position_;
  int64_t occupied_ = 0;
};

}  // namespace kvscope::detail
