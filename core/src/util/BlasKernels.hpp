// Which kernels OpenBLAS runs LibTorch's float32 matrix products with. OpenBLAS (a
// DYNAMIC_ARCH build, as Debian ships it) picks them from the CPU model when it loads; a
// release that predates the CPU does not know the model and falls back to its generic SSE3
// "Prescott" kernels, whatever the CPU supports. Debian 12's OpenBLAS 0.3.21 does that on
// Emerald Rapids (family 6, model 207): float32 GEMM there runs at a quarter of the speed of
// its AVX-512 kernels (32 vs 130 GFLOP/s on one core, docs/performance.md).
//
// At start-up (before main, after OpenBLAS initialised itself) KV Scope re-selects them the
// way OPENBLAS_CORETYPE would have: SkylakeX where the CPU and OS support AVX-512 F/BW/DQ/VL,
// Haswell where they support AVX2 and FMA. It leaves the choice alone when OPENBLAS_CORETYPE
// is set, when KVSCOPE_BLAS_KERNELS=keep, when the BLAS is not OpenBLAS, and when OpenBLAS
// recognised the CPU.
#pragma once

#include <string>

namespace kvscope::detail {

struct CpuVectorSupport {
  bool avx2Fma = false;
  bool avx512 = false;  // F, BW, DQ and VL
  static CpuVectorSupport ofThisCpu();
};

class BlasKernels {
 public:
  // The kernel set to switch to, or "" to keep the one OpenBLAS chose at load.
  static std::string replacementFor(const std::string& chosenAtLoad, CpuVectorSupport cpu);

  // What the start-up selection found and did (it runs once per process).
  static const BlasKernels& atStartup();

  std::string chosenAtLoad;  // OpenBLAS's own choice, "" when the BLAS is not OpenBLAS
  std::string inUse;         // the kernels in use now
  std::string reason;        // why they were switched or kept, one sentence

 private:
  static BlasKernels select();
};

}  // namespace kvscope::detail
