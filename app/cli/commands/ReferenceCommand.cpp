// kvscope-cli reference --model DIR (--prompt TEXT | --ids 1,2,3) [--json] [--dump OUT]
//                       [--top N]
// One uncached pass over a prompt (audit stage 1's reference): the next-token logits, the
// top candidates, and optionally every position's logits, hidden states and per-layer K/V
// in a safetensors file.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "CliCommands.hpp"
#include "CliText.hpp"
#include "ModelSession.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"

namespace kvscope::cli {

namespace {

struct ReferenceOptions {
  std::string model;
  std::string prompt;
  std::string ids;
  std::string dump;
  bool json = false;
  int64_t top = 10;
  CLI::Option* promptOpt = nullptr;
  CLI::Option* idsOpt = nullptr;
};

struct Candidate {
  int64_t id = 0;
  float logit = 0.0f;
  double probability = 0.0;
};

// The N highest logits of `row` (ties: lower id first) with their softmax probabilities,
// computed in double over the whole row.
std::vector<Candidate> topCandidates(const std::vector<float>& row, int64_t n) {
  double maxLogit = -INFINITY;
  for (float x : row) maxLogit = std::max(maxLogit, static_cast<double>(x));
  double sum = 0.0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - maxLogit);
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  const size_t k = std::min(order.size(), static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int64_t a, int64_t b) {
                      const float la = row[static_cast<size_t>(a)],
                                  lb = row[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  std::vector<Candidate> out;
  for (size_t i = 0; i < k; ++i) {
    const float logit = row[static_cast<size_t>(order[i])];
    out.push_back({order[i], logit, std::exp(static_cast<double>(logit) - maxLogit) / sum});
  }
  return out;
}

nlohmann::json tokenJson(const ModelSession& s, int64_t id) {
  const auto text = s.tokenText(id);
  return text ? nlohmann::json(*text) : nlohmann::json(nullptr);
}

void writeDump(const ReferenceRun& run, const Model& model, const std::string& path) {
  SafetensorsWriter w;
  w.setMetadata("format", "kvscope-reference");
  w.setMetadata("fingerprint", model.fingerprint());
  w.setMetadata("architecture", architectureName(model.config().architecture));
  w.setMetadata("ids", nlohmann::json(run.ids).dump());
  w.addFloat("logits", run.logits);  // [T, V]
  for (size_t j = 0; j < run.hiddenStates.size(); ++j)
    w.addFloat("hidden." + std::to_string(j), run.hiddenStates[j]);  // [T, H]
  for (size_t l = 0; l < run.keys.size(); ++l) {
    const std::string layer = "layer" + std::to_string(l);
    if (run.keys[l].empty()) {  // a recurrent layer: its state after the prompt, no K/V
      if (l < run.recurrentStates.size() && !run.recurrentStates[l].empty()) {
        w.addFloat(layer + ".conv", run.convStates[l]);    // [C, K]
        w.addFloat(layer + ".state", run.recurrentStates[l]);  // [Hv, Dk, Dv]
      }
      continue;
    }
    w.addFloat(layer + ".k", run.keys[l]);    // [h_kv, T, d]
    w.addFloat(layer + ".v", run.values[l]);  // [h_kv, T, d]
  }
  w.write(path, /*overwrite=*/false);
}

void refuseExisting(const std::string& path, const std::string& option) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, ec)))
    throw InputError(path, "",
                     option +
                         ": the file already exists; refusing to overwrite it "
                         "(remove it or choose another name)");
}

void runReference(const ReferenceOptions& o, CliContext& ctx) {
  const bool haveIds = o.idsOpt->count() > 0, havePrompt = o.promptOpt->count() > 0;
  if (haveIds == havePrompt) throw UsageError("reference: give exactly one of --prompt and --ids");
  if (o.top < 0) throw UsageError("--top must be >= 0, got " + std::to_string(o.top));
  std::vector<int64_t> idList;
  if (haveIds) idList = parseIdList(o.ids, "--ids");  // before the model loads: cheap checks first
  if (!o.dump.empty()) refuseExisting(o.dump, "--dump");

  const ModelSession session = ModelSession::open(o.model, /*requireTokenizer=*/havePrompt);
  const Model& model = *session.model();
  if (isatty(STDERR_FILENO)) {  // the first run of a large checkpoint hashes every byte
    bool shown = false;
    model.fingerprint([&shown](uint64_t done, uint64_t total) {
      std::cerr << "\rfingerprinting the checkpoint: " << done / 1000000 << " of "
                << total / 1000000 << " MB (cached for the next run)" << std::flush;
      shown = true;
    });
    if (shown) std::cerr << "\n";
  }
  std::vector<std::string> tokens;
  if (havePrompt) {
    Encoding enc = session.encode(o.prompt);
    idList = std::move(enc.ids);
    tokens = std::move(enc.tokens);
  }
  session.checkIds(idList, havePrompt ? "--prompt" : "--ids");

  PassWatch watch;
  if (isatty(STDERR_FILENO))  // an 8B model's 256-token pass takes about a minute here
    watch.progress = [&idList](int64_t layer, int64_t layers) {
      std::cerr << "\runcached reference over " << idList.size() << " tokens: layer " << layer
                << " of " << layers << std::flush;
      if (layer == layers) std::cerr << "\n";
    };
  const ReferenceRun run = model.reference(idList, {}, watch);
  if (!run.memoryNote.empty()) std::cerr << "note: " << run.memoryNote << "\n";  // weights from the disk
  const int64_t T = run.logits.dim(0), V = run.logits.dim(1);
  const std::vector<float> last(run.logits.data.end() - V, run.logits.data.end());
  const std::vector<Candidate> top = topCandidates(last, o.top);
  if (!o.dump.empty()) writeDump(run, model, o.dump);

  const ModelConfig& cfg = model.config();
  if (o.json) {
    for (const auto& n : session.notes()) std::cerr << "note: " << n << "\n";
    nlohmann::json j;
    j["model"] = model.checkpoint().directory();
    j["ids"] = idList;
    if (session.tokenizer()) {
      nlohmann::json toks = nlohmann::json::array();
      for (size_t i = 0; i < idList.size(); ++i)
        toks.push_back(i < tokens.size() ? nlohmann::json(tokens[i])
                                         : tokenJson(session, idList[i]));
      j["tokens"] = toks;
    }
    j["fingerprint"] = model.fingerprint();
    j["dtype"] = model.storedDtype();
    j["architecture"] = architectureName(cfg.architecture);
    j["vocab_size"] = cfg.vocabSize;
    j["last_logits"] = last;
    nlohmann::json topJson = nlohmann::json::array();
    for (const auto& c : top)
      topJson.push_back({{"id", c.id},
                         {"token", tokenJson(session, c.id)},
                         {"logit", c.logit},
                         {"probability", c.probability}});
    j["top"] = topJson;
    j["notes"] = session.notes();
    j["dump"] = o.dump.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.dump);
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    ctx.exitCode = 0;
    return;
  }

  std::cout << "model:        " << model.checkpoint().directory() << "\n"
            << "architecture: " << architectureName(cfg.architecture) << " (" << cfg.numLayers
            << " layers, " << cfg.numHeads << " heads / " << cfg.numKvHeads << " KV heads of "
            << cfg.headDim << ", vocab " << cfg.vocabSize << ")\n"
            << "stored dtype: " << model.storedDtype() << " (computed in float32)\n"
            << "fingerprint:  " << model.fingerprint() << "\n";
  if (session.tokenizer())
    std::cout << "tokenizer:    " << session.tokenizer()->description() << "\n";
  for (const auto& n : session.notes()) std::cout << "note: " << n << "\n";
  std::cout << "\n" << T << " tokens:\n";
  std::cout << std::setw(6) << "pos"
            << "  " << std::setw(8) << "id"
            << "  token\n";
  for (size_t i = 0; i < idList.size(); ++i) {
    const auto text =
        i < tokens.size() ? std::optional<std::string>(tokens[i]) : session.tokenText(idList[i]);
    std::cout << std::setw(6) << i << "  " << std::setw(8) << idList[i] << "  "
              << (text ? "'" + printable(*text) + "'" : std::string("-")) << "\n";
  }
  std::cout << "\nnext token after position " << T - 1 << ": top " << top.size() << " of " << V
            << "\n";
  std::cout << std::setw(6) << "rank"
            << "  " << std::setw(8) << "id"
            << "  " << std::setw(12) << "logit"
            << "  " << std::setw(12) << "probability"
            << "  token\n";
  for (size_t i = 0; i < top.size(); ++i) {
    const auto text = session.tokenText(top[i].id);
    std::cout << std::setw(6) << i + 1 << "  " << std::setw(8) << top[i].id << "  " << std::setw(12)
              << std::setprecision(6) << top[i].logit << "  " << std::setw(12) << top[i].probability
              << "  " << (text ? "'" + printable(*text) + "'" : std::string("-")) << "\n";
  }
  if (!o.dump.empty())
    std::cout << "\ndump: " << o.dump << " (logits [" << T << ", " << V << "], "
              << run.hiddenStates.size() << " hidden states, K/V or state of " << run.keys.size()
              << " layers)\n";
  ctx.exitCode = 0;
}

}  // namespace

void registerReferenceCommand(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<ReferenceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "reference",
      "Run the uncached reference over a prompt: next-token logits, top candidates, and "
      "optionally every position's logits, hidden states and K/V");
  cmd->add_option("--model", o->model, "Model directory (config.json + *.safetensors)")->required();
  o->promptOpt = cmd->add_option("--prompt", o->prompt,
                                 "Text, tokenized with the model's tokenizer (special tokens "
                                 "added as its post-processor does)");
  o->idsOpt = cmd->add_option("--ids", o->ids, "Token ids instead of text, e.g. 1,2,3");
  o->promptOpt->excludes(o->idsOpt);
  cmd->add_flag("--json", o->json,
                "Print JSON: ids, tokens, fingerprint, dtype, architecture, last_logits, top");
  cmd->add_option("--dump", o->dump,
                  "Write logits [T,V], hidden.{j} [T,H], layer{l}.k / layer{l}.v [h_kv,T,d] (a "
                  "recurrent layer: layer{l}.conv [C,K] / layer{l}.state [Hv,Dk,Dv], its state after "
                  "the prompt) to a new safetensors file (an existing file is never replaced)");
  cmd->add_option("--top", o->top, "How many of the most likely next tokens to show (default 10)");
  cmd->callback([o, &ctx]() { runReference(*o, ctx); });
}

}  // namespace kvscope::cli
