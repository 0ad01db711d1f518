// Plot titles that fit their plot: a title wider than the plot breaks at its " · "
// separators into lines, and a line still too wide is elided ("…"); the whole text stays
// on the element (fullTitle) for tests and tooltips. Call setFittedTitle when the text
// changes and refitTitles when the plot is resized.
#pragma once

#include <QFontMetrics>
#include <QStringList>
#include <algorithm>

#include "ui/views/QCustomPlotInclude.hpp"

namespace kvscope::ui {

inline const char* kFullTitleProperty = "kvscopeFullTitle";

inline QString fullTitle(const QCPTextElement* element) {
  return element->property(kFullTitleProperty).toString();
}

// Breaks `line` at `separator` into lines no wider than `room` (a part wider stays whole).
inline QStringList breakTitleLine(const QString& line, const QString& separator,
                                  const QFontMetrics& fm, int room) {
  QStringList out;
  QString current;
  for (const QString& part : line.split(separator)) {
    const QString joined = current.isEmpty() ? part : current + separator + part;
    if (current.isEmpty() || fm.horizontalAdvance(joined) <= room) {
      current = joined;
    } else {
      out << (separator == QStringLiteral(", ") ? current + QLatin1Char(',') : current);
      current = part;
    }
  }
  if (!current.isEmpty()) out << current;
  return out;
}

inline void fitTitle(QCPTextElement* element, int width) {
  const QFontMetrics fm(element->font());
  const int room = std::max(40, width - 8);
  QStringList fitted;
  for (const QString& line : fullTitle(element).split(QLatin1Char('\n')))
    for (const QString& part : breakTitleLine(line, QStringLiteral(" \u00B7 "), fm, room))
      for (const QString& piece : breakTitleLine(part, QStringLiteral(", "), fm, room))
        fitted << fm.elidedText(piece, Qt::ElideRight, room);
  element->setText(fitted.join(QLatin1Char('\n')));
}

inline void setFittedTitle(QCPTextElement* element, const QString& text) {
  element->setProperty(kFullTitleProperty, text);
  fitTitle(element, element->parentPlot()->width());
}

inline void refitTitles(QCustomPlot* plot) {
  for (QCPLayoutElement* e : plot->plotLayout()->elements(true))
    if (auto* t = qobject_cast<QCPTextElement*>(e); t && t->property(kFullTitleProperty).isValid())
      fitTitle(t, plot->width());
}

/// A log axis of `pixels` gets about one labelled decade per 40 pixels (skipping decades).
inline void fitLogTicks(QCPAxis* axis, int pixels) {
  if (auto ticker = axis->ticker().dynamicCast<QCPAxisTickerLog>())
    ticker->setTickCount(std::clamp(pixels / 40, 2, 5));
}

}  // namespace kvscope::ui
