// kvscope-cli generate --model DIR --prompt TEXT [--prompt TEXT ...] --max-new N
//     [--fault SPEC ...] [--trace OUT.kvtrace] [--json] [--temperature T] [--top-k K]
//     [--top-p P] [--seed S] [--arrival TICK ...] [--batch [--batch-invariant]] [--snapshots]
//     [--uncached] [--speculative K] [--kv-cache int8|fp8_e4m3|fp8_e5m2|q8_0|q4_0] [--prefill-chunk N]
//     [--ring-window] [--prefix-cache B] [--mla-absorbed] [--weight-update TICK:TENSOR:SCALE ...]
// Runs the built-in cached engine (optionally with injected faults) and records a trace
// that `audit` can check against the uncached reference.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CliCommands.hpp"
#include "CliText.hpp"
#include "ModelSession.hpp"
#include "SamplingArgs.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/TraceFile.hpp"

namespace kvscope::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::string> idLists;  // --ids, one comma-separated list per request
  int64_t maxNew = 0;
  std::vector<std::string> faults;
  std::string trace;
  bool json = false;
  SamplingArgs sampling;
  std::vector<int64_t> arrivals;
  bool batch = false;
  bool batchInvariant = false;
  bool snapshots = false;
  int64_t stateEvery = 1;
  bool uncached = false;
  int64_t speculative = 0;
  int64_t prefillChunk = 0;
  bool ringWindow = false;
  bool mlaAbsorbed = false;
  int64_t prefixCache = 0;
  std::string kvCache;
  std::vector<std::string> weightUpdates;
};

// TICK:TENSOR:SCALE. Tensor names hold dots, never colons, so the first and the last colon
// split the three parts.
WeightUpdateSpec parseWeightUpdate(const std::string& text) {
  const auto first = text.find(':'), last = text.rfind(':');
  const std::string form = "--weight-update '" + text + "': ";
  if (first == std::string::npos || first == last)
    throw UsageError(
        form + "expected TICK:TENSOR:SCALE, e.g. 3:model.layers.0.self_attn.k_proj.weight:0.05");
  WeightUpdateSpec u;
  const std::string tick = text.substr(0, first), scale = text.substr(last + 1);
  u.tensor = text.substr(first + 1, last - first - 1);
  size_t used = 0;
  try {
    u.tick = std::stoll(tick, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (tick.empty() || used != tick.size() || u.tick < 0)
    throw UsageError(form + "TICK '" + tick + "' is not a non-negative integer");
  double s = 0.0;
  try {
    s = std::stod(scale, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (scale.empty() || used != scale.size() || !std::isfinite(s))
    throw UsageError(form + "SCALE '" + scale + "' is not a finite number");
  u.scale = static_cast<float>(s);
  if (u.tensor.empty()) throw UsageError(form + "TENSOR is empty");
  return u;
}

void checkWeightName(const Model& model, const WeightUpdateSpec& u) {
  const auto names = model.weightNames();
  if (std::find(names.begin(), names.end(), u.tensor) != names.end()) return;
  std::string some;
  for (size_t i = 0; i < names.size() && i < 4; ++i) some += (i ? ", " : "") + names[i];
  throw UsageError("--weight-update: the model has no weight tensor '" + u.tensor +
                   "' (names are checkpoint tensor names such as " + some + ")");
}

// One request per prompt. With --batch, prompts that arrive at the same tick (two or more)
// share a batch group: one left-padded prefill and batched decode.
std::vector<RequestSpec> buildRequests(const GenerateOptions& o, const ModelSession& session,
                                       const SamplingPolicy& policy) {
  std::map<int64_t, int64_t> perTick;
  for (size_t i = 0; i < o.prompts.size(); ++i) perTick[o.arrivals.empty() ? 0 : o.arrivals[i]]++;
  std::map<int64_t, int64_t> groupOfTick;
  for (const auto& [tick, count] : perTick)
    if (o.batch && count > 1) groupOfTick[tick] = static_cast<int64_t>(groupOfTick.size());

  std::vector<RequestSpec> out;
  for (size_t i = 0; i < o.prompts.size(); ++i) {
    RequestSpec r;
    if (o.idLists.empty()) {
      r.promptText = o.prompts[i];
      r.promptIds = session.encode(o.prompts[i]).ids;
      session.checkIds(r.promptIds, "--prompt " + std::to_string(i));
    } else {
      r.promptIds = parseIdList(o.idLists[i], "--ids");
      session.checkIds(r.promptIds, "--ids " + std::to_string(i));
    }
    r.maxNewTokens = o.maxNew;
    r.policy = policy;
    r.arrivalTick = o.arrivals.empty() ? 0 : o.arrivals[i];
    auto g = groupOfTick.find(r.arrivalTick);
    if (g != groupOfTick.end()) r.batchGroup = g->second;
    out.push_back(std::move(r));
  }
  return out;
}

void printText(const Trace& trace, const ModelSession& session, const std::string& tracePath) {
  std::cout << "engine: " << trace.engine << " (" << trace.mode << "), model "
            << trace.model.architecture << " " << trace.model.storedDtype << "\n";
  for (const auto& n : session.notes()) std::cout << "note: " << n << "\n";
  if (!trace.faults.empty()) {
    std::cout << "faults:\n";
    for (size_t i = 0; i < trace.faults.size(); ++i)
      std::cout << "  " << trace.faults[i] << ": "
                << (i < trace.faultFirings.size() ? trace.faultFirings[i].describe()
                                                  : std::string("not recorded"))
                << "\n";
  }
  for (const auto& e : trace.events)
    if (e.kind == "weight_update")
      std::cout << "tick " << e.tick << ": weight update of " << e.tensor << " (scale " << e.scale
                << ") -> weights v" << e.weightsVersion << ", " << e.detail << "\n";
  for (const auto& r : trace.requests) {
    std::cout << "\nrequest " << r.id << " (arrives at tick " << r.arrivalTick;
    if (r.batchGroup >= 0) std::cout << ", batch group " << r.batchGroup;
    std::cout << ", " << r.policy.describe() << ")\n"
              << "  prompt:    '" << printable(r.promptText) << "' (" << r.promptIds.size()
              << " tokens)\n"
              << "  generated:";
    for (int64_t id : r.generated) std::cout << " " << id;
    std::cout << "\n  text:      "
              << (session.tokenizer()
                      ? "'" + printable(session.tokenizer()->decode(r.generated)) + "'"
                      : std::string("(no tokenizer in the model directory to decode it)"))
              << "\n  stop:      " << r.stopReason << " after " << r.generated.size() << " tokens\n";
  }
  if (!tracePath.empty())
    std::cout << "\ntrace: " << tracePath << " (" << trace.steps.size() << " steps"
              << (trace.hasSnapshots() ? ", with cache snapshots" : "") << ")\n";
}

void runGenerate(GenerateOptions& o, CliContext& ctx) {
  // Everything that needs no model is checked first.
  if (o.prompts.empty() && o.idLists.empty())
    throw UsageError("generate: give --prompt TEXT or --ids 1,2,3 (one per request)");
  for (const auto& list : o.idLists) parseIdList(list, "--ids");
  if (!o.idLists.empty())
    o.prompts.assign(o.idLists.size(), std::string());  // one request per id list
  if (o.maxNew < 1)
    throw UsageError("--max-new must be at least 1, got " + std::to_string(o.maxNew));
  if (!o.arrivals.empty() && o.arrivals.size() != o.prompts.size())
    throw UsageError("--arrival given " + std::to_string(o.arrivals.size()) + " times for " +
                     std::to_string(o.prompts.size()) +
                     " prompts (give one tick per prompt, or none)");
  for (int64_t a : o.arrivals)
    if (a < 0) throw UsageError("--arrival ticks must be >= 0, got " + std::to_string(a));
  const SamplingPolicy policy = o.sampling.policy();  // UsageError -> exit 2
  EngineOptions options;
  for (const auto& f : o.faults) options.faults.push_back(FaultSpec::parse(f));
  for (const auto& w : o.weightUpdates) options.weightUpdates.push_back(parseWeightUpdate(w));
  options.recordSnapshots = o.snapshots;
  if (o.stateEvery < 0) throw UsageError("--state-every must be 0 (never) or a positive step count, got " + std::to_string(o.stateEvery));
  options.recordStatesEvery = o.stateEvery;
  options.uncached = o.uncached;
  if (o.speculative < 0 || o.speculative > 16)
    throw UsageError("--speculative must be in 0..16, got " + std::to_string(o.speculative));
  options.speculativeDrafts = o.speculative;
  if (o.prefillChunk < 0)
    throw UsageError("--prefill-chunk must be >= 0 (0 = whole prompt), got " +
                     std::to_string(o.prefillChunk));
  options.prefillChunk = o.prefillChunk;
  options.kvCacheDtype = o.kvCache;
  if (o.batchInvariant && !o.batch)
    throw UsageError("--batch-invariant needs --batch (it says how a batch is computed)");
  options.batchInvariant = o.batchInvariant;
  options.ringWindow = o.ringWindow;
  options.prefixCacheBlock = o.prefixCache;
  options.mlaAbsorbedDecode = o.mlaAbsorbed;
  if (!o.trace.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(o.trace, ec)))
      throw InputError(o.trace, "",
                       "--trace: the file already exists; refusing to overwrite it "
                       "(remove it or choose another name)");
  }

  // --ids need no tokenizer (as in `reference`); prompt text does.
  const ModelSession session = ModelSession::open(o.model, /*requireTokenizer=*/o.idLists.empty());
  for (const auto& u : options.weightUpdates) checkWeightName(*session.model(), u);
  const std::vector<RequestSpec> requests = buildRequests(o, session, policy);

  Engine engine(session.model());
  const Trace trace = engine.run(requests, options);
  if (!engine.memoryNote().empty()) std::cerr << "note: " << engine.memoryNote() << "\n";  // weights from the disk
  if (!o.trace.empty()) TraceFile::write(trace, o.trace, /*overwrite=*/false);

  if (!o.json) {
    printText(trace, session, o.trace);
    ctx.exitCode = 0;
    return;
  }
  for (const auto& n : session.notes()) std::cerr << "note: " << n << "\n";
  nlohmann::json reqs = nlohmann::json::array();
  for (const auto& r : trace.requests) {
    reqs.push_back({{"id", r.id},
                    {"prompt", r.promptText},
                    {"prompt_ids", r.promptIds},
                    {"generated", r.generated},
                    {"text", session.tokenizer()
                                 ? nlohmann::json(session.tokenizer()->decode(r.generated))
                                 : nlohmann::json(nullptr)},
                    {"stop_reason", r.stopReason},
                    {"arrival_tick", r.arrivalTick},
                    {"batch_group",
                     r.batchGroup >= 0 ? nlohmann::json(r.batchGroup) : nlohmann::json(nullptr)},
                    {"policy", r.policy}});
  }
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : trace.events)
    events.push_back({{"tick", e.tick},
                      {"kind", e.kind},
                      {"detail", e.detail},
                      {"tensor", e.tensor},
                      {"weights_version", e.weightsVersion}});
  nlohmann::json j;
  j["engine"] = trace.engine;
  j["mode"] = trace.mode;
  j["requests"] = reqs;
  j["faults"] = trace.faults;
  j["fault_firings"] = nlohmann::json::array();
  for (const auto& f : trace.faultFirings)
    j["fault_firings"].push_back({{"fired", f.fired}, {"request", f.request}, {"step", f.step},
                                  {"layer", f.layer}, {"reason", f.reason}});
  j["events"] = events;
  j["trace"] = o.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.trace);
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  ctx.exitCode = 0;
}

}  // namespace

void registerGenerateCommand(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate with the built-in cached engine (optionally injecting faults) and record a "
      "trace for the audit");
  cmd->add_option("--model", o->model, "Model directory (config.json, *.safetensors, tokenizer)")
      ->required();
  auto* prompt = cmd->add_option("--prompt", o->prompts, "Prompt text; repeat for several requests")
                     ->allow_extra_args(false);
  auto* ids =
      cmd->add_option("--ids", o->idLists,
                      "Prompt token ids instead of text, e.g. 1,2,3; repeat for several requests")
          ->allow_extra_args(false);
  prompt->excludes(ids);
  cmd->add_option("--max-new", o->maxNew, "Tokens to generate per request (at most)")->required();
  cmd->add_option("--fault", o->faults,
                  "Inject a fault: NAME[:key=value,...] (see below); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--trace", o->trace,
                  "Write the recorded trace to a new file (never replaces one)");
  cmd->add_flag(
      "--json", o->json,
      "Print JSON: requests (id, prompt_ids, generated, text, stop_reason), faults, trace");
  o->sampling.addTo(*cmd, 0.0);
  cmd->add_option("--arrival", o->arrivals,
                  "Engine tick at which each prompt's request joins, one per --prompt in order "
                  "(default: all at tick 0)")
      ->allow_extra_args(false);
  cmd->add_flag("--batch", o->batch,
                "Prefill and decode prompts that arrive at the same tick as one left-padded batch");
  cmd->add_flag(
      "--batch-invariant", o->batchInvariant,
      "With --batch: batch-invariant kernels: a batch's requests share its ticks but each "
      "one's forward is computed alone (unpadded), so its logits do not depend on its "
      "batch mates");
  cmd->add_flag("--snapshots", o->snapshots,
                "Record full per-step cache copies in the trace (O(T^2))");
  cmd->add_option("--state-every", o->stateEvery,
                  "A model with recurrent layers (Qwen3.5): record their states after the prefill and every N-th "
                  "step (default 1; 0 = never)");
  cmd->add_flag("--uncached", o->uncached,
                "Recompute the full prefix every step (the reference engine)");
  cmd->add_option("--speculative", o->speculative,
                  "Speculative decoding: propose K prompt-lookup draft tokens per decode step and "
                  "verify them in one forward, rolling the rejected ones back (their K/V rows "
                  "trimmed; a recurrent layer's state taken back to the one after the last accepted "
                  "token) (greedy requests decoding alone; 0 = off)");
  cmd->add_option("--prefill-chunk", o->prefillChunk,
                  "Chunked prefill: feed a prompt N tokens per forward, one chunk per tick, each "
                  "attending over the cache and itself; every chunk but the last chooses no token "
                  "(requests prefilled alone; 0 = whole prompt)");
  cmd->add_flag("--ring-window", o->ringWindow,
                "Ring-buffer caches on sliding-window layers: a ring of `window` slots, entry i "
                "in slot i mod window; the trace records the position each slot holds (a model "
                "with sliding_window: Mistral, Qwen2 with use_sliding_window)");
  cmd->add_option("--prefix-cache", o->prefixCache,
                  "Prefix caching in blocks of B tokens: a request whose prompt begins with an "
                  "earlier prompt's whole blocks takes their K/V rows (and a recurrent layer's "
                  "state after them) and prefills only the rest; the trace records each hit "
                  "(reused_count, reused_from; 0 = off)");
  cmd->add_flag("--mla-absorbed", o->mlaAbsorbed,
                "Latent attention (DeepSeek V2/V3): decode in the absorbed form serving engines use "
                "(kv_b_proj's key rows folded into the queries, scores over the cached latent rows, "
                "its value rows applied after), not by decompressing each head's K/V; the same "
                "attention up to rounding");
  cmd->add_option("--kv-cache", o->kvCache,
                  "Quantise the KV cache: int8, fp8_e4m3 or fp8_e5m2 with a scale per token and "
                  "kv head, or llama.cpp's q8_0 / q4_0 with a scale per 32-element block "
                  "(records are rounded when written; the trace declares it)");
  cmd->add_option(
         "--weight-update", o->weightUpdates,
         "TICK:TENSOR:SCALE: perturb a weight tensor at an engine tick (an RL-style refit); "
         "repeatable")
      ->allow_extra_args(false);
  cmd->footer("\n" + FaultSpec::helpText());
  cmd->callback([o, &ctx]() { runGenerate(*o, ctx); });
}

}  // namespace kvscope::cli
