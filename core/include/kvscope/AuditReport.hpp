// The audit's result as a value: stages in dependency order, the first divergence, the
// findings mapped onto the failure matrix with their evidence, and per-step numerics.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "kvscope/AuditStages.hpp"
#include "kvscope/FaultSpec.hpp"

namespace kvscope {

enum class StageStatus { Pass, Fail, Skipped, NotRun };
std::string stageStatusName(StageStatus s);  // pass | fail | skipped | not_run

struct StageResult {
  int number = 0;                // 1..6
  std::string id;                // reference | cache | positions | numerics | policy | stopping
  std::string title;             // "Uncached reference", ...
  StageStatus status = StageStatus::NotRun;
  std::string summary;           // one line a person can read
  std::vector<std::string> checks;  // what was checked, one line each ("ok: ..." / "FAIL: ...")
  bool operator==(const StageResult& o) const;
  /// The stage's number, id and title from the catalogue, not run yet.
  static StageResult of(AuditStage stage);
};

/// Stable finding ids (JSON): reference, position, wrong_layer, duplicate_append,
/// cross_request, stale_cache, tie_rule, rng_order, context_limit, drift.
struct Finding {
  std::string id;
  std::string matrixRow;         // the failure-matrix observation
  std::string firstCheck;        // the failure-matrix "first check"
  int64_t request = -1;
  int64_t step = -1;
  int64_t layer = -1;
  int64_t position = -1;
  double confidence = 0.0;       // 0..1
  std::string causedBy;          // id of the root finding this one follows from ("" = a root)
  std::string explanation;       // evidence in words
  std::map<std::string, double> evidence;  // evidence in numbers (named)
  bool operator==(const Finding& o) const;
};

struct FirstDivergence {
  bool present = false;
  int64_t request = -1;
  int64_t step = -1;
  int64_t layer = -1;            // -1 when only logits/tokens diverge
  int64_t position = -1;
  bool operator==(const FirstDivergence& o) const;
};

/// Numbers for one (request, step).
struct StepNumerics {
  int64_t request = 0;
  int64_t step = 0;
  int64_t position = -1;         // position of the last fed real token
  double maxLogitError = 0.0;    // max |cached - reference| over the logits row
  double tolerance = 0.0;        // the tolerance used for this row
  double top2Margin = 0.0;       // reference top-1 minus top-2 logit
  bool nearTie = false;          // top2Margin < 2 x tolerance: precision alone may swap the top two
  int64_t referenceToken = -1;   // argmax of the reference row
  int64_t chosenToken = -1;
  std::vector<double> keyError;    // per layer max |cached - reference| of this step's K records
  std::vector<double> valueError;  // per layer, V records
  std::vector<double> keyTolerance;    // per layer: the tolerance those errors were held to
  std::vector<double> valueTolerance;  // (dtype, depth, position and magnitude; docs/audit.md)
  /// Per layer, a recurrent layer's recorded state after the step against the reference's
  /// (0 elsewhere, and where the step recorded none); empty for a model without such layers.
  std::vector<double> stateError, stateTolerance;
  bool valuesChecked = true;           // false: no reference for this step's weights version
  bool diverged = false;
  bool operator==(const StepNumerics& o) const;
};

struct AuditReport {
  std::string verdict = "clean";  // clean | divergent
  std::string inputDescription;   // what was audited (model dir, trace files)
  std::string mode;               // model+engine | model+trace | trace+trace
  FirstDivergence firstDivergence;
  std::vector<Finding> findings;
  std::vector<StageResult> stages;  // one per auditStages() entry, in order
  int rootStage = 0;              // the first failing stage (0: none)
  std::vector<StepNumerics> steps;
  std::string stopSummary;        // why generation ended, per request
  double toleranceBase = 0.0;     // the dtype's relative tolerance (K/V records at layer 0)
  std::string toleranceRule;      // the tolerance formula with this audit's numbers
  std::string dtype;
  std::vector<std::string> faults;       // the trace's injected fault specs
  std::vector<FaultFiring> faultFirings;  // per fault whether it fired; empty: not recorded
  /// "SPEC: fired at request 0, step 2" / "SPEC: never fired: why" / "SPEC: not recorded".
  std::string faultLine(size_t i) const;

  bool clean() const { return verdict == "clean"; }
  bool hasFinding(const std::string& id) const;
  const Finding* finding(const std::string& id) const;
  const StageResult* stage(const std::string& id) const;
  const StageResult* stage(AuditStage stage) const;
  bool operator==(const AuditReport& o) const;

  nlohmann::json toJson() const;
  std::string toMarkdown() const;
  /// A terminal summary: verdict, first divergence, findings, per-step max logit error.
  std::string toText() const;
};

std::ostream& operator<<(std::ostream& os, const Finding& f);

}  // namespace kvscope
