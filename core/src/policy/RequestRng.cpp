#include "kvscope/RequestRng.hpp"

namespace kvscope {

double RequestRng::nextUniform() {
  // Top 53 bits of one 64-bit output, scaled by 2^-53: exactly representable, in [0, 1).
  const uint64_t bits = engine_() >> 11;
  ++draws_;
  return static_cast<double>(bits) * 0x1.0p-53;
}

void RequestRng::discard(uint64_t n) {
  engine_.discard(n);  // one engine output per draw, so this equals n nextUniform() calls
  draws_ += n;
}

void RequestRng::reseed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(seed);
  draws_ = 0;
}

}  // namespace kvscope
