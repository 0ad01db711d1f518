#include "audit/RebuiltCacheRow.hpp"

#include <xxhash.h>

#include <algorithm>
#include <numeric>

namespace kvscope::detail {

void RebuiltCacheRow::append(const FloatTensor& keys, const FloatTensor& values) {
  if (keys.shape.size() != 3 || !keys.sameEntriesAs(values)) return;
  const int64_t n = keys.shape[1];
  for (int64_t j = 0; j < n; ++j)
    columns_.push_back({keys.data.data() + j * keyWidth_, values.data.data() + j * valueWidth_, n * keyWidth_,
                        n * valueWidth_});
}

void RebuiltCacheRow::replaceWith(const FloatTensor& keys, const FloatTensor& values) {
  columns_.clear();
  append(keys, values);
}

void RebuiltCacheRow::trim(int64_t count) {
  columns_.resize(static_cast<size_t>(std::max<int64_t>(0, size() - count)));
}

const float* RebuiltCacheRow::key(int64_t head, int64_t column) const {
  const Column& c = columns_[static_cast<size_t>(column)];
  return c.keys + head * c.keyStride;
}

const float* RebuiltCacheRow::value(int64_t head, int64_t column) const {
  const Column& c = columns_[static_cast<size_t>(column)];
  return c.values + head * c.valueStride;
}

uint64_t RebuiltCacheRow::checksum(bool keys) const {
  std::vector<int64_t> all(columns_.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  return checksum(keys, all);
}

uint64_t RebuiltCacheRow::checksum(bool keys, const std::vector<int64_t>& columns) const {
  // The bytes traceRowChecksum hashes, head by head, without gathering them first.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const auto bytes = static_cast<size_t>(keys ? keyWidth_ : valueWidth_) * sizeof(float);
  for (int64_t h = 0; h < heads_ && !columns.empty(); ++h)
    for (int64_t c : columns) XXH3_64bits_update(st, keys ? key(h, c) : value(h, c), bytes);
  const uint64_t out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return out;
}

}  // namespace kvscope::detail
