// The audit: walks the six stages of the audit method in dependency order over a recorded
// run and reports the first divergence and the failure-matrix findings with evidence.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kvscope/AuditResult.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

struct AuditOptions {
  double toleranceScale = 1.0;      // multiplies the dtype tolerance
  bool perStepReference = false;    // cross-check: also recompute every step uncached
  std::function<void(double, const std::string&)> progress;  // fraction, what
  std::function<bool()> cancelled;  // polled between requests/steps; throws AuditCancelled
  int64_t tokenizerVocabSize = 0;   // stage 1: ids the tokenizer can produce (0 = unknown)
  // Model mode: the checkpoint of each later weights version a trace's steps name
  // (`weights_version` N), e.g. after another engine's weight update. Version 0 is the
  // audited model. Without one, a version is replayed from the trace's weight_update
  // events when it records them, and otherwise its steps are reported "not checked".
  std::map<uint64_t, std::string> weightsDirectories;
};

class Auditor {
 public:
  /// Modes 1 and 2: a model plus a cached trace (the built-in engine's or another
  /// engine's). The reference is one teacher-forced uncached pass over each request's own
  /// token stream (per weights version). The result holds the trace: move it in
  /// (std::move) where the caller is done with it, or it is copied.
  static AuditResult audit(const Model& model, Trace cached, const AuditOptions& options = {});
  /// Mode 3: two traces, no model: `reference` (e.g. an uncached run) against `cached`.
  /// The result holds a reference for every request the reference trace has.
  /// Both traces are kept in the result (moved in, or copied).
  static AuditResult auditTraces(Trace reference, Trace cached,
                                 const AuditOptions& options = {});
};

}  // namespace kvscope
