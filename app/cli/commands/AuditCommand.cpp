// kvscope-cli audit: the staged audit, headless (CI). Exit 0 clean, 1 divergent, 2 error.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "CliCommands.hpp"
#include "CliText.hpp"
#include "SamplingArgs.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"

namespace kvscope::cli {

namespace {

struct AuditArgs {
  AuditJobSpec spec;
  std::vector<std::string> ids;  // comma-separated id lists, one per request
  bool json = false;
  std::string reportPath;
  std::string markdownPath;
  bool force = false;
  SamplingArgs sampling;
  std::vector<std::string> weightsVersions;  // N=DIR
};

void writeText(const std::string& path, const std::string& text, bool force) {
  if (!force && std::filesystem::exists(path))
    throw InputError(path, "", "refusing to overwrite an existing file (pass --force)");
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw InputError(path, "", "cannot write");
  out << text;
}

void run(AuditArgs& a, CliContext& ctx) {
  for (const auto& list : a.ids) a.spec.promptIds.push_back(parseIdList(list, "--ids"));
  for (const auto& item : a.weightsVersions) addWeightsVersion(a.spec, item);
  a.spec.policy = a.sampling.policy();  // --top-p 0 is an error, not "off"
  if (isatty(STDERR_FILENO)) {
    a.spec.options.progress = [](double f, const std::string& what) {
      std::cerr << "\r[" << static_cast<int>(f * 100) << "%] " << what << "                " << std::flush;
      if (f >= 1.0) std::cerr << "\n";
    };
  }
  AuditJobOutput out = runAuditJob(a.spec);
  const AuditReport& rep = out.result.report;
  if (!a.reportPath.empty()) writeText(a.reportPath, rep.toJson().dump(2) + "\n", a.force);
  if (!a.markdownPath.empty()) writeText(a.markdownPath, rep.toMarkdown(), a.force);
  if (a.json) {
    auto j = rep.toJson();
    j["requests"] = nlohmann::json::array();
    for (size_t i = 0; i < out.result.trace.requests.size(); ++i) {
      const auto& r = out.result.trace.requests[i];
      j["requests"].push_back({{"id", r.id}, {"prompt_ids", r.promptIds}, {"generated", r.generated},
                               {"text", i < out.decodedText.size() ? out.decodedText[i] : ""}, {"stop_reason", r.stopReason}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << rep.toText();
  }
  ctx.exitCode = rep.clean() ? 0 : 1;
}

}  // namespace

void registerAuditCommand(CLI::App& app, CliContext& ctx) {
  auto args = std::make_shared<AuditArgs>();
  auto* cmd = app.add_subcommand("audit", "Audit cached generation against the uncached reference (exit 0 clean, 1 divergent, 2 error)");
  cmd->add_option("--model", args->spec.modelDir, "HF checkpoint directory (omit for trace+trace mode)");
  cmd->add_option("--trace", args->spec.traceFile, "audit this trace (from any engine) instead of running the built-in engine");
  cmd->add_option("--reference-trace", args->spec.referenceTraceFile, "trace+trace mode: the uncached (reference) trace");
  cmd->add_option("--weights-version", args->weightsVersions,
                  "N=DIR: the checkpoint of weights version N that the trace's steps name "
                  "(repeatable; --model is version 0)");
  cmd->add_option("--prompt", args->spec.prompts, "prompt text, one request each (built-in engine)");
  cmd->add_option("--ids", args->ids, "prompt token ids as 1,2,3, one request each");
  cmd->add_option("--arrival", args->spec.arrivalTicks, "arrival tick per request (default 0)");
  cmd->add_option("--max-new", args->spec.maxNewTokens, "new tokens per request")->check(CLI::PositiveNumber);
  cmd->add_option("--fault", args->spec.faults, "inject a fault (repeatable), see below");
  args->sampling.addTo(*cmd, 0.0);
  cmd->add_option("--save-trace", args->spec.saveTraceTo, "write the built-in engine's trace here");
  cmd->add_flag("--per-step-reference", args->spec.options.perStepReference,
                "cross-check: also recompute every step uncached (slower)");
  cmd->add_option("--tolerance-scale", args->spec.options.toleranceScale, "multiply the dtype tolerance");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->add_option("--report", args->reportPath, "write the JSON report to this file");
  cmd->add_option("--markdown", args->markdownPath, "write a Markdown summary to this file");
  cmd->add_flag("--force", args->force, "overwrite --report/--markdown files");
  cmd->footer(FaultSpec::helpText());
  cmd->callback([args, &ctx]() { run(*args, ctx); });
}

}  // namespace kvscope::cli
