// Whether a trace was recorded with a model of the checkpoint's family and shape. The one
// rule for every front end: runAuditJob (the CLI's audit and inspect, the GUI) refuses a pair
// that does not fit before anything runs, and stage 1 of Auditor::audit reports the same
// mismatches when a caller audits such a pair directly.
#pragma once

#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

/// One declared field of the trace's `model` that the checkpoint contradicts.
struct TraceModelMismatch {
  std::string field;       // the trace's field, e.g. "model.num_layers"
  std::string what;        // what it is, e.g. "layers"
  std::string traceValue;  // as the trace declares it
  std::string modelValue;  // as the checkpoint's config.json has it
};

/// The trace's declared architecture, cache shape and vocabulary against the checkpoint's:
/// architecture (when the trace names a family KV Scope knows: gpt2, llama, mistral, qwen2,
/// qwen3, also as a transformers class name such as LlamaForCausalLM), num_layers, num_heads
/// (when declared), num_kv_heads, head_dim and vocab_size. Empty: they fit.
std::vector<TraceModelMismatch> traceModelMismatches(const TraceModelInfo& trace,
                                                     const ModelConfig& model);

/// The family a trace's `model.architecture` names ("" when it is not one KV Scope knows).
std::string traceArchitectureFamily(const std::string& declared);

/// Throws InputError naming `traceFile`, the first mismatching field and both values, e.g.
/// "run.kvtrace: field 'model.num_layers': the trace's model.num_layers is 4 but checkpoint
/// m/config.json has 2 (layers): ...".
void requireTraceFitsModel(const TraceModelInfo& trace, const std::string& traceFile,
                           const ModelConfig& model);

}  // namespace kvscope
