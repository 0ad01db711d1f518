// The checkpoint fingerprint cache (issue 11): a cached value equals the recomputed full
// hash, and changing a file (content, or only its mtime) invalidates the entry.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ScratchCheckpoint.hpp"
#include "kvscope/Checkpoint.hpp"
#include "model/FingerprintCache.hpp"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

class FingerprintCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cacheDir_ = test::scratchDir("fingerprint-cache", "cache");
    const char* old = std::getenv("KVSCOPE_CACHE_DIR");
    if (old) saved_ = old;
    ::setenv("KVSCOPE_CACHE_DIR", cacheDir_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) ::unsetenv("KVSCOPE_CACHE_DIR");
    else ::setenv("KVSCOPE_CACHE_DIR", saved_.c_str(), 1);
  }
  static std::string recomputed(const Checkpoint& ck) {
    std::vector<std::string> paths{ck.directory() + "/config.json"};
    for (const auto& f : ck.weightFiles()) paths.push_back(f);
    return detail::computeFingerprint(paths);
  }
  size_t entries() const {
    size_t n = 0;
    if (fs::exists(cacheDir_ / "fingerprints"))
      for (const auto& e : fs::directory_iterator(cacheDir_ / "fingerprints"))
        n += e.path().extension() == ".json";
    return n;
  }
  fs::path cacheDir_;
  std::string saved_;
};

TEST_F(FingerprintCacheTest, CachedValueEqualsTheRecomputedHash) {
  CheckpointSpec spec = test::smallSpec();
  spec.numShards = 2;
  const auto dir = test::writeScratchCheckpoint("fingerprint-cache", "two-shards", spec);
  std::string first;
  {
    auto ck = Checkpoint::open(dir);
    first = ck->fingerprint();
    EXPECT_EQ(first, recomputed(*ck));
  }
  EXPECT_EQ(entries(), 1u);
  auto again = Checkpoint::open(dir);
  EXPECT_TRUE(again->fingerprintReady());  // from the cache: nothing to wait for
  EXPECT_EQ(again->fingerprint(), first);
  EXPECT_EQ(again->fingerprint(), recomputed(*again));
}

TEST_F(FingerprintCacheTest, ChangingAFileInvalidatesTheEntry) {
  const auto dir = test::writeScratchCheckpoint("fingerprint-cache", "changed", test::smallSpec());
  const std::string before = Checkpoint::open(dir)->fingerprint();
  // New content (same names): a fine-tune of the same base.
  test::rewriteTensors(dir, [](const std::string& name, FloatTensor& t) {
    if (name == "model.norm.weight") t.data[0] += 1.0f;
    return true;
  });
  auto ck = Checkpoint::open(dir);
  const std::string after = ck->fingerprint();
  EXPECT_NE(after, before);
  EXPECT_EQ(after, recomputed(*ck));
  // A cache entry doctored to a wrong value is believed only while the stamps match:
  // touching the file (mtime) makes the next open recompute.
  const auto file = ck->weightFiles().at(0);
  std::vector<detail::FileStamp> stamps{detail::stampOf(dir + "/config.json"), detail::stampOf(file)};
  detail::storeFingerprint(ck->directory(), stamps, std::string(64, 'a'));
  EXPECT_EQ(Checkpoint::open(dir)->fingerprint(), std::string(64, 'a'));
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  struct utimbuf times {st.st_atime, st.st_mtime + 10};
  ASSERT_EQ(::utime(file.c_str(), &times), 0);
  EXPECT_EQ(Checkpoint::open(dir)->fingerprint(), after);
}

TEST_F(FingerprintCacheTest, UnwritableCacheStillGivesTheHash) {
  ::setenv("KVSCOPE_CACHE_DIR", "/proc/kvscope-no-such-cache", 1);
  const auto dir = test::writeScratchCheckpoint("fingerprint-cache", "nocache", test::smallSpec());
  auto ck = Checkpoint::open(dir);
  EXPECT_EQ(ck->fingerprint(), recomputed(*ck));
}

}  // namespace
}  // namespace kvscope
