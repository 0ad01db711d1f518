// `kvscope-cli inspect` on a terminal: the compact view of one step, redrawn as keys move
// through the audit (steps, layers, kv heads, K/V, requests, findings). Used only when stdin
// and stdout are terminals; piped output never gets here.
#pragma once

#include <string>

#include "TerminalHeatmap.hpp"
#include "kvscope/Inspection.hpp"

namespace kvscope::cli {

/// The keys, as the footer of every screen names them.
std::string inspectKeysHelp();

/// Shows `start` and follows the keys until q (or Esc, Ctrl-C, Ctrl-D); then leaves the
/// terminal as it was and prints the last screen (without the footer) so it stays in the
/// scrollback. `width` > 0 caps the columns used; `rows` caps the heatmap's positions.
void browseInspection(Inspector& insp, InspectionPoint start, const Style& style, int width,
                      int rows);

}  // namespace kvscope::cli
