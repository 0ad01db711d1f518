#include "TerminalHeatmap.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvscope::cli {

namespace {

// Plain-text shading, lowest to highest.
const std::array<const char*, 5> kShades = {" ", "\u2591", "\u2592", "\u2593", "\u2588"};

Rgb mix(const Rgb& a, const Rgb& b, double t) {
  auto c = [t](int x, int y) { return static_cast<int>(std::lround(x + (y - x) * t)); };
  return {c(a.r, b.r), c(a.g, b.g), c(a.b, b.b)};
}

// Piecewise-linear colour map over evenly spaced stops, t in [0, 1].
template <size_t N>
Rgb ramp(const std::array<Rgb, N>& stops, double t) {
  t = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0) * (N - 1);
  const size_t i = std::min(static_cast<size_t>(t), N - 2);
  return mix(stops[i], stops[i + 1], t - static_cast<double>(i));
}

// Blue - light grey - red for signed values (the GUI's value maps read the same way).
Rgb diverging(double t) {
  static const std::array<Rgb, 3> stops = {Rgb{59, 76, 192}, Rgb{221, 221, 221}, Rgb{180, 4, 38}};
  return ramp(stops, t);
}

// Dark to bright for |difference|: precision noise stays dark.
Rgb sequential(double t) {
  static const std::array<Rgb, 5> stops = {Rgb{0, 0, 4}, Rgb{87, 16, 110}, Rgb{188, 55, 84},
                                           Rgb{249, 142, 9}, Rgb{252, 255, 164}};
  return ramp(stops, t);
}

double fraction(double x, double lo, double hi) {
  if (!(hi > lo)) return 0.0;
  return std::clamp((x - lo) / (hi - lo), 0.0, 1.0);
}

size_t shadeIndex(double t) {
  return static_cast<size_t>(std::lround(std::clamp(t, 0.0, 1.0) * (kShades.size() - 1)));
}

}  // namespace

ColorMode detectColorMode(const std::string& choice) {
  if (choice == "never") return ColorMode::None;
  if (choice != "always") {
    if (!isatty(STDOUT_FILENO)) return ColorMode::None;
    const char* noColor = std::getenv("NO_COLOR");
    if (noColor && *noColor) return ColorMode::None;
    const char* term = std::getenv("TERM");
    if (term && std::string(term) == "dumb") return ColorMode::None;
  }
  const char* colorterm = std::getenv("COLORTERM");
  const std::string ct = colorterm ? colorterm : "";
  return ct == "truecolor" || ct == "24bit" ? ColorMode::TrueColor : ColorMode::Ansi256;
}

std::string Style::code(const Rgb& c, bool background) const {
  char buf[32];
  if (mode_ == ColorMode::TrueColor) {
    std::snprintf(buf, sizeof buf, "\x1b[%d;2;%d;%d;%dm", background ? 48 : 38, c.r, c.g, c.b);
  } else {
    auto q = [](int x) { return static_cast<int>(std::lround(std::clamp(x, 0, 255) / 255.0 * 5)); };
    std::snprintf(buf, sizeof buf, "\x1b[%d;5;%dm", background ? 48 : 38,
                  16 + 36 * q(c.r) + 6 * q(c.g) + q(c.b));
  }
  return buf;
}

std::string Style::fg(const Rgb& c, const std::string& text) const {
  return colored() ? code(c, false) + text + "\x1b[0m" : text;
}
std::string Style::bg(const Rgb& c, const std::string& text) const {
  return colored() ? code(c, true) + text + "\x1b[0m" : text;
}
std::string Style::bold(const std::string& text) const {
  return colored() ? "\x1b[1m" + text + "\x1b[0m" : text;
}
std::string Style::dim(const std::string& text) const {
  return colored() ? "\x1b[2m" + text + "\x1b[0m" : text;
}
std::string Style::alarm(const std::string& text) const {
  return colored() ? "\x1b[1;31m" + text + "\x1b[0m" : text;
}
std::string Style::ok(const std::string& text) const {
  return colored() ? "\x1b[32m" + text + "\x1b[0m" : text;
}

std::vector<std::string> drawHeatmaps(const std::vector<HeatmapMap>& maps, const HeatmapRows& rows,
                                      int width, const Style& style, std::string* dimsNote) {
  const std::string gap = "   ";
  const int margin = rows.labels.empty() ? 0 : displayWidth(rows.labels.front());
  int64_t dims = 1;
  for (const auto& m : maps) dims = std::max(dims, m.dims);
  const int n = static_cast<int>(std::max<size_t>(1, maps.size()));
  const int room = std::max(n * 4, width - margin - (n - 1) * displayWidth(gap));
  const int64_t perMap = std::max<int64_t>(4, room / n);
  const int64_t group = (dims + perMap - 1) / perMap;  // dims per column
  const int64_t cols = (dims + group - 1) / group;
  const int mapWidth = static_cast<int>(std::max<int64_t>(cols, 1));
  if (dimsNote) {
    *dimsNote = "head dims 0-" + std::to_string(dims - 1) + " across";
    if (group > 1)
      *dimsNote += ", " + std::to_string(group) +
                   " per column (the mean of values, the max of |difference|)";
  }

  std::vector<std::string> lines;
  std::string header = std::string(static_cast<size_t>(margin), ' ');
  for (size_t k = 0; k < maps.size(); ++k)
    header += (k ? gap : "") + padRight(fitWidth(maps[k].title, mapWidth), mapWidth);
  lines.push_back(header);
  for (int64_t q = rows.first; q <= rows.last; ++q) {
    const size_t r = static_cast<size_t>(q - rows.first);
    std::string line = r < rows.labels.size() ? rows.labels[r] : std::string();
    for (size_t k = 0; k < maps.size(); ++k) {
      const HeatmapMap& m = maps[k];
      if (k) line += gap;
      const bool have = m.data && !m.data->empty() && q < m.positions;
      if (!have) {
        // Nothing at this position: the reason once, on the first row.
        const std::string text = q == rows.first ? fitWidth(m.missing, mapWidth) : "";
        line += padRight(style.dim(text), mapWidth);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) {
        double acc = m.poolMax ? -INFINITY : 0.0;
        int64_t count = 0;
        for (int64_t j = c * group; j < std::min(m.dims, (c + 1) * group); ++j) {
          const double x = (*m.data)[static_cast<size_t>(q * m.dims + j)];
          acc = m.poolMax ? std::max(acc, x) : acc + x;
          ++count;
        }
        if (count == 0) {
          line += " ";
          continue;
        }
        const double x = m.poolMax ? acc : acc / static_cast<double>(count);
        const double t = fraction(x, m.lo, m.hi);
        if (style.colored())
          line += style.bg(m.diverging ? diverging(t) : sequential(t), " ");
        else
          line += kShades[shadeIndex(t)];
      }
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> heatmapLegend(const HeatmapMap& m, const Style& style) {
  std::vector<std::string> items{m.title + ":"};
  if (style.colored()) {
    std::string gradient = shortNumber(m.lo) + " ";
    const int cells = 16;
    for (int i = 0; i < cells; ++i) {
      const double t = static_cast<double>(i) / (cells - 1);
      gradient += style.bg(m.diverging ? diverging(t) : sequential(t), " ");
    }
    items.push_back(gradient + " " + shortNumber(m.hi));
    if (m.diverging) items.push_back("(light = " + shortNumber((m.lo + m.hi) / 2) + ")");
  } else {
    // Each glyph and the value it stands for (the middle of its interval).
    for (size_t i = 0; i < kShades.size(); ++i) {
      const double t = static_cast<double>(i) / (kShades.size() - 1);
      items.push_back(std::string("'") + kShades[i] + "' " + shortNumber(m.lo + t * (m.hi - m.lo)));
    }
  }
  items[1] = items[0] + " " + items[1];  // the title stays with the first entry
  items.erase(items.begin());
  return items;
}

std::string heatmapRamp(const HeatmapMap& m, const Style& style) {
  std::string ramp;
  if (style.colored()) {
    for (int i = 0; i < 8; ++i) {
      const double t = i / 7.0;
      ramp += style.bg(m.diverging ? diverging(t) : sequential(t), " ");
    }
  } else {
    for (const char* g : kShades) ramp += g;
    ramp = "'" + ramp + "'";
  }
  return shortNumber(m.lo) + " " + ramp + " " + shortNumber(m.hi);
}

std::string logBar(double value, double floor, double lo, double hi, int width,
                   const Style& style) {
  auto cell = [&](double x) {
    if (!(x > 0) || !(hi > lo) || lo <= 0) return 0;
    if (std::isinf(x)) return width;
    const double t = (std::log10(x) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return static_cast<int>(std::lround(std::clamp(t, 0.0, 1.0) * width));
  };
  const int filled = std::isnan(value) ? 0 : cell(value);
  const int mark = floor > 0 ? std::min(width - 1, cell(floor)) : -1;
  const bool over = floor > 0 && value > floor;
  std::string bar;
  for (int i = 0; i < width; ++i) {
    std::string c = i < filled ? "\u2588" : " ";
    if (i == mark) c = i < filled ? "\u256B" : "\u2506";  // the noise floor
    bar += c;
  }
  return over ? style.alarm(bar) : style.ok(bar);
}

std::string shortNumber(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  const double a = std::abs(x);
  if (a == 0.0)
    std::snprintf(buf, sizeof buf, "0");
  else if (a >= 1e-3 && a < 1e4)
    std::snprintf(buf, sizeof buf, "%.4g", x);
  else
    std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

}  // namespace kvscope::cli
