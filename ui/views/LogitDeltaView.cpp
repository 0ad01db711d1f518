#include "ui/views/LogitDeltaView.hpp"

#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/PlotLegend.hpp"
#include "ui/views/PlotTitle.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {
constexpr double kLogFloor = 1e-9;

QCPTextElement* addTitle(QCustomPlot* plot, const QString& text) {
  plot->plotLayout()->insertRow(0);
  auto* t = new QCPTextElement(plot, text, QFont(plot->font().family(), plot->font().pointSize() + 1, QFont::Bold));
  plot->plotLayout()->addElement(0, 0, t);
  t->setProperty(kFullTitleProperty, text);
  return t;
}

// Whole numbers on an integer axis (steps, token ids), however far it is zoomed.
void integerTicks(QCPAxis* axis) {
  auto ticker = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
  ticker->setTickStep(1.0);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  axis->setTicker(ticker);
}
}  // namespace

LogitDeltaView::LogitDeltaView(SelectionContext* context, QWidget* parent)
    : QWidget(parent), context_(context) {
  steps_ = new QCustomPlot(this);
  steps_->setMinimumSize(240, 130);
  stepsTitle_ = addTitle(steps_, tr("max |Δ logit| per step"));
  steps_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  steps_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  steps_->yAxis->setNumberFormat(QStringLiteral("eb"));
  steps_->yAxis->setNumberPrecision(0);
  steps_->xAxis->setLabel(tr("step (click to select)"));
  integerTicks(steps_->xAxis);
  floorGraph_ = steps_->addGraph();
  floorGraph_->setPen(Qt::NoPen);
  floorGraph_->removeFromLegend();
  tolerance_ = steps_->addGraph();
  tolerance_->setName(tr("tolerance"));
  tolerance_->setPen(QPen(Theme::ok(), 1.5, Qt::DashLine));
  tolerance_->setBrush(QColor(0x2E, 0x7D, 0x32, 40));
  tolerance_->setChannelFillGraph(floorGraph_);
  tolerance_->setLineStyle(QCPGraph::lsStepCenter);
  within_ = steps_->addGraph();
  within_->setName(tr("within"));
  within_->setLineStyle(QCPGraph::lsNone);
  within_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Theme::ok(), 8));
  beyond_ = steps_->addGraph();
  beyond_->setName(tr("beyond tolerance"));
  beyond_->setLineStyle(QCPGraph::lsNone);
  beyond_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Theme::alarm(), 9));
  // The legend in its own row under the title, never over the data.
  placeLegendRow(steps_, 1);
  steps_->legend->setMargins(QMargins(2, 0, 2, 0));
  steps_->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
  steps_->legend->setBrush(QColor(255, 255, 255, 200));
  steps_->legend->setIconSize(14, 8);
  steps_->legend->setRowSpacing(0);
  steps_->legend->setColumnSpacing(4);
  cursor_ = new QCPItemStraightLine(steps_);
  cursor_->setPen(QPen(Theme::selection(), 2));

  tokens_ = new QCustomPlot(this);
  tokens_->setMinimumSize(240, 130);
  tokensTitle_ = addTitle(tokens_, tr("Δ logit per token (cached − reference)"));
  tokens_->xAxis->setLabel(tr("token id · labelled: largest |Δ|, red = the largest"));
  integerTicks(tokens_->xAxis);
  delta_ = tokens_->addGraph();
  delta_->setLineStyle(QCPGraph::lsImpulse);
  delta_->setPen(QPen(Theme::alarm(), 1));
  delta_->setAdaptiveSampling(true);
  delta_->setAntialiased(false);  // crisp impulses (and a smaller PNG)

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(steps_, 1);
  layout->addWidget(tokens_, 1);

  connect(context_, &SelectionContext::outputChanged, this, [this] { rebuildSteps(); });
  connect(context_, &SelectionContext::selectionChanged, this,
          [this](const InspectionPoint& cur, const InspectionPoint&) {
            if (cur.request != request_) rebuildSteps();
            else moveCursor();
          });
  connect(context_, &SelectionContext::snapshotChanged, this, [this] { paintTokens(); });
  // A click on a step selects it.
  connect(steps_, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
    const int64_t step = stepAt(event->position().toPoint());
    if (step >= 0) context_->setStep(step);
  });
  rebuildSteps();
}

void LogitDeltaView::rebuildSteps() {
  request_ = context_->selection().request;
  within_->data()->clear();
  beyond_->data()->clear();
  tolerance_->data()->clear();
  floorGraph_->data()->clear();
  const AuditResult* r = context_->result();
  double top = 1.0, bottom = 1e-7;
  double last = 0.0;
  if (r) {
    std::vector<const StepNumerics*> rows;
    for (const auto& sn : r->report.steps)
      if (sn.request == request_) rows.push_back(&sn);
    std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->step < b->step; });
    const double dot = rows.size() > 60 ? 4 : 8;
    within_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Theme::ok(), dot));
    beyond_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Theme::alarm(), dot + 1));
    for (const StepNumerics* sn : rows) {
      const auto x = static_cast<double>(sn->step);
      const double y = std::max(sn->maxLogitError, kLogFloor);
      (sn->maxLogitError > sn->tolerance ? beyond_ : within_)->addData(x, y);
      tolerance_->addData(x, std::max(sn->tolerance, kLogFloor));
      top = std::max({top, y, sn->tolerance});
      bottom = std::min({bottom, y, sn->tolerance});
      last = x;
    }
    // Extend the band half a step on both sides.
    if (!rows.empty()) {
      tolerance_->addData(-0.5, std::max(rows.front()->tolerance, kLogFloor));
      tolerance_->addData(last + 0.5, std::max(rows.back()->tolerance, kLogFloor));
    }
    floorGraph_->addData(-0.5, bottom / 10.0);
    floorGraph_->addData(last + 0.5, bottom / 10.0);
  }
  steps_->xAxis->setRange(-0.5, last + 0.5);
  steps_->yAxis->setRange(bottom / 10.0, top * 10.0);
  setFittedTitle(stepsTitle_, tr("max |Δ logit| per step · request %1").arg(request_));
  moveCursor();
}

void LogitDeltaView::moveCursor() {
  const auto x = static_cast<double>(context_->selection().step);
  cursor_->point1->setCoords(x, 1.0);
  cursor_->point2->setCoords(x, 2.0);
  cursor_->setVisible(context_->output() != nullptr);
  steps_->replot(QCustomPlot::rpQueuedReplot);
}

int64_t LogitDeltaView::stepAt(const QPoint& plotPos) const {
  if (!steps_->axisRect()->rect().contains(plotPos) || !context_->output()) return -1;
  const auto steps = context_->stepsOf(context_->selection().request);
  if (steps.empty()) return -1;
  const double x = steps_->xAxis->pixelToCoord(plotPos.x());
  int64_t best = steps.front();
  for (int64_t s : steps)
    if (std::abs(static_cast<double>(s) - x) < std::abs(static_cast<double>(best) - x)) best = s;
  return best;
}

void LogitDeltaView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  for (QCustomPlot* plot : {steps_, tokens_}) refitTitles(plot);
  fitLogTicks(steps_->yAxis, steps_->height() - 90);
  fitLegend(steps_);  // as many items per line as fit
  paintTokens();  // label spacing is in pixels
}

QString LogitDeltaView::tokenText(int64_t id) const {
  const auto& inspector = context_->inspector();
  if (!inspector) return QStringLiteral("#%1").arg(id);
  return QString::fromStdString(inspector->tokenLabel(context_->selection().request, id));
}

void LogitDeltaView::paintTokens() {
  for (QCPItemText* l : labels_) tokens_->removeItem(l);
  labels_.clear();
  labelled_.clear();
  const auto& snap = context_->snapshot();
  if (!snap || snap->logitDelta.empty()) {
    delta_->data()->clear();
    setFittedTitle(tokensTitle_, context_->output()
                                     ? tr("Δ logit per token · no reference row for this step")
                                     : tr("Δ logit per token"));
    tokens_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const auto& d = snap->logitDelta;
  QVector<double> keys(static_cast<int>(d.size())), values(static_cast<int>(d.size()));
  for (size_t i = 0; i < d.size(); ++i) {
    keys[static_cast<int>(i)] = static_cast<double>(i);
    values[static_cast<int>(i)] = static_cast<double>(d[i]);
  }
  delta_->setData(keys, values, true);
  const double m = std::max(snap->maxAbsLogitDelta, 1e-9);
  tokens_->xAxis->setRange(-0.5, static_cast<double>(d.size()) - 0.5);
  tokens_->yAxis->setRange(-m * 1.6, m * 1.6);  // room for the labels above and below
  std::vector<size_t> order(d.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // The largest deltas, skipping ones whose label would sit on top of a larger one's.
  const size_t candidates = std::min<size_t>(kLabelledTokens * 6, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(candidates),
                    order.end(),
                    [&d](size_t a, size_t b) { return std::abs(d[a]) > std::abs(d[b]); });
  const bool significant =
      snap->maxAbsLogitDelta > (snap->logitNoiseFloor > 0 ? snap->logitNoiseFloor : 1e-4);
  // Labels at least a label's width apart on screen (about 70 pixels).
  const int px = std::max(
      100, tokens_->axisRect()->width() > 0 ? tokens_->axisRect()->width() : tokens_->width() - 60);
  const auto apart =
      static_cast<std::ptrdiff_t>(std::max<size_t>(1, d.size() * 70 / static_cast<size_t>(px)));
  for (size_t k = 0; k < candidates && significant && labelled_.size() < kLabelledTokens; ++k) {
    const size_t i = order[k];
    bool crowded = false;
    for (int64_t j : labelled_)
      crowded =
          crowded ||
          (std::abs(static_cast<std::ptrdiff_t>(i) - static_cast<std::ptrdiff_t>(j)) < apart &&
           (d[i] >= 0) == (d[static_cast<size_t>(j)] >= 0));  // above and below do not meet
    if (crowded) continue;
    labelled_.push_back(static_cast<int64_t>(i));
    auto* label = new QCPItemText(tokens_);
    label->setText(tokenText(static_cast<int64_t>(i)));
    label->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
    label->setColor(labelled_.size() == 1 ? Theme::alarm() : palette().color(QPalette::Text));
    // Centred on its impulse, unless that would cut it at either end of the axis.
    const double x = tokens_->xAxis->coordToPixel(static_cast<double>(i));
    const double half = QFontMetrics(label->font()).horizontalAdvance(label->text()) / 2.0 + 2;
    const QRect axes = tokens_->axisRect()->rect();
    const Qt::Alignment h = x - half < axes.left()    ? Qt::AlignLeft
                            : x + half > axes.right() ? Qt::AlignRight
                                                      : Qt::AlignHCenter;
    label->setPositionAlignment(h | (d[i] >= 0 ? Qt::AlignBottom : Qt::AlignTop));
    label->position->setCoords(static_cast<double>(i), static_cast<double>(d[i]));
    labels_.push_back(label);
  }
  setFittedTitle(tokensTitle_, tr("Δ logit per token · step %1 · max %2")
                                   .arg(snap->point.step)
                                   .arg(snap->maxAbsLogitDelta, 0, 'g', 3));
  tokens_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
