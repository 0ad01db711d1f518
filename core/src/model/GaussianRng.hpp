// Deterministic normal samples for random-weight checkpoints: std::mt19937_64 and a
// hand-written Box-Muller transform (std::normal_distribution differs between standard
// libraries, so it would make checkpoints differ between platforms).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

namespace kvscope {

class GaussianRng {
 public:
  explicit GaussianRng(uint64_t seed) : engine_(seed) {}

  /// A stream seed for one named tensor: independent of the order tensors are made in,
  /// so sharding or reordering never changes a tensor's values.
  static uint64_t streamSeed(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : name) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    return splitMix(splitMix(seed) ^ h);
  }

  /// Uniform in [0, 1) from the top 53 bits of one engine output.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  /// Standard normal; Box-Muller yields two values per pair of uniforms.
  double normal() {
    if (hasSpare_) {
      hasSpare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 6.283185307179586476925 * u2;
    spare_ = r * std::sin(a);
    hasSpare_ = true;
    return r * std::cos(a);
  }

 private:
  static uint64_t splitMix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool hasSpare_ = false;
};

}  // namespace kvscope
