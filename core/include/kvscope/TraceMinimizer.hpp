// Minimal reproducers: the smallest trace that still shows an audit's first finding (only
// the affected requests, the steps up to the first divergence plus what the evidence
// needs, the layers involved) and the kvscope-cli command that reproduces the verdict on
// it. Front ends call minimizeAudit() after runAuditJob() (the CLI's `audit --minimize`;
// the GUI's bug-report bundle can call the same), on the thread that ran the audit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "kvscope/AuditReport.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

/// What a cut keeps of a recorded run.
struct TraceCut {
  std::vector<int64_t> requests;   // ids kept (unchanged); empty = all
  int64_t lastTick = -1;           // steps with tick <= lastTick are kept; -1 = all
  std::vector<int64_t> layers;     // model layers kept (ascending; the trace's recorded
                                   // layers); empty = all
  bool snapshots = true;           // keep full-cache snapshots
  int64_t snapshotsFromTick = -1;  // with snapshots: only of steps with tick >= this (-1 = all)
  bool checksums = true;           // keep cache checksums
  bool operator==(const TraceCut& o) const;
  std::string describe() const;  // "requests 0,1; steps up to tick 4; layers 1, 2; no snapshots"
};

/// Applies a cut: drops the other requests, the later steps (and events), the records of
/// the other layers (the result's recordedLayers name the kept ones), and the snapshots /
/// checksums when asked. A request whose steps were
/// cut keeps the generated tokens its kept steps chose (max_new_tokens and the stop reason
/// follow), so the result is a valid trace of a shorter run.
Trace cutTrace(const Trace& trace, const TraceCut& cut);

/// The finding a reproducer must keep showing: the report's first root finding and the
/// first divergence.
struct MinimizeTarget {
  Finding finding;
  FirstDivergence first;
};
/// nullopt when the report has no root finding (a clean audit).
std::optional<MinimizeTarget> minimizeTarget(const AuditReport& report);
/// True when `report` shows the target: a root finding with the same id, request, step and
/// layer whose evidence names the same other request and layer (other_request,
/// other_layer, source_layer), and the same first divergence (request, step, layer).
bool showsTarget(const AuditReport& report, const MinimizeTarget& target);

struct MinimizedTrace {
  MinimizeTarget target;
  TraceCut cut;
  Trace trace;                       // the minimized cached trace
  std::optional<Trace> reference;    // trace+trace mode: the reference cut the same way
  AuditReport report;                // the audit of the minimized trace (shows the target)
  int audits = 0;                    // candidate audits it took
  std::vector<std::string> dropped;  // root findings of the original the cut no longer shows
};

/// Audits a candidate: cached trace and, in trace+trace mode, the reference (else null).
using CandidateAudit = std::function<AuditReport(const Trace& cached, const Trace* reference)>;

/// Greedy reduction, one dimension at a time, each step keeping the smallest choice whose
/// audit still shows the target: steps (up to the first divergence, +1, +2, all), requests
/// (the finding's, plus the ones its evidence names or that share its cache slot, all),
/// layers (the finding's and the first divergence's with the ones its evidence names, then
/// with layer 0, then every layer up to the highest of them, all), snapshots (none, from
/// the step before the divergence, all), checksums. Throws UsageError for a clean report.
MinimizedTrace minimizeTrace(const Trace& cached, const Trace* reference, const AuditReport& report,
                             const CandidateAudit& audit);

/// minimizeTrace for the audit `out` that runAuditJob(`spec`) produced: candidates are
/// written and read back (exactly what the reproducer does) and audited with the same
/// model, weights versions and options (model+engine runs are audited as model+trace).
MinimizedTrace minimizeAudit(const AuditJobSpec& spec, const AuditJobOutput& out);

/// Writes the minimized trace to `path` and, in trace+trace mode, its reference to
/// referencePathFor(path). Returns the paths written. Throws InputError naming the path.
std::vector<std::string> writeMinimized(const MinimizedTrace& m, const std::string& path,
                                        bool overwrite);
/// "OUT.reference.kvtrace" for "OUT.kvtrace".
std::string referencePathFor(const std::string& path);

/// The kvscope-cli command that reproduces the verdict on the written files (arguments
/// shell-quoted where needed): the model, weights versions and tolerance scale of `spec`.
std::string reproduceCommand(const AuditJobSpec& spec, const std::string& tracePath,
                             const std::string& referencePath = "");
/// A Markdown section for bug reports: the command, what the cut kept, sizes.
std::string reproducerMarkdown(const MinimizedTrace& m, const std::string& command,
                               uintmax_t originalBytes, uintmax_t minimizedBytes);

/// A reproducer as a bug report carries it: the files written, the command that reproduces
/// the verdict on them, the sizes and the Markdown section. Built by writeReproducer(), the
/// one function `kvscope-cli audit --minimize / --export-bundle` and the GUI's bundle use.
struct Reproducer {
  std::vector<std::string> written;  // the minimized trace (and, trace+trace, its reference)
  std::string command;               // reproduceCommand() naming commandPath
  uintmax_t bytesBefore = 0;         // the audited run's files
  uintmax_t bytesAfter = 0;          // the written files
  std::string markdown;              // reproducerMarkdown()
};
/// Writes `m` to `path` (the audited trace file itself when nothing could be cut) and names
/// `commandPath` in the command (the path as the command will see it, e.g. relative to a
/// bundle folder). Throws InputError naming the path it cannot write.
Reproducer writeReproducer(const AuditJobSpec& spec, const MinimizedTrace& m,
                           const std::string& path, const std::string& commandPath, bool overwrite,
                           uintmax_t bytesBefore);
/// The bytes of the audited run as files: the trace (and reference) given, or the built-in
/// engine's trace as TraceFile writes it.
uintmax_t auditedTraceBytes(const AuditJobSpec& spec, const AuditJobOutput& out);
/// `spec` with its model and weights-version directories made absolute (a bundle's command
/// runs from the bundle folder).
AuditJobSpec withAbsolutePaths(AuditJobSpec spec);
/// A bundle's reproduce.sh: changes into its folder and runs `command`, passing its
/// arguments on. kvscope-cli is $KVSCOPE_CLI when set, else `besideWriter` (the kvscope-cli
/// beside the program that wrote the bundle) when it is executable, else the one on PATH;
/// with none it says what to set and exits 127.
std::string reproduceScript(const std::string& command, const std::string& besideWriter = {});

}  // namespace kvscope
