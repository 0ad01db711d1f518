// Shared helpers for tests of one failure-matrix row: a trace written to a file and read
// back (as another engine's trace arrives), and the report's one finding of an id.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "ScratchDir.hpp"
#include "kvscope/AuditReport.hpp"
#include "kvscope/Trace.hpp"
#include "kvscope/TraceFile.hpp"

namespace kvscope::test {

/// `t` written to `name` in the scratch directory `dir` and read back.
inline Trace writtenAndRead(const Trace& t, const std::string& dir, const std::string& name) {
  const auto path = (scratchDir(dir) / name).string();
  std::filesystem::remove(path);
  TraceFile::write(t, path);
  return TraceFile::read(path);
}

/// The report's finding `id`, which must be its only one (a failure names what it got).
inline const Finding& onlyFinding(const AuditReport& rep, const std::string& id) {
  EXPECT_EQ(rep.findings.size(), 1u) << rep.toText();
  for (const auto& f : rep.findings)
    if (f.id == id) return f;
  ADD_FAILURE() << "no " << id << "\n" << rep.toText();
  static const Finding none;
  return none;
}

}  // namespace kvscope::test
