#include "AuditInputArgs.hpp"

#include <unistd.h>

#include <iostream>

#include "CliChecks.hpp"
#include "CliText.hpp"
#include "kvscope/FaultSpec.hpp"

namespace kvscope::cli {

void AuditInputArgs::addTo(CLI::App& cmd, AuditJobSpec& spec) {
  cmd.add_option("--model", spec.modelDir, "HF checkpoint directory (omit for trace+trace mode)");
  cmd.add_option("--trace", spec.traceFile,
                 "audit this trace (from any engine) instead of running the built-in engine");
  cmd.add_option("--reference-trace", spec.referenceTraceFile,
                 "trace+trace mode: the uncached (reference) trace");
  cmd.add_option("--weights-version", weightsVersions_,
                 "N=DIR: the checkpoint of weights version N that the trace's steps name "
                 "(repeatable; --model is version 0)");
  cmd.add_option("--prompt", spec.prompts,
                 "prompt text, one request each (built-in engine); with a saved mlx-lm cache that "
                 "names no tokens, the text it was made from");
  cmd.add_option("--ids", ids_, "prompt token ids as 1,2,3, one request each (or a saved cache's tokens)");
  cmd.add_option("--arrival", spec.arrivalTicks, "arrival tick per request (default 0)");
  cmd.add_option("--max-new", spec.maxNewTokens, "new tokens per request")
      ->check(wholeNumberIn(1, 1000000, "new tokens per request"));
  cmd.add_option("--fault", spec.faults, "inject a fault (repeatable), see below");
  sampling_.addTo(cmd, 0.0);
  cmd.add_flag("--per-step-reference", spec.options.perStepReference,
               "cross-check: also recompute every step uncached (slower)");
  cmd.add_option("--tolerance-scale", spec.options.toleranceScale, "multiply the dtype tolerance");
  cmd.footer(FaultSpec::helpText());
}

void AuditInputArgs::apply(AuditJobSpec& spec) const {
  for (const auto& list : ids_) spec.promptIds.push_back(parseIdList(list, "--ids"));
  for (const auto& item : weightsVersions_) addWeightsVersion(spec, item);
  spec.policy = sampling_.policy();  // --top-p 0 is an error, not "off"
}

void showProgressOnTerminal(AuditJobSpec& spec) {
  if (!isatty(STDERR_FILENO)) return;
  spec.options.progress = [](double f, const std::string& what) {
    std::cerr << "\r[" << static_cast<int>(f * 100) << "%] " << what << "                "
              << std::flush;
    if (f >= 1.0) std::cerr << "\n";
  };
}

}  // namespace kvscope::cli
