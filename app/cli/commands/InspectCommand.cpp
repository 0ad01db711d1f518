// kvscope-cli inspect: one step of an audit in a terminal (over SSH, in a CI log): the
// verdict, the first check and the point shown, the request's token strip around the step,
// the layer overview against the audit's tolerances, the reference | cached | difference
// heatmaps of one layer and kv head, the logit delta and the findings there
// (InspectSections.hpp lays them out). Compact by default, fitting the terminal (or
// --width x --height); --full prints every part whole. With stdin and stdout on a terminal,
// keys step through the audit (InspectBrowser.hpp). Exit 0 clean, 1 divergent, 2 bad input.
#include <algorithm>
#include <iostream>
#include <memory>

#include "AuditInputArgs.hpp"
#include "CliChecks.hpp"
#include "CliCommands.hpp"
#include "InspectBrowser.hpp"
#include "InspectSections.hpp"
#include "TerminalSession.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Inspection.hpp"

namespace kvscope::cli {

namespace {

struct InspectArgs {
  AuditJobSpec spec;
  AuditInputArgs inputs;
  int64_t request = 0, step = 0, layer = 0, head = 0;
  std::string kind;
  int width = 0;
  int height = 0;
  int rows = 32;
  bool full = false;
  bool noKeys = false;
  std::string color = "auto";
  CLI::Option* requestOpt = nullptr;
  CLI::Option* stepOpt = nullptr;
  CLI::Option* layerOpt = nullptr;
  CLI::Option* headOpt = nullptr;
};

// The point to show: the first divergence (or the first request's first step when clean)
// with every field the user gave replaced, each checked against what the audit holds.
InspectionPoint resolvePoint(const Inspector& insp, const InspectArgs& a) {
  const std::vector<int64_t> requests = insp.requests();
  if (requests.empty()) throw UsageError("the audited trace has no requests to inspect");
  InspectionPoint p;
  p.autoHead = p.autoKind = true;
  if (auto fd = insp.firstDivergence()) {
    p = *fd;
  } else {
    p.request = requests.front();
    const auto steps = insp.steps(p.request);
    p.step = steps.empty() ? 0 : steps.front();
  }
  if (a.requestOpt->count() && a.request != p.request) {
    if (std::find(requests.begin(), requests.end(), a.request) == requests.end())
      throw UsageError("--request " + std::to_string(a.request) +
                       ": the trace has no such request (requests: " + rangeList(requests) + ")");
    p.request = a.request;
    const auto steps = insp.steps(p.request);
    const int64_t divergent = insp.timeline(p.request).divergentStep;
    p.step = divergent >= 0 ? divergent : (steps.empty() ? 0 : steps.front());
  }
  const auto steps = insp.steps(p.request);
  if (steps.empty())
    throw UsageError("request " + std::to_string(p.request) + " has no recorded steps");
  if (a.stepOpt->count()) {
    if (std::find(steps.begin(), steps.end(), a.step) == steps.end())
      throw UsageError("--step " + std::to_string(a.step) + ": request " +
                       std::to_string(p.request) +
                       " has no such step (its steps: " + rangeList(steps) + ")");
    p.step = a.step;
  }
  if (a.layerOpt->count()) {
    if (a.layer < 0 || a.layer >= insp.layers())
      throw UsageError("--layer " + std::to_string(a.layer) + ": the model has layers 0-" +
                       std::to_string(insp.layers() - 1));
    p.layer = a.layer;
  }
  if (a.headOpt->count()) {
    if (a.head < 0 || a.head >= insp.kvHeads())
      throw UsageError("--head " + std::to_string(a.head) + ": the model has kv heads 0-" +
                       std::to_string(insp.kvHeads() - 1));
    p.head = a.head;
    p.autoHead = false;
  }
  if (!a.kind.empty()) {
    p.kind = a.kind == "v" || a.kind == "V" ? KvKind::Values : KvKind::Keys;
    p.autoKind = false;
  }
  return p;
}

void run(InspectArgs& a, CliContext& ctx) {
  a.inputs.apply(a.spec);
  showProgressOnTerminal(a.spec);
  // (Trace+trace mode: auditTraces gives every request a reference side, also when stage
  // 1 stopped early.)
  auto output = std::make_shared<const AuditJobOutput>(runAuditJob(a.spec));
  Inspector insp(output);
  const InspectionPoint point = resolvePoint(insp, a);
  ctx.exitCode = insp.output().result.report.clean() ? 0 : 1;
  const Style style(detectColorMode(a.color));
  if (!a.full && !a.noKeys && TerminalSession::available()) {
    browseInspection(insp, point, style, a.width, a.rows);
    return;
  }
  const StepView view = insp.view(point);
  const InspectFrame frame{insp, view, style, terminalWidth(a.width), !a.full};
  const Lines lines = a.full ? fullInspectLayout(frame, a.rows)
                             : compactInspectLayout(frame, terminalHeight(a.height), a.rows, "");
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  std::cout << text << std::flush;
}

}  // namespace

void registerInspectCommand(CLI::App& app, CliContext& ctx) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Show one step of the audit in the terminal: verdict, first "
                                 "check, tokens, layers, logits, findings, the K/V heatmaps of "
                                 "one layer and kv head; on a terminal, keys step through it (" +
                                     inspectKeysHelp() +
                                     ", a automatic head and kind). Exit 0 clean, 1 divergent, "
                                     "2 error");
  args->inputs.addTo(*cmd, args->spec);
  args->requestOpt =
      cmd->add_option("--request", args->request, "request id (default: the first divergence's)");
  args->stepOpt = cmd->add_option(
      "--step", args->step,
      "step of that request, 0 = prefill (default: its first divergent step, else 0)");
  args->layerOpt =
      cmd->add_option("--layer", args->layer, "layer (default: the first divergence's, else 0)");
  args->headOpt =
      cmd->add_option("--head", args->head, "kv head (default: the one whose cache differs most)");
  cmd->add_option("--kind", args->kind, "k or v (default: whichever is further past its tolerance)")
      ->check(CLI::IsMember({"k", "v", "K", "V"}));
  cmd->add_option("--width", args->width,
                  "columns to draw in (default: the terminal's; piped: $COLUMNS, else 80)")
      ->check(wholeNumberIn(40, 1000, "columns"));
  cmd->add_option("--height", args->height,
                  "lines the compact view fits in (default: the terminal's; piped: $LINES, "
                  "else 24)")
      ->check(wholeNumberIn(10, 1000, "lines"));
  cmd->add_option("--rows", args->rows, "cache positions drawn at most (default 32)")
      ->check(wholeNumberIn(1, 100000, "cache positions drawn at most"));
  cmd->add_flag("--full", args->full,
                "every part whole (all layers, --rows positions), not fit to the height; no keys");
  cmd->add_flag("--no-keys", args->noKeys,
                "on a terminal too, print the view once instead of stepping with keys");
  cmd->add_option("--color", args->color, "auto (a terminal without NO_COLOR), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->callback([args, &ctx]() { run(*args, ctx); });
}

}  // namespace kvscope::cli
