#include "kvscope/Auditor.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "audit/Diagnosis.hpp"
#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "audit/PolicyStage.hpp"
#include "audit/rows/RowRegistry.hpp"
#include "model/RotaryEmbedding.hpp"
#include "audit/rows/reference/FirstRecords.hpp"
#include "audit/rows/reference/ReferenceFinding.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/ReferenceStageLines.hpp"
#include "audit/RequestWalk.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/TraceModelFit.hpp"

namespace kvscope {

using namespace detail;

namespace {

class AuditRun {
 public:
  AuditRun(const Trace& cached, ReferenceSet& refs, const AuditOptions& o, int64_t slidingWindow,
           const std::string& storage, double attentionFactor, const Trace* referenceTrace = nullptr,
           bool referenceRounded = true)
      : trace_(cached),
        referenceTrace_(referenceTrace),
        refs_(refs),
        opts_(o),
        tol_(cached.model.computeDtype, o.toleranceScale, storage, cached.model.numLayers,
             cached.kvCache, referenceRounded, attentionFactor),
        window_(slidingWindow) {
    // A mixture of experts: the reference takes the engine's experts on near ties.
    refs_.followExperts([this](int64_t layer, int64_t token, double maxAbs) {
      return tol_.routerMargin(layer, token, maxAbs);
    });
  }

  /// A long stream's uncached reference takes a while (a minute for 8B models): the passes of
  /// request `id` (the `done`-th of the trace's) report it layer by layer, and Cancel stops
  /// them between layers.
  void watchReference(double done, int64_t id) {
    const double n = static_cast<double>(std::max<size_t>(1, trace_.requests.size()));
    refs_.watchPasses({opts_.cancelled, [this, id, done, n](int64_t layer, int64_t layers) {
                         if (!opts_.progress) return;
                         opts_.progress((done + static_cast<double>(layer) / static_cast<double>(layers)) / n,
                                        "request " + std::to_string(id) + ": uncached reference, layer " +
                                            std::to_string(layer) + " of " + std::to_string(layers));
                       }});
  }

  AuditResult run(StageResult stage1, std::vector<Finding> stage1Findings, std::string input, std::string mode) {
    AuditResult out;  // the audited trace goes in after the run (the caller owns it)
    AuditReport& rep = out.report;
    rep.inputDescription = std::move(input);
    rep.mode = std::move(mode);
    rep.faults = trace_.faults;
    rep.faultFirings = trace_.faultFirings;
    rep.dtype = tol_.dtype();
    rep.toleranceBase = tol_.relative();
    rep.toleranceRule = tol_.describe();
    FindingBuilder findings;
    for (const auto& f : stage1Findings) findings.addExisting(f, -1);
    rep.stages = {stage1};
    for (const AuditStageInfo& info : auditStages())
      if (info.stage != AuditStage::Reference) rep.stages.push_back(StageResult::of(info.stage));
    if (stage1.status == StageStatus::Fail) return finish(out, findings);

    // Walk every request against the reference of its own stream.
    std::map<int64_t, std::vector<StepAnalysis>> analyses;
    std::map<int64_t, const RequestReference*>& latest = latest_;
    size_t done = 0;
    for (const auto& req : trace_.requests) {
      if (opts_.cancelled && opts_.cancelled()) throw AuditCancelled();
      const double n = static_cast<double>(trace_.requests.size()),
                   first = static_cast<double>(done++);
      if (opts_.progress) opts_.progress(first / n, "request " + std::to_string(req.id));
      watchReference(first, req.id);
      const auto stream = req.stream();
      RequestWalk walk(
          trace_, req, tol_, [&](uint64_t v) { return refs_.get(req.id, v, stream); },
          [&] { return refs_.unavailableReason(); });
      analyses[req.id] = walk.run();
      uint64_t last = 0;
      for (const auto& a : analyses[req.id]) last = a.version;
      latest[req.id] = refs_.get(req.id, last, stream);
    }
    refs_.watchPasses({opts_.cancelled, {}});  // later passes are short: cancel only
    // Stage 1's last check: a reference that reproduces none of the run's first records was
    // computed with other weights; no cache finding is reported on top of it.
    if (auto misfit = firstRecordsNotReproduced(trace_, analyses, refs_, tol_, referenceTrace_)) {
      StageResult& s1 = rep.stages[stageIndex(AuditStage::Reference)];
      s1.status = StageStatus::Fail;
      s1.checks.push_back(misfit->check);
      s1.summary = misfit->summary;
      findings.add(misfit->finding);
      return finish(out, findings);
    }

    // Trace+trace: the rows that compare the run with the paired one (numerics lines).
    std::vector<std::string> pairedLines;
    Diagnosis diagnosis(trace_, refs_, tol_, analyses, latest, window_);
    if (referenceTrace_) {
      std::set<int64_t> explained;
      for (const FailureRow* row : RowRegistry::rows()) {
        auto lines = row->paired({trace_, *referenceTrace_, analyses}, findings, explained);
        pairedLines.insert(pairedLines.end(), lines.begin(), lines.end());
      }
      diagnosis.noDriftFor(explained);
    }
    diagnosis.run(findings);
    numerics(rep, analyses, findings);
    addPairedLines(rep.stages[stageIndex(AuditStage::Numerics)], pairedLines, findings);
    cacheAndPositionStages(rep, analyses, findings);
    std::vector<Finding> policyFindings;
    rep.stages[stageIndex(AuditStage::Policy)] =
        policyStage(trace_, referenceTrace_, analyses, policyFindings);
    std::vector<Finding> stopFindings;
    rep.stages[stageIndex(AuditStage::Stopping)] =
        stoppingStage(trace_, stopFindings, rep.stopSummary);
    for (const auto& f : policyFindings) findings.addExisting(f, tickOf(f));
    for (const auto& f : stopFindings)
      if (!findings.hasFor(f.id, f.request)) findings.addExisting(f, tickOf(f));
    if (opts_.progress) opts_.progress(1.0, "done");
    return finish(out, findings);
  }

 private:
  // The rows that fired in `stage` (divergent findings only).
  static std::vector<const FailureRow*> firedIn(AuditStage stage, const FindingBuilder& f) {
    std::vector<const FailureRow*> out;
    for (const FailureRow* row : RowRegistry::rows())
      if (row->spec().stage == stage && row->spec().divergent && f.has(row->id()))
        out.push_back(row);
    return out;
  }

  // Each row's lines for `stage`, in the rows' order.
  void rowChecks(AuditStage stage, const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                 const FindingBuilder& f, std::vector<std::string>& checks) const {
    for (const FailureRow* row : RowRegistry::rows())
      row->stageChecks({stage, trace_, analyses, tol_, f.has(row->id()), f, latest_, refs_.modelConfig()},
                       checks);
  }

  // Trace+trace lines (a batched request against its solo run); a row of the numerics stage
  // that fired fails it, in the row's words.
  static void addPairedLines(StageResult& st, const std::vector<std::string>& lines,
                             const FindingBuilder& findings) {
    st.checks.insert(st.checks.end(), lines.begin(), lines.end());
    for (const FailureRow* row : firedIn(AuditStage::Numerics, findings)) {
      st.status = StageStatus::Fail;
      if (!row->spec().stageFailSummary.empty()) st.summary = row->spec().stageFailSummary;
      break;
    }
  }

  int64_t tickOf(const Finding& f) const {
    for (const auto& s : trace_.steps)
      if (s.request == f.request && s.step == f.step) return s.tick;
    return 0;
  }

  void numerics(AuditReport& rep, const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                const FindingBuilder& findings) {
    StageResult& st = rep.stages[stageIndex(AuditStage::Numerics)];
    int diverged = 0, compared = 0;
    double worstRatio = 0;
    const StepAnalysis* first = nullptr;
    for (const auto& [r, steps] : analyses)
      for (const auto& a : steps) {
        StepNumerics n;
        n.request = r;
        n.step = a.step->step;
        n.position = a.lastRealStreamIndex();
        n.maxLogitError = a.logitError;
        n.tolerance = a.logitTol;
        n.top2Margin = a.top2Margin;
        // A near tie: the reference's top two are closer than two rows that agree within
        // tolerance can differ, so an acceptable precision difference may swap them.
        n.nearTie = a.logitsCompared && a.top2Margin < 2.0 * a.logitTol;
        n.referenceToken = a.referenceToken;
        n.chosenToken = a.step->chosenToken;
        n.keyError = a.keyError;
        n.valueError = a.valueError;
        n.keyTolerance = a.keyTol;
        n.valueTolerance = a.valueTol;
        if (!trace_.recurrentLayers().empty()) {
          n.stateError = a.stateError;
          n.stateTolerance = a.stateTol;
        }
        n.valuesChecked = !a.referenceMissing;
        n.diverged = a.diverged();
        rep.steps.push_back(n);
        if (!a.logitsCompared) continue;
        ++compared;
        worstRatio = std::max(worstRatio, a.logitTol > 0 ? a.logitError / a.logitTol : 0);
        if (a.logitsDiverged) {
          ++diverged;
          if (!first || a.step->tick < first->step->tick) first = &a;
        }
      }
    std::sort(rep.steps.begin(), rep.steps.end(), [](const StepNumerics& a, const StepNumerics& b) {
      return a.request < b.request || (a.request == b.request && a.step < b.step);
    });
    // A failed check says what failed, not the condition that did not hold.
    if (compared == 0) {
      st.checks.push_back("not checked: the trace holds no logits rows (a saved cache state)");
    } else {
      st.checks.push_back(
          std::string(diverged ? "FAIL: " : "ok: ") + std::to_string(diverged ? diverged : compared) +
          " of " + std::to_string(compared) +
          (diverged ? " logits rows beyond tolerance (" : " logits rows within tolerance (") +
          tol_.dtype() + ", relative " + numberText(tol_.logitRelative(), 3) +
          " x max(1, |logits|) x depth and position factors)");
    }
    if (first) {
      // Drift grows smoothly across layers; a bug jumps at one layer.
      std::ostringstream growth;
      growth << "per-layer key error at request " << first->step->request << " step " << first->step->step << ":";
      double prev = 0;
      int jump = -1;
      for (size_t l = 0; l < first->keyError.size(); ++l) {
        if (!trace_.holdsRows(static_cast<int64_t>(l))) {
          growth << " L" << l << "=(not in the trace)";
          continue;
        }
        growth << " L" << l << "=" << numberText(first->keyError[l], 3);
        if (jump < 0 && first->keyError[l] > first->keyTol[l] && first->keyError[l] > 100 * std::max(prev, 1e-7)) jump = static_cast<int>(l);
        prev = first->keyError[l];
      }
      growth << (jump >= 0 ? " (jumps at layer " + std::to_string(jump) + ": a bug, not drift)" : " (no single-layer jump)");
      st.checks.push_back(growth.str());
      st.checks.push_back(
          "FAIL: first logits divergence at request " + std::to_string(first->step->request) +
          " step " + std::to_string(first->step->step) + ": max |delta logit| " +
          numberText(first->logitError, 3) + " vs tolerance " + numberText(first->logitTol, 3) +
          (first->top2Margin < 2.0 * first->logitTol
               ? " (near tie: top-2 margin " + numberText(first->top2Margin, 3) + ")"
               : ""));
    }
    rowChecks(AuditStage::Numerics, analyses, findings, st.checks);
    st.status = compared == 0 ? StageStatus::Skipped : diverged ? StageStatus::Fail : StageStatus::Pass;
    st.summary = compared == 0 ? "no logits to compare"
                 : diverged    ? std::to_string(diverged) + " of " + std::to_string(compared) +
                                  " steps beyond tolerance"
                            : "all logits within tolerance (worst " +
                                  numberText(worstRatio * 100, 3) + "% of it)";
  }

  void cacheAndPositionStages(AuditReport& rep, const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                              const FindingBuilder& f) {
    StageResult& cache = rep.stages[stageIndex(AuditStage::Cache)];
    StageResult& pos = rep.stages[stageIndex(AuditStage::Positions)];
    int records = 0, badRecords = 0, checksums = 0, lengthBad = 0;
    for (const auto& [r, steps] : analyses)
      for (const auto& a : steps) {
        records += static_cast<int>(a.step->layers.size());
        if (a.firstBadLayer >= 0) ++badRecords;
        if (a.lengthMismatchLayer >= 0 || a.duplicateLayer >= 0 || a.rollbackLayer >= 0) ++lengthBad;
        for (const auto& l : a.step->layers)
          checksums += l.keyChecksum || !l.snapshotKeys.empty() ? 1 : 0;
      }
    const auto& m = trace_.model;
    // Recurrent layers keep a state instead (the recurrent_state row's line says so).
    const std::vector<int64_t> stateLayers = trace_.recurrentLayers();
    const std::string stateNote = stateLayers.empty() ? ""
                                  : "; " + std::string(stateLayers.size() == 1 ? "layer " : "layers ") +
                                        listText(stateLayers) + " keep a recurrent state instead";
    cache.checks.push_back("ok: one K and one V record set per layer (" +
                           describeTraceLayers(trace_) + stateNote +
                           "), axes [h_kv=" + std::to_string(m.numKvHeads) +
                           ", t, d=" + std::to_string(m.headDim) +
                           (m.valueDim() != m.headDim ? " (values: d=" + std::to_string(m.valueDim()) + ")" : "") +
                           "] per request row");
    for (int64_t l = 0; l < m.numLayers && trace_.isLayerSubset(); ++l)
      if (!trace_.hasLayer(l)) cache.checks.push_back(layerNotInTraceNote(l));
    rowChecks(AuditStage::Cache, analyses, f, cache.checks);
    cache.checks.push_back(lengthBad ? "FAIL: cache length differs from the inputs consumed at " +
                                           std::to_string(lengthBad) + " steps"
                                     : "ok: cache length equals the inputs consumed at every step");
    // Steps without a reference for their weights version were not value-checked: say so.
    std::map<uint64_t, std::vector<std::string>> unchecked;  // version -> "request r step s"
    std::map<uint64_t, std::string> uncheckedWhy;
    int checkedSteps = 0;
    for (const auto& [r, steps] : analyses)
      for (const auto& a : steps) {
        if (a.step->layers.empty()) continue;
        if (a.referenceMissing) {
          unchecked[a.version].push_back("r" + std::to_string(r) + "s" +
                                         std::to_string(a.step->step));
          uncheckedWhy[a.version] = a.referenceMissingReason;
        } else {
          ++checkedSteps;
        }
      }
    if (checkedSteps > 0 || unchecked.empty())
      cache.checks.push_back(
          (badRecords ? "FAIL: new K/V records differ from the reference projection of their "
                        "layer and position at " +
                            std::to_string(badRecords) + " steps"
                      : "ok: new K/V records equal the reference projection of their layer and "
                        "position") +
          (unchecked.empty() ? "" : " (" + std::to_string(checkedSteps) + " steps checked)"));
    for (const auto& [version, where] : unchecked) {
      std::string list;
      for (size_t i = 0; i < where.size() && i < 8; ++i) list += (i ? ", " : "") + where[i];
      if (where.size() > 8) list += ", ... (" + std::to_string(where.size()) + " steps)";
      cache.checks.push_back("not checked: K/V values and logits of weights version " +
                             std::to_string(version) + " (" + list + "): " +
                             (uncheckedWhy[version].empty() ? "no reference for that version"
                                                            : uncheckedWhy[version]));
    }
    int rewrittenSteps = 0;
    for (const auto& [r, steps] : analyses)
      for (const auto& a : steps) rewrittenSteps += a.rewrittenLayer >= 0 ? 1 : 0;
    cache.checks.push_back(
        checksums ? (rewrittenSteps ? "FAIL: earlier rows changed at " +
                                          std::to_string(rewrittenSteps) + " steps ("
                                    : std::string("ok: earlier rows unchanged (")) +
                        std::to_string(checksums) +
                        " layer checksums or snapshots verified against the rebuilt cache)"
                  : "not checked: earlier rows unchanged: the trace has no checksums or snapshots");
    const bool cacheFail = !firedIn(AuditStage::Cache, f).empty() || lengthBad > 0;
    cache.status = cacheFail ? StageStatus::Fail : StageStatus::Pass;
    cache.summary = cacheFail ? "the cache is built wrongly (see findings)"
                    : badRecords ? "structure ok; record values differ (explained by a later stage)"
                                 : "every record is where it belongs";
    const bool posFail = !firedIn(AuditStage::Positions, f).empty();
    rowChecks(AuditStage::Positions, analyses, f, pos.checks);
    pos.status = posFail ? StageStatus::Fail : StageStatus::Pass;
    pos.summary = posFail ? "positions or request state are wrong (see findings)" : "positions, ownership and weights versions are consistent";
  }

  // The report's verdict and first divergence; the requests' latest references move into
  // the result (the reference set is done with them: no copy of a long run's rows).
  AuditResult finish(AuditResult& out, const FindingBuilder& findings) {
    for (const auto& [id, ref] : latest_)
      if (ref) out.references.push_back(refs_.release(ref));
    AuditReport& rep = out.report;
    rep.findings = findings.finish();
    if (refs_.hasModel() && !rep.stages.empty())
      rep.stages.front().checks.push_back(referencePassLine(refs_.passes(), trace_));
    if (!refs_.memoryNote().empty() && !rep.stages.empty())
      rep.stages.front().checks.push_back("note: " + refs_.memoryNote());
    auto divergent = [](const Finding& f) { return RowRegistry::row(f.id).spec().divergent; };
    const bool realFinding = std::any_of(rep.findings.begin(), rep.findings.end(), divergent);
    bool failed = false;
    for (const auto& s : rep.stages)
      if (s.status == StageStatus::Fail) {
        failed = true;
        if (!rep.rootStage) rep.rootStage = s.number;
      }
    rep.verdict = realFinding || failed ? "divergent" : "clean";
    // First divergence: the earliest diverged step (by tick, then request).
    const StepNumerics* best = nullptr;
    int64_t bestTick = 0;
    for (const auto& n : rep.steps) {
      if (!n.diverged) continue;
      const int64_t t = tickOfStep(n.request, n.step);
      if (!best || t < bestTick || (t == bestTick && n.request < best->request)) {
        best = &n;
        bestTick = t;
      }
    }
    if (best) {
      rep.firstDivergence.present = true;
      rep.firstDivergence.request = best->request;
      rep.firstDivergence.step = best->step;
      rep.firstDivergence.position = best->position;
      for (const auto& f : rep.findings)
        if (f.request == best->request && f.step == best->step && f.layer >= 0) {
          rep.firstDivergence.layer = f.layer;
          if (f.position >= 0) rep.firstDivergence.position = f.position;
          break;
        }
      if (rep.firstDivergence.layer < 0)
        for (size_t l = 0; l < best->keyError.size() && l < best->keyTolerance.size(); ++l)
          if (best->keyError[l] > best->keyTolerance[l] ||
              best->valueError[l] > best->valueTolerance[l]) {
            rep.firstDivergence.layer = static_cast<int64_t>(l);
            break;
          }
    } else if (!rep.findings.empty() && realFinding) {
      for (const auto& f : rep.findings)
        if (divergent(f)) {
          rep.firstDivergence = {true, f.request, f.step, f.layer, f.position};
          break;
        }
    }
    return std::move(out);
  }

  int64_t tickOfStep(int64_t request, int64_t step) const {
    for (const auto& s : trace_.steps)
      if (s.request == request && s.step == step) return s.tick;
    return 0;
  }

  const Trace& trace_;
  const Trace* referenceTrace_;  // trace+trace mode
  ReferenceSet& refs_;
  const AuditOptions& opts_;
  Tolerance tol_;
  int64_t window_;
  std::map<int64_t, const RequestReference*> latest_;  // request -> its latest reference
};

// Cross-check of the teacher-forced reference: recompute every step's row with its own
// full-prefix pass (one pass per step, the slow way) and compare.
void perStepCrossCheck(const Model& model, AuditResult& result) {
  double worst = 0;
  int steps = 0;
  for (const auto& ref : result.references) {
    for (size_t p = 0; p < ref.ids.size(); ++p) {
      const float* row = ref.logitsAt(static_cast<int64_t>(p));
      if (!row) continue;  // a prompt row no step chose from: the reference did not compute it
      std::vector<int64_t> prefix(ref.ids.begin(), ref.ids.begin() + static_cast<std::ptrdiff_t>(p) + 1);
      if (static_cast<int64_t>(prefix.size()) > model.config().maxPositions) break;
      ReferenceKeep last;
      last.logitsFrom = static_cast<int64_t>(p);  // the one row compared
      last.hiddenStates = false;
      ReferenceRun one = model.reference(prefix, {}, {}, -1, nullptr, {}, last);
      const int64_t V = one.logits.shape[1];
      for (int64_t i = 0; i < V; ++i)
        worst = std::max(worst, static_cast<double>(std::fabs(one.logits.data[static_cast<size_t>(i)] - row[i])));
      ++steps;
    }
  }
  result.report.stages[stageIndex(AuditStage::Numerics)].checks.push_back(
      "cross-check: " + std::to_string(steps) +
      " per-step full-prefix recomputes agree with the teacher-forced reference (max diff " +
      numberText(worst, 3) + ")");
}

}  // namespace

AuditResult Auditor::audit(const Model& model, Trace cached, const AuditOptions& options) {
  StageResult s1 = StageResult::of(AuditStage::Reference);
  std::vector<Finding> findings;
  const auto& c = model.config();
  const auto& m = cached.model;
  auto fail = [&](const std::string& why, std::map<std::string, double> ev = {}) {
    s1.checks.push_back("FAIL: " + why);
    findings.push_back(referenceFinding(why, std::move(ev)));
  };
  if (!m.fingerprint.empty() && m.fingerprint != model.fingerprint())
    fail("the trace was recorded with other weights: fingerprint " + m.fingerprint.substr(0, 12) + "... vs the model's " +
         model.fingerprint().substr(0, 12) + "...");
  else
    s1.checks.push_back(m.fingerprint.empty()
                            ? "not checked: the trace names no checkpoint fingerprint"
                            : "ok: checkpoint fingerprint " + m.fingerprint.substr(0, 12) +
                                  "... matches");
  const std::vector<TraceModelMismatch> misfit = traceModelMismatches(m, c);
  for (const TraceModelMismatch& f : misfit)
    fail("the trace's " + f.field + " (" + f.what + ") is " + f.traceValue + " but the model's is " + f.modelValue);
  if (misfit.empty())
    s1.checks.push_back("ok: architecture, cache shape and vocabulary fit the model (" + std::to_string(c.numLayers) + " layers, " +
                        std::to_string(m.numKvHeads) + " kv heads, head dim " + std::to_string(m.headDim) +
                        (m.latentHeads ? " (each head's decompressed latent attention)" : "") + ", vocab_size " +
                        std::to_string(c.vocabSize) + ")");
  if (cached.isLayerSubset())
    s1.checks.push_back("note: the trace holds " + describeTraceLayers(cached) +
                        " (minimized): the reference runs every layer, the others are not checked");
  if (options.tokenizerVocabSize > model.embeddingRows())
    fail("the tokenizer produces ids up to " + std::to_string(options.tokenizerVocabSize - 1) + " but the embedding has " +
         std::to_string(model.embeddingRows()) + " rows");
  else if (options.tokenizerVocabSize > 0)
    s1.checks.push_back("ok: tokenizer vocabulary (" + std::to_string(options.tokenizerVocabSize) + ") fits the embedding (" +
                        std::to_string(model.embeddingRows()) + " rows" +
                        (options.tokenizerVocabSize < model.embeddingRows() ? ", the extra rows are padding" : "") + ")");
  for (const auto& r : cached.requests)
    for (int64_t id : r.promptIds)
      if (id >= model.embeddingRows()) {
        fail("request " + std::to_string(r.id) + " feeds token id " + std::to_string(id) + " beyond the embedding's " +
             std::to_string(model.embeddingRows()) + " rows");
        break;
      }
  ReferenceSet refs(model, cached, options.weightsDirectories);
  AuditRun run(cached, refs, options, model.config().slidingWindow, cached.tensorDtype, detail::RotaryEmbedding::attentionFactorOf(c));
  if (findings.empty() && !cached.requests.empty()) {
    // The first request's own reference, the pass the walk reads too (never a pass of its own).
    const auto& r0 = cached.requests.front();
    const int64_t prompt = std::min<int64_t>(static_cast<int64_t>(r0.promptIds.size()), c.maxPositions);
    run.watchReference(0, r0.id);
    const RequestReference* ref = prompt > 0 ? refs.get(r0.id, model.weightsVersion(), r0.stream()) : nullptr;
    const float* last = ref ? ref->logitsAt(prompt - 1) : nullptr;
    if (!last) {
      s1.checks.push_back("not checked: the reference logits of request " + std::to_string(r0.id) + "'s prompt (" +
                          (ref ? "the run's first step chose from no row at the prompt's last position"
                           : refs.unavailableReason().empty() ? "no reference" : refs.unavailableReason()) + ")");
    } else {
      const auto V = ref->logits.shape[1];
      const bool finite = std::all_of(last, last + V, [](float x) { return std::isfinite(x); });
      if (!finite)
        fail("the reference logits of request " + std::to_string(r0.id) + "'s prompt are not finite");
      else
        s1.checks.push_back("ok: reference logits of request " + std::to_string(r0.id) + "'s prompt (" +
                            std::to_string(prompt) + " tokens, inference mode, no cache) are finite; top token " +
                            std::to_string(std::max_element(last, last + V) - last));
    }
  }
  for (const std::string& line : longRopeFactorSets(c, cached)) s1.checks.push_back(line);
  for (const std::string& line : layerKindLines(c, cached)) s1.checks.push_back(line);
  if (const std::string why = layerKindMismatch(c, cached); !why.empty()) fail(why);
  s1.status = findings.empty() ? StageStatus::Pass : StageStatus::Fail;
  s1.summary = findings.empty() ? "checkpoint " + model.checkpoint().directory() + " (" + model.storedDtype() + ") fits the trace"
                                : "the reference cannot be trusted: no cache can repair it";
  AuditResult result = run.run(s1, findings, "model " + model.checkpoint().directory() + "; trace by " + cached.engine,
                               // The built-in engine names itself "kvscope <version>"; kvscope-record's
                               // traces are another engine's.
                               cached.engine.rfind("kvscope ", 0) == 0 ? "model+engine" : "model+trace");
  result.trace = std::move(cached);
  if (options.perStepReference && s1.status == StageStatus::Pass) perStepCrossCheck(model, result);
  return result;
}

AuditResult Auditor::auditTraces(Trace referenceTrace, Trace cached, const AuditOptions& options) {
  // Owned here: the reference set takes its records into the references (no second copy).
  const auto shared = std::make_shared<Trace>(std::move(referenceTrace));
  const Trace& reference = *shared;
  StageResult s1 = StageResult::of(AuditStage::Reference);
  std::vector<Finding> findings;
  const auto& a = reference.model;
  const auto& b = cached.model;
  if (a.numLayers != b.numLayers || a.numKvHeads != b.numKvHeads || a.headDim != b.headDim ||
      a.valueDim() != b.valueDim() || a.vocabSize != b.vocabSize) {
    const std::string why = "the two traces describe different models (layers/kv heads/head dim/vocab)";
    s1.checks.push_back("FAIL: " + why);
    findings.push_back(referenceFinding(why));
  }
  if (reference.recordedLayers != cached.recordedLayers) {
    // Records are compared layer by layer: both sides must hold the same layers.
    const std::string why =
        "the two traces hold different layers (reference: " + describeTraceLayers(reference) +
        "; cached: " + describeTraceLayers(cached) +
        "): minimize both with the same recorded_layers";
    s1.checks.push_back("FAIL: " + why);
    findings.push_back(referenceFinding(why));
  } else if (cached.isLayerSubset()) {
    s1.checks.push_back("note: both traces hold " + describeTraceLayers(cached) + " (minimized)");
  }
  if (!a.fingerprint.empty() && !b.fingerprint.empty() && a.fingerprint != b.fingerprint) {
    const std::string why = "the traces were recorded with different weights (fingerprints differ)";
    s1.checks.push_back("FAIL: " + why);
    findings.push_back(referenceFinding(why));
  }
  for (const auto& r : cached.requests) {
    const TraceRequest* ref = reference.findRequest(r.id);
    if (!ref) {
      const std::string why = "the reference trace has no request " + std::to_string(r.id);
      s1.checks.push_back("FAIL: " + why);
      findings.push_back(referenceFinding(why));
    } else if (ref->promptIds != r.promptIds) {
      const std::string why = "request " + std::to_string(r.id) +
                              "'s prompt differs between the traces: one prompt's cache is never compared with another prompt's tokens";
      s1.checks.push_back("FAIL: " + why);
      findings.push_back(referenceFinding(why));
    } else {
      size_t agree = 0;
      while (agree < ref->generated.size() && agree < r.generated.size() && ref->generated[agree] == r.generated[agree]) ++agree;
      s1.checks.push_back("ok: request " + std::to_string(r.id) + ": same prompt; generated streams agree on " +
                          std::to_string(agree) + " of " + std::to_string(r.generated.size()) + " tokens" +
                          (agree < r.generated.size() ? " (compared up to there)" : ""));
    }
  }
  if (reference.mode != "uncached") s1.checks.push_back("note: the reference trace is not marked uncached");
  s1.status = findings.empty() ? StageStatus::Pass : StageStatus::Fail;
  s1.summary = findings.empty() ? "reference trace by " + reference.engine + " fits" : "the reference trace does not fit the audited one";
  ReferenceSet refs(shared);
  // Both traces' storage rounding bounds how exactly they can agree: take the coarser.
  const std::string storage = detail::Tolerance::unitRoundoff(reference.tensorDtype) >
                                      detail::Tolerance::unitRoundoff(cached.tensorDtype)
                                  ? reference.tensorDtype
                                  : cached.tensorDtype;
  // A reference trace that declares the same quantised cache was rounded alike.
  // The scores' attention factor from the RoPE the engines declare (none declared: 1).
  const std::optional<RopeConfig>& rope = cached.model.rope ? cached.model.rope : reference.model.rope;
  const double attentionFactor = rope ? detail::RotaryEmbedding::attentionFactorOf(*rope) : 1.0;
  AuditRun run(cached, refs, options, 0, storage, attentionFactor, shared.get(),
               reference.kvCache == cached.kvCache);
  AuditResult out = run.run(s1, findings, "reference trace by " + reference.engine + "; cached trace by " + cached.engine, "trace+trace");
  out.trace = std::move(cached);
  out.referenceTrace = shared;
  // Views show a reference side for every request, also where stage 1 stopped the audit
  // before any reference was compared.
  out.addReferencesFromTrace();
  return out;
}

}  // namespace kvscope
