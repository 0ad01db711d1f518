// A per-request random generator with a documented, stable order of draws:
// std::mt19937_64 seeded with the request's seed; each draw takes one 64-bit output and
// maps its top 53 bits to a double in [0, 1). A sampled token consumes exactly one draw;
// a greedy token consumes none. `draws()` counts draws since seeding, so a replay can
// skip ahead with `discard(n)`.
#pragma once

#include <cstdint>
#include <random>

namespace kvscope {

class RequestRng {
 public:
  explicit RequestRng(uint64_t seed = 0) : seed_(seed), engine_(seed) {}
  double nextUniform();
  void discard(uint64_t n);
  void reseed(uint64_t seed);  // resets the draw count
  uint64_t seed() const { return seed_; }
  uint64_t draws() const { return draws_; }

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
  uint64_t draws_ = 0;
};

}  // namespace kvscope
