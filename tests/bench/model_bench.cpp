// Real-size model costs (issue 11) on random-weight checkpoints of real shapes, written by
// `kvscope-cli make-demo --preset llama-3.2-1b|llama-3.1-8b DIR`. Prints the figures and
// the ratios measured in this one run:
//   - the machine's streaming-read bandwidth (1 and 2 threads) and the time to read the
//     weight files once (page cache warm);
//   - kvscope-cli generate --max-new 1 run twice: time to first token (the second run has
//     the fingerprint cached) and peak RSS, against the file-read time;
//   - decode time per token over steps 1-8, 9-16, 17-32 (in process, 1 and 2 threads),
//     against the bandwidth floor (weight bytes read per token / bandwidth);
//   - the same from the disk (the files' pages dropped first), and LibTorch's start-up alone;
//   - with --big DIR: kvscope-cli reference of a 256-token prompt, then generate 32 steps
//     after it with a trace and audit that trace against the model: times and peak RSS.
//   kvscope_model_bench --cli PATH/kvscope-cli --model DIR [--big DIR] [--new N]
// GCC 12 reports its own AVX-512 reduction intrinsics as reading uninitialised values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <fcntl.h>
#include <immintrin.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Tokenizer.hpp"

extern char** environ;

using namespace kvscope;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One reader's pass over [p, p + n): 64-byte loads where the CPU has them (the decode kernel
// reads its weights so; a scalar loop would understate what memory delivers), summed so the
// loads cannot be dropped.
__attribute__((target("avx512f"))) uint64_t sumAvx512(const uint64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
  }
  uint64_t s =
      _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

uint64_t sumScalar(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

// Streaming read of a buffer much larger than the caches, `threads` readers.
double streamingReadGBs(int threads) {
  const size_t bytes = size_t{2} << 30;
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); i += 512) buf[i] = i;  // fault the pages in
  std::fill(buf.begin(), buf.end(), 1);
  double best = 1e30;
  std::atomic<uint64_t> sink{0};
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t n = buf.size() / static_cast<size_t>(threads);
        const uint64_t* p = buf.data() + n * static_cast<size_t>(t);
        sink += __builtin_cpu_supports("avx512f") ? sumAvx512(p, n) : sumScalar(p, n);
      });
    }
    for (auto& th : pool) th.join();
    best = std::min(best, seconds(t0, Clock::now()));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

// Reads every weight file once with read(2) (1 MiB at a time); seconds.
double readFilesOnce(const std::vector<std::string>& files, uint64_t* total) {
  std::vector<char> buf(1 << 20);
  *total = 0;
  auto t0 = Clock::now();
  for (const auto& f : files) {
    int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) *total += static_cast<uint64_t>(n);
    ::close(fd);
  }
  return seconds(t0, Clock::now());
}

// Drops the files' pages from the page cache (POSIX_FADV_DONTNEED; clean pages of files
// nobody maps), so the next read comes from the disk: a researcher's first run of the day.
void dropFromPageCache(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct ChildRun {
  int exitCode = -1;
  double seconds = 0;
  double peakRssGB = 0;
};

ChildRun runChild(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  ChildRun r;
  pid_t pid = 0;
  auto t0 = Clock::now();
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return r;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  struct rusage ru {};
  while (::wait4(pid, &status, 0, &ru) < 0) {
  }
  r.seconds = seconds(t0, Clock::now());
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.peakRssGB = static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e9;
  return r;
}

std::vector<int64_t> promptIds(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((i * 7919 + 13) % std::min<int64_t>(vocab, 250));
  return ids;
}

std::string idList(const std::vector<int64_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// Bytes of weights one decode step reads: every matrix except the input embedding (only
// the fed token's row is read) unless it doubles as the tied output head.
uint64_t bytesPerToken(const Checkpoint& ck) {
  uint64_t total = 0;
  const bool tied = !ck.contains("lm_head.weight");
  for (const auto& n : ck.tensorNames()) {
    const auto& e = ck.entry(n);
    if (!tied && (n == "model.embed_tokens.weight" || n == "transformer.wte.weight")) continue;
    if (n == "transformer.wpe.weight") continue;
    total += e.end - e.begin;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cli, dir, big;
  int64_t newTokens = 33;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cli") && i + 1 < argc) cli = argv[++i];
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--big") && i + 1 < argc) big = argv[++i];
    else if (!std::strcmp(argv[i], "--new") && i + 1 < argc) newTokens = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s --cli KVSCOPE_CLI --model DIR [--big DIR] [--new N]\n", argv[0]);
      return 2;
    }
  }
  if (dir.empty() && big.empty()) {
    std::fprintf(stderr, "give --model DIR (make-demo --preset llama-3.2-1b DIR)\n");
    return 2;
  }
  const double bw1 = streamingReadGBs(1), bw2 = streamingReadGBs(2);
  std::printf("streaming read: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n", bw1, bw2);

  if (!dir.empty()) {
    auto ck = Checkpoint::open(dir);
    uint64_t fileBytes = 0;
    readFilesOnce(ck->weightFiles(), &fileBytes);  // warm the page cache
    const double readS = readFilesOnce(ck->weightFiles(), &fileBytes);
    std::printf("\n%s: weight files %.2f GB, read once in %.2f s (%.1f GB/s, page cache)\n",
                dir.c_str(), static_cast<double>(fileBytes) / 1e9, readS,
                static_cast<double>(fileBytes) / readS / 1e9);
    dropFromPageCache(ck->weightFiles());
    const double coldReadS = readFilesOnce(ck->weightFiles(), &fileBytes);
    std::printf("  read once from the disk (pages dropped first): %.2f s (%.1f GB/s)\n", coldReadS,
                static_cast<double>(fileBytes) / coldReadS / 1e9);
    if (!cli.empty()) {
      const auto ids = idList(promptIds(8, ck->config().vocabSize));
      const std::vector<std::string> first = {cli,     "generate", "--model",   dir,
                                              "--ids", ids,        "--max-new", "1"};
      const ChildRun start = runChild({cli, "--help"});
      std::printf(
          "  process start-up alone (kvscope-cli --help: loading LibTorch): %.2f s = %.2fx the "
          "file read\n",
          start.seconds, start.seconds / readS);
      auto r = runChild(first);  // the fingerprint is cached from here on
      std::printf("  generate --max-new 1, first run: exit %d, %.2f s to first token\n", r.exitCode,
                  r.seconds);
      for (int run = 2; run <= 3; ++run) {
        r = runChild(first);
        std::printf(
            "  generate --max-new 1, run %d (fingerprint cached, page cache warm): exit %d, %.2f s "
            "to first token = %.2fx the file read, %.2fx without the start-up; peak RSS %.2f GB "
            "(%.2fx the files)\n",
            run, r.exitCode, r.seconds, r.seconds / readS, (r.seconds - start.seconds) / readS,
            r.peakRssGB, r.peakRssGB * 1e9 / static_cast<double>(fileBytes));
      }
      dropFromPageCache(ck->weightFiles());
      r = runChild(first);
      std::printf(
          "  generate --max-new 1, weights read from the disk (fingerprint cached): exit %d, %.2f "
          "s "
          "to first token = %.2fx reading the files from the disk\n",
          r.exitCode, r.seconds, r.seconds / coldReadS);
    }
    // In process, as the GUI pays it (LibTorch is loaded already): open the checkpoint, read
    // the tokenizer, prefill the prompt and choose the first token.
    for (int run = 1; run <= 2; ++run) {
      auto t0 = Clock::now();
      auto model = Model::load(dir);
      auto t1 = Clock::now();
      auto tokenizer = Tokenizer::loadFromDirectory(dir);
      auto t2 = Clock::now();
      RequestSpec req;
      req.promptIds = tokenizer->encode("The quick brown fox jumps over the lazy", true).ids;
      req.maxNewTokens = 1;
      Engine(model).run({req}, {});
      const double total = seconds(t0, Clock::now());
      std::printf(
          "  in process, run %d: open %.2f s + tokenizer %.2f s + encode, prefill %zu tokens and "
          "choose %.2f s = %.2f s to first token = %.2fx the file read\n",
          run, seconds(t0, t1), seconds(t1, t2), req.promptIds.size(), seconds(t2, Clock::now()),
          total, total / readS);
    }
    const uint64_t perToken = bytesPerToken(*ck);
    for (int threads : {1, 2}) {
      ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
      auto model = Model::load(dir);
      RequestSpec req;
      req.promptIds = promptIds(8, model->config().vocabSize);
      req.maxNewTokens = newTokens;
      req.stopAtEos = false;
      EngineOptions opts;
      std::vector<Clock::time_point> ticks;
      opts.progress = [&](double) { ticks.push_back(Clock::now()); };
      Engine engine(model);
      auto t0 = Clock::now();
      engine.run({req}, opts);
      ticks.insert(ticks.begin(), t0);
      const double bw = threads == 1 ? bw1 : bw2;
      const double floor = static_cast<double>(perToken) / (bw * 1e9);
      std::printf("  decode, %d thread(s): prefill %.3f s; floor %.3f s/token (%.2f GB / %.1f GB/s)\n",
                  threads, seconds(ticks[0], ticks[1]), floor, static_cast<double>(perToken) / 1e9, bw);
      for (auto [a, b] : {std::pair<size_t, size_t>{1, 9}, {9, 17}, {17, 33}}) {
        if (b >= ticks.size()) break;
        const double per = seconds(ticks[a], ticks[b]) / static_cast<double>(b - a);
        std::printf("    steps %zu-%zu: %.3f s/token = %.0f%% of the bandwidth floor's speed\n", a,
                    b - 1, per, 100.0 * floor / per);
      }
    }
  }
  if (!big.empty() && !cli.empty()) {
    auto ck = Checkpoint::open(big);
    const auto ids = idList(promptIds(256, ck->config().vocabSize));
    auto r = runChild({cli, "reference", "--model", big, "--ids", ids});
    std::printf("\n%s: reference of a 256-token prompt: exit %d, %.1f s, peak RSS %.2f GB\n",
                big.c_str(), r.exitCode, r.seconds, r.peakRssGB);
    // A 32-step run recorded by the built-in engine, then audited against the model (one
    // uncached pass over the 288-token stream plus every step's checks).
    const auto trace = (std::filesystem::temp_directory_path() /
                        ("kvscope-bench-8b-" + std::to_string(::getpid()) + ".kvtrace"))
                           .string();
    r = runChild(
        {cli, "generate", "--model", big, "--ids", ids, "--max-new", "32", "--trace", trace});
    std::printf(
        "%s: generate 32 steps after the 256-token prompt: exit %d, %.1f s, peak RSS %.2f GB\n",
        big.c_str(), r.exitCode, r.seconds, r.peakRssGB);
    r = runChild({cli, "audit", "--model", big, "--trace", trace});
    std::printf("%s: audit of that 32-step trace: exit %d (0 = clean), %.1f s, peak RSS %.2f GB\n",
                big.c_str(), r.exitCode, r.seconds, r.peakRssGB);
    std::error_code ec;
    std::filesystem::remove(trace, ec);
  }
  return 0;
}
