#include "ui/views/KvHeatmapView.hpp"

#include <QToolTip>
#include <cmath>

#include "ui/views/PlotTitle.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {

QString roleTitle(KvHeatmapView::Role role) {
  switch (role) {
    case KvHeatmapView::Role::Reference: return KvHeatmapView::tr("Reference (uncached)");
    case KvHeatmapView::Role::Cached: return KvHeatmapView::tr("Cached");
    case KvHeatmapView::Role::Difference: return KvHeatmapView::tr("|cached \u2212 reference|");
  }
  return {};
}

}  // namespace

KvHeatmapView::KvHeatmapView(Role role, QWidget* parent) : QCustomPlot(parent), role_(role) {
  setMouseTracking(true);
  setMinimumSize(200, 170);
  setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  axisRect()->setRangeDrag(Qt::Horizontal);
  axisRect()->setRangeZoom(Qt::Horizontal);
  setNoAntialiasingOnDrag(true);
  plotLayout()->insertRow(0);
  title_ = new QCPTextElement(this, roleTitle(role), QFont(font().family(), font().pointSize() + 1, QFont::Bold));
  title_->setProperty(kFullTitleProperty, roleTitle(role));
  plotLayout()->addElement(0, 0, title_);

  setAxisNames(tr("position"), tr("head dim"));
  // Positions and dimensions are whole numbers: no 2.5 ticks.
  for (QCPAxis* axis : {xAxis, yAxis}) {
    auto ticker = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    ticker->setTickCount(6);
    axis->setTicker(ticker);
  }
  yAxis->setRangeReversed(true);  // dimension 0 at the top
  map_ = new QCPColorMap(xAxis, yAxis);
  map_->setInterpolate(false);
  map_->setTightBoundary(false);
  scale_ = new QCPColorScale(this);
  scale_->setType(QCPAxis::atRight);
  scale_->setBarWidth(10);
  plotLayout()->addElement(1, 1, scale_);
  map_->setColorScale(scale_);
  auto* group = new QCPMarginGroup(this);
  axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, group);

  marker_ = new QCPItemRect(this);
  // The records the step appended: a solid frame in a colour that neither map uses (the
  // polar map runs blue-black-red, the difference white-red).
  marker_->setPen(
      QPen(role == Role::Difference ? Theme::selection() : QColor(0x00, 0xE6, 0x76), 2.5));
  marker_->setBrush(Qt::NoBrush);
  marker_->setVisible(false);
  marker_->setSelectable(false);
  pointer_ = new QCPItemText(this);
  pointer_->setText(QStringLiteral("\u25BC"));
  pointer_->setColor(marker_->pen().color());
  pointer_->setFont(QFont(font().family(), font().pointSize() + 2, QFont::Bold));
  pointer_->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
  pointer_->setClipToAxisRect(false);
  pointer_->setPadding(QMargins(0, 0, 0, 0));
  pointer_->setSelectable(false);
  pointer_->setVisible(false);

  if (role == Role::Difference) {
    QCPColorGradient g;
    g.clearColorStops();
    g.setColorStopAt(0.0, QColor(0xFF, 0xFF, 0xFF));
    g.setColorStopAt(0.3, QColor(0xFF, 0xE0, 0x82));
    g.setColorStopAt(0.65, QColor(0xF4, 0x51, 0x1E));
    g.setColorStopAt(1.0, QColor(0x8E, 0x00, 0x00));
    map_->setGradient(g);
  } else {
    map_->setGradient(QCPColorGradient(QCPColorGradient::gpPolar));
  }
  // The frame follows zoom and pan (its inset is in pixels).
  connect(this, &QCustomPlot::beforeReplot, this, [this] { placeMarker(); });
  clearBuffer(tr("no data"));
}

QString KvHeatmapView::title() const { return fullTitle(title_); }

void KvHeatmapView::setGradient(const QCPColorGradient& gradient) {
  if (role_ == Role::Difference) return;  // the difference keeps its sequential scale
  map_->setGradient(gradient);
  replot(QCustomPlot::rpQueuedReplot);
}

void KvHeatmapView::setBuffer(const std::vector<float>& buffer, int64_t positions, int64_t dims,
                              QCPRange range, const QString& subtitle) {
  positions_ = positions;
  dims_ = dims;
  const int nx = static_cast<int>(std::max<int64_t>(positions, 1));
  const int ny = static_cast<int>(std::max<int64_t>(dims, 1));
  QCPColorMapData* data = map_->data();
  if (data->keySize() != nx || data->valueSize() != ny)
    data->setSize(nx, ny);
  data->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
  for (int p = 0; p < nx; ++p)
    for (int j = 0; j < ny; ++j) {
      const size_t i = static_cast<size_t>(p) * static_cast<size_t>(dims) + static_cast<size_t>(j);
      data->setCell(p, j, i < buffer.size() && positions > 0 ? static_cast<double>(buffer[i]) : 0.0);
    }
  if (!(range.upper > range.lower)) range = QCPRange(range.lower, range.lower + 1e-9);
  map_->setDataRange(range);
  xAxis->setRange(-0.5, nx - 0.5);
  yAxis->setRange(-0.5, ny - 0.5);
  for (QCPAxis* axis : {xAxis, yAxis}) axis->setTickLabels(true);
  setFittedTitle(title_, subtitle.isEmpty() ? roleTitle(role_)
                                            : roleTitle(role_) + QLatin1Char('\n') + subtitle);
  map_->setVisible(positions > 0);
  scale_->setVisible(positions > 0);
  fitTicks();
  replot(QCustomPlot::rpQueuedReplot);
}

void KvHeatmapView::setVisiblePositions(double first, double last) {
  xAxis->setRange(first - 0.5, last + 0.5);
  replot(QCustomPlot::rpQueuedReplot);
}

void KvHeatmapView::clearBuffer(const QString& message) {
  positions_ = 0;
  dims_ = 0;
  map_->data()->setSize(1, 1);
  map_->data()->setCell(0, 0, 0.0);
  map_->setVisible(false);
  marker_->setVisible(false);
  pointer_->setVisible(false);
  setFittedTitle(title_, roleTitle(role_) + QLatin1Char('\n') + message);
  // No data, no made-up content: no colour scale and no axes' numbers.
  scale_->setVisible(false);
  for (QCPAxis* axis : {xAxis, yAxis}) axis->setTickLabels(false);
  replot(QCustomPlot::rpQueuedReplot);
}

void KvHeatmapView::placeMarker() {
  if (markedFirst_ < 0) return;
  // Half the pen's width, in positions, at the current zoom.
  const double perPixel = std::abs(xAxis->pixelToCoord(1.0) - xAxis->pixelToCoord(0.0));
  const double inset = std::min(0.25, (marker_->pen().widthF() / 2.0 + 0.5) * perPixel);
  marker_->topLeft->setCoords(static_cast<double>(markedFirst_) - 0.5 + inset, -1.0);
  marker_->bottomRight->setCoords(static_cast<double>(markedLast_) + 0.5 - inset,
                                  static_cast<double>(dims_));
}

void KvHeatmapView::fitTicks() {
  // Whole numbers, as many as fit: about one label per 36 pixels on positions.
  const int px = axisRect()->width() > 0 ? axisRect()->width() : width() - 90;
  if (auto t = xAxis->ticker().dynamicCast<QCPAxisTickerFixed>())
    t->setTickCount(std::clamp(px / 36, 2, 8));
  const int py = axisRect()->height() > 0 ? axisRect()->height() : height() - 80;
  if (auto t = yAxis->ticker().dynamicCast<QCPAxisTickerFixed>())
    t->setTickCount(std::clamp(py / 24, 2, 6));
}

void KvHeatmapView::resizeEvent(QResizeEvent* event) {
  QCustomPlot::resizeEvent(event);
  refitTitles(this);
  fitTicks();
  replot(QCustomPlot::rpQueuedReplot);
}

void KvHeatmapView::setAxisNames(const QString& across, const QString& down) {
  xAxis->setLabel(across);
  yAxis->setLabel(down);
}

void KvHeatmapView::setMarkedPositions(int64_t first, int64_t last) {
  if (first < 0 || last < first || positions_ == 0) {
    markedFirst_ = markedLast_ = -1;
    marker_->setVisible(false);
    pointer_->setVisible(false);
  } else {
    // A frame around the columns, reaching above and below the map, and a caret above;
    // placeMarker() keeps its pen inside the framed columns (never over the previous one).
    markedFirst_ = first;
    markedLast_ = last;
    placeMarker();
    marker_->setVisible(true);
    pointer_->position->setCoords((static_cast<double>(first) + static_cast<double>(last)) / 2.0,
                                  -0.5);
    pointer_->setVisible(true);
  }
  replot(QCustomPlot::rpQueuedReplot);
}

QString KvHeatmapView::valueTextAt(const QPoint& widgetPos) const {
  if (positions_ == 0 || !axisRect()->rect().contains(widgetPos)) return {};
  const double key = xAxis->pixelToCoord(widgetPos.x());
  const double value = yAxis->pixelToCoord(widgetPos.y());
  const auto p = static_cast<int64_t>(std::lround(key));
  const auto j = static_cast<int64_t>(std::lround(value));
  if (p < 0 || p >= positions_ || j < 0 || j >= dims_) return {};
  const double v = map_->data()->cell(static_cast<int>(p), static_cast<int>(j));
  return tr("position %1, dim %2: %3").arg(p).arg(j).arg(v, 0, 'g', 6);
}

void KvHeatmapView::mouseMoveEvent(QMouseEvent* event) {
  QCustomPlot::mouseMoveEvent(event);
  const QString text = valueTextAt(event->position().toPoint());
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(event->globalPosition().toPoint(), text, this);
}

void KvHeatmapView::leaveEvent(QEvent* event) {
  QCustomPlot::leaveEvent(event);
  QToolTip::hideText();
}

}  // namespace kvscope::ui
