// kvscope-cli audit: the staged audit, headless (CI). Exit 0 clean, 1 divergent, 2 error.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "AuditInputArgs.hpp"
#include "CliCommands.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceFileSniffer.hpp"
#include "kvscope/TraceMinimizer.hpp"

namespace kvscope::cli {

namespace {

struct AuditArgs {
  AuditJobSpec spec;
  bool json = false;
  std::string reportPath;
  std::string markdownPath;
  bool force = false;
  AuditInputArgs inputs;  // model, traces, prompts, faults, sampling: shared with inspect
  std::string minimizePath;                  // --minimize OUT.kvtrace
  std::string bundleDir;                     // --export-bundle DIR
};

namespace fs = std::filesystem;

void writeText(const std::string& path, const std::string& text, bool force) {
  if (!force && std::filesystem::exists(path))
    throw InputError(path, "", "refusing to overwrite an existing file (pass --force)");
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw InputError(path, "", "cannot write");
  out << text;
}

// The minimized reproducer written to `path` (writeReproducer: the one rule for the CLI and
// the GUI) and what it was cut from.
struct CliReproducer {
  MinimizedTrace minimized;
  Reproducer written;
};

CliReproducer writeCliReproducer(const AuditJobSpec& spec, const MinimizedTrace& m,
                                 const std::string& path, const std::string& commandPath,
                                 bool force, uintmax_t before) {
  return {m, writeReproducer(spec, m, path, commandPath, force, before)};
}

nlohmann::json reproducerJson(const CliReproducer& c) {
  const Finding& f = c.minimized.target.finding;
  const Reproducer& r = c.written;
  return {{"trace", r.written.at(0)},
          {"reference_trace", r.written.size() > 1 ? r.written[1] : ""},
          {"command", r.command},
          {"kept", c.minimized.cut.describe()},
          {"finding", {{"id", f.id}, {"request", f.request}, {"step", f.step}, {"layer", f.layer}}},
          {"requests", c.minimized.trace.requests.size()},
          {"steps", c.minimized.trace.steps.size()},
          {"layers", c.minimized.trace.layerIndices()},
          {"bytes_before", r.bytesBefore},
          {"bytes_after", r.bytesAfter},
          {"candidate_audits", c.minimized.audits},
          {"not_shown", c.minimized.dropped}};
}

// --export-bundle DIR: the report (JSON, Markdown with the reproducer section), the
// minimized trace and reproduce.sh, which runs the reproducer from the bundle folder.
void exportBundle(const std::string& dir, const AuditJobSpec& spec, const AuditJobOutput& out,
                  const std::optional<MinimizedTrace>& m, uintmax_t before, bool force) {
  fs::create_directories(dir);
  const AuditReport& rep = out.result.report;
  const auto json = (fs::path(dir) / "report.json").string();
  const auto md = (fs::path(dir) / "summary.md").string();
  std::string markdown = rep.toMarkdown();
  nlohmann::json j = rep.toJson();
  if (m) {
    // reproduce.sh changes into the bundle folder: the inputs are named absolutely.
    const CliReproducer r = writeCliReproducer(withAbsolutePaths(spec), *m,
                                               (fs::path(dir) / "minimized.kvtrace").string(),
                                               "minimized.kvtrace", force, before);
    markdown += r.written.markdown;
    j["minimized"] = reproducerJson(r);
    const auto sh = (fs::path(dir) / "reproduce.sh").string();
    std::error_code ec;  // this kvscope-cli, for when $KVSCOPE_CLI is unset and it is not on PATH
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    writeText(sh, reproduceScript(r.written.command, ec ? std::string() : self.string()), force);
    fs::permissions(sh, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add);
  }
  writeText(json, j.dump(2) + "\n", force);
  writeText(md, markdown, force);
}

void run(AuditArgs& a, CliContext& ctx) {
  a.inputs.apply(a.spec);
  showProgressOnTerminal(a.spec);
  // A wrong file given as a trace is named for what it is before the reader's detail.
  for (const std::string& t : {a.spec.traceFile, a.spec.referenceTraceFile})
    if (const FileSniff s = describeFile(t);
        !t.empty() && s.kind != FileKind::Missing && !s.isTrace())
      throw InputError(t, "", notATraceMessage(s));
  AuditJobOutput out = runAuditJob(a.spec);
  const AuditReport& rep = out.result.report;
  std::optional<MinimizedTrace> minimized;
  std::optional<CliReproducer> reproducer;
  uintmax_t before = 0;
  if ((!a.minimizePath.empty() || !a.bundleDir.empty()) && !rep.clean()) {
    if (a.spec.options.progress) a.spec.options.progress(1.0, "minimizing");
    minimized = minimizeAudit(a.spec, out);
    before = auditedTraceBytes(a.spec, out);
  }
  if (!a.minimizePath.empty()) {
    if (minimized)
      reproducer =
          writeCliReproducer(a.spec, *minimized, a.minimizePath, a.minimizePath, a.force, before);
    else
      std::cerr
          << "--minimize: the audit is clean; there is no finding to reproduce (nothing written)\n";
  }
  if (!a.bundleDir.empty()) exportBundle(a.bundleDir, a.spec, out, minimized, before, a.force);
  if (!a.reportPath.empty()) writeText(a.reportPath, rep.toJson().dump(2) + "\n", a.force);
  if (!a.markdownPath.empty())
    writeText(a.markdownPath,
              rep.toMarkdown() + (reproducer ? reproducer->written.markdown : std::string()),
              a.force);
  if (a.json) {
    auto j = rep.toJson();
    if (reproducer) j["minimized"] = reproducerJson(*reproducer);
    j["requests"] = nlohmann::json::array();
    for (size_t i = 0; i < out.result.trace.requests.size(); ++i) {
      const auto& r = out.result.trace.requests[i];
      j["requests"].push_back({{"id", r.id}, {"prompt_ids", r.promptIds}, {"generated", r.generated},
                               {"text", i < out.decodedText.size() ? out.decodedText[i] : ""}, {"stop_reason", r.stopReason}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << rep.toText();
    if (reproducer)
      std::cout << "minimized reproducer: " << reproducer->written.written.at(0) << " ("
                << reproducer->written.bytesAfter << " bytes, from "
                << reproducer->written.bytesBefore << "; " << reproducer->minimized.cut.describe()
                << ")\n"
                << "reproduce: " << reproducer->written.command << "\n";
  }
  ctx.exitCode = rep.clean() ? 0 : 1;
}

}  // namespace

void registerAuditCommand(CLI::App& app, CliContext& ctx) {
  auto args = std::make_shared<AuditArgs>();
  auto* cmd = app.add_subcommand("audit", "Audit cached generation against the uncached reference (exit 0 clean, 1 divergent, 2 error)");
  args->inputs.addTo(*cmd, args->spec);  // and the fault syntax as the footer
  cmd->add_option("--save-trace", args->spec.saveTraceTo, "write the built-in engine's trace here");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->add_option("--report", args->reportPath, "write the JSON report to this file");
  cmd->add_option("--markdown", args->markdownPath, "write a Markdown summary to this file");
  cmd->add_option(
      "--minimize", args->minimizePath,
      "write the smallest trace that still shows the first finding here (and, without a model, "
      "its reference as OUT.reference.kvtrace); --markdown then gives the command that reproduces "
      "it");
  cmd->add_option("--export-bundle", args->bundleDir,
                  "write a bug-report bundle to this folder: report.json, summary.md, "
                  "minimized.kvtrace, reproduce.sh");
  cmd->add_flag("--force", args->force,
                "overwrite --report/--markdown/--minimize/--export-bundle files");
  cmd->callback([args, &ctx]() { run(*args, ctx); });
}

}  // namespace kvscope::cli
