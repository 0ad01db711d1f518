#include "ui/views/PositionTimelineView.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/PlotLegend.hpp"
#include "ui/views/PlotTitle.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {
const char* const kStepProperty = "kvscopeStep";  // the event's step (the label may sit beside it)
const char* const kLaneProperty = "kvscopeLane";  // 0: at the line, 1: one text line right, ...
}  // namespace

PositionTimelineView::PositionTimelineView(SelectionContext* context, QWidget* parent)
    : QCustomPlot(parent), context_(context) {
  setMinimumSize(240, 160);
  plotLayout()->insertRow(0);
  title_ = new QCPTextElement(this, tr("Positions and cache length"),
                              QFont(font().family(), font().pointSize() + 1, QFont::Bold));
  plotLayout()->addElement(0, 0, title_);
  title_->setProperty(kFullTitleProperty, title_->text());
  xAxis->setLabel(tr("step (click to select)"));
  yAxis->setLabel(tr("tokens"));
  // Steps and token counts are whole numbers.
  for (QCPAxis* axis : {xAxis, yAxis}) {
    auto ticker = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    axis->setTicker(ticker);
  }

  expected_ = addGraph();
  expected_->setName(tr("expected pos."));
  expected_->setPen(QPen(Theme::expected(), 2, Qt::DashLine));
  recorded_ = addGraph();
  recorded_->setName(tr("recorded pos."));
  recorded_->setPen(QPen(Theme::selection(), 1.5));
  recorded_->setLineStyle(QCPGraph::lsNone);
  recorded_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Theme::selection(), 7));
  legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
  legend->setRowSpacing(0);
  legend->setColumnSpacing(4);
  legend->setIconSize(18, 8);
  legend->setBrush(QColor(255, 255, 255, 210));
  legend->setMargins(QMargins(2, 0, 2, 0));
  placeLegendRow(this, 1);  // its own row under the title, never over the lines

  cursor_ = new QCPItemStraightLine(this);
  cursor_->setPen(QPen(Theme::selection(), 2));
  connect(this, &QCustomPlot::afterLayout, this, [this] { fitEventLabels(); });

  connect(context_, &SelectionContext::outputChanged, this, [this] { rebuild(); });
  connect(context_, &SelectionContext::selectionChanged, this,
          [this](const InspectionPoint& cur, const InspectionPoint&) {
            if (cur.request != request_) rebuild();
            else moveCursor();
          });
  rebuild();
}

void PositionTimelineView::rebuild() {
  // Remove everything but the two position graphs and the cursor.
  while (graphCount() > 2) removeGraph(graphCount() - 1);
  for (int i = itemCount() - 1; i >= 0; --i)
    if (item(i) != cursor_) removeItem(i);
  eventMarkers_ = 0;
  expected_->data()->clear();
  recorded_->data()->clear();
  const AuditResult* r = context_->result();
  request_ = context_->selection().request;
  if (!r) {
    setFittedTitle(title_, tr("Positions and cache length"));
    cursor_->setVisible(false);
    replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const RequestTimeline& timeline = context_->inspector()->timeline(request_);
  double top = 1.0;
  // Cache length per layer and step; collapsed to one line when all layers agree.
  std::map<int64_t, std::vector<double>> lengths;  // layer -> per step
  QVector<double> xs;
  bool layersDisagree = false;
  for (const TimelineStep& st : timeline.steps) {
    const auto x = static_cast<double>(st.step);
    xs << x;
    expected_->addData(x, static_cast<double>(st.expectedPosition));
    if (st.recordedPosition >= 0) recorded_->addData(x, static_cast<double>(st.recordedPosition));
    top = std::max({top, static_cast<double>(st.expectedPosition + 1), static_cast<double>(st.recordedPosition)});
    std::set<int64_t> distinct;
    for (size_t l = 0; l < st.cacheLength.size(); ++l) {
      if (r->trace.layerKind(static_cast<int64_t>(l)).recurrent) continue;  // a state, no rows to count
      lengths[static_cast<int64_t>(l)].push_back(static_cast<double>(st.cacheLength[l]));
      distinct.insert(st.cacheLength[l]);
      top = std::max(top, static_cast<double>(st.cacheLength[l]));
    }
    layersDisagree = layersDisagree || distinct.size() > 1;
  }
  const QColor lenColor = Theme::cacheLength();
  for (const auto& [layer, values] : lengths) {
    if (!layersDisagree && layer > lengths.begin()->first) break;
    QCPGraph* g = addGraph();
    g->setName(layersDisagree ? tr("cache length L%1").arg(layer) : tr("cache length"));
    QColor c = lenColor;
    if (layersDisagree) c.setHsv((lenColor.hue() + static_cast<int>(layer) * 37) % 360, 200, 220);
    g->setPen(QPen(c, 2));
    g->setLineStyle(QCPGraph::lsStepLeft);
    g->setData(xs.mid(0, static_cast<int>(values.size())), QVector<double>(values.begin(), values.end()), true);
  }
  // Events on the way: the step's own, other requests' arrivals, trace-level events.
  std::map<int64_t, int> atStep;  // labels so far at each step: the next one goes beside them
  for (const TimelineMarker& m : timeline.markers) {
    const QColor color = m.alarm ? Theme::alarm() : m.kind == "other_arrival" ? Theme::selection() : Theme::ok();
    auto* line = new QCPItemStraightLine(this);
    line->setPen(QPen(color, 1.5, Qt::DotLine));
    line->point1->setCoords(static_cast<double>(m.step), 0);
    line->point2->setCoords(static_cast<double>(m.step), 1);
    auto* label = new QCPItemText(this);
    label->setProperty(kFullTitleProperty, QString::fromStdString(m.label));
    label->setText(QString::fromStdString(m.label));
    label->setColor(color);
    label->setRotation(-90);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);  // right of the line, reading up
    label->position->setCoords(static_cast<double>(m.step), top * 0.05);
    label->setProperty(kStepProperty, static_cast<qlonglong>(m.step));
    label->setProperty(kLaneProperty, atStep[m.step]++);
    ++eventMarkers_;
  }
  const FirstDivergence& fd = r->report.firstDivergence;
  if (fd.present && fd.request == request_) {
    auto* band = new QCPItemRect(this);
    band->setPen(Qt::NoPen);
    band->setBrush(QColor(0xD5, 0x00, 0x00, 40));
    band->topLeft->setCoords(static_cast<double>(fd.step) - 0.5, top * 1.2);
    band->bottomRight->setCoords(xs.isEmpty() ? fd.step + 0.5 : xs.back() + 0.5, -1.0);
  }
  xAxis->setRange(-0.5, xs.isEmpty() ? 1.0 : xs.back() + 0.5);
  yAxis->setRange(-0.5, top * 1.15 + 1.0);
  setFittedTitle(title_, tr("Positions · request %1").arg(request_));
  fitLegend(this);
  moveCursor();
}

void PositionTimelineView::fitEventLabels() {
  for (int i = 0; i < itemCount(); ++i) {
    auto* label = qobject_cast<QCPItemText*>(item(i));
    if (!label) continue;
    // Up to the lowest line at the label's step when there is room below it (the label
    // then crosses no data), else up to the top of the axes.
    const double step = static_cast<double>(label->property(kStepProperty).toLongLong());
    // Several events at one step (arrival, batch group, RoPE, prefix cache at step 0): each
    // label one text line further right, not drawn over the others (issue 27).
    const int lane = label->property(kLaneProperty).toInt();
    const int lineHeight = QFontMetrics(label->font()).height();
    label->position->setCoords(xAxis->pixelToCoord(xAxis->coordToPixel(step) + lane * lineHeight),
                               label->position->coords().y());
    double lowest = yAxis->range().upper;
    for (int g = 0; g < graphCount(); ++g) {
      const auto at = graph(g)->data()->findBegin(step, false);
      if (at != graph(g)->data()->constEnd() && at->key == step)
        lowest = std::min(lowest, at->value);
    }
    const double foot = yAxis->coordToPixel(label->position->coords().y());
    const double below = foot - yAxis->coordToPixel(lowest) - 6;
    const int room = static_cast<int>(below >= 60 ? below : foot - axisRect()->top() - 4);
    label->setText(QFontMetrics(label->font())
                       .elidedText(label->property(kFullTitleProperty).toString(), Qt::ElideRight,
                                   std::max(0, room)));
  }
}

int64_t PositionTimelineView::stepAt(const QPoint& widgetPos) const {
  if (!axisRect()->rect().contains(widgetPos) || !context_->output()) return -1;
  const auto steps = context_->stepsOf(request_);
  if (steps.empty()) return -1;
  const double x = xAxis->pixelToCoord(widgetPos.x());
  int64_t best = steps.front();
  for (int64_t s : steps)
    if (std::abs(static_cast<double>(s) - x) < std::abs(static_cast<double>(best) - x)) best = s;
  return best;
}

void PositionTimelineView::mousePressEvent(QMouseEvent* event) {
  const int64_t step = stepAt(event->position().toPoint());
  if (step >= 0) {
    context_->setStep(step);
    return;
  }
  QCustomPlot::mousePressEvent(event);
}

void PositionTimelineView::resizeEvent(QResizeEvent* event) {
  QCustomPlot::resizeEvent(event);
  refitTitles(this);
  fitLegend(this);
}

void PositionTimelineView::moveCursor() {
  const auto x = static_cast<double>(context_->selection().step);
  cursor_->point1->setCoords(x, 0);
  cursor_->point2->setCoords(x, 1);
  cursor_->setVisible(context_->output() != nullptr);
  replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
