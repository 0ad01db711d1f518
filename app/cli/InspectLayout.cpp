// kvscope-cli inspect: the full and the compact layout of the parts (InspectSections.hpp).
#include <algorithm>

#include "InspectSections.hpp"

namespace kvscope::cli {

namespace {

int count(const Lines& l) { return static_cast<int>(l.size()); }

// Every line at most `width` columns, whatever a part produced.
Lines fitted(Lines lines, int width) {
  for (auto& l : lines) l = fitWidth(l, width);
  return lines;
}

}  // namespace

Lines fullInspectLayout(const InspectFrame& f, int rows) {
  Lines out = inspectHeader(f);
  const Lines parts[] = {inspectTokens(f), inspectLayers(f, 0), inspectHeatmaps(f, rows),
                         inspectLogits(f), inspectFindings(f)};
  for (const Lines& part : parts) {
    out.push_back("");
    appendLines(out, part);
  }
  return fitted(out, f.width);
}

Lines compactInspectLayout(const InspectFrame& f, int height, int rows, const std::string& footer) {
  // Header, tokens, layers, logits and the findings here first; the heatmap last, with the
  // positions that fit in what is left.
  Lines out = inspectHeader(f);
  appendLines(out, inspectTokens(f));
  const Lines logits = inspectLogits(f), here = inspectFindings(f);
  const int room = height - (footer.empty() ? 0 : 1);
  int rest = room - count(out) - count(logits) - count(here);
  const Lines layers = inspectLayers(f, std::max(3, (rest - 8) / 2));
  appendLines(out, layers);
  appendLines(out, logits);
  appendLines(out, here);
  rest -= count(layers);

  // The heatmap's own lines besides its rows, measured with one row; then as many rows as
  // fit (its wrapped lines can change with the row range: shrink until it fits).
  const int overhead = count(inspectHeatmaps(f, 1)) - 1;
  int fit = std::min(rows, rest - overhead);
  Lines heat;
  if (fit >= 1) {
    for (int tries = 0; tries < 4; ++tries) {
      heat = inspectHeatmaps(f, fit);
      const int over = count(heat) - rest;
      if (over <= 0 || fit <= 1) break;
      fit = std::max(1, fit - over);
    }
  } else if (rest >= 1) {
    heat.push_back("K/V cache: no room for it in " + std::to_string(height) +
                   " lines (--height, a taller terminal, or --full)");
  }
  appendLines(out, heat);
  if (count(out) > room) out.resize(static_cast<size_t>(std::max(0, room)));
  if (!footer.empty()) out.push_back(footer);
  return fitted(out, f.width);
}

}  // namespace kvscope::cli
