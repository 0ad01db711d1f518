#include "kvscope/AuditJob.hpp"

#include <filesystem>

#include "audit/NumberText.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/LlamaStateTrace.hpp"
#include "kvscope/MlxPromptCacheTrace.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceModelFit.hpp"

namespace kvscope {

namespace {
std::unique_ptr<Tokenizer> tryTokenizer(const std::string& dir) {
  try {
    return Tokenizer::loadFromDirectory(dir);
  } catch (const InputError&) {
    return nullptr;  // a model without tokenizer files: ids only
  }
}

void fillText(AuditJobOutput& out, const Tokenizer* tok) {
  for (const auto& r : out.result.trace.requests) {
    std::vector<std::string> pieces;
    for (int64_t id : r.stream()) pieces.push_back(tok ? tok->decode({id}) : std::to_string(id));
    out.tokenPieces.push_back(std::move(pieces));
    out.decodedText.push_back(tok ? tok->decode(r.generated) : "");
  }
}
// trace+trace: what the cached trace says of each layer's attention.
std::vector<std::string> traceLayerKinds(const Trace& t) {
  std::vector<std::string> out;
  for (int64_t l = 0; l < t.model.numLayers; ++l) {
    const TraceLayerKind k = t.layerKind(l);
    std::string s = k.recurrent   ? "recurrent state (no K/V records)"
                    : k.latent     ? (t.model.latentHeads ? "latent attention (each head's decompressed K/V)"
                                                          : "latent attention (latent rows and roped key parts)")
                    : k.window > 0 ? "sliding window " + std::to_string(k.window)
                     : k.chunk > 0 ? "chunks of " + std::to_string(k.chunk)
                                   : "full attention";
    if (k.ring()) s += ", a ring of " + std::to_string(k.ringSlots) + " slots";
    out.push_back(s);
  }
  return out;
}
}  // namespace

AuditJobOutput runAuditJob(const AuditJobSpec& spec) {
  AuditJobOutput out;
  if (spec.modelDir.empty()) {
    if (spec.traceFile.empty() || spec.referenceTraceFile.empty())
      throw UsageError("without --model, give both --trace (the cached run) and --reference-trace (the uncached run)");
    for (const auto* f : {&spec.traceFile, &spec.referenceTraceFile})
      if (const bool llama = isLlamaStateFile(*f); llama || isMlxPromptCacheFile(*f))
        throw UsageError(*f + " is a saved cache (" + (llama ? "llama.cpp" : "mlx-lm") +
                         "): its rows are read with the model's heads and head size, so give --model "
                         "(the checkpoint that made it) with it");
    Trace reference = TraceFile::read(spec.referenceTraceFile);
    Trace cached = TraceFile::read(spec.traceFile);
    out.result = Auditor::auditTraces(std::move(reference), std::move(cached), spec.options);
    fillText(out, nullptr);
    out.layerKinds = traceLayerKinds(out.result.trace);
    return out;
  }
  // Between the pieces of loading, say what comes next and let Cancel stop it.
  const auto next = [&spec](const std::string& what) {
    if (spec.options.cancelled && spec.options.cancelled()) throw AuditCancelled();
    if (spec.options.progress) spec.options.progress(0.0, what);
  };
  next("opening the checkpoint " + spec.modelDir);
  auto model = Model::load(spec.modelDir);
  // The content hash of a large checkpoint takes a while on its first run (then it is
  // cached): say so instead of sitting silent, and let Cancel stop the wait.
  if (spec.options.progress)
    model->fingerprint([&](uint64_t done, uint64_t total) {
      if (spec.options.cancelled && spec.options.cancelled()) throw AuditCancelled();
      const double gb = 1e-9;
      spec.options.progress(0.0, "fingerprinting the checkpoint: " +
                                     detail::numberText(static_cast<double>(done) * gb, 3) +
                                     " of " +
                                     detail::numberText(static_cast<double>(total) * gb, 3) +
                                     " GB (cached for the next run)");
    });
  next("reading the tokenizer");
  auto tokenizer = tryTokenizer(spec.modelDir);
  next(spec.traceFile.empty() ? "generating" : "reading the trace " + spec.traceFile);
  AuditOptions options = spec.options;
  if (tokenizer && options.tokenizerVocabSize == 0) options.tokenizerVocabSize = tokenizer->vocabSize();
  Trace trace;
  if (!spec.traceFile.empty()) {
    const bool llamaState = isLlamaStateFile(spec.traceFile);
    if (llamaState || isMlxPromptCacheFile(spec.traceFile)) {
      // A saved cache holds one sequence; the one --ids / --prompt given says what it was
      // made from (an mlx-lm cache may name no tokens) and must agree with a file that does.
      if (spec.promptIds.size() + spec.prompts.size() > 1)
        throw UsageError("a saved cache holds one sequence: give at most one --ids or --prompt");
      std::vector<int64_t> tokens = spec.promptIds.empty() ? std::vector<int64_t>{} : spec.promptIds.front();
      if (!spec.prompts.empty()) {
        if (!tokenizer) throw InputError(spec.modelDir, "tokenizer", "no tokenizer files: give --ids instead of text");
        tokens = tokenizer->encode(spec.prompts.front(), true).ids;
      }
      trace = llamaState ? readLlamaStateTrace(spec.traceFile, model->checkpoint(), tokens)
                         : readMlxPromptCacheTrace(spec.traceFile, model->checkpoint(), tokens);
    } else {
      trace = TraceFile::read(spec.traceFile);
    }
    // Another family's or shape's trace is a wrong input, not a divergence: refuse it here.
    requireTraceFitsModel(trace.model, spec.traceFile, model->config());
  } else {
    std::vector<RequestSpec> requests;
    auto add = [&](std::vector<int64_t> ids, const std::string& text) {
      RequestSpec r;
      r.promptIds = std::move(ids);
      r.promptText = text;
      r.maxNewTokens = spec.maxNewTokens;
      r.policy = spec.policy;
      const size_t i = requests.size();
      r.arrivalTick = i < spec.arrivalTicks.size() ? spec.arrivalTicks[i] : 0;
      requests.push_back(std::move(r));
    };
    for (const auto& text : spec.prompts) {
      if (!tokenizer) throw InputError(spec.modelDir, "tokenizer", "no tokenizer files: give prompt ids instead of text");
      add(tokenizer->encode(text, true).ids, text);
    }
    for (const auto& ids : spec.promptIds) add(ids, "");
    if (requests.empty()) throw UsageError("nothing to run: give at least one prompt");
    EngineOptions eo;
    for (const auto& f : spec.faults) eo.faults.push_back(FaultSpec::parse(f));
    eo.cancelled = spec.options.cancelled;
    if (spec.options.progress) eo.progress = [&](double f) { spec.options.progress(0.5 * f, "generating"); };
    trace = Engine(model).run(requests, eo);
    if (!spec.saveTraceTo.empty()) TraceFile::write(trace, spec.saveTraceTo, false);
    model = Model::load(spec.modelDir);  // the engine may have updated weights; audit from the checkpoint
  }
  if (options.progress) {
    auto outer = options.progress;
    options.progress = [outer](double f, const std::string& what) { outer(0.5 + 0.5 * f, what); };
  }
  out.result = Auditor::audit(*model, std::move(trace), options);
  fillText(out, tokenizer.get());
  for (int64_t l = 0; l < model->config().numLayers; ++l) out.layerKinds.push_back(model->config().layerDescription(l));
  return out;
}

void addWeightsVersion(AuditJobSpec& spec, const std::string& item, const std::string& option) {
  const auto eq = item.find('=');
  uint64_t version = 0;
  try {
    if (eq == std::string::npos || eq == 0 || item.front() == '-' || item.front() == '+')
      throw std::invalid_argument(item);
    size_t used = 0;
    version = std::stoull(item.substr(0, eq), &used);
    if (used != eq) throw std::invalid_argument(item);
  } catch (const std::exception&) {
    throw UsageError(option + ": '" + item + "' is not N=DIR (e.g. 1=checkpoints/step-2000)");
  }
  if (version == 0)
    throw UsageError(
        option + ": version 0 is the model checkpoint itself; give later versions (1=DIR, ...)");
  if (eq + 1 >= item.size()) throw UsageError(option + " " + item + ": the directory is missing");
  if (spec.modelDir.empty())
    throw UsageError(option + " needs a model (it names later checkpoints of that model)");
  if (!spec.options.weightsDirectories.emplace(version, item.substr(eq + 1)).second)
    throw UsageError(option + ": version " + std::to_string(version) + " is given twice");
}

std::vector<std::string> weightsVersionItems(const AuditJobSpec& spec) {
  std::vector<std::string> out;
  for (const auto& [version, dir] : spec.options.weightsDirectories)
    out.push_back(std::to_string(version) + "=" + dir);
  return out;
}

}  // namespace kvscope
