// kvscope-cli inspect: the header, the token strip, the logits and the findings
// (InspectSections.hpp).
#include <algorithm>
#include <numeric>

#include "CliText.hpp"
#include "InspectSections.hpp"
#include "kvscope/FindingGroups.hpp"

namespace kvscope::cli {

namespace {

constexpr int kTokenWindow = 10;  // tokens shown on either side of the step (full layout)

std::string tokenText(const TimelineToken& t) {
  if (!t.real) return "<pad>";
  if (t.piece.empty()) return "#" + std::to_string(t.id);
  std::string out;
  for (char c : escapeInvalidUtf8(printable(t.piece)))
    out += c == ' ' ? std::string("\u00B7") : std::string(1, c);
  return out;
}

struct StripItem {
  std::string text;
  size_t step = 0;  // index into timeline.steps; steps.size() for tokens never fed back
  bool pad = false;
};

// The words of the strip with `window` tokens either side of the shown step (index `shown`
// into tl.steps); a long step keeps its ends. *lowStep/*highStep: the steps it reaches.
std::vector<std::string> stripWords(const RequestTimeline& tl, size_t shown, size_t window,
                                    const Style& st, size_t* lowStep, size_t* highStep) {
  std::vector<StripItem> items;
  size_t first = 0, end = 0;  // the shown step's items: [first, end)
  for (size_t i = 0; i < tl.steps.size(); ++i) {
    if (i == shown) first = items.size();
    for (const TimelineToken& t : tl.steps[i].fed) items.push_back({tokenText(t), i, !t.real});
    if (i == shown) end = items.size();
  }
  for (const TimelineToken& t : tl.unfed) items.push_back({tokenText(t), tl.steps.size(), false});

  std::vector<size_t> chosen;
  const size_t lo = first > window ? first - window : 0;
  for (size_t i = lo; i < first; ++i) chosen.push_back(i);
  const size_t n = end - first;
  const size_t keep = 2 * window;
  for (size_t i = first; i < end; ++i)
    if (n <= keep || i < first + window || i >= end - window) chosen.push_back(i);
  for (size_t i = end; i < std::min(items.size(), end + window); ++i) chosen.push_back(i);
  *lowStep = chosen.empty() ? 0 : items[chosen.front()].step;
  *highStep = chosen.empty() ? 0 : items[chosen.back()].step;

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
    if (it.step == shown && n > keep && i == first + window - 1)
      w += " " + st.dim("\u2026(" + std::to_string(n - keep) + " more)\u2026");
    words.push_back(w);
    previousStep = it.step;
  }
  if (!chosen.empty() && chosen.back() + 1 < items.size()) words.push_back(st.dim("\u2026"));
  return words;
}

std::string stepDetail(const TimelineStep& s, const Style& st) {
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
    d += " " + (s.recordedPosition != s.expectedPosition
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
  return d;
}

std::string where(const Finding& f) {
  std::string w;
  if (f.layer >= 0) w += "layer " + std::to_string(f.layer);
  if (f.position >= 0)
    w += std::string(w.empty() ? "" : ", ") + "position " + std::to_string(f.position);
  return w + (w.empty() ? "" : ", ") + (f.causedBy.empty() ? "root" : "caused by " + f.causedBy);
}

}  // namespace

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

std::string kindLetter(KvKind k) { return k == KvKind::Keys ? "K" : "V"; }
std::string kindWord(KvKind k, bool latent) {
  if (latent) return k == KvKind::Keys ? "latent rows c_kv" : "roped key parts k_pe";
  return k == KvKind::Keys ? "keys" : "values";
}

const Finding* leadingFinding(const AuditReport& report) {
  const FirstDivergence& fd = report.firstDivergence;
  for (const Finding& f : report.findings)
    if (fd.present && f.causedBy.empty() && f.request == fd.request && f.step == fd.step)
      return &f;
  for (const Finding& f : report.findings)
    if (f.causedBy.empty()) return &f;
  return report.findings.empty() ? nullptr : &report.findings.front();
}

Lines inspectHeader(const InspectFrame& f) {
  const Style& st = f.style;
  const int w = f.width;
  const AuditReport& rep = f.insp.output().result.report;
  Lines out;
  std::string line = st.bold("KV Scope inspect") + " \u2014 verdict: " +
                     (rep.clean() ? st.ok("clean") : st.alarm("DIVERGENT"));
  if (!rep.mode.empty() || !rep.inputDescription.empty())
    line +=
        "  (" + rep.mode + (rep.inputDescription.empty() ? "" : "; " + rep.inputDescription) + ")";
  appendLines(out, f.compact ? Lines{fitWidth(line, w)} : wrapText(line, w, ""));

  const FirstDivergence& fd = rep.firstDivergence;
  std::string div = "first divergence: none";
  if (fd.present) {
    std::string at = "request " + std::to_string(fd.request) + ", step " + std::to_string(fd.step);
    if (fd.layer >= 0) at += ", layer " + std::to_string(fd.layer);
    if (fd.position >= 0) at += ", position " + std::to_string(fd.position);
    div = "first divergence: " + st.alarm(at);
  }
  appendLines(out, firstLines(wrapText(div, w, ""), f.compact ? 1 : 9, w));

  std::string check;
  if (const Finding* lead = leadingFinding(rep))
    check = "first check: " +
            st.bold(lead->firstCheck.empty() ? "(none named)" : lead->firstCheck) + " (" +
            lead->id + ")";
  else if (!rep.clean())
    check = "first check: no finding names one; `kvscope-cli audit` lists the failed checks";
  else
    check = "first check: none, the audit is clean";
  appendLines(out, firstLines(wrapText(check, w, ""), f.compact ? 2 : 9, w));

  if (!rep.findings.empty()) {
    std::vector<std::string> items;
    const bool oneRequest = f.insp.requests().size() == 1;
    // A bug that several requests show is named once, with each request's onset.
    for (const FindingGroup& g : groupFindings(rep.findings)) {
      const Finding& x = g.first();
      std::string item = x.id;
      if (g.members.size() > 1) {
        item += " (" + (x.causedBy.empty() ? "" : "caused by " + x.causedBy + "; ") + g.onsets() + ")";
      } else if (f.compact) {
        item += " (" + (oneRequest ? "" : "request " + std::to_string(x.request) + " ") + "step " +
                std::to_string(x.step) + ")";
      } else if (!x.causedBy.empty()) {
        item += " (caused by " + x.causedBy + ")";
      }
      items.push_back(item);
    }
    if (f.compact) {
      std::string all = "findings: ";
      for (size_t i = 0; i < items.size(); ++i) all += (i ? ", " : "") + items[i];
      out.push_back(fitWidth(all, w));
    } else {
      std::string all;
      for (size_t i = 0; i < items.size(); ++i) all += (i ? ", " : "") + items[i];
      appendLines(out, wrapText("findings: " + all, w, ""));
    }
  }

  const StepView& v = f.view;
  const InspectionPoint& p = v.point;
  std::string shown = "request " + std::to_string(p.request) + ", step " + std::to_string(p.step) +
                      (p.step == 0 ? " (prefill)" : "") + ", layer " + std::to_string(p.layer) +
                      ", kv head " + std::to_string(p.head) + " of " +
                      std::to_string(f.insp.kvHeads());
  if (v.requested.autoHead && v.worstHead == p.head)
    shown += " (differs most)";
  else if (v.worstHead >= 0 && v.worstHead != p.head)
    shown += " (kv head " + std::to_string(v.worstHead) + " differs most)";
  if (f.compact)
    shown += ", " + kindLetter(p.kind);
  else
    shown += ", " + kindLetter(p.kind) + " (" + kindWord(p.kind, v.showsLatent) +
             (v.requested.autoKind ? ", auto: the further past its tolerance" : "") + ")";
  appendLines(out, firstLines(wrapText("shown: " + st.bold(shown), w, ""), f.compact ? 2 : 9, w));
  return out;
}

Lines inspectTokens(const InspectFrame& f) {
  const Style& st = f.style;
  const int w = f.width;
  const StepView& v = f.view;
  const RequestTimeline& tl = f.insp.timeline(v.point.request);
  size_t shown = tl.steps.size();
  for (size_t i = 0; i < tl.steps.size(); ++i)
    if (tl.steps[i].step == v.point.step) shown = i;
  Lines out;
  size_t stepLo = 0, stepHi = 0;
  if (f.compact) {
    // The widest window whose strip takes at most two lines.
    Lines strip;
    for (size_t window : {10, 6, 4, 2, 1, 0}) {
      strip = packItems(stripWords(tl, shown, window, st, &stepLo, &stepHi), w, "tokens ", "  ",
                        " ");
      if (strip.size() <= 2) break;
    }
    appendLines(out, firstLines(strip, 2, w));
  } else {
    std::vector<int64_t> stepNumbers;
    for (const auto& s : tl.steps) stepNumbers.push_back(s.step);
    std::string legend = "Tokens \u2014 request " + std::to_string(tl.request) + ", steps " +
                         rangeList(stepNumbers) + ";  [ ] step " + std::to_string(v.point.step) +
                         " (shown)";
    if (tl.divergentStep >= 0)
      legend += ",  ! step " + std::to_string(tl.divergentStep) + " (first divergent)";
    legend += ",  <pad> padding,  \u00B7 a space,  \u2192 generated, not fed back";
    appendLines(out, wrapText(st.bold(legend), w, ""));
    appendLines(out, packItems(stripWords(tl, shown, kTokenWindow, st, &stepLo, &stepHi), w,
                               "  ", "  ", " "));
  }

  std::string detail = shown < tl.steps.size() ? stepDetail(tl.steps[shown], st) : "";
  std::string events;
  for (const TimelineMarker& m : tl.markers) {
    size_t idx = tl.steps.size();
    for (size_t i = 0; i < tl.steps.size(); ++i)
      if (tl.steps[i].step == m.step) idx = i;
    if (idx < stepLo || idx > std::max(stepHi, shown)) continue;
    const std::string e = "step " + std::to_string(m.step) + " " + m.label;
    events += (events.empty() ? "" : "; ") + (m.alarm ? st.alarm(e) : e);
  }
  if (f.compact) {
    const std::string both = detail + (events.empty() ? ""
                                                      : (detail.empty() ? "" : "; ") +
                                                            std::string("events: ") + events);
    if (!both.empty()) appendLines(out, firstLines(wrapText(both, w, "  "), 2, w));
    return out;
  }
  if (!detail.empty()) appendLines(out, wrapText(detail, w, "  "));
  if (!events.empty()) appendLines(out, wrapText("events: " + events, w, "  "));
  return out;
}

Lines inspectLogits(const InspectFrame& f) {
  const Style& st = f.style;
  const StepView& v = f.view;
  Lines out;
  if (!f.compact)
    out.push_back(fitWidth(st.bold("Logits \u2014 step " + std::to_string(v.point.step) +
                                   "'s row, cached \u2212 reference"),
                           f.width));
  const std::string lead = f.compact ? "logits: " : "  ";
  if (v.logitDelta.empty()) {
    const std::string none =
        "no logits to compare (no reference row, or the trace recorded none for this step)";
    appendLines(out, firstLines(wrapText(lead + none, f.width, ""), f.compact ? 1 : 9, f.width));
    return out;
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
  std::vector<size_t> order(v.logitDelta.size());
  std::iota(order.begin(), order.end(), size_t(0));
  const size_t top = std::min<size_t>(5, order.size());
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
      [&](size_t a, size_t b) { return std::abs(v.logitDelta[a]) > std::abs(v.logitDelta[b]); });
  std::vector<std::string> tops;
  for (size_t k = 0; k < top; ++k) {
    const float d = v.logitDelta[order[k]];
    if (!(std::abs(d) > 0)) break;
    tops.push_back(escapeInvalidUtf8(printable(
                       f.insp.tokenLabel(v.point.request, static_cast<int64_t>(order[k])))) +
                   " " + (d >= 0 ? "+" : "") + shortNumber(d));
  }
  if (tops.empty()) tops.push_back("none (the rows are equal)");
  if (f.compact) {
    std::string all = lead + line + "; largest:";
    for (const auto& t : tops) all += " " + t;
    out.push_back(fitWidth(all, f.width));
    return out;
  }
  appendLines(out, wrapText(line, f.width, "  "));
  tops.front() = "largest |\u0394|: " + tops.front();
  appendLines(out, packItems(tops, f.width, "  ", "  ", ",  "));
  return out;
}

Lines inspectFindings(const InspectFrame& f) {
  const Style& st = f.style;
  const int w = f.width;
  const StepView& v = f.view;
  const InspectionPoint& p = v.point;
  Lines out;
  if (f.compact) {
    // One line a finding at the point, the first check beside it.
    if (v.findings.empty()) {
      out.push_back(fitWidth("here: no finding at this step", w));
      return out;
    }
    for (const Finding& x : v.findings)
      out.push_back(fitWidth("here: " + st.alarm("[" + x.id + "]") + " " + where(x) +
                                 (x.firstCheck.empty() ? "" : "; check " + x.firstCheck) + "; " +
                                 x.explanation,
                             w));
    return firstLines(out, 2, w);
  }
  out.push_back(fitWidth(st.bold("Findings at request " + std::to_string(p.request) + ", step " +
                                 std::to_string(p.step)),
                         w));
  if (v.findings.empty()) out.push_back("  none here");
  for (const Finding& x : v.findings) {
    appendLines(out, wrapText(st.alarm("[" + x.id + "]") + " " + where(x), w, "  "));
    if (!x.firstCheck.empty())
      appendLines(out, wrapText("first check: " + x.firstCheck, w, "      "));
    appendLines(out, wrapText(x.explanation, w, "      "));
  }
  std::string elsewhere;
  for (const Finding& x : f.insp.output().result.report.findings) {
    if (x.request == p.request && x.step == p.step) continue;
    const InspectionPoint at = f.insp.locate(x);
    elsewhere += (elsewhere.empty() ? "" : "; ") + x.id + " at --request " +
                 std::to_string(at.request) + " --step " + std::to_string(at.step) + " --layer " +
                 std::to_string(at.layer);
  }
  if (!elsewhere.empty()) appendLines(out, wrapText("elsewhere: " + elsewhere, w, "  "));
  return out;
}

}  // namespace kvscope::cli
