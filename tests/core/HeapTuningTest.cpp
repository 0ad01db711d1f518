// glibc's allocator tuned before main (util/HeapTuning): a long forward's large tensors are
// reused from the heap instead of mapped and zeroed afresh each time.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdlib>

#include "util/HeapTuning.hpp"

namespace {

using kvscope::detail::HeapTuning;

TEST(HeapTuning, LargeBlocksComeFromTheHeapUnlessTheUserTunedMallocThemselves) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan replaces the allocator";
#endif
  const HeapTuning& t = HeapTuning::atStartup();
  for (const char* own : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "KVSCOPE_HEAP"})
    if (std::getenv(own)) {
      EXPECT_FALSE(t.applied) << own;
      EXPECT_NE(t.why.find("kept"), std::string::npos) << t.why;
      return;
    }
  ASSERT_TRUE(t.applied) << t.why;
  // A query chunk's 64 MiB of scores: glibc's default (at most 32 MB) would map it.
  const size_t mappedBefore = mallinfo2().hblks;
  void* block = std::malloc(64u << 20);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mappedBefore);
  std::free(block);
}

}  // namespace
