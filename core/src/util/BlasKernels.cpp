#include "util/BlasKernels.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace kvscope::detail {

CpuVectorSupport CpuVectorSupport::ofThisCpu() {
  // libgcc's checks include the OS side (XGETBV): a feature the kernel does not save is off.
  __builtin_cpu_init();
  CpuVectorSupport cpu;
  cpu.avx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return cpu;
}

std::string BlasKernels::replacementFor(const std::string& chosenAtLoad, CpuVectorSupport cpu) {
  // Prescott is what OpenBLAS falls back to for an Intel model it does not know; any other
  // choice means it recognised the CPU (or was told), and is kept.
  if (chosenAtLoad != "Prescott") return "";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2Fma) return "Haswell";
  return "";
}

namespace {
using CorenameFn = char* (*)();
using InitFn = void (*)();

std::string corename(CorenameFn fn) {
  const char* name = fn ? fn() : nullptr;
  return name ? name : "";
}
}  // namespace

BlasKernels BlasKernels::select() {
  BlasKernels out;
  auto getCorename = reinterpret_cast<CorenameFn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!getCorename) {
    out.reason = "the BLAS in this process is not OpenBLAS";
    return out;
  }
  out.chosenAtLoad = out.inUse = corename(getCorename);
  if (std::getenv("OPENBLAS_CORETYPE")) {
    out.reason = "set by OPENBLAS_CORETYPE";
    return out;
  }
  const char* keep = std::getenv("KVSCOPE_BLAS_KERNELS");
  if (keep && std::string(keep) == "keep") {
    out.reason = "kept as OpenBLAS chose them, as KVSCOPE_BLAS_KERNELS=keep asks";
    return out;
  }
  const std::string target = replacementFor(out.chosenAtLoad, CpuVectorSupport::ofThisCpu());
  if (target.empty()) {
    out.reason = "chosen by OpenBLAS for this CPU";
    return out;
  }
  // A DYNAMIC_ARCH build exports its selector; a build for one CPU has nothing to switch.
  auto quit = reinterpret_cast<InitFn>(::dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<InitFn>(::dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!quit || !init) {
    out.reason =
        "OpenBLAS fell back to its generic kernels and was built for one CPU, so they stay";
    return out;
  }
  // The selector reads OPENBLAS_CORETYPE; keeping it set makes processes this one starts
  // (the CLI started by the GUI's tests, say) load with the same kernels.
  ::setenv("OPENBLAS_CORETYPE", target.c_str(), 0);
  quit();
  init();
  out.inUse = corename(getCorename);
  out.reason = "OpenBLAS did not recognise this CPU and chose its generic " + out.chosenAtLoad +
               " kernels; switched to " + out.inUse + ", as the CPU has " +
               (target == "SkylakeX" ? "AVX-512" : "AVX2 and FMA");
  return out;
}

const BlasKernels& BlasKernels::atStartup() {
  static const BlasKernels selection = select();
  return selection;
}

namespace {
// Runs before main, once OpenBLAS (a shared library this one depends on) has initialised and
// before any thread could be inside a BLAS call.
[[maybe_unused]] const BlasKernels& kSelectedBeforeMain = BlasKernels::atStartup();
}  // namespace

}  // namespace kvscope::detail
