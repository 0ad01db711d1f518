#include "kvscope/AuditReport.hpp"

#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvscope {

using nlohmann::ordered_json;

std::string stageStatusName(StageStatus s) {
  switch (s) {
    case StageStatus::Pass: return "pass";
    case StageStatus::Fail: return "fail";
    case StageStatus::Skipped: return "skipped";
    case StageStatus::NotRun: return "not_run";
  }
  return "?";
}

bool StageResult::operator==(const StageResult& o) const {
  return number == o.number && id == o.id && title == o.title && status == o.status &&
         summary == o.summary && checks == o.checks;
}

bool Finding::operator==(const Finding& o) const {
  return id == o.id && matrixRow == o.matrixRow && firstCheck == o.firstCheck &&
         request == o.request && step == o.step && layer == o.layer && position == o.position &&
         confidence == o.confidence && causedBy == o.causedBy && explanation == o.explanation &&
         evidence == o.evidence;
}

bool FirstDivergence::operator==(const FirstDivergence& o) const {
  return present == o.present && request == o.request && step == o.step && layer == o.layer &&
         position == o.position;
}

bool StepNumerics::operator==(const StepNumerics& o) const {
  return request == o.request && step == o.step && position == o.position &&
         maxLogitError == o.maxLogitError && tolerance == o.tolerance &&
         top2Margin == o.top2Margin && nearTie == o.nearTie && referenceToken == o.referenceToken &&
         chosenToken == o.chosenToken && keyError == o.keyError && valueError == o.valueError &&
         keyTolerance == o.keyTolerance && valueTolerance == o.valueTolerance && stateError == o.stateError &&
         stateTolerance == o.stateTolerance &&
         valuesChecked == o.valuesChecked && diverged == o.diverged;
}

bool AuditReport::hasFinding(const std::string& id) const { return finding(id) != nullptr; }

const Finding* AuditReport::finding(const std::string& id) const {
  for (const auto& f : findings)
    if (f.id == id) return &f;
  return nullptr;
}

StageResult StageResult::of(AuditStage stage) {
  const AuditStageInfo& info = auditStage(stage);
  return StageResult{info.number, info.id, info.title, StageStatus::NotRun, "", {}};
}

const StageResult* AuditReport::stage(AuditStage s) const {
  const size_t i = stageIndex(s);
  return i < stages.size() ? &stages[i] : nullptr;
}

const StageResult* AuditReport::stage(const std::string& id) const {
  for (const auto& s : stages)
    if (s.id == id) return &s;
  return nullptr;
}

bool AuditReport::operator==(const AuditReport& o) const {
  return verdict == o.verdict && inputDescription == o.inputDescription && mode == o.mode &&
         firstDivergence == o.firstDivergence && findings == o.findings && stages == o.stages &&
         steps == o.steps && rootStage == o.rootStage && stopSummary == o.stopSummary && toleranceBase == o.toleranceBase &&
         dtype == o.dtype && faults == o.faults && faultFirings == o.faultFirings;
}

std::string AuditReport::faultLine(size_t i) const {
  const std::string spec = i < faults.size() ? faults[i] : "";
  if (i >= faultFirings.size()) return spec + ": not recorded (the trace predates the record)";
  return spec + ": " + faultFirings[i].describe();
}

namespace {
// JSON has no inf/NaN: such numbers become null.
ordered_json number(double v) { return std::isfinite(v) ? ordered_json(v) : ordered_json(); }
ordered_json numbers(const std::vector<double>& v) {
  ordered_json a = ordered_json::array();
  for (double x : v) a.push_back(number(x));
  return a;
}
std::string fmt(double v, int precision = 4) {
  if (!std::isfinite(v)) return std::isnan(v) ? "n/a" : "inf";
  std::ostringstream os;
  // Counts, layers, slots and exact zeros are integers: "7", not "7.0000".
  if (std::fabs(v) < 1e15 && v == std::trunc(v)) {
    os << static_cast<long long>(v);
    return os.str();
  }
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e5))
    os << std::scientific << std::setprecision(2) << v;
  else
    os << std::fixed << std::setprecision(precision) << v;
  return os.str();
}
// Roots first, each followed by the findings that follow from it (caused_by) in its request.
std::vector<std::pair<const Finding*, int>> rootOrder(const std::vector<Finding>& findings) {
  std::vector<std::pair<const Finding*, int>> out;
  auto isRootOf = [](const Finding& root, const Finding& f) {
    return !f.causedBy.empty() && &root != &f && root.id == f.causedBy && root.request == f.request;
  };
  auto hasRoot = [&](const Finding& f) {
    for (const auto& g : findings)
      if (isRootOf(g, f)) return true;
    return false;
  };
  for (const auto& f : findings) {
    if (hasRoot(f)) continue;
    out.push_back({&f, 0});
    for (const auto& g : findings)
      if (isRootOf(f, g)) out.push_back({&g, 1});
  }
  return out;
}
std::string where(const Finding& f) {
  std::ostringstream os;
  os << "request " << f.request << ", step " << f.step;
  if (f.layer >= 0) os << ", layer " << f.layer;
  if (f.position >= 0) os << ", position " << f.position;
  return os.str();
}
}  // namespace

nlohmann::json AuditReport::toJson() const {
  ordered_json j;
  j["verdict"] = verdict;
  j["mode"] = mode;
  j["input"] = inputDescription;
  j["dtype"] = dtype;
  j["tolerance_base"] = number(toleranceBase);
  j["tolerance_rule"] = toleranceRule;
  if (firstDivergence.present) {
    j["first_divergence"] = {{"request", firstDivergence.request}, {"step", firstDivergence.step},
                             {"layer", firstDivergence.layer}, {"position", firstDivergence.position}};
  } else {
    j["first_divergence"] = nullptr;
  }
  j["root_stage"] = rootStage;
  j["findings"] = ordered_json::array();
  for (const auto& f : findings) {
    ordered_json e;
    for (const auto& [k, v] : f.evidence) e[k] = number(v);
    j["findings"].push_back(
        {{"id", f.id},
         {"row", f.matrixRow},
         {"first_check", f.firstCheck},
         {"where",
          {{"request", f.request}, {"step", f.step}, {"layer", f.layer}, {"position", f.position}}},
         {"confidence", number(f.confidence)},
         {"caused_by", f.causedBy.empty() ? ordered_json() : ordered_json(f.causedBy)},
         {"explanation", f.explanation},
         {"evidence", e}});
  }
  j["stages"] = ordered_json::array();
  for (const auto& s : stages)
    j["stages"].push_back({{"stage", s.number}, {"id", s.id}, {"title", s.title},
                           {"status", stageStatusName(s.status)}, {"summary", s.summary},
                           {"checks", s.checks}});
  j["steps"] = ordered_json::array();
  for (const auto& s : steps) {
    j["steps"].push_back({{"request", s.request},
                          {"step", s.step},
                          {"position", s.position},
                          {"max_logit_error", number(s.maxLogitError)},
                          {"tolerance", number(s.tolerance)},
                          {"top2_margin", number(s.top2Margin)},
                          {"near_tie", s.nearTie},
                          {"reference_token", s.referenceToken},
                          {"chosen_token", s.chosenToken},
                          {"key_error", numbers(s.keyError)},
                          {"value_error", numbers(s.valueError)},
                          {"key_tolerance", numbers(s.keyTolerance)},
                          {"value_tolerance", numbers(s.valueTolerance)},
                          {"values_checked", s.valuesChecked},
                          {"diverged", s.diverged}});
    if (!s.stateError.empty()) {  // a model with recurrent layers
      j["steps"].back()["state_error"] = numbers(s.stateError);
      j["steps"].back()["state_tolerance"] = numbers(s.stateTolerance);
    }
  }
  j["stopping"] = stopSummary;
  j["faults"] = nlohmann::json::array();
  for (size_t i = 0; i < faults.size(); ++i) {
    ordered_json f{{"spec", faults[i]}};
    if (i >= faultFirings.size()) {
      f["fired"] = nullptr;  // not recorded
      f["why"] = "not recorded (the trace predates the record)";
    } else {
      const FaultFiring& x = faultFirings[i];
      f["fired"] = x.fired;
      if (x.fired)
        f["where"] = {{"request", x.request}, {"step", x.step}, {"layer", x.layer}};
      else
        f["why"] = x.reason;
    }
    j["faults"].push_back(std::move(f));
  }
  return nlohmann::json::parse(j.dump());
}

std::string AuditReport::toMarkdown() const {
  std::ostringstream md;
  md << "# KV Scope audit: " << (clean() ? "clean" : "**divergent**") << "\n\n";
  md << "- Input: " << inputDescription << "\n- Mode: " << mode << "\n- Compute dtype: " << dtype
     << " (relative tolerance " << fmt(toleranceBase) << ")\n";
  if (!toleranceRule.empty()) md << "- Tolerance: " << toleranceRule << "\n";
  if (firstDivergence.present)
    md << "- First divergence: request " << firstDivergence.request << ", step "
       << firstDivergence.step << ", layer " << firstDivergence.layer << ", position "
       << firstDivergence.position << "\n";
  md << "\n## Findings\n\n";
  if (findings.empty()) md << "None: cached and uncached generation agree.\n";
  for (const auto& [fp, depth] : rootOrder(findings)) {
    const Finding& f = *fp;
    md << (depth ? "#### ↳ `" : "### `") << f.id << "` — " << f.matrixRow << "\n\n";
    if (!f.causedBy.empty())
      md << "- Caused by: `" << f.causedBy << "` (a consequence, not a separate cause)\n";
    md << "- Where: " << where(f) << "\n- First check: " << f.firstCheck
       << "\n- Confidence: " << fmt(f.confidence, 2) << "\n- Evidence: " << f.explanation << "\n";
    for (const auto& [k, v] : f.evidence) md << "  - `" << k << "` = " << fmt(v) << "\n";
    md << "\n";
  }
  md << "## Stages\n\n| # | Stage | Status | Summary |\n| --- | --- | --- | --- |\n";
  for (const auto& s : stages)
    md << "| " << s.number << " | " << s.title << " | " << stageStatusName(s.status) << " | "
       << s.summary << " |\n";
  // What failed, in the words of the stages' checks (the GUI's stage list shows the same).
  bool failedHeading = false;
  for (const auto& s : stages)
    for (const auto& c : s.checks)
      if (c.rfind("FAIL: ", 0) == 0) {
        if (!failedHeading) md << "\n### Failed checks\n\n";
        failedHeading = true;
        md << "- " << s.number << ". " << s.title << ": " << c.substr(6) << "\n";
      }
  md << "\n## Per-step logit error\n\n| Request | Step | Position | max abs error | tolerance | top-2 margin | chosen | reference |\n"
     << "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& s : steps)
    md << "| " << s.request << " | " << s.step << " | " << s.position << " | "
       << fmt(s.maxLogitError) << (s.diverged ? " **!**" : "") << " | " << fmt(s.tolerance) << " | "
       << fmt(s.top2Margin) << (s.nearTie ? " (near tie)" : "") << " | " << s.chosenToken << " | "
       << s.referenceToken << " |\n";
  if (!stopSummary.empty()) md << "\n## Stopping\n\n" << stopSummary << "\n";
  if (!faults.empty()) md << "\n## Injected faults\n\n";
  for (size_t i = 0; i < faults.size(); ++i) md << "- " << faultLine(i) << "\n";
  return md.str();
}

std::string AuditReport::toText() const {
  std::ostringstream os;
  os << "verdict: " << verdict << "  (" << mode << "; " << inputDescription << ")\n";
  if (firstDivergence.present)
    os << "first divergence: request " << firstDivergence.request << ", step "
       << firstDivergence.step << ", layer " << firstDivergence.layer << ", position "
       << firstDivergence.position << "\n";
  os << "\nstages:\n";
  for (const auto& s : stages) {
    os << "  " << s.number << ". " << std::left << std::setw(24) << s.title << std::setw(8)
       << stageStatusName(s.status) << s.summary << "\n";
    for (const auto& c : s.checks)
      if (c.rfind("FAIL: ", 0) == 0) os << "     " << c << "\n";
  }
  os << "\nfindings:\n";
  if (findings.empty()) os << "  none\n";
  for (const auto& [f, depth] : rootOrder(findings))
    os << (depth ? "      <- caused by " + f->causedBy + ": " : "  ") << *f << "\n";
  os << "\nmax |logit error| per step (tolerance):\n";
  for (const auto& s : steps)
    os << "  request " << s.request << " step " << std::setw(3) << s.step << "  " << std::setw(10)
       << fmt(s.maxLogitError) << "  (" << fmt(s.tolerance) << ")" << (s.diverged ? "  <- diverged" : "")
       << (s.nearTie && !s.diverged ? "  near tie" : "") << "\n";
  if (!stopSummary.empty()) os << "\nstopping: " << stopSummary << "\n";
  if (!faults.empty()) os << "\ninjected faults:\n";
  for (size_t i = 0; i < faults.size(); ++i) os << "  " << faultLine(i) << "\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Finding& f) {
  os << "[" << f.id << "] " << where(f) << ": " << f.matrixRow << " -> check " << f.firstCheck
     << ". " << f.explanation;
  return os;
}

}  // namespace kvscope
