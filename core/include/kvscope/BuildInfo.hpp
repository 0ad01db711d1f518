// What this build of KV Scope runs on: versions and the BLAS library LibTorch got.
#pragma once

#include <string>

namespace kvscope {

struct BuildInfo {
  std::string kvscopeVersion;
  std::string torchVersion;
  std::string blasLibrary;   // resolved path of the loaded libblas, e.g. .../openblas-pthread/libblas.so.3
  bool optimizedBlas = false;  // false for the reference BLAS (~45x slower matrix products)
  std::string blasKernels;     // OpenBLAS's kernel set and why, e.g. "SkylakeX: OpenBLAS did not recognise ..."
  std::string heap;            // the allocator's tuning (util/HeapTuning), or why it was left alone
  int torchThreads = 0;

  static BuildInfo detect();
  std::string describe() const;  // multi-line, for --version
};

}  // namespace kvscope
