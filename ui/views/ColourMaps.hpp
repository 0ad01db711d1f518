// Colour maps safe for colour-blind readers (perceptually uniform, monotonic in lightness):
// viridis (matplotlib's default) and cividis (optimised for deuteranopia and protanopia).
#pragma once

#include <QColor>
#include <initializer_list>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui::ColourMaps {

inline QCPColorGradient fromStops(std::initializer_list<QRgb> stops) {
  QCPColorGradient g;
  g.clearColorStops();
  const double n = static_cast<double>(stops.size() - 1);
  int i = 0;
  for (QRgb c : stops) g.setColorStopAt(i++ / n, QColor(c));
  g.setColorInterpolation(QCPColorGradient::ciRGB);
  return g;
}

inline QCPColorGradient viridis() {
  return fromStops(
      {0x440154, 0x472D7B, 0x3B528B, 0x2C728E, 0x21918C, 0x28AE80, 0x5EC962, 0xADDC30, 0xFDE725});
}

inline QCPColorGradient cividis() {
  return fromStops({0x00204D, 0x00336F, 0x39486B, 0x575C6D, 0x707173, 0x8A8779, 0xA69D75, 0xC4B56C,
                    0xE4CF5B, 0xFFEA46});
}

}  // namespace kvscope::ui::ColourMaps
