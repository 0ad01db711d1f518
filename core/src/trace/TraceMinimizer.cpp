#include "kvscope/TraceMinimizer.hpp"

#include "kvscope/FailureMatrix.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/TraceFile.hpp"

namespace kvscope {

namespace fs = std::filesystem;

namespace {

bool isRoot(const Finding& f) { return f.causedBy.empty() && FailureMatrix::row(f.id).divergent; }

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// What to keep of the steps, layers and side data; the step rule is per trace (a cached
// trace cuts by tick, its reference by each request's last kept step).
struct Keep {
  std::function<bool(const TraceStep&)> step;
  std::vector<int64_t> layers;  // model layers kept; empty = the trace's
  bool snapshots = true;
  int64_t snapshotsFromTick = -1;
  bool checksums = true;
  int64_t lastTick = -1;  // events after it are dropped (-1: all kept)
};

Trace cutWith(const Trace& t, const Keep& keep) {
  Trace out;
  out.formatVersion = t.formatVersion;
  out.engine = t.engine;
  out.mode = t.mode;
  out.model = t.model;
  out.faults = t.faults;
  out.faultFirings = t.faultFirings;
  out.kvCache = t.kvCache;  // a quantised cache stays declared, or its records would not fit
  out.tensorDtype = t.tensorDtype;
  out.recordedLayers = t.recordedLayers;
  if (!keep.layers.empty()) {  // only layers the trace holds can be kept
    out.recordedLayers.clear();
    for (int64_t l : keep.layers)
      if (t.hasLayer(l)) out.recordedLayers.push_back(l);
    if (out.recordedLayers.size() == static_cast<size_t>(t.model.numLayers))
      out.recordedLayers.clear();  // every layer: no subset
  }
  std::map<int64_t, int64_t> lastStep, kept, total, keptTokens;
  for (const TraceStep& s : t.steps) {
    ++total[s.request];
    if (!keep.step(s)) continue;
    TraceStep c = s;
    const bool snapshots =
        keep.snapshots && (keep.snapshotsFromTick < 0 || s.tick >= keep.snapshotsFromTick);
    for (size_t l = 0; l < c.layers.size(); ++l) {
      TraceLayerRecord& rec = c.layers[l];
      const bool dropLayer = !out.hasLayer(static_cast<int64_t>(l));
      if (dropLayer) rec = TraceLayerRecord{};
      if (dropLayer || !snapshots) rec.snapshotKeys = rec.snapshotValues = FloatTensor{};
      if (dropLayer || !keep.checksums) rec.keyChecksum = rec.valueChecksum = std::nullopt;
    }
    // A step either has checksums for every layer it holds or none (the file's checksum row).
    bool partial = false;
    for (size_t l = 0; l < c.layers.size(); ++l)
      if (out.hasLayer(static_cast<int64_t>(l)))
        partial = partial || !c.layers[l].keyChecksum || !c.layers[l].valueChecksum;
    if (partial)
      for (auto& rec : c.layers) rec.keyChecksum = rec.valueChecksum = std::nullopt;
    lastStep[s.request] =
        std::max(lastStep.count(s.request) ? lastStep[s.request] : int64_t{-1}, s.step);
    ++kept[s.request];
    // A step chooses one token, plus its accepted drafts under speculative decoding.
    if (s.chosenToken >= 0) keptTokens[s.request] += 1 + s.acceptedCount;
    out.steps.push_back(std::move(c));
  }
  for (const TraceRequest& r : t.requests) {
    if (!kept.count(r.id)) continue;
    TraceRequest c = r;
    if (kept[r.id] < total[r.id]) {  // later steps cut: a shorter run of the same request
      const size_t n = std::min(
          c.generated.size(), static_cast<size_t>(std::max(lastStep[r.id] + 1, keptTokens[r.id])));
      c.generated.resize(n);
      c.maxNewTokens = static_cast<int64_t>(n);
      c.stopReason = "max_new_tokens";
    }
    out.requests.push_back(std::move(c));
  }
  for (const TraceEvent& e : t.events)
    if (keep.lastTick < 0 || e.tick <= keep.lastTick) out.events.push_back(e);
  return out;
}

bool anySnapshots(const Trace& t) {
  for (const auto& s : t.steps)
    for (const auto& r : s.layers)
      if (!r.snapshotKeys.shape.empty()) return true;
  return false;
}

bool anyChecksums(const Trace& t) {
  for (const auto& s : t.steps)
    for (const auto& r : s.layers)
      if (r.keyChecksum) return true;
  return false;
}

int64_t evidenceInt(const Finding& f, const char* name) {
  auto it = f.evidence.find(name);
  if (it == f.evidence.end() || !std::isfinite(it->second)) return -1;
  return static_cast<int64_t>(it->second);
}

// The layer subsets worth trying, smallest first, each smaller than what `t` holds.
std::vector<std::vector<int64_t>> layerCandidates(const Trace& t, const MinimizeTarget& target) {
  bool records = false;  // a trace without K/V records (logits only) has nothing to cut
  for (const auto& s : t.steps)
    for (const auto& r : s.layers) records = records || !r.keys.empty() || !r.snapshotKeys.empty();
  if (!records) return {};
  const Finding& f = target.finding;
  std::set<int64_t> named;
  for (int64_t l :
       {f.layer, target.first.layer, evidenceInt(f, "source_layer"), evidenceInt(f, "other_layer")})
    if (t.hasLayer(l)) named.insert(l);
  if (named.empty()) named.insert(t.layerIndices().front());
  std::vector<std::vector<int64_t>> out;
  auto add = [&](std::set<int64_t> layers) {
    std::vector<int64_t> v(layers.begin(), layers.end());
    if (v.size() >= t.layerIndices().size()) return;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  };
  add(named);
  std::set<int64_t> withZero = named;
  if (t.hasLayer(0)) withZero.insert(0);
  add(withZero);
  std::set<int64_t> prefix;
  for (int64_t l : t.layerIndices())
    if (l <= *named.rbegin()) prefix.insert(l);
  add(prefix);
  return out;
}

std::string shellQuote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,+-@%") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A scratch folder removed when the minimization ends.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("kvscope-minimize-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

bool TraceCut::operator==(const TraceCut& o) const {
  return requests == o.requests && lastTick == o.lastTick && layers == o.layers &&
         snapshots == o.snapshots && snapshotsFromTick == o.snapshotsFromTick &&
         checksums == o.checksums;
}

std::string TraceCut::describe() const {
  std::ostringstream os;
  if (requests.empty()) {
    os << "all requests";
  } else {
    os << (requests.size() == 1 ? "request " : "requests ");
    for (size_t i = 0; i < requests.size(); ++i) os << (i ? "," : "") << requests[i];
  }
  os << "; "
     << (lastTick < 0 ? std::string("all steps") : "steps up to tick " + std::to_string(lastTick));
  if (layers.empty()) {
    os << "; all layers";
  } else {
    os << (layers.size() == 1 ? "; layer " : "; layers ");
    for (size_t i = 0; i < layers.size(); ++i) os << (i ? ", " : "") << layers[i];
  }
  if (!snapshots)
    os << "; no snapshots";
  else if (snapshotsFromTick >= 0)
    os << "; snapshots from tick " << snapshotsFromTick;
  if (!checksums) os << "; no checksums";
  return os.str();
}

Trace cutTrace(const Trace& trace, const TraceCut& cut) {
  Keep keep;
  keep.step = [&cut](const TraceStep& s) {
    return (cut.requests.empty() || contains(cut.requests, s.request)) &&
           (cut.lastTick < 0 || s.tick <= cut.lastTick);
  };
  keep.layers = cut.layers;
  keep.snapshots = cut.snapshots;
  keep.snapshotsFromTick = cut.snapshotsFromTick;
  keep.checksums = cut.checksums;
  keep.lastTick = cut.lastTick;
  return cutWith(trace, keep);
}

std::optional<MinimizeTarget> minimizeTarget(const AuditReport& report) {
  for (const Finding& f : report.findings)
    if (isRoot(f)) return MinimizeTarget{f, report.firstDivergence};
  return std::nullopt;
}

bool showsTarget(const AuditReport& report, const MinimizeTarget& target) {
  const Finding& want = target.finding;
  // The evidence that names another request or layer must still name it (a cut that drops
  // the other request may leave a weaker finding of the same id).
  auto sameEvidence = [&](const Finding& f) {
    for (const char* key : {"other_request", "other_layer", "source_layer"})
      if (evidenceInt(want, key) != evidenceInt(f, key)) return false;
    return true;
  };
  const bool finding =
      std::any_of(report.findings.begin(), report.findings.end(), [&](const Finding& f) {
        return isRoot(f) && f.id == want.id && f.request == want.request && f.step == want.step &&
               f.layer == want.layer && sameEvidence(f);
      });
  const FirstDivergence& a = report.firstDivergence;
  const FirstDivergence& b = target.first;
  return finding && a.present == b.present && a.request == b.request && a.step == b.step &&
         a.layer == b.layer;
}

MinimizedTrace minimizeTrace(const Trace& cached, const Trace* reference, const AuditReport& report,
                             const CandidateAudit& audit) {
  auto target = minimizeTarget(report);
  if (!target) throw UsageError("the audit is clean: there is no finding to minimize a trace for");
  MinimizedTrace best;
  best.target = *target;
  best.trace = cached;
  if (reference) best.reference = *reference;
  best.report = report;

  const Finding& f = target->finding;
  const int64_t request = f.request >= 0 ? f.request : target->first.request;

  // The reference keeps, per request, the steps the cached cut keeps.
  auto referenceFor = [&](const Trace& cut, const TraceCut& c) -> std::optional<Trace> {
    if (!reference) return std::nullopt;
    std::map<int64_t, int64_t> last;
    for (const auto& s : cut.steps)
      last[s.request] = std::max(last.count(s.request) ? last[s.request] : int64_t{-1}, s.step);
    Keep keep;
    keep.step = [last](const TraceStep& s) {
      auto it = last.find(s.request);
      return it != last.end() && s.step <= it->second;
    };
    keep.layers = c.layers;
    keep.snapshots = c.snapshots;
    keep.checksums = c.checksums;
    return cutWith(*reference, keep);
  };
  TraceCut current;
  auto attempt = [&](const TraceCut& c) {
    Trace candidate = cutTrace(cached, c);
    if (candidate.steps.empty()) return false;
    std::optional<Trace> ref = referenceFor(candidate, c);
    ++best.audits;
    AuditReport r;
    try {
      r = audit(candidate, ref ? &*ref : nullptr);
    } catch (const InputError&) {
      return false;  // a cut the reader or the audit refuses is not a reproducer
    } catch (const UsageError&) {
      return false;
    }
    if (!showsTarget(r, *target)) return false;
    current = c;
    best.cut = c;
    best.trace = std::move(candidate);
    best.reference = std::move(ref);
    best.report = std::move(r);
    return true;
  };

  // 1. Steps: the finding's request up to the divergence, then one or two more steps.
  std::vector<const TraceStep*> own;
  for (const auto& s : cached.steps)
    if (s.request == request) own.push_back(&s);
  std::sort(own.begin(), own.end(),
            [](const TraceStep* a, const TraceStep* b) { return a->step < b->step; });
  const int64_t divergence =
      std::max(f.step, target->first.request == request ? target->first.step : int64_t{-1});
  int64_t maxTick = -1;
  for (const auto& s : cached.steps) maxTick = std::max(maxTick, s.tick);
  for (int64_t margin = 0; margin <= 2; ++margin) {
    auto it = std::find_if(own.begin(), own.end(),
                           [&](const TraceStep* s) { return s->step == divergence + margin; });
    if (it == own.end() || (*it)->tick >= maxTick) break;  // nothing later to cut
    TraceCut c = current;
    c.lastTick = (*it)->tick;
    if (attempt(c)) break;
  }

  // 2. Requests: the finding's alone, then with the requests its evidence names or that
  // share its cache slot in the kept steps.
  std::vector<int64_t> alone{request};
  std::set<int64_t> involved{request};
  if (target->first.request >= 0) involved.insert(target->first.request);
  for (const Finding& g : report.findings)
    if (isRoot(g) && g.request == request && evidenceInt(g, "other_request") >= 0)
      involved.insert(evidenceInt(g, "other_request"));
  std::set<int64_t> slots;
  for (const auto& s : best.trace.steps)
    if (s.request == request) slots.insert(s.slot);
  for (const auto& s : best.trace.steps)
    if (slots.count(s.slot)) involved.insert(s.request);
  const std::vector<int64_t> withInvolved(involved.begin(), involved.end());
  for (const auto& ids : {alone, withInvolved}) {
    if (ids.size() >= best.trace.requests.size()) break;
    TraceCut c = current;
    c.requests = ids;
    if (attempt(c)) break;
  }

  // 3. Layers: the ones the finding, the first divergence and the evidence name; then with
  // layer 0 (position and stream evidence probe it); then every layer up to the highest.
  for (const auto& layers : layerCandidates(best.trace, *target)) {
    TraceCut c = current;
    c.layers = layers;
    if (attempt(c)) break;
  }

  // 4. Snapshots and checksums, when the evidence does without them.
  if (anySnapshots(best.trace) || (best.reference && anySnapshots(*best.reference))) {
    TraceCut c = current;
    c.snapshots = false;
    auto before = std::find_if(own.begin(), own.end(),
                               [&](const TraceStep* s) { return s->step == divergence - 1; });
    if (!attempt(c) && before != own.end() && (*before)->tick > 0) {
      c.snapshots = true;  // the evidence compares the cache before and at the divergence
      c.snapshotsFromTick = (*before)->tick;
      attempt(c);
    }
  }
  if (anyChecksums(best.trace) || (best.reference && anyChecksums(*best.reference))) {
    TraceCut c = current;
    c.checksums = false;
    attempt(c);
  }

  if (best.cut.requests.empty() && best.trace.requests.size() < cached.requests.size())
    for (const auto& r : best.trace.requests)
      best.cut.requests.push_back(r.id);  // what the tick cut left
  for (const Finding& g : report.findings) {
    if (!isRoot(g)) continue;
    const bool still = std::any_of(best.report.findings.begin(), best.report.findings.end(),
                                   [&](const Finding& h) { return isRoot(h) && h.id == g.id; });
    if (!still && !std::count(best.dropped.begin(), best.dropped.end(), g.id))
      best.dropped.push_back(g.id);
  }
  return best;
}

MinimizedTrace minimizeAudit(const AuditJobSpec& spec, const AuditJobOutput& out) {
  AuditOptions options = spec.options;
  options.progress = nullptr;
  std::shared_ptr<Model> model;
  if (!spec.modelDir.empty()) {
    model = Model::load(spec.modelDir);  // from the checkpoint, as the reproducer will
    if (options.tokenizerVocabSize == 0) {
      try {
        options.tokenizerVocabSize = Tokenizer::loadFromDirectory(spec.modelDir)->vocabSize();
      } catch (const InputError&) {
        // a model without tokenizer files: ids only, as runAuditJob does
      }
    }
  }
  const Trace* reference = out.result.referenceTrace.get();
  if (!model && !reference)
    throw UsageError("minimizing needs the model or the reference trace the audit used");
  ScratchDir scratch;
  const std::string cachedPath = (scratch.path / "candidate.kvtrace").string();
  const std::string referencePath = (scratch.path / "candidate.reference.kvtrace").string();
  CandidateAudit audit = [&](const Trace& cached, const Trace* ref) {
    TraceFile::write(cached, cachedPath, true);
    const Trace readBack = TraceFile::read(cachedPath);
    if (ref) {
      TraceFile::write(*ref, referencePath, true);
      return Auditor::auditTraces(TraceFile::read(referencePath), readBack, options).report;
    }
    return Auditor::audit(*model, readBack, options).report;
  };
  return minimizeTrace(out.result.trace, model ? nullptr : reference, out.result.report, audit);
}

std::string referencePathFor(const std::string& path) {
  const fs::path p(path);
  const std::string stem = p.extension() == ".kvtrace" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / (stem + ".reference.kvtrace")).string();
}

std::vector<std::string> writeMinimized(const MinimizedTrace& m, const std::string& path,
                                        bool overwrite) {
  std::vector<std::string> written;
  const std::string ref = referencePathFor(path);
  if (!overwrite) {
    if (fs::exists(path))
      throw InputError(path, "", "refusing to overwrite an existing file (pass --force)");
    if (m.reference && fs::exists(ref))
      throw InputError(ref, "", "refusing to overwrite an existing file (pass --force)");
  }
  TraceFile::write(m.trace, path, overwrite);
  written.push_back(path);
  if (m.reference) {
    TraceFile::write(*m.reference, ref, overwrite);
    written.push_back(ref);
  }
  return written;
}

std::string reproduceCommand(const AuditJobSpec& spec, const std::string& tracePath,
                             const std::string& referencePath) {
  std::string cmd = "kvscope-cli audit";
  if (!spec.modelDir.empty())
    cmd += " --model " + shellQuote(spec.modelDir);
  else if (!referencePath.empty())
    cmd += " --reference-trace " + shellQuote(referencePath);
  cmd += " --trace " + shellQuote(tracePath);
  if (!spec.modelDir.empty())
    for (const auto& item : weightsVersionItems(spec))
      cmd += " --weights-version " + shellQuote(item);
  if (spec.options.toleranceScale != 1.0) {
    std::ostringstream os;
    os.precision(17);
    os << spec.options.toleranceScale;
    cmd += " --tolerance-scale " + os.str();
  }
  return cmd;
}

std::string reproducerMarkdown(const MinimizedTrace& m, const std::string& command,
                               uintmax_t originalBytes, uintmax_t minimizedBytes) {
  const Finding& f = m.target.finding;
  std::ostringstream os;
  os << "\n## Minimal reproducer\n\n";
  os << "The smallest trace found that still shows `" << f.id << "` at request " << f.request
     << ", step " << f.step << (f.layer >= 0 ? ", layer " + std::to_string(f.layer) : std::string())
     << " (the first divergence: request " << m.target.first.request << ", step "
     << m.target.first.step
     << (m.target.first.layer >= 0 ? ", layer " + std::to_string(m.target.first.layer)
                                   : std::string())
     << "). It reproduces the verdict with:\n\n```sh\n"
     << command << "\n```\n\n";
  os << "Kept: " << m.cut.describe() << " (" << m.trace.requests.size() << " request"
     << (m.trace.requests.size() == 1 ? "" : "s") << ", " << m.trace.steps.size() << " steps; "
     << m.audits << " candidate audits).";
  if (originalBytes > 0 && minimizedBytes > 0)
    os << " Size: " << minimizedBytes << " bytes, from " << originalBytes << " ("
       << static_cast<int>(std::lround(100.0 * static_cast<double>(minimizedBytes) /
                                       static_cast<double>(originalBytes)))
       << " %).";
  if (!m.dropped.empty()) {
    os << " Not shown by it (later or elsewhere in the run):";
    for (const auto& id : m.dropped) os << " `" << id << "`";
    os << ".";
  }
  os << "\n";
  return os.str();
}

namespace {
uintmax_t fileBytes(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : n;
}
}  // namespace

Reproducer writeReproducer(const AuditJobSpec& spec, const MinimizedTrace& m,
                           const std::string& path, const std::string& commandPath, bool overwrite,
                           uintmax_t bytesBefore) {
  Reproducer r;
  if (m.cut == TraceCut{} && !spec.traceFile.empty() && spec.referenceTraceFile.empty()) {
    // Nothing could be cut: the audited file itself is the smallest reproducer.
    if (!overwrite && fs::exists(path))
      throw InputError(path, "", "refusing to overwrite an existing file (pass --force)");
    std::error_code ec;
    fs::copy_file(spec.traceFile, path, fs::copy_options::overwrite_existing, ec);
    if (ec) throw InputError(path, "", "cannot write: " + ec.message());
    r.written = {path};
  } else {
    r.written = writeMinimized(m, path, overwrite);
  }
  for (const auto& p : r.written) r.bytesAfter += fileBytes(p);
  r.bytesBefore = bytesBefore;
  const std::string ref = m.reference ? referencePathFor(commandPath) : std::string();
  r.command = reproduceCommand(spec, commandPath, ref);
  r.markdown = reproducerMarkdown(m, r.command, r.bytesBefore, r.bytesAfter);
  return r;
}

uintmax_t auditedTraceBytes(const AuditJobSpec& spec, const AuditJobOutput& out) {
  if (!spec.traceFile.empty())
    return fileBytes(spec.traceFile) +
           (spec.referenceTraceFile.empty() ? 0 : fileBytes(spec.referenceTraceFile));
  ScratchDir scratch;
  const std::string tmp = (scratch.path / "audited.kvtrace").string();
  TraceFile::write(out.result.trace, tmp, true);
  return fileBytes(tmp);
}

AuditJobSpec withAbsolutePaths(AuditJobSpec spec) {
  if (!spec.modelDir.empty()) spec.modelDir = fs::absolute(spec.modelDir).string();
  for (auto& [version, d] : spec.options.weightsDirectories) d = fs::absolute(d).string();
  return spec;
}

std::string reproduceScript(const std::string& command, const std::string& besideWriter) {
  const std::string cli = "kvscope-cli";
  const std::string args = command.rfind(cli, 0) == 0 ? command.substr(cli.size()) : " " + command;
  // Single-quoted for sh ('\'' closes, escapes and reopens a quote).
  std::string quoted = "'";
  for (char c : besideWriter) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  std::string s =
      "#!/bin/sh\n# Reproduces the audit's first finding on the minimized trace (exit 1 = "
      "divergent).\n# kvscope-cli: $KVSCOPE_CLI when set, else the one beside the program that "
      "wrote this bundle, else the one on PATH.\n"
      "cli=\"${KVSCOPE_CLI:-}\"\n";
  if (!besideWriter.empty())
    s += "if [ -z \"$cli\" ] && [ -x " + quoted + " ]; then cli=" + quoted + "; fi\n";
  s += "if [ -z \"$cli\" ]; then cli=\"$(command -v kvscope-cli)\" || cli=; fi\n"
       "if [ -z \"$cli\" ]; then\n"
       "  echo \"reproduce.sh: kvscope-cli not found (" +
       (besideWriter.empty() ? std::string() : "not at " + quoted + ", ") +
       "not on PATH): set KVSCOPE_CLI=/path/to/kvscope-cli\" >&2\n"
       "  exit 127\nfi\n"
       "cd \"$(dirname \"$0\")\" && exec \"$cli\"" +
       args + " \"$@\"\n";
  return s;
}

}  // namespace kvscope
