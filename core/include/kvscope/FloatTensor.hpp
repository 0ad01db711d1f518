// A plain tensor value for the public API: a shape and a row-major float buffer.
// No torch types cross the core's public boundary.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvscope {

struct FloatTensor {
  std::vector<int64_t> shape;  // row-major dimensions
  std::vector<float> data;     // numel() values

  FloatTensor() = default;
  FloatTensor(std::vector<int64_t> shape_, std::vector<float> data_);
  static FloatTensor zeros(std::vector<int64_t> shape_);

  int64_t numel() const;
  int64_t dim(size_t i) const { return shape.at(i); }
  bool empty() const { return data.empty(); }
  /// Largest |a - b| over all elements; throws std::invalid_argument on a shape mismatch.
  static float maxAbsDiff(const FloatTensor& a, const FloatTensor& b);
  /// Largest |x| over all elements (0 for an empty tensor).
  float maxAbs() const;
  std::string shapeString() const;  // e.g. "[2, 5, 16]"
  /// Whether this and `o` are [h, n, *] records of the same entries: as many heads and records,
  /// their widths free (a layer's keys and values; MLA's differ in width).
  bool sameEntriesAs(const FloatTensor& o) const {
    return shape.size() == 3 && o.shape.size() == 3 && shape[0] == o.shape[0] && shape[1] == o.shape[1];
  }

  bool operator==(const FloatTensor& o) const { return shape == o.shape && data == o.data; }
  bool operator!=(const FloatTensor& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const FloatTensor& t);

/// A shape as text, e.g. "[2, 5, 16]" (FloatTensor::shapeString of any shape).
std::string shapeString(const std::vector<int64_t>& shape);

}  // namespace kvscope
