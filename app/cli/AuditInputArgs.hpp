// What an audit runs on, as kvscope-cli audit and inspect take it: a model directory, a
// trace (and a reference trace), later weights versions, or the built-in engine's prompts,
// faults and sampling options. Registered and read in one place so the two commands accept
// the same inputs with the same meaning.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "SamplingArgs.hpp"
#include "kvscope/AuditJob.hpp"

namespace kvscope::cli {

class AuditInputArgs {
 public:
  /// Adds --model, --trace, --reference-trace, --weights-version, --prompt, --ids,
  /// --arrival, --max-new, --fault, the sampling options, --per-step-reference and
  /// --tolerance-scale, bound to `spec` (which must outlive the command), and the fault
  /// syntax as the command's footer.
  void addTo(CLI::App& cmd, AuditJobSpec& spec);
  /// After parsing: the --ids lists, --weights-version items and sampling policy into
  /// `spec`; UsageError (exit 2) for a bad value.
  void apply(AuditJobSpec& spec) const;

 private:
  std::vector<std::string> ids_;              // comma-separated id lists, one per request
  std::vector<std::string> weightsVersions_;  // N=DIR
  SamplingArgs sampling_;
};

/// When stderr is a terminal: the audit's progress as one rewritten line on stderr.
void showProgressOnTerminal(AuditJobSpec& spec);

}  // namespace kvscope::cli
