// Shared helpers for tests of one failure-matrix row: a family fixture run by the built-in
// engine with faults, a trace written to a file and read back (as another engine's trace
// arrives), the report's one finding of an id, the row's
// place among KV Scope's additions, and the accuracy table a suite prints at exit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "ScratchDir.hpp"
#include "kvscope/AuditReport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/Trace.hpp"
#include "kvscope/TraceFile.hpp"

namespace kvscope::test {

/// The checkpoint in `dir` run by the built-in engine with `faults`: one request of a
/// 10-token prompt (longer than the family fixtures' windows of 6), 8 tokens, EOS ignored.
inline Trace runWithFaults(const std::string& dir, const std::vector<std::string>& faults) {
  auto m = Model::load(dir);
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  s.maxNewTokens = 8;
  s.stopAtEos = false;
  EngineOptions o;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run({s}, o);
}

/// `t` written to `name` in the scratch directory `dir` and read back.
inline Trace writtenAndRead(const Trace& t, const std::string& dir, const std::string& name) {
  const auto path = (scratchDir(dir) / name).string();
  std::filesystem::remove(path);
  TraceFile::write(t, path);
  return TraceFile::read(path);
}

/// Every stage's check lines, one per line.
inline std::string allStageChecks(const AuditReport& rep) {
  std::string all;
  for (const auto& st : rep.stages)
    for (const auto& line : st.checks) all += line + "\n";
  return all;
}

/// A temporary report's finding would dangle (ASan's heap-use-after-free): name the report.
const Finding& onlyFinding(AuditReport&& rep, const std::string& id) = delete;

/// The report's finding `id`, which must be its only one (a failure names what it got).
inline const Finding& onlyFinding(const AuditReport& rep, const std::string& id) {
  EXPECT_EQ(rep.findings.size(), 1u) << rep.toText();
  for (const auto& f : rep.findings)
    if (f.id == id) return f;
  ADD_FAILURE() << "no " << id << "\n" << rep.toText();
  static const Finding none;
  return none;
}

/// Row `id` is KV Scope's addition, listed after `after`, and its fault is in --help.
inline void expectAdditionAfter(const char* id, const char* after) {
  const auto& row = FailureMatrix::row(id);
  EXPECT_EQ(row.origin, MatrixOrigin::KvScope) << id;
  const auto& rows = FailureMatrix::rows();
  const auto at = [&](const char* which) {
    return std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.id == which; });
  };
  EXPECT_LT(at(after), at(id)) << id << " is listed before " << after;
  EXPECT_NE(FaultSpec::helpText().find(id), std::string::npos) << id << " not in --help";
}

/// One run of a suite's accuracy table.
struct AccuracyRow {
  std::string name, mode, expected, got;
  int64_t step = -1, layer = -1;
  std::string detail;  // e.g. the finding's position
  bool pass = false;
};

/// The rows a suite adds, printed as one table when the test program ends.
class AccuracyTable : public ::testing::Environment {
 public:
  explicit AccuracyTable(std::string title) : title_(std::move(title)) {}
  /// Registers a table with gtest (call from a namespace-scope initializer).
  static AccuracyTable* registered(const std::string& title) {
    auto* t = new AccuracyTable(title);
    ::testing::AddGlobalTestEnvironment(t);
    return t;
  }
  void add(AccuracyRow row) { rows_.push_back(std::move(row)); }
  void TearDown() override {
    if (rows_.empty()) return;
    int passed = 0;
    std::cout << "\n"
              << title_ << "\n"
              << std::left << std::setw(34) << "case" << std::setw(13) << "mode" << std::setw(14)
              << "expected" << std::setw(14) << "got"
              << "step layer detail ok\n";
    for (const auto& r : rows_) {
      passed += r.pass ? 1 : 0;
      std::cout << std::setw(34) << r.name << std::setw(13) << r.mode << std::setw(14) << r.expected
                << std::setw(14) << r.got << std::setw(5) << r.step << std::setw(6) << r.layer
                << std::setw(7) << r.detail << (r.pass ? "yes" : "NO") << "\n";
    }
    std::cout << passed << " of " << rows_.size() << " right\n";
  }

 private:
  std::string title_;
  std::vector<AccuracyRow> rows_;
};

}  // namespace kvscope::test
