// kvscope-cli inspect: one step of an audit in a terminal (over SSH, in a CI log): the
// verdict and the point shown, the request's token strip around the step, the layer
// overview against the audit's tolerances, the reference | cached | difference heatmaps of
// one layer and kv head, the logit delta and the findings there. Every number comes from
// kvscope::Inspector (the GUI's inspection layer); this file only lays them out.
// Exit 0 clean, 1 divergent, 2 bad input.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>

#include "AuditInputArgs.hpp"
#include "CliCommands.hpp"
#include "CliText.hpp"
#include "TerminalHeatmap.hpp"
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
  int rows = 32;
  std::string color = "auto";
  CLI::Option* requestOpt = nullptr;
  CLI::Option* stepOpt = nullptr;
  CLI::Option* layerOpt = nullptr;
  CLI::Option* headOpt = nullptr;
};

constexpr int kTokenWindow = 10;  // tokens shown on either side of the step

std::string kindLetter(KvKind k) { return k == KvKind::Keys ? "K" : "V"; }
std::string kindWord(KvKind k) { return k == KvKind::Keys ? "keys" : "values"; }

// "0-11" or "0-3, 5, 7-9".
std::string rangeList(const std::vector<int64_t>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size();) {
    size_t j = i;
    while (j + 1 < xs.size() && xs[j + 1] == xs[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(xs[i]);
    if (j > i) out += "-" + std::to_string(xs[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::string rangeOf(int64_t first, int64_t last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

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

// ---- 1. header --------------------------------------------------------------------------

void printHeader(std::ostream& os, const Inspector& insp, const StepView& v, const Style& st,
                 int width) {
  const AuditReport& rep = insp.output().result.report;
  std::string verdict = rep.clean() ? st.ok("clean") : st.alarm("DIVERGENT");
  std::string line = "verdict: " + verdict;
  if (!rep.mode.empty() || !rep.inputDescription.empty())
    line +=
        "  (" + rep.mode + (rep.inputDescription.empty() ? "" : "; " + rep.inputDescription) + ")";
  for (const auto& l : wrapText(st.bold("KV Scope inspect") + " \u2014 " + line, width, ""))
    os << l << "\n";
  const FirstDivergence& fd = rep.firstDivergence;
  if (fd.present) {
    std::string where =
        "request " + std::to_string(fd.request) + ", step " + std::to_string(fd.step);
    if (fd.layer >= 0) where += ", layer " + std::to_string(fd.layer);
    if (fd.position >= 0) where += ", position " + std::to_string(fd.position);
    os << "first divergence: " << st.alarm(where) << "\n";
  } else {
    os << "first divergence: none\n";
  }
  if (!rep.findings.empty()) {
    std::string ids;
    for (const Finding& f : rep.findings)
      ids += (ids.empty() ? "" : ", ") + f.id +
             (f.causedBy.empty() ? "" : " (caused by " + f.causedBy + ")");
    for (const auto& l : wrapText("findings: " + ids, width, "")) os << l << "\n";
  }
  const InspectionPoint& p = v.point;
  std::string shown = "request " + std::to_string(p.request) + ", step " + std::to_string(p.step) +
                      (p.step == 0 ? " (prefill)" : "") + ", layer " + std::to_string(p.layer) +
                      ", kv head " + std::to_string(p.head) + " of " +
                      std::to_string(insp.kvHeads());
  if (v.requested.autoHead && v.worstHead == p.head)
    shown += " (differs most)";
  else if (v.worstHead >= 0 && v.worstHead != p.head)
    shown += " (kv head " + std::to_string(v.worstHead) + " differs most)";
  shown += ", " + kindLetter(p.kind) + " (" + kindWord(p.kind) +
           (v.requested.autoKind ? ", auto: the further past its tolerance" : "") + ")";
  for (const auto& l : wrapText("shown: " + st.bold(shown), width, "")) os << l << "\n";
}

// ---- 2. token strip ---------------------------------------------------------------------

struct StripItem {
  std::string text;
  size_t step = 0;  // index into timeline.steps; steps.size() for tokens never fed back
  bool pad = false;
};

std::string tokenText(const TimelineToken& t) {
  if (!t.real) return "<pad>";
  if (t.piece.empty()) return "#" + std::to_string(t.id);
  std::string s = printable(t.piece);
  std::string out;
  for (char c : s) out += c == ' ' ? std::string("\u00B7") : std::string(1, c);
  return out;
}

void printTokenStrip(std::ostream& os, const Inspector& insp, const StepView& v, const Style& st,
                     int width) {
  const RequestTimeline& tl = insp.timeline(v.point.request);
  size_t shown = tl.steps.size();
  for (size_t i = 0; i < tl.steps.size(); ++i)
    if (tl.steps[i].step == v.point.step) shown = i;
  std::vector<StripItem> items;
  size_t first = 0, end = 0;  // the shown step's items: [first, end)
  for (size_t i = 0; i < tl.steps.size(); ++i) {
    if (i == shown) first = items.size();
    for (const TimelineToken& t : tl.steps[i].fed) items.push_back({tokenText(t), i, !t.real});
    if (i == shown) end = items.size();
  }
  for (const TimelineToken& t : tl.unfed) items.push_back({tokenText(t), tl.steps.size(), false});

  std::vector<int64_t> stepNumbers;
  for (const auto& s : tl.steps) stepNumbers.push_back(s.step);
  std::string legend = "Tokens \u2014 request " + std::to_string(tl.request) + ", steps " +
                       rangeList(stepNumbers) + ";  [ ] step " + std::to_string(v.point.step) +
                       " (shown)";
  if (tl.divergentStep >= 0)
    legend += ",  ! step " + std::to_string(tl.divergentStep) + " (first divergent)";
  legend += ",  <pad> padding,  \u00B7 a space,  \u2192 generated, not fed back";
  os << "\n";
  for (const auto& l : wrapText(st.bold(legend), width, "")) os << l << "\n";

  // The window: kTokenWindow tokens either side of the step; a long step keeps its ends.
  std::vector<size_t> chosen;
  const size_t lo = first > static_cast<size_t>(kTokenWindow) ? first - kTokenWindow : 0;
  for (size_t i = lo; i < first; ++i) chosen.push_back(i);
  const size_t n = end - first;
  const size_t keep = 2 * static_cast<size_t>(kTokenWindow);
  for (size_t i = first; i < end; ++i)
    if (n <= keep || i < first + kTokenWindow || i >= end - kTokenWindow) chosen.push_back(i);
  for (size_t i = end; i < std::min(items.size(), end + kTokenWindow); ++i) chosen.push_back(i);

  std::vector<std::string> words;
  if (!chosen.empty() && chosen.front() > 0) words.push_back(st.dim("\u2026"));
  size_t previousStep = static_cast<size_t>(-1);
  for (size_t c = 0; c < chosen.size(); ++c) {
    const size_t i = chosen[c];
    const StripItem& it = items[i];
    std::string w;
    const bool opens = it.step != previousStep;
    const bool closes = c + 1 == chosen.size() || items[chosen[c + 1]].step != it.step;
    const bool divergent = it.step < tl.steps.size() && tl.steps[it.step].step == tl.divergentStep;
    if (opens && !words.empty()) words.back() += " ";  // a wider gap between steps
    if (opens && it.step == tl.steps.size()) w += "\u2192";
    if (opens && divergent) w += "!";
    if (opens && it.step == shown) w += "[";
    std::string text = it.pad ? st.dim(it.text) : it.text;
    if (it.step == shown) text = st.bold(text);
    if (divergent) text = st.alarm(text);
    w += text;
    if (closes && it.step == shown) w += "]";
    if (it.step == shown && n > keep && i == first + kTokenWindow - 1)
      w += " " + st.dim("\u2026(" + std::to_string(n - keep) + " more)\u2026");
    words.push_back(w);
    previousStep = it.step;
  }
  if (!chosen.empty() && chosen.back() + 1 < items.size()) words.push_back(st.dim("\u2026"));
  std::string line = "  ";
  for (const auto& w : words) {
    if (displayWidth(line) > 2 && displayWidth(line) + 1 + displayWidth(w) > width) {
      os << line << "\n";
      line = "  ";
    }
    line += (displayWidth(line) > 2 ? " " : "") + w;
  }
  if (displayWidth(line) > 2) os << line << "\n";

  if (shown < tl.steps.size()) {
    const TimelineStep& s = tl.steps[shown];
    int64_t real = 0, pads = 0, lowPos = -1;
    for (const auto& t : s.fed) {
      if (!t.real) {
        ++pads;
        continue;
      }
      ++real;
      if (lowPos < 0 || t.position < lowPos) lowPos = t.position;
    }
    std::string d = "step " + std::to_string(s.step) + ": tick " + std::to_string(s.tick) + ", " +
                    std::to_string(real) + (real == 1 ? " token" : " tokens") + " fed";
    if (pads) d += " (+" + std::to_string(pads) + " pads)";
    if (real) {
      std::string pos =
          "at position" + std::string(real > 1 ? "s " + rangeOf(lowPos, s.recordedPosition)
                                               : " " + std::to_string(s.recordedPosition));
      d += " " +
           (s.recordedPosition != s.expectedPosition
                ? st.alarm(pos + " (expected up to " + std::to_string(s.expectedPosition) + ")")
                : pos);
    }
    if (!s.cacheLength.empty()) {
      const bool same = std::all_of(s.cacheLength.begin(), s.cacheLength.end(),
                                    [&](int64_t x) { return x == s.cacheLength.front(); });
      if (same) {
        d += ", cache length " + std::to_string(s.cacheLength.front()) + " in every layer";
      } else {
        std::string per;
        for (int64_t x : s.cacheLength) per += (per.empty() ? "" : ", ") + std::to_string(x);
        d += ", " + st.alarm("cache length per layer " + per);
      }
    }
    for (const auto& l : wrapText(d, width, "  ")) os << l << "\n";
  }
  // Events at the steps in the window.
  const size_t stepLo = chosen.empty() ? 0 : items[chosen.front()].step;
  const size_t stepHi = chosen.empty() ? 0 : items[chosen.back()].step;
  std::string events;
  for (const TimelineMarker& m : tl.markers) {
    size_t idx = tl.steps.size();
    for (size_t i = 0; i < tl.steps.size(); ++i)
      if (tl.steps[i].step == m.step) idx = i;
    if (idx < stepLo || idx > std::max(stepHi, shown)) continue;
    const std::string e = "step " + std::to_string(m.step) + " " + m.label;
    events += (events.empty() ? "" : "; ") + (m.alarm ? st.alarm(e) : e);
  }
  if (!events.empty())
    for (const auto& l : wrapText("events: " + events, width, "  ")) os << l << "\n";
}

// ---- 3. layer overview ------------------------------------------------------------------

void printLayers(std::ostream& os, const Inspector& insp, const StepView& v, const Style& st,
                 int width) {
  const InspectionPoint& p = v.point;
  const FirstDivergence& fd = insp.output().result.report.firstDivergence;
  os << "\n";
  for (const auto& l :
       wrapText(st.bold("Layers \u2014 max |cached \u2212 reference| of " + kindLetter(p.kind) +
                        " over the whole cache after step " + std::to_string(p.step) +
                        ", against the audit's tolerance (tol, \u2506 on the log-scale bar)"),
                width, ""))
    os << l << "\n";
  if (v.layerMaxDiff.empty()) {
    os << "  no layer to compare\n";
    return;
  }
  auto floorAt = [&](size_t l) {
    return l < v.layerNoiseFloor.size() ? v.layerNoiseFloor[l] : 0.0;
  };
  double lo = INFINITY, hi = 0.0;
  for (size_t l = 0; l < v.layerMaxDiff.size(); ++l)
    for (double x : {v.layerMaxDiff[l], floorAt(l)})
      if (x > 0 && std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  if (!(hi > 0)) lo = hi = 1.0;
  lo = std::min(lo / 4, hi / 10);
  const int digits = static_cast<int>(std::to_string(v.layerMaxDiff.size() - 1).size());
  std::vector<std::string> tags(v.layerMaxDiff.size());
  int tagWidth = 0;
  for (size_t l = 0; l < v.layerMaxDiff.size(); ++l) {
    const double d = v.layerMaxDiff[l], f = floorAt(l);
    std::string& t = tags[l];
    if (f > 0 && d > f)
      t = std::isinf(d / f) ? "over tol" : "\u00D7" + shortNumber(d / f) + " over tol";
    if (fd.present && fd.request == p.request && fd.step == p.step &&
        fd.layer == static_cast<int64_t>(l))
      t += std::string(t.empty() ? "" : ", ") + "first divergence";
    tagWidth = std::max(tagWidth, displayWidth(t));
  }
  // "▶ layer L  value      tol floor      bar  ◀ tags" in `width` columns where it can.
  const int fixed = 2 + 6 + digits + 2 + 10 + 6 + 9 + 2 + (tagWidth ? 4 + tagWidth : 0);
  const int bar = std::clamp(width - fixed, 8, 40);
  for (size_t l = 0; l < v.layerMaxDiff.size(); ++l) {
    const double d = v.layerMaxDiff[l];
    const double f = floorAt(l);
    const bool here = static_cast<int64_t>(l) == p.layer;
    std::string layer = std::to_string(l);
    layer = std::string(static_cast<size_t>(digits) - layer.size(), ' ') + layer;
    std::string line = std::string(here ? "\u25B6 " : "  ") + "layer " + layer + "  ";
    const std::string value = std::isnan(d) ? "shapes differ" : shortNumber(d);
    line += padRight(f > 0 && d > f ? st.alarm(value) : value, 10);
    line += "  tol " + padRight(f > 0 ? shortNumber(f) : "n/a", 9) + "  ";
    line += logBar(d, f, lo, hi, bar, st);
    if (!tags[l].empty())
      line += "  \u25C0 " +
              (fd.present && fd.layer == static_cast<int64_t>(l) ? st.alarm(tags[l]) : tags[l]);
    os << line << "\n";
  }
  if (v.layerNoiseFloor.empty()) os << "  (this step was not audited: no tolerance)\n";
}

// ---- 4. heatmaps ------------------------------------------------------------------------

void printHeatmaps(std::ostream& os, const StepView& v, const Style& st, int width, int maxRows) {
  const InspectionPoint& p = v.point;
  os << "\n";
  const std::string heading = "K/V cache \u2014 layer " + std::to_string(p.layer) + ", kv head " +
                              std::to_string(p.head) + ", " + kindLetter(p.kind) + " (" +
                              kindWord(p.kind) + ") after step " + std::to_string(p.step) +
                              ": reference | cached | |difference|";
  for (const auto& l : wrapText(st.bold(heading), width, "")) os << l << "\n";

  const int64_t t = std::max(v.cachedPositions, v.referencePositions);
  const int64_t newLast = v.appendedCount > 0 ? v.appendedFirst + v.appendedCount - 1 : -1;
  std::string info;
  if (v.appendedCount > 0)
    info = std::string(v.appendedCount == 1 ? "new record: position " : "new records: positions ") +
           rangeOf(v.appendedFirst, newLast) + " (\u25B6)";
  else
    info = "no new records at this step";
  const double m = std::max(1e-6, static_cast<double>(v.valueAbsMax));
  const double floor = v.diffFloor;
  const bool beyond = v.diffMax > floor;
  if (!v.absDiff.empty())
    info += beyond ? "; max |difference| " + shortNumber(v.diffMax) + " at position " +
                         std::to_string(v.diffArgPosition) + ", dim " +
                         std::to_string(v.diffArgDim) + " (\u25C0)"
            : v.diffIsNoise()
                ? "; max |difference| " + shortNumber(v.diffMax) + " (noise, under " +
                      shortNumber(floor) + ")"
                : "; max |difference| " + shortNumber(v.diffMax) + " (under " +
                      shortNumber(floor) + ", not noise: " + v.diffStructure + ")";
  for (const auto& l : wrapText(info, width, "  ")) os << l << "\n";
  if (t == 0 || v.headDim == 0) {
    os << "  nothing to draw" << (v.note.empty() ? "" : ": " + v.note) << "\n";
    return;
  }

  // Rows: every position, or a window ending just after the step's records.
  HeatmapRows rows;
  rows.last = t - 1;
  if (t > maxRows) {
    if (newLast >= 0) rows.last = std::min(t - 1, newLast + 2);
    rows.first = std::max<int64_t>(0, rows.last - maxRows + 1);
    // ... unless the largest difference lies outside it: then a window around that.
    if (beyond && (v.diffArgPosition < rows.first || v.diffArgPosition > rows.last)) {
      rows.first = std::clamp<int64_t>(v.diffArgPosition - maxRows / 2, 0, t - maxRows);
      rows.last = rows.first + maxRows - 1;
    }
  }
  const int digits = static_cast<int>(std::to_string(t - 1).size());
  for (int64_t q = rows.first; q <= rows.last; ++q) {
    std::string num = std::to_string(q);
    const bool isNew = q >= v.appendedFirst && q <= newLast;
    const bool rewritten = std::find(v.rewrittenPositions.begin(), v.rewrittenPositions.end(), q) !=
                           v.rewrittenPositions.end();
    std::string mark = isNew ? "\u25B6" : rewritten ? "r" : " ";
    if (isNew) mark = st.ok(mark);
    if (rewritten) mark = st.alarm(isNew ? "\u25B6" : "r");
    rows.labels.push_back("  pos " + std::string(static_cast<size_t>(digits) - num.size(), ' ') +
                          num + " " + mark + " ");
  }
  HeatmapMap ref{"reference", &v.reference, v.referencePositions, v.headDim, -m, m,
                 true,        false,        "no reference"};
  HeatmapMap cached{v.cachedFromReplay ? "cached, rebuilt" : "cached",
                    &v.cached,
                    v.cachedPositions,
                    v.headDim,
                    -m,
                    m,
                    true,
                    false,
                    "no records"};
  HeatmapMap diff{"|difference|", &v.absDiff, std::min(v.cachedPositions, v.referencePositions),
                  v.headDim,      0.0,        std::max(static_cast<double>(v.diffMax), floor),
                  false,          true,       "no comparison"};
  std::string dimsNote;
  std::vector<std::string> lines =
      drawHeatmaps({ref, cached, diff}, rows, width - 2, st, &dimsNote);
  std::string where = "positions " + rangeOf(rows.first, rows.last) + " down";
  if (rows.first > 0 || rows.last < t - 1)
    where += " (of 0-" + std::to_string(t - 1) + "; --rows for more)";
  for (const auto& l : wrapText(where + ", " + dimsNote, width, "  ")) os << l << "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string l = lines[i];
    const int64_t q = rows.first + static_cast<int64_t>(i) - 1;
    if (i > 0 && beyond && q == v.diffArgPosition) l += " " + st.alarm("\u25C0");
    os << l << "\n";
  }
  if (beyond && (v.diffArgPosition < rows.first || v.diffArgPosition > rows.last))
    os << "  (the largest difference, at position " << v.diffArgPosition
       << ", is outside the rows shown)\n";
  HeatmapMap values = ref;
  values.title = "reference and cached";
  os << "  scale  " << heatmapLegend(values, st) << "\n";
  os << "         " << heatmapLegend(diff, st) << "\n";
  if (!v.rewrittenPositions.empty()) {
    std::string list;
    for (int64_t q : v.rewrittenPositions) list += (list.empty() ? "" : ", ") + std::to_string(q);
    for (const auto& l : wrapText("rewritten positions (r): " + list, width, "  ")) os << l << "\n";
  }
  if (!v.note.empty())
    for (const auto& l : wrapText("note: " + v.note, width, "  ")) os << l << "\n";
}

// ---- 5. logits --------------------------------------------------------------------------

void printLogits(std::ostream& os, const Inspector& insp, const StepView& v, const Style& st,
                 int width) {
  os << "\n"
     << st.bold("Logits \u2014 step " + std::to_string(v.point.step) +
                "'s row, cached \u2212 reference")
     << "\n";
  if (v.logitDelta.empty()) {
    os << "  no logits to compare (no reference row, or the trace recorded none for this step)\n";
    return;
  }
  std::string line = "max |\u0394logit| " + shortNumber(v.maxAbsLogitDelta);
  if (v.logitNoiseFloor > 0) {
    const bool over = v.maxAbsLogitDelta > v.logitNoiseFloor;
    line += ", tolerance " + shortNumber(v.logitNoiseFloor) + ": ";
    line +=
        over ? st.alarm("over (\u00D7" + shortNumber(v.maxAbsLogitDelta / v.logitNoiseFloor) + ")")
             : st.ok("within");
  } else {
    line += ", tolerance n/a (step not audited)";
  }
  os << "  " << line << "\n";
  std::vector<size_t> order(v.logitDelta.size());
  std::iota(order.begin(), order.end(), size_t(0));
  const size_t top = std::min<size_t>(5, order.size());
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
      [&](size_t a, size_t b) { return std::abs(v.logitDelta[a]) > std::abs(v.logitDelta[b]); });
  std::string tops;
  for (size_t k = 0; k < top; ++k) {
    const float d = v.logitDelta[order[k]];
    if (!(std::abs(d) > 0)) break;
    tops += std::string(k ? ",  " : "") +
            printable(insp.tokenLabel(v.point.request, static_cast<int64_t>(order[k]))) + " " +
            (d >= 0 ? "+" : "") + shortNumber(d);
  }
  if (tops.empty()) tops = "none (the rows are equal)";
  for (const auto& l : wrapText("largest |\u0394|: " + tops, width, "  ")) os << l << "\n";
}

// ---- 6. findings ------------------------------------------------------------------------

void printFindings(std::ostream& os, const Inspector& insp, const StepView& v, const Style& st,
                   int width) {
  const InspectionPoint& p = v.point;
  os << "\n"
     << st.bold("Findings at request " + std::to_string(p.request) + ", step " +
                std::to_string(p.step))
     << "\n";
  if (v.findings.empty()) os << "  none here\n";
  for (const Finding& f : v.findings) {
    std::string where;
    if (f.layer >= 0) where += "layer " + std::to_string(f.layer);
    if (f.position >= 0)
      where += std::string(where.empty() ? "" : ", ") + "position " + std::to_string(f.position);
    where += std::string(where.empty() ? "" : ", ") +
             (f.causedBy.empty() ? "root" : "caused by " + f.causedBy);
    os << "  " << st.alarm("[" + f.id + "]") << " " << where << "\n";
    for (const auto& l : wrapText(f.explanation, width, "      ")) os << l << "\n";
  }
  std::string elsewhere;
  for (const Finding& f : insp.output().result.report.findings) {
    if (f.request == p.request && f.step == p.step) continue;
    const InspectionPoint at = insp.locate(f);
    elsewhere += (elsewhere.empty() ? "" : "; ") + f.id + " at --request " +
                 std::to_string(at.request) + " --step " + std::to_string(at.step) + " --layer " +
                 std::to_string(at.layer);
  }
  if (!elsewhere.empty())
    for (const auto& l : wrapText("elsewhere: " + elsewhere, width, "  ")) os << l << "\n";
}

void run(InspectArgs& a, CliContext& ctx) {
  if (a.width != 0 && a.width < 40)
    throw UsageError("--width " + std::to_string(a.width) + ": give at least 40");
  a.inputs.apply(a.spec);
  showProgressOnTerminal(a.spec);
  // (Trace+trace mode: auditTraces gives every request a reference side, also when stage
  // 1 stopped early.)
  auto output = std::make_shared<const AuditJobOutput>(runAuditJob(a.spec));
  Inspector insp(output);
  const InspectionPoint point = resolvePoint(insp, a);
  const StepView view = insp.view(point);

  const Style style(detectColorMode(a.color));
  const int width = terminalWidth(a.width);
  std::ostringstream os;
  printHeader(os, insp, view, style, width);
  printTokenStrip(os, insp, view, style, width);
  printLayers(os, insp, view, style, width);
  printHeatmaps(os, view, style, width, a.rows);
  printLogits(os, insp, view, style, width);
  printFindings(os, insp, view, style, width);
  std::cout << os.str() << std::flush;
  ctx.exitCode = insp.output().result.report.clean() ? 0 : 1;
}

}  // namespace

void registerInspectCommand(CLI::App& app, CliContext& ctx) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Show one step of the audit in the terminal: verdict, tokens, "
                                 "layers, the K/V heatmaps of one layer and kv "
                                 "head, logits, findings (exit 0 clean, 1 divergent, 2 error)");
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
  cmd->add_option("--width", args->width, "columns to draw in (default: the terminal's, else 100)");
  cmd->add_option("--rows", args->rows, "cache positions drawn at most (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--color", args->color, "auto (a terminal without NO_COLOR), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->callback([args, &ctx]() { run(*args, ctx); });
}

}  // namespace kvscope::cli
