// A run that cannot fit in memory is refused with a sentence naming the figures and what
// to do (issue 11), never a LibTorch stack dump or a kill. kvscope-cli runs under an
// address-space limit (RLIMIT_AS, like `prlimit --as=`) set in the child before exec.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <string>
#include <vector>

#include "CliRunner.hpp"
#include "ScratchCheckpoint.hpp"
#include "kvscope/MemoryBudget.hpp"
#include "kvscope/Model.hpp"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

test::CliRun runWithAddressLimit(uint64_t limit, const std::vector<std::string>& args) {
  const fs::path base = fs::temp_directory_path() / ("kvscope-memlimit-" + std::to_string(::getpid()));
  const std::string outPath = base.string() + ".out", errPath = base.string() + ".err";
  std::vector<std::string> argv{KVSCOPE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  test::CliRun r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct rlimit rl {limit, limit};
    ::setrlimit(RLIMIT_AS, &rl);
    const int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = test::readWholeFile(outPath);
  r.err = test::readWholeFile(errPath);
  std::error_code ec;
  fs::remove(outPath, ec);
  fs::remove(errPath, ec);
  return r;
}

std::string ids(int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string((i * 31 + 7) % 256);
  return s;
}

// One layer, tiny width, a long context, a vocabulary of `vocab` entries.
std::string longContextModel(const std::string& name, int64_t vocab) {
  CheckpointSpec s = test::smallSpec();
  s.numLayers = 1;
  s.vocabSize = vocab;
  s.maxPositions = 8192;
  return test::writeScratchCheckpoint("memory-limit", name, s);
}

// A 6000-token reference attends in query chunks (AttentionContext::queryRows), so its
// 6000 x 6000 scores are never whole (2 GB once) and it needs a few hundred MB; a 200-token
// one a few MB.
std::string longContextModel() { return longContextModel("long-context", 4096); }

// With a 65536-entry vocabulary a 6000-token reference keeps a logits row per position
// (1.6 GB of them), which no chunking of the attention changes.
std::string wideVocabularyModel() { return longContextModel("wide-vocabulary", 65536); }

constexpr uint64_t kLimit = 1500ull << 20;  // 1.5 GiB of address space

// AddressSanitizer reserves terabytes of shadow address space when a process starts, so an
// ASan-built kvscope-cli cannot start under any RLIMIT_AS a test could set (the sanitizer
// job builds the CLI that way); the uninstrumented build runs these tests.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCliUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCliUnderAddressSanitizer = true;
#else
constexpr bool kCliUnderAddressSanitizer = false;
#endif
#else
constexpr bool kCliUnderAddressSanitizer = false;
#endif
#define SKIP_UNDER_ADDRESS_SANITIZER()                                                       \
  if (kCliUnderAddressSanitizer) GTEST_SKIP() << "ASan cannot start under an address-space " \
                                                 "limit (it reserves its shadow memory)"

TEST(MemoryLimit, ALongReferenceAttendsInQueryChunksWithinTheLimit) {
  SKIP_UNDER_ADDRESS_SANITIZER();
  // Whole, its attention scores alone were 2 GB: refused under this limit before.
  auto r = runWithAddressLimit(kLimit, {"reference", "--model", longContextModel(), "--ids", ids(6000)});
  EXPECT_TRUE(r.exitedWith(0)) << r;
}

TEST(MemoryLimit, ReferenceTooLongForTheLimitIsRefusedWithTheFigures) {
  SKIP_UNDER_ADDRESS_SANITIZER();
  const auto dir = wideVocabularyModel();
  auto r = runWithAddressLimit(kLimit, {"reference", "--model", dir, "--ids", ids(6000)});
  ASSERT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("RLIMIT_AS"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trace+trace"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("frame #"), std::string::npos) << r.err;  // no LibTorch backtrace
  // The same limit is enough for a short prompt.
  auto ok = runWithAddressLimit(kLimit, {"reference", "--model", dir, "--ids", ids(200)});
  EXPECT_TRUE(ok.exitedWith(0)) << ok;
}

TEST(MemoryLimit, GenerationWithSnapshotsTooLargeIsRefused) {
  SKIP_UNDER_ADDRESS_SANITIZER();
  const auto dir = longContextModel();
  auto r = runWithAddressLimit(kLimit, {"generate", "--model", dir, "--ids", ids(100),
                                        "--max-new", "7000", "--snapshots"});
  ASSERT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--snapshots"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("frame #"), std::string::npos) << r.err;
}

TEST(MemoryLimit, EstimateCoversTheReferencePass) {
  auto model = Model::load(wideVocabularyModel());
  const auto small = model->referenceMemory(200), large = model->referenceMemory(6000);
  EXPECT_GT(large.total(), 3000ull << 20);  // the 6000 logits rows of 65536, in the pass and kept
  EXPECT_LT(small.total(), 160ull << 20);
  // Attention in query chunks: the 6000^2 scores are counted one chunk at a time.
  const auto chunked = Model::load(longContextModel())->referenceMemory(6000);
  EXPECT_LT(chunked.activations, 700ull << 20);
  EXPECT_GT(small.weights, 0u);
  MemoryAvailable tight;
  tight.ram = 100ull << 20;
  tight.ramSource = "MemAvailable";
  tight.addressSpace = UINT64_MAX;
  try {
    large.check(tight, "the test pass", "do something else");
    FAIL() << "expected a refusal";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the test pass needs about"), std::string::npos) << m;
    EXPECT_NE(m.find("105 MB is available (MemAvailable)"), std::string::npos) << m;
    EXPECT_NE(m.find("do something else"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(small.check(MemoryAvailable::now(), "the small pass", ""));
}

TEST(MemoryLimit, WeightsLargerThanTheMemoryStreamFromTheDiskWhatMustBeResidentIsChecked) {
  MemoryNeed need;  // a 14B bf16 model's pass: 29.5 GB of weights, its output head the largest
  need.weights = 29500ull * 1000 * 1000;
  need.weightsWorkingSet = 1556ull * 1000 * 1000;
  need.activations = 2000ull * 1000 * 1000;
  need.kvCache = 1000ull * 1000 * 1000;
  MemoryAvailable desk;  // a 24 GB machine
  desk.ram = 22000ull * 1000 * 1000;
  desk.ramSource = "MemAvailable";
  desk.addressSpace = UINT64_MAX;
  // Not refused: the run's own 3 GB and one tensor fit; the weights are read as they are used.
  const std::string note = need.check(desk, "the 14B pass", "advice");
  EXPECT_NE(note.find("the 14B pass: the weights (29.50 GB) do not all fit in the 18.70 GB"), std::string::npos)
      << note;
  EXPECT_NE(note.find("10.80 GB to all 29.50 GB"), std::string::npos) << note;  // 29.5 - 18.7 at least
  // Everything fits: nothing to say.
  MemoryAvailable large = desk;
  large.ram = 64000ull * 1000 * 1000;
  EXPECT_EQ(need.check(large, "the 14B pass", "advice"), "");
  // What must be resident does not fit: refused with the figures, the weights named as mapped.
  MemoryAvailable small = desk;
  small.ram = 4000ull * 1000 * 1000;
  try {
    need.check(small, "the 14B pass", "use a machine with more memory");
    FAIL() << "expected a refusal";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the 14B pass needs about 4.86 GB of memory resident"), std::string::npos) << m;
    EXPECT_NE(m.find("the largest weight tensor 1.56 GB"), std::string::npos) << m;
    EXPECT_NE(m.find("29.50 GB mapped"), std::string::npos) << m;
    EXPECT_NE(m.find("only 4.00 GB is available (MemAvailable)"), std::string::npos) << m;
    EXPECT_NE(m.find("use a machine with more memory"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kvscope
