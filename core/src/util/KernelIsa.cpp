#include "util/KernelIsa.hpp"

#include <cstdlib>
#include <string>

namespace kvscope::detail {

namespace {

Isa detectIsa() {
  const char* force = std::getenv("KVSCOPE_KERNEL");  // tests and benchmarks: compare kernels
  if (force && std::string(force) == "scalar") return Isa::Scalar;
  __builtin_cpu_init();
  if ((!force || std::string(force) != "avx2") && __builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::Avx2;
  return Isa::Scalar;
}

}  // namespace

Isa isa() {
  static const Isa value = detectIsa();
  return value;
}

}  // namespace kvscope::detail
