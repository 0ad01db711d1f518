#include "kvscope/BuildInfo.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/BlasKernels.hpp"
#include "util/HeapTuning.hpp"

namespace kvscope {

namespace {
// Finds the BLAS shared object mapped into this process (LibTorch's Debian build links the
// generic libblas.so.3, which update-alternatives points at OpenBLAS or the reference BLAS).
std::string loadedBlasPath() {
  // Make sure the BLAS is loaded: a tiny matmul.
  (void)torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    auto base = std::filesystem::path(path).filename().string();
    if (base.rfind("libblas", 0) == 0 || base.rfind("libopenblas", 0) == 0 ||
        base.rfind("libmkl", 0) == 0 || base.rfind("libblis", 0) == 0) {
      std::error_code ec;
      auto canonical = std::filesystem::canonical(path, ec);
      return ec ? path : canonical.string();
    }
  }
  return "";
}
}  // namespace

BuildInfo BuildInfo::detect() {
  BuildInfo info;
  info.kvscopeVersion = KVSCOPE_VERSION;
  info.torchVersion = TORCH_VERSION;
  info.blasLibrary = loadedBlasPath();
  info.optimizedBlas = info.blasLibrary.find("openblas") != std::string::npos ||
                       info.blasLibrary.find("mkl") != std::string::npos ||
                       info.blasLibrary.find("blis") != std::string::npos;
  const auto& kernels = detail::BlasKernels::atStartup();
  info.blasKernels = kernels.inUse.empty() ? "" : kernels.inUse + ": " + kernels.reason;
  info.heap = detail::HeapTuning::atStartup().why;
  info.torchThreads = torch::get_num_threads();
  return info;
}

std::string BuildInfo::describe() const {
  std::ostringstream os;
  os << "kvscope " << kvscopeVersion << "\n"
     << "libtorch " << torchVersion << " (" << torchThreads << " threads)\n"
     << "BLAS: " << (blasLibrary.empty() ? "not found" : blasLibrary)
     << (optimizedBlas ? " (optimized)"
                       : " (reference BLAS: matrix products ~45x slower; "
                         "install libopenblas0-pthread)")
     << "\n";
  if (!blasKernels.empty()) os << "BLAS kernels: " << blasKernels << "\n";
  if (!heap.empty()) os << "heap: " << heap << "\n";
  return os.str();
}

}  // namespace kvscope
