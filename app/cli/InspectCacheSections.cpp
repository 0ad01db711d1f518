// kvscope-cli inspect: the layer overview and the K/V heatmaps (InspectSections.hpp).
#include <algorithm>
#include <cmath>
#include <set>

#include "InspectSections.hpp"

namespace kvscope::cli {

namespace {

// The layers to draw: all, or `count` of them around the shown layer, the first
// divergence's layer among them.
std::vector<size_t> chooseLayers(size_t layers, int count, int64_t shown, int64_t divergent) {
  std::vector<size_t> all(layers);
  for (size_t l = 0; l < layers; ++l) all[l] = l;
  if (count <= 0 || layers <= static_cast<size_t>(count)) return all;
  std::set<size_t> pick;
  const auto add = [&](int64_t l) {
    if (l >= 0 && static_cast<size_t>(l) < layers && pick.size() < static_cast<size_t>(count))
      pick.insert(static_cast<size_t>(l));
  };
  add(shown);
  add(divergent);
  for (int64_t d = 1; pick.size() < static_cast<size_t>(count); ++d) {
    add(shown - d);
    add(shown + d);
  }
  return {pick.begin(), pick.end()};
}

}  // namespace

Lines inspectLayers(const InspectFrame& f, int maxLayers) {
  const Style& st = f.style;
  const StepView& v = f.view;
  const InspectionPoint& p = v.point;
  const int width = f.width;
  const FirstDivergence& fd = f.insp.output().result.report.firstDivergence;
  Lines out;
  if (f.compact)
    out.push_back(fitWidth(st.bold("layers: max |cached \u2212 reference| of " +
                                   kindLetter(p.kind) + " after step " + std::to_string(p.step) +
                                   " vs its tolerance (tol \u2506)"),
                           width));
  else
    appendLines(out, wrapText(st.bold("Layers \u2014 max |cached \u2212 reference| of " +
                                 kindLetter(p.kind) + " over the whole cache after step " +
                                 std::to_string(p.step) +
                                 ", against the audit's tolerance (tol, \u2506 on the "
                                 "log-scale bar)"),
                         width, ""));
  if (v.layerMaxDiff.empty()) {
    out.push_back("  no layer to compare");
    return out;
  }
  const size_t layers = v.layerMaxDiff.size();
  auto floorAt = [&](size_t l) {
    return l < v.layerNoiseFloor.size() ? v.layerNoiseFloor[l] : 0.0;
  };
  double lo = INFINITY, hi = 0.0;
  for (size_t l = 0; l < layers; ++l)
    for (double x : {v.layerMaxDiff[l], floorAt(l)})
      if (x > 0 && std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  if (!(hi > 0)) lo = hi = 1.0;
  lo = std::min(lo / 4, hi / 10);

  const bool summary = maxLayers > 0 && layers > static_cast<size_t>(maxLayers);
  const std::vector<size_t> drawn =
      chooseLayers(layers, summary ? std::max(1, maxLayers - 1) : 0, p.layer,
                   fd.present && fd.request == p.request ? fd.layer : -1);
  const int digits = static_cast<int>(std::to_string(layers - 1).size());
  // Tags, long ("×8303 over tol, first divergence") and short ("×8303, first div.").
  std::vector<std::string> tags(layers), shortTags(layers);
  int tagWidth = 0, shortWidth = 0;
  for (size_t l : drawn) {
    const double d = v.layerMaxDiff[l], fl = floorAt(l);
    if (fl > 0 && d > fl) {
      const std::string times = std::isinf(d / fl) ? "" : "\u00D7" + shortNumber(d / fl);
      tags[l] = times.empty() ? "over tol" : times + " over tol";
      shortTags[l] = times.empty() ? "over" : times;
    }
    if (fd.present && fd.request == p.request && fd.step == p.step &&
        fd.layer == static_cast<int64_t>(l)) {
      tags[l] += std::string(tags[l].empty() ? "" : ", ") + "first divergence";
      shortTags[l] += std::string(shortTags[l].empty() ? "" : ", ") + "first div.";
    }
    tagWidth = std::max(tagWidth, displayWidth(tags[l]));
    shortWidth = std::max(shortWidth, displayWidth(shortTags[l]));
  }
  // "▶ layer L  value      tol floor      bar  ◀ tags" in `width` columns: the short tags
  // when the long ones leave the bar fewer than 10 cells.
  const int fixed = 2 + 6 + digits + 2 + 10 + 6 + 9 + 2;
  int bar = std::min(40, width - fixed - (tagWidth ? 4 + tagWidth : 0));
  const bool useShort = bar < 10;
  if (useShort) bar = std::min(40, width - fixed - (shortWidth ? 4 + shortWidth : 0));
  bar = std::max(bar, 4);
  for (size_t l : drawn) {
    const double d = v.layerMaxDiff[l];
    const double fl = floorAt(l);
    const bool here = static_cast<int64_t>(l) == p.layer;
    std::string layer = std::to_string(l);
    layer = std::string(static_cast<size_t>(digits) - layer.size(), ' ') + layer;
    std::string line = std::string(here ? "\u25B6 " : "  ") + "layer " + layer + "  ";
    // NaN: nothing to compare (a layer without K/V records: recurrent, or minimized away).
    const std::string value = std::isnan(d) ? "no records" : std::isinf(d) ? "shapes differ" : shortNumber(d);
    line += padRight(fl > 0 && d > fl ? st.alarm(value) : value, 10);
    line += "  tol " + padRight(fl > 0 ? shortNumber(fl) : "n/a", 9) + "  ";
    line += logBar(d, fl, lo, hi, bar, st);
    const std::string& tag = useShort ? shortTags[l] : tags[l];
    if (!tag.empty())
      line += "  \u25C0 " +
              (fd.present && fd.layer == static_cast<int64_t>(l) ? st.alarm(tag) : tag);
    out.push_back(fitWidth(line, width));
  }
  if (summary) {
    size_t over = 0;
    for (size_t l = 0; l < layers; ++l)
      if (std::find(drawn.begin(), drawn.end(), l) == drawn.end() && floorAt(l) > 0 &&
          v.layerMaxDiff[l] > floorAt(l))
        ++over;
    out.push_back(fitWidth("  (" + std::to_string(layers - drawn.size()) + " more layers of " +
                               std::to_string(layers) + ", " + std::to_string(over) +
                               " of them over tol; --full shows all)",
                           width));
  }
  if (v.layerNoiseFloor.empty())
    out.push_back(fitWidth("  (this step was not audited: no tolerance)", width));
  return out;
}

Lines inspectHeatmaps(const InspectFrame& f, int maxRows) {
  const Style& st = f.style;
  const StepView& v = f.view;
  const InspectionPoint& p = v.point;
  const int width = f.width;
  Lines out;
  // A recurrent layer's state: one value head's [Dk, Dv] matrix, rows the key features.
  const std::string what = v.showsState ? "recurrent state of layer " + std::to_string(p.layer) + ", value head " +
                                              std::to_string(p.head)
                                        : kindWord(p.kind, v.showsLatent) + " of layer " + std::to_string(p.layer) + ", kv head " +
                                              std::to_string(p.head);
  const std::string heading =
      v.showsState ? "Recurrent state \u2014 layer " + std::to_string(p.layer) + ", value head " +
                         std::to_string(p.head) + " after step " + std::to_string(p.step) +
                         " (rows: key features, columns: value features): reference | cached | |difference|"
                   : "K/V cache \u2014 layer " + std::to_string(p.layer) + ", kv head " + std::to_string(p.head) +
                         ", " + kindLetter(p.kind) + " (" + kindWord(p.kind, v.showsLatent) + ") after step " +
                         std::to_string(p.step) + ": reference | cached | |difference|";
  if (f.compact)
    out.push_back(fitWidth(st.bold(what + " after step " + std::to_string(p.step) + ": reference | cached | |difference|"),
                           width));
  else
    appendLines(out, wrapText(st.bold(heading), width, ""));
  if (!v.layerKind.empty() && !f.compact)
    appendLines(out, wrapText("layer " + std::to_string(p.layer) + ": " + v.layerKind, width, "  "));

  const int64_t t = std::max(v.cachedPositions, v.referencePositions);
  const int64_t newLast = v.appendedCount > 0 ? v.appendedFirst + v.appendedCount - 1 : -1;
  std::string info;
  const std::string rowWord = v.showsState ? "key dim" : "position";
  if (v.showsState)
    info = "the state after the step's tokens";
  else if (v.appendedCount > 0)
    info = std::string(v.appendedCount == 1 ? "new record: position " : "new records: positions ") +
           rangeOf(v.appendedFirst, newLast) + " (\u25B6)";
  else
    info = "no new records at this step";
  const double m = std::max(1e-6, static_cast<double>(v.valueAbsMax));
  const double floor = v.diffFloor;
  const bool beyond = v.diffMax > floor;
  if (!v.absDiff.empty())
    info += beyond ? "; max |difference| " + shortNumber(v.diffMax) + " at " + rowWord + " " +
                         std::to_string(v.diffArgPosition) + ", dim " +
                         std::to_string(v.diffArgDim) + " (\u25C0)"
            : v.diffIsNoise()
                ? "; max |difference| " + shortNumber(v.diffMax) + " (noise, under " +
                      shortNumber(floor) + ")"
                : "; max |difference| " + shortNumber(v.diffMax) + " (under " +
                      shortNumber(floor) + ", not noise: " + v.diffStructure + ")";
  if (t == 0 || v.headDim == 0) {
    appendLines(out, wrapText(info, width, "  "));
    out.push_back(fitWidth("  nothing to draw" + (v.note.empty() ? "" : ": " + v.note), width));
    return out;
  }

  // Rows: every position, or a window ending just after the step's records.
  maxRows = std::max(1, maxRows);
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
    rows.labels.push_back(std::string(v.showsState ? "  k " : "  pos ") + std::string(static_cast<size_t>(digits) - num.size(), ' ') +
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
  // Two columns kept for the largest difference's " ◀".
  const Lines lines = drawHeatmaps({ref, cached, diff}, rows, width - 2, st, &dimsNote);
  const bool cut = rows.first > 0 || rows.last < t - 1;
  if (f.compact) {
    // "new 0-35 (▶); max |difference| 10.56 at 13, dim 14 (◀); rows 12-13 of 0-35"
    std::string brief = v.appendedCount > 0
                            ? "new " + rangeOf(v.appendedFirst, newLast) + " (\u25B6)"
                            : "no new records";
    if (!v.absDiff.empty())
      brief += beyond ? "; max |difference| " + shortNumber(v.diffMax) + " at " +
                            std::to_string(v.diffArgPosition) + ", dim " +
                            std::to_string(v.diffArgDim) + " (\u25C0)"
                      : "; max |difference| " + shortNumber(v.diffMax) + " (noise)";
    brief += "; positions " + rangeOf(rows.first, rows.last) +
             (cut ? " of 0-" + std::to_string(t - 1) : "") + " down";
    out.push_back(fitWidth("  " + brief, width));
  } else {
    appendLines(out, wrapText(info, width, "  "));
    std::string where = "positions " + rangeOf(rows.first, rows.last) + " down";
    if (cut) where += " (of 0-" + std::to_string(t - 1) + "; --rows for more)";
    appendLines(out, wrapText(where + ", " + dimsNote, width, "  "));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string l = lines[i];
    const int64_t q = rows.first + static_cast<int64_t>(i) - 1;
    if (i > 0 && beyond && q == v.diffArgPosition) l += " " + st.alarm("\u25C0");
    out.push_back(fitWidth(l, width));
  }
  if (beyond && (v.diffArgPosition < rows.first || v.diffArgPosition > rows.last))
    out.push_back(fitWidth("  (the largest difference, at position " +
                               std::to_string(v.diffArgPosition) + ", is outside the rows shown)",
                           width));
  HeatmapMap values = ref;
  values.title = "reference and cached";
  if (f.compact) {
    out.push_back(fitWidth("  scale: values " + heatmapRamp(values, st) + ", |difference| " +
                               heatmapRamp(diff, st),
                           width));
  } else {
    appendLines(out, packItems(heatmapLegend(values, st), width, "  scale  ", "         ", "  "));
    appendLines(out, packItems(heatmapLegend(diff, st), width, "         ", "         ", "  "));
  }
  std::string list;
  for (int64_t q : v.rewrittenPositions) list += (list.empty() ? "" : ", ") + std::to_string(q);
  const Lines notes[] = {
      list.empty() ? Lines{} : wrapText("rewritten positions (r): " + list, width, "  "),
      v.note.empty() ? Lines{} : wrapText("note: " + v.note, width, "  ")};
  for (const Lines& n : notes) appendLines(out, f.compact ? firstLines(n, 1, width) : n);
  return out;
}

}  // namespace kvscope::cli
