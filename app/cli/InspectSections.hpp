// The parts of `kvscope-cli inspect`'s view of one step, each as lines of at most `width`
// columns: the header (verdict, first divergence, first check, findings, the point shown),
// the token strip, the layer overview, the K/V heatmaps, the logits and the findings at the
// point. The full layout (--full) shows each part whole; the compact one (the default, and
// every screen of the key-driven mode) fits a terminal's height. Every number comes from
// kvscope::Inspector; these files only lay them out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "TerminalHeatmap.hpp"
#include "kvscope/Inspection.hpp"

namespace kvscope::cli {

using Lines = std::vector<std::string>;

inline void appendLines(Lines& out, const Lines& more) {
  out.insert(out.end(), more.begin(), more.end());
}

/// What one view is drawn from and in.
struct InspectFrame {
  const Inspector& insp;
  const StepView& view;
  const Style& style;
  int width = 80;
  bool compact = false;
};

Lines inspectHeader(const InspectFrame& f);
/// The request's tokens around the step, the step's tick, positions and cache lengths, and
/// the events nearby (compact: at most four lines).
Lines inspectTokens(const InspectFrame& f);
/// A heading and one line per layer; with maxLayers > 0 at most that many layer lines (the
/// shown layer, the first divergence's, their neighbours) and a line counting the others.
Lines inspectLayers(const InspectFrame& f, int maxLayers);
/// A heading, the step's new records and largest difference, then reference | cached |
/// |difference| with at most `maxRows` positions, the colour scales and notes.
Lines inspectHeatmaps(const InspectFrame& f, int maxRows);
Lines inspectLogits(const InspectFrame& f);
Lines inspectFindings(const InspectFrame& f);

/// The finding whose first check the header names: the root finding at the first
/// divergence, else the first root finding, else the first; nullptr without findings.
const Finding* leadingFinding(const AuditReport& report);

/// Every part, whole, with blank lines between them.
Lines fullInspectLayout(const InspectFrame& f, int rows);
/// The parts fit into `height` lines (the heatmap gets what is left, at most `rows`
/// positions), `footer` (when not empty) as the last line.
Lines compactInspectLayout(const InspectFrame& f, int height, int rows, const std::string& footer);

/// "0-11" or "0-3, 5, 7-9" ("none" when empty).
std::string rangeList(const std::vector<int64_t>& xs);
/// "4" or "4-9".
std::string rangeOf(int64_t first, int64_t last);
std::string kindLetter(KvKind k);  // K | V
std::string kindWord(KvKind k, bool latent = false);  // keys | values (MLA: latent rows | roped key parts)

}  // namespace kvscope::cli
