// Drawing numbers in a terminal for kvscope-cli inspect: colour (24-bit or 256-colour ANSI,
// or none), heatmaps of [positions, dims] buffers side by side with one line per position,
// colour-scale legends and log-scale bars. Presentation only: the numbers come from
// kvscope::Inspector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "TerminalText.hpp"

namespace kvscope::cli {

enum class ColorMode { None, Ansi256, TrueColor };

/// `choice` auto | always | never. auto: colour when stdout is a terminal, NO_COLOR is
/// unset (or empty) and TERM is not "dumb"; 24-bit when COLORTERM says truecolor/24bit.
ColorMode detectColorMode(const std::string& choice);

struct Rgb {
  int r = 0, g = 0, b = 0;
};

/// Text styling that disappears without colour.
class Style {
 public:
  explicit Style(ColorMode mode) : mode_(mode) {}
  ColorMode mode() const { return mode_; }
  bool colored() const { return mode_ != ColorMode::None; }
  std::string fg(const Rgb& c, const std::string& text) const;
  std::string bg(const Rgb& c, const std::string& text) const;
  std::string bold(const std::string& text) const;
  std::string dim(const std::string& text) const;
  std::string alarm(const std::string& text) const;  // red
  std::string ok(const std::string& text) const;     // green

 private:
  std::string code(const Rgb& c, bool background) const;
  ColorMode mode_;
};

/// One map of a heatmap row: a [positions, dims] row-major buffer and its colour range.
struct HeatmapMap {
  std::string title;
  const std::vector<float>* data = nullptr;  // nullptr or empty: `missing` is shown instead
  int64_t positions = 0;
  int64_t dims = 0;
  double lo = 0.0, hi = 1.0;  // colour range
  bool diverging = false;     // blue-white-red (signed values) instead of dark-to-bright
  bool poolMax = false;       // downsampled dims: the group's max (else its mean)
  std::string missing;        // why there is nothing to draw
};

struct HeatmapRows {
  int64_t first = 0, last = -1;     // positions drawn, inclusive
  std::vector<std::string> labels;  // per drawn position: the left margin, same width each
};

/// The maps side by side, one line per position in `rows`, dims across, downsampled so the
/// whole row fits `width` columns. Returns the lines, a column-header line first.
std::vector<std::string> drawHeatmaps(const std::vector<HeatmapMap>& maps, const HeatmapRows& rows,
                                      int width, const Style& style, std::string* dimsNote);
/// The colour scale of a map as items to pack into lines: "title: " and each glyph with
/// its value, or the colour gradient between the numeric range's ends.
std::vector<std::string> heatmapLegend(const HeatmapMap& map, const Style& style);

/// The colour scale in a few columns: "lo ' ░▒▓█' hi", or a short gradient between them.
std::string heatmapRamp(const HeatmapMap& map, const Style& style);

/// A log-scale bar of `width` cells for `value` on [lo, hi] with a mark at `floor`
/// (none when floor <= 0).
std::string logBar(double value, double floor, double lo, double hi, int width, const Style& style);

/// "1.23e-04"-style short numbers.
std::string shortNumber(double x);

}  // namespace kvscope::cli
