#include "kvscope/FloatTensor.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace kvscope {

FloatTensor::FloatTensor(std::vector<int64_t> shape_, std::vector<float> data_)
    : shape(std::move(shape_)), data(std::move(data_)) {
  if (static_cast<int64_t>(data.size()) != numel()) {
    throw std::invalid_argument("FloatTensor: buffer of " + std::to_string(data.size()) +
                                " values does not fill shape " + shapeString());
  }
}

FloatTensor FloatTensor::zeros(std::vector<int64_t> shape_) {
  FloatTensor t;
  t.shape = std::move(shape_);
  t.data.assign(static_cast<size_t>(t.numel()), 0.0f);
  return t;
}

int64_t FloatTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float FloatTensor::maxAbsDiff(const FloatTensor& a, const FloatTensor& b) {
  if (a.shape != b.shape) {
    throw std::invalid_argument("maxAbsDiff: shape " + a.shapeString() + " vs " +
                                b.shapeString());
  }
  float m = 0.0f;
  for (size_t i = 0; i < a.data.size(); ++i) {
    float d = std::fabs(a.data[i] - b.data[i]);
    if (std::isnan(d)) return d;
    if (d > m) m = d;
  }
  return m;
}

float FloatTensor::maxAbs() const {
  float m = 0.0f;
  for (float x : data) m = std::max(m, std::fabs(x));
  return m;
}

std::string FloatTensor::shapeString() const { return kvscope::shapeString(shape); }

std::string shapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const FloatTensor& t) {
  os << "FloatTensor" << t.shapeString() << '{';
  const size_t shown = std::min<size_t>(t.data.size(), 8);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << t.data[i];
  if (t.data.size() > shown) os << ", ...";
  return os << '}';
}

}  // namespace kvscope
