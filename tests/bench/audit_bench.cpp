// Audit cost against plain cached generation on a GPT-2-small-shaped checkpoint (random
// weights, 12 layers, 768 wide; `kvscope-cli make-demo --preset gpt2-small` writes the
// same): 128-token prompt, 128 new tokens. Prints times and ratios measured in one run.
//   kvscope_audit_bench [MODEL_DIR] [--prompt N] [--new N] [--repeat N] [--per-step]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kvscope/Auditor.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
using Clock = std::chrono::steady_clock;

namespace {
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

template <typename F>
double best(int repeat, F&& f) {
  double out = 1e30;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    f();
    out = std::min(out, seconds(t0, Clock::now()));
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t promptLen = 128, newTokens = 128;
  int repeat = 2;
  bool perStep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prompt") && i + 1 < argc) promptLen = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--new") && i + 1 < argc) newTokens = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--per-step")) perStep = true;
    else dir = argv[i];
  }
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / "kvscope-bench-gpt2-small").string();
    if (!std::filesystem::exists(dir + "/config.json")) {
      std::printf("writing the gpt2-small-shaped checkpoint to %s\n", dir.c_str());
      CheckpointWriter(CheckpointSpec::gpt2Small()).write(dir, true);
    }
  }
  auto model = Model::load(dir);
  const auto& c = model->config();
  std::printf("model %s: %s, %lld layers, hidden %lld, vocab %lld; prompt %lld, new %lld, best of %d\n", dir.c_str(),
              architectureName(c.architecture).c_str(), static_cast<long long>(c.numLayers), static_cast<long long>(c.hiddenSize),
              static_cast<long long>(c.vocabSize), static_cast<long long>(promptLen), static_cast<long long>(newTokens), repeat);
  RequestSpec req;
  for (int64_t i = 0; i < promptLen; ++i) req.promptIds.push_back((i * 7919 + 13) % c.vocabSize);
  req.maxNewTokens = newTokens;
  req.stopAtEos = false;

  EngineOptions plain;
  plain.recordCache = false;
  const double tPlain = best(repeat, [&] { Engine(model).run({req}, plain); });
  Trace trace;
  const double tRecorded = best(repeat, [&] { trace = Engine(model).run({req}, {}); });
  AuditResult result;
  const double tAudit = best(repeat, [&] { result = Auditor::audit(*model, trace); });
  std::vector<int64_t> stream = req.promptIds;
  stream.insert(stream.end(), trace.requests[0].generated.begin(), trace.requests[0].generated.end());
  stream.pop_back();
  const double tTeacher = best(repeat, [&] { model->reference(stream); });
  std::printf("plain cached generation        %8.3f s\n", tPlain);
  std::printf("recorded cached generation     %8.3f s  (recording overhead %.2fx)\n", tRecorded, tRecorded / tPlain);
  std::printf("audit of the recorded trace    %8.3f s  (verdict %s)\n", tAudit, result.report.verdict.c_str());
  std::printf("  teacher-forced reference     %8.3f s  (one uncached pass over %zu tokens)\n", tTeacher, stream.size());
  std::printf("ratio audit / plain generation           %.3f  (target <= 1.3)\n", tAudit / tPlain);
  std::printf("ratio (record + audit) / plain generation %.3f\n", (tRecorded + tAudit) / tPlain);
  if (perStep) {
    AuditOptions o;
    o.perStepReference = true;
    const double tPerStep = best(1, [&] { Auditor::audit(*model, trace, o); });
    std::printf("audit with per-step reference  %8.3f s  (per-step / teacher-forced audit %.2fx)\n", tPerStep, tPerStep / tAudit);
  }
  size_t raw = 0;
  for (const auto& s : trace.steps) {
    raw += s.logits.data.size() * 4;
    for (const auto& l : s.layers) raw += (l.keys.data.size() + l.values.data.size()) * 4;
  }
  const auto path = (std::filesystem::temp_directory_path() / "kvscope-bench.kvtrace").string();
  TraceFile::write(trace, path, true);
  const auto size = std::filesystem::file_size(path);
  std::printf("trace file %zu bytes vs raw appended K/V + logits %zu bytes: ratio %.4f (target <= 1.1)\n",
              static_cast<size_t>(size), raw, static_cast<double>(size) / static_cast<double>(raw));
  return 0;
}
