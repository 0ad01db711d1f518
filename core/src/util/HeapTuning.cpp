#include "util/HeapTuning.hpp"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace kvscope::detail {

namespace {

constexpr int kThreshold = 1 << 30;  // 1 GiB: see HeapTuning.hpp

HeapTuning tune() {
  HeapTuning t;
  if (const char* keep = std::getenv("KVSCOPE_HEAP"); keep && std::strcmp(keep, "keep") == 0) {
    t.why = "glibc's defaults kept (KVSCOPE_HEAP=keep)";
    return t;
  }
  for (const char* own : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
    if (std::getenv(own)) {
      t.why = std::string("glibc's settings from ") + own + " kept";
      return t;
    }
  t.applied = mallopt(M_MMAP_THRESHOLD, kThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kThreshold) == 1;
  t.why = t.applied ? "blocks up to 1 GiB reused from the heap (mmap and trim thresholds)"
                    : "mallopt refused the thresholds (another allocator?)";
  return t;
}

// Before main, before any thread allocates.
[[maybe_unused]] const HeapTuning& kTunedBeforeMain = HeapTuning::atStartup();

}  // namespace

const HeapTuning& HeapTuning::atStartup() {
  static const HeapTuning tuning = tune();
  return tuning;
}

}  // namespace kvscope::detail
