#include "kvscope/TraceModelFit.hpp"

#include <cctype>

#include "kvscope/Error.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

std::string traceArchitectureFamily(const std::string& declared) {
  std::string name;
  for (char ch : declared)
    if (std::isalnum(static_cast<unsigned char>(ch)))
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // transformers class names: LlamaForCausalLM, GPT2LMHeadModel, Qwen2ForCausalLM, ...
  for (const char* suffix : {"forcausallm", "lmheadmodel", "model"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      name.resize(name.size() - s.size());
      break;
    }
  }
  if (familyForModelType(name)) return name;
  return "";
}

std::vector<TraceModelMismatch> traceModelMismatches(const TraceModelInfo& t,
                                                     const ModelConfig& c) {
  std::vector<TraceModelMismatch> out;
  const std::string family = traceArchitectureFamily(t.architecture);
  if (!family.empty() && family != architectureName(c.architecture))
    out.push_back({"model.architecture", "architecture", t.architecture,
                   c.modelType.empty() ? architectureName(c.architecture) : c.modelType});
  auto number = [&](const char* field, const char* what, int64_t traced, int64_t model) {
    if (traced != model) out.push_back({field, what, std::to_string(traced), std::to_string(model)});
  };
  number("model.num_layers", "layers", t.numLayers, c.numLayers);
  if (t.numHeads > 0) number("model.num_heads", "attention heads", t.numHeads, c.numHeads);
  if (t.latentHeads && !c.mla.enabled()) {
    out.push_back({"model.latent_records", "cache layout", "heads (decompressed latent attention)",
                   "no multi-head latent attention (no kv_lora_rank)"});
  } else {
    // The record shape the model caches, or (model.latent_records "heads") each head's
    // decompressed key (nope | roped part) and value, as a decompressing engine holds them.
    const TraceModelInfo want = TraceModelInfo::ofConfig(c, t.latentHeads);
    const bool heads = t.latentHeads;
    number("model.num_kv_heads", heads ? "kv heads: each head's decompressed K/V" : "kv heads", t.numKvHeads,
           want.numKvHeads);
    number("model.head_dim", heads ? "head dim: qk_nope_head_dim + qk_rope_head_dim" : "head dim", t.headDim,
           want.headDim);
    number("model.value_head_dim", heads ? "value record width: v_head_dim" : "value record width", t.valueDim(),
           want.valueDim());
  }
  number("model.vocab_size", "vocabulary entries", t.vocabSize, c.vocabSize);
  return out;
}

void requireTraceFitsModel(const TraceModelInfo& trace, const std::string& traceFile,
                           const ModelConfig& model) {
  const auto mismatches = traceModelMismatches(trace, model);
  if (mismatches.empty()) return;
  const TraceModelMismatch& m = mismatches.front();
  std::string also;
  for (size_t i = 1; i < mismatches.size(); ++i)
    also += (i == 1 ? "; also " : ", ") + mismatches[i].field + " " + mismatches[i].traceValue +
            " vs " + mismatches[i].modelValue;
  const std::string config = model.sourceFile.empty() ? "the checkpoint" : "checkpoint " + model.sourceFile;
  throw InputError(traceFile, m.field,
                   "the trace's " + m.field + " is " + m.traceValue + " but " + config +
                       " has " + m.modelValue + " (" + m.what + ")" + also +
                       ": the trace was recorded with another model; audit it against the "
                       "checkpoint that produced it");
}

}  // namespace kvscope
