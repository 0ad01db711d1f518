// A plot's legend in a row of its own under the title, centred, and never wider than the
// plot: it takes as many items per line as fit and wraps the rest, so the box never covers
// the data or runs past the widget's edge. Call placeLegendRow once when the plot is built
// and fitLegend when it is resized (and after items are added or renamed).
#pragma once

#include <QtGlobal>
#include <algorithm>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

/// Moves the legend out of the axis rect into a row under `row` - 1 (the title's), in the
/// middle of three cells so that the spare width goes left and right of it.
inline void placeLegendRow(QCustomPlot* plot, int row) {
  QCPLegend* legend = plot->legend;
  plot->axisRect()->insetLayout()->take(legend);
  auto* cell = new QCPLayoutGrid;
  plot->plotLayout()->insertRow(row);
  plot->plotLayout()->addElement(row, 0, cell);
  plot->plotLayout()->setRowStretchFactor(row, 0.001);
  cell->setMargins(QMargins(0, 0, 0, 0));
  cell->setColumnSpacing(0);
  cell->expandTo(1, 3);
  cell->addElement(0, 1, legend);
  cell->setColumnStretchFactors({1.0, 0.001, 1.0});
  legend->setVisible(true);
  legend->setSizeConstraintRect(QCPLayoutElement::scrOuterRect);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
}

/// The most legend items per line that fit the plot's width (at least one), and a box no
/// wider than those items. Items wider than the plot alone are the caller's to shorten.
inline void fitLegend(QCustomPlot* plot) {
  QCPLegend* legend = plot->legend;
  const int room = std::max(1, plot->width() - 4);
  legend->setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
  for (int perLine = std::max(1, legend->itemCount()); perLine >= 1; --perLine) {
    legend->setWrap(perLine >= legend->itemCount() ? 0 : perLine);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    if (legend->minimumOuterSizeHint().width() <= room) break;
  }
  legend->setMaximumSize(legend->minimumOuterSizeHint());
}

}  // namespace kvscope::ui
