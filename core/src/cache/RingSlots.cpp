#include "cache/RingSlots.hpp"

namespace kvscope::detail {

RingSlots::RingSlots(int64_t slots)
    : index_(static_cast<size_t>(slots), -1), position_(static_cast<size_t>(slots), -1) {}

int64_t RingSlots::slotFor(int64_t cacheIndex, int64_t wrapShift) const {
  const int64_t S = slots();
  const int64_t shift = cacheIndex >= S ? wrapShift : 0;
  return (((cacheIndex + shift) % S) + S) % S;
}

void RingSlots::put(int64_t slot, int64_t cacheIndex, int64_t position) {
  const auto s = static_cast<size_t>(slot);
  if (index_[s] < 0) ++occupied_;
  index_[s] = cacheIndex;
  position_[s] = position;
}

void RingSlots::clear() {
  index_.assign(index_.size(), -1);
  position_.assign(position_.size(), -1);
  occupied_ = 0;
}

}  // namespace kvscope::detail
