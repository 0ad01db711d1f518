// kvscope-cli policy: apply a sampling policy to one logits row from a safetensors file and
// show what it leaves (the eligible set, its probabilities) and what it chooses.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CliCommands.hpp"
#include "SamplingArgs.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/RequestRng.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/Sampler.hpp"
#include "kvscope/SamplingPolicy.hpp"

namespace kvscope::cli {

namespace {

struct PolicyOptions {
  std::string logits;
  SamplingArgs sampling;
  size_t limit = 0;
  bool json = false;
};

struct LogitsRow {
  std::string file;
  std::string key;
  std::vector<float> values;
  std::vector<int64_t> shape;  // of the tensor
  int64_t row = -1;            // the row used of a 2-D tensor, else -1
};

// FILE.safetensors[:KEY]. A path that exists as given is a file without a key.
LogitsRow loadRow(const std::string& spec) {
  LogitsRow out;
  out.file = spec;
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec)) {
    const auto colon = spec.rfind(':');
    if (colon != std::string::npos && colon > 0) {
      out.file = spec.substr(0, colon);
      out.key = spec.substr(colon + 1);
    }
  }
  auto file = SafetensorsFile::open(out.file);
  if (out.key.empty()) {
    const auto names = file->names();
    if (names.size() != 1) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw InputError(out.file, "",
                       "holds " + std::to_string(names.size()) +
                           " tensors; name one with --logits FILE:KEY (keys: " +
                           (list.empty() ? std::string("none") : list) + ")");
    }
    out.key = names.front();
  }
  FloatTensor t = file->readFloat(out.key);
  out.shape = t.shape;
  if (t.shape.size() == 1) {
    out.values = std::move(t.data);
  } else if (t.shape.size() == 2 && t.shape[0] > 0) {
    const size_t v = static_cast<size_t>(t.shape[1]);
    out.row = t.shape[0] - 1;
    out.values.assign(t.data.end() - static_cast<std::ptrdiff_t>(v), t.data.end());
  } else {
    throw InputError(out.file, out.key,
                     "expected a 1-D logits row or a non-empty 2-D [rows, V] tensor, got shape " +
                         t.shapeString());
  }
  if (out.values.empty()) throw InputError(out.file, out.key, "the logits row is empty");
  return out;
}

void runPolicy(const PolicyOptions& o, CliContext& ctx) {
  const SamplingPolicy policy =
      o.sampling.policy();  // UsageError -> exit 2, before any file is read

  const LogitsRow row = loadRow(o.logits);
  const std::string rowNote =
      row.row >= 0 ? "using the last row (" + std::to_string(row.row) + ") of the [" +
                         std::to_string(row.shape[0]) + ", " + std::to_string(row.shape[1]) +
                         "] tensor"
                   : std::string();

  RequestRng rng(policy.seed);
  const SamplingOutcome outcome = Sampler::choose(row.values, policy, rng);
  std::vector<double> p;
  if (policy.greedy()) {
    p.assign(row.values.size(), 0.0);
    p[static_cast<size_t>(outcome.token)] = 1.0;
  } else {
    p = Sampler::warpedProbabilitiesDouble(row.values, policy);
  }
  double sum = 0.0;
  for (int64_t id : outcome.eligible) sum += p[static_cast<size_t>(id)];

  if (o.json) {
    if (!rowNote.empty()) std::cerr << "note: " << row.key << ": " << rowNote << "\n";
    nlohmann::json j;
    j["file"] = row.file;
    j["key"] = row.key;
    j["row"] = row.row >= 0 ? nlohmann::json(row.row) : nlohmann::json(nullptr);
    j["policy"] = policy;
    j["probabilities"] = p;
    j["eligible"] = outcome.eligible;
    j["sum"] = sum;
    j["token"] = outcome.token;
    j["greedy"] = policy.greedy();
    j["tied_at_top"] = outcome.tiedAtTop;
    j["uniform"] = policy.greedy() ? nlohmann::json(nullptr) : nlohmann::json(outcome.uniform);
    j["draws"] = outcome.drawsAfter;
    std::cout << j.dump(2) << "\n";
    ctx.exitCode = 0;
    return;
  }

  std::cout << "logits: " << row.file << " : " << row.key << " (V=" << row.values.size() << ")\n";
  if (!rowNote.empty()) std::cout << "note: " << rowNote << "\n";
  std::cout << "policy: " << policy.describe() << "\n";
  std::vector<int64_t> order = outcome.eligible;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  std::cout << "eligible: " << order.size() << " of " << row.values.size() << " tokens, sum "
            << std::setprecision(17) << sum << std::setprecision(6) << "\n";
  const size_t shown = o.limit > 0 ? std::min(o.limit, order.size()) : order.size();
  std::cout << "  " << std::setw(10) << "id" << "  probability\n";
  for (size_t i = 0; i < shown; ++i)
    std::cout << "  " << std::setw(10) << order[i] << "  " << std::setprecision(9)
              << p[static_cast<size_t>(order[i])] << std::setprecision(6) << "\n";
  if (shown < order.size()) std::cout << "  ... " << order.size() - shown << " more\n";
  std::cout << "tied at top:";
  for (int64_t id : outcome.tiedAtTop) std::cout << " " << id;
  std::cout << "\n";
  if (policy.greedy()) {
    std::cout << "greedy choice: token " << outcome.token << " (ties go to the "
              << (policy.tieRule == SamplingPolicy::TieRule::Lowest ? "lowest" : "highest")
              << " id; no draw)\n";
  } else {
    std::cout << "sampled choice: token " << outcome.token << " (seed " << policy.seed
              << ", draw 1, u=" << std::setprecision(17) << outcome.uniform
              << std::setprecision(6) << ")\n";
  }
  ctx.exitCode = 0;
}

}  // namespace

void registerPolicyCommand(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<PolicyOptions>();
  CLI::App* sub = app.add_subcommand(
      "policy",
      "Apply a sampling policy (temperature -> top-k -> top-p -> softmax, as transformers) "
      "to one logits row and show the eligible tokens and the choice");
  sub->add_option("--logits", o->logits,
                  "FILE.safetensors[:KEY]; KEY may be left out when the file holds one "
                  "tensor; a 2-D tensor uses its last row")
      ->required();
  o->sampling.addTo(*sub, 1.0, true);
  sub->add_option("--limit", o->limit, "print at most N eligible tokens (0 = all)");
  sub->add_flag("--json", o->json, "print JSON: probabilities (all V), eligible, sum, token, policy");
  sub->callback([o, &ctx]() { runPolicy(*o, ctx); });
}

}  // namespace kvscope::cli
