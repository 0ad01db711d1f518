// One audit as the CLI and the GUI ask for it: what to load, what to run, and the result.
// Runs synchronously; the GUI calls it on its engine thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kvscope/AuditResult.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"

namespace kvscope {

struct AuditJobSpec {
  std::string modelDir;              // empty: trace+trace mode
  std::string traceFile;             // empty: run the built-in engine
  std::string referenceTraceFile;    // trace+trace mode: the uncached trace
  std::vector<std::string> prompts;  // built-in engine: prompt texts (tokenized with the model's tokenizer)
  std::vector<std::vector<int64_t>> promptIds;  // or ids directly
  int64_t maxNewTokens = 16;
  SamplingPolicy policy;
  std::vector<std::string> faults;   // fault specs
  std::vector<int64_t> arrivalTicks; // per prompt; missing entries arrive at tick 0
  std::string saveTraceTo;           // write the engine's trace here (optional)
  AuditOptions options;
};

struct AuditJobOutput {
  AuditResult result;
  std::vector<std::string> decodedText;  // per request: generated text (when a tokenizer exists)
  /// Per request, the text of each token of prompt + generated stream, for token strips.
  std::vector<std::vector<std::string>> tokenPieces;
  /// Per layer, what kind it is (ModelConfig::layerDescription; in trace+trace mode from the
  /// traces' layer kinds): "sliding window 6, RoPE", "full attention, NoPE", ...
  std::vector<std::string> layerKinds;
};

/// Throws InputError / UsageError for bad input, AuditCancelled when cancelled.
AuditJobOutput runAuditJob(const AuditJobSpec& spec);

/// Adds "N=DIR" (the checkpoint of weights version N >= 1; the model is version 0) to
/// `spec.options.weightsDirectories`. Throws UsageError naming `option` for a bad item, a
/// version given twice, or no model directory. One rule for the CLI and the GUI.
void addWeightsVersion(AuditJobSpec& spec, const std::string& item,
                       const std::string& option = "--weights-version");
/// The items of `spec.options.weightsDirectories` as "N=DIR", in version order.
std::vector<std::string> weightsVersionItems(const AuditJobSpec& spec);

}  // namespace kvscope
