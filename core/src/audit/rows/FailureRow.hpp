// One row of the failure matrix as a module (core/src/audit/rows/<id>/): its matrix entry, the
// faults that reproduce it, and the detectors that claim its findings. The walk
// (audit/Diagnosis.cpp), the stages and the views ask every row through this interface, in
// the order of RowRegistry.cpp, and know no row by name.
//
// A row overrides only the questions it answers; every default answers "not mine".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/AuditStages.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/Inspection.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {
struct PolicyReplayReport;
}

namespace kvscope::detail {

class DiagnosisContext;
class FindingBuilder;
class Tolerance;
struct StepAnalysis;

using Evidence = std::map<std::string, double>;
using RequestAnalyses = std::map<int64_t, std::vector<StepAnalysis>>;

/// The parameters of a fault that changes a computation from a step on, at one layer or at
/// every layer, for one request or all (FaultPlan's from-step-at-layer faults).
inline std::vector<FaultParameter> fromStepAtLayerParameters() {
  return {{"step", "first step affected (0 = prefill)", "0"},
          {"layer", "layer affected (-1 = all)", "-1"},
          {"request", "request affected (-1 = all)", "-1"}};
}

/// What a row is, as the user reads it (the matrix, docs/audit.md, --help).
struct RowSpec {
  const char* id = "";      // the stable finding id (kvscope::finding)
  std::string observation;  // what the audit saw
  std::string firstCheck;   // where to look first
  MatrixOrigin origin = MatrixOrigin::KvScope;
  /// Its place in the matrix as listed: the method's rows by their number in the method's
  /// table (1-8), KV Scope's from 100 on in the order they were added.
  int listing = 0;
  /// The audit stage a finding of this row fails (Reference .. Stopping).
  AuditStage stage = AuditStage::Positions;
  /// The findings this row can cause: one of them at the same request is linked to it
  /// (caused_by) when explainConsequence() says the evidence agrees.
  std::vector<const char*> causes;
  /// Public reports of the bug the row stands for (docs/audit.md cites them).
  std::vector<std::string> citations;
  /// The built-in engine's faults that reproduce it (the injection stays in core/src/engine).
  std::vector<FaultInfo> faults;
  /// The stage's summary when only this row fails it (empty: the stage's own words).
  std::string stageFailSummary;
  /// A finding of this row makes the verdict divergent and fails its stage (drift does not).
  bool divergent = true;
};

/// The policy stage's replay of one request (logits held fixed), handed to each row.
struct PolicyRequestReplay {
  const Trace& trace;
  const TraceRequest& request;
  const PolicyReplayReport& replay;
  const std::vector<const TraceStep*>& order;  // the steps replayed, in order
  bool replayable;                             // KV Scope's own generator: draws replayable
};

/// What the policy stage collects from the rows it asks.
struct PolicyStageState {
  StageResult& stage;
  std::vector<Finding>& findings;
  int anomalies = 0;
  bool drawsUnchecked = false;  // another engine's generator: no replay
};

/// A stage's checks, asked of every row once the findings are known.
struct StageCheckInput {
  AuditStage stage;
  const Trace& trace;
  const RequestAnalyses& analyses;
  const Tolerance& tolerance;
  bool fired;  // the row has a finding in this audit
  const FindingBuilder& findings;  // every finding so far (a row's own evidence words its lines)
  const std::map<int64_t, const RequestReference*>& references;  // request -> latest reference
  const ModelConfig* config;  // the checkpoint's (nullptr in trace+trace mode)
};

/// Trace+trace mode: the audited run against a reference run of the same requests.
struct PairedRuns {
  const Trace& audited;
  const Trace& reference;
  const RequestAnalyses& analyses;
};

class FailureRow {
 public:
  virtual ~FailureRow() = default;
  virtual const RowSpec& spec() const = 0;
  const char* id() const { return spec().id; }

  // --- The diagnosis walk (audit/Diagnosis.cpp), per request and step. ---
  /// A step with structural evidence (StepAnalysis::structural()): every row is asked.
  virtual void structural(DiagnosisContext&, int64_t /*request*/, const StepAnalysis&) const {}
  /// The request's first divergence with a mismatching record that no structural evidence
  /// explains: the first row that explains the values claims it (returns true).
  virtual bool explainRecords(DiagnosisContext&, int64_t, const StepAnalysis&,
                              const RequestReference& /*own*/, const Evidence&) const {
    return false;
  }
  /// The request's first divergence where a recurrent layer's recorded state is beyond
  /// tolerance below every wrong K/V record (StepAnalysis::stateFirst()): asked before the
  /// records, the first row that explains the state claims it.
  virtual bool explainState(DiagnosisContext&, int64_t, const StepAnalysis&, const RequestReference& /*own*/,
                            const Evidence&) const {
    return false;
  }
  /// Asked when no row explained the records: the nearest row, with a lower confidence.
  virtual bool nearestRecords(DiagnosisContext&, int64_t, const StepAnalysis&,
                              const RequestReference&, const Evidence&) const {
    return false;
  }
  /// The first divergence where every record matches but the logits do not.
  virtual bool explainLogits(DiagnosisContext&, int64_t, const StepAnalysis&,
                             const Evidence&) const {
    return false;
  }
  virtual bool nearestLogits(DiagnosisContext&, int64_t, const StepAnalysis&,
                             const Evidence&) const {
    return false;
  }
  /// A step before the request diverged (nothing structural, nothing beyond tolerance).
  virtual void beforeDivergence(DiagnosisContext&, int64_t, const StepAnalysis&) const {}
  /// `consequence` (a finding of one of spec().causes, at `a`, of a request this row already
  /// has a finding for): true when this row's evidence explains it; then add to its
  /// explanation and evidence.
  virtual bool explainConsequence(const StepAnalysis&, Finding& /*consequence*/) const {
    return false;
  }

  // --- Checks outside the walk. ---
  /// Trace+trace mode, before the walk: findings against the paired run, the numerics
  /// stage's lines, and requests whose near-tie flips are explained (not drift).
  virtual std::vector<std::string> paired(const PairedRuns&, FindingBuilder&,
                                          std::set<int64_t>& /*explained*/) const {
    return {};
  }
  /// Stage 5, per request, with the replay of its recorded policy.
  virtual void policy(const PolicyRequestReplay&, PolicyStageState&) const {}
  /// Stage 5 in trace+trace mode, after every request was replayed.
  virtual void pairedPolicy(const PairedRuns&, PolicyStageState&) const {}
  /// Stage 6, per request: a finding about how the request ended; `line` is the request's
  /// stopping line (add to it), `ok` whether it ended rightly.
  virtual std::optional<Finding> stopping(const Trace&, const TraceRequest&, std::ostringstream& /*line*/,
                                          bool& /*ok*/) const {
    return std::nullopt;
  }
  /// The lines this row adds to stage `in.stage` (ok / FAIL / not checked).
  virtual void stageChecks(const StageCheckInput&, std::vector<std::string>& /*checks*/) const {}

  // --- Presentation. ---
  /// Fills a finding's matrix row and first check (the layers it names, where it has any).
  virtual void describe(Finding& f) const;
  /// The timeline marker of a finding of this row (none: nothing to mark).
  virtual std::optional<TimelineMarker> marker(const Finding&) const { return std::nullopt; }
};

}  // namespace kvscope::detail
