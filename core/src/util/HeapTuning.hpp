// glibc's allocator tuned for a long forward's tensors, before main.
//
// By default glibc serves an allocation above its mmap threshold (128 kB, rising to at most
// 32 MB as such blocks are freed) with a fresh mmap and returns it with munmap: every query
// chunk's 64 MiB of attention scores, every [tokens, intermediate] MLP temporary of a long
// prefill then costs page faults and the kernel zeroing each page again. Measured on the 1B
// shape, a 3,000-token reference: 79.6 s wall, 53.9 s of it system time, against 50.7 s and
// 6.5 s with the thresholds below (peak RSS 6.32 -> 6.48 GB). Blocks up to 1 GiB now come from
// the heap and are reused; larger ones (a long run's logits) are still mapped.
#pragma once

#include <string>

namespace kvscope::detail {

struct HeapTuning {
  bool applied = false;
  std::string why;  // what was done, or why not (the user's own malloc settings, KVSCOPE_HEAP=keep)

  /// Applied once, before main (util/HeapTuning.cpp); later calls return the first result.
  static const HeapTuning& atStartup();
};

}  // namespace kvscope::detail
