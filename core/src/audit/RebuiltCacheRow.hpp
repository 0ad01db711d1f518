// One layer's cache as an audit rebuilds it from a trace's records: the columns the engine
// appended, step by step, in cache order. The columns point into the trace's own record
// tensors (a long run's cache is gigabytes: it is never copied), so the trace must outlive
// the row and stay unchanged while it is used.
#pragma once

#include <cstdint>
#include <vector>

#include "kvscope/FloatTensor.hpp"

namespace kvscope::detail {

class RebuiltCacheRow {
 public:
  RebuiltCacheRow(int64_t heads, int64_t keyWidth, int64_t valueWidth)
      : heads_(heads), keyWidth_(keyWidth), valueWidth_(valueWidth) {}

  /// Appends every column of a step's records, keys [h, n, d] and values [h, n, dv].
  void append(const FloatTensor& keys, const FloatTensor& values);
  /// The cache becomes a full snapshot [h, t, d] / [h, t, dv] (what the engine really held).
  void replaceWith(const FloatTensor& keys, const FloatTensor& values);
  /// Drops the last `count` columns (a rollback).
  void trim(int64_t count);
  int64_t size() const { return static_cast<int64_t>(columns_.size()); }
  int64_t heads() const { return heads_; }
  /// Head `head`'s key (d values) / value (dv values) at cache column `column`.
  const float* key(int64_t head, int64_t column) const;
  const float* value(int64_t head, int64_t column) const;
  /// traceRowChecksum of the keys (or values) as the engine holds them ([h][t * d], heads in
  /// order), over every column, or over `columns` in that order.
  uint64_t checksum(bool keys) const;
  uint64_t checksum(bool keys, const std::vector<int64_t>& columns) const;

 private:
  struct Column {
    const float* keys;    // head 0's key; head h's at keys + h * keyStride
    const float* values;  // likewise
    int64_t keyStride;
    int64_t valueStride;
  };
  int64_t heads_, keyWidth_, valueWidth_;
  std::vector<Column> columns_;
};

}  // namespace kvscope::detail
