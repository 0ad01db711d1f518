#include "ui/views/LayerOverviewView.hpp"

#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/PlotTitle.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {
constexpr double kAxisFloor = 1e-9;
double shown(double v) {
  if (std::isnan(v)) return kAxisFloor;
  if (std::isinf(v)) return 1e3;
  return std::max(v, kAxisFloor);
}
}  // namespace

LayerOverviewView::LayerOverviewView(SelectionContext* context, QWidget* parent)
    : QCustomPlot(parent), context_(context) {
  setMouseTracking(true);
  setMinimumSize(220, 160);
  plotLayout()->insertRow(0);
  title_ = new QCPTextElement(this, tr("Layers at this step"),
                              QFont(font().family(), font().pointSize() + 1, QFont::Bold));
  plotLayout()->addElement(0, 0, title_);
  yAxis->setScaleType(QCPAxis::stLogarithmic);
  yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  yAxis->setNumberFormat(QStringLiteral("eb"));
  yAxis->setNumberPrecision(0);
  yAxis->setLabel(tr("max |Δ| K/V"));
  xAxis->setLabel(tr("layer · dashed: noise floor"));
  auto ticker = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
  ticker->setTickStep(1.0);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  xAxis->setTicker(ticker);
  xAxis->grid()->setVisible(false);

  auto makeBars = [this](QColor color) {
    auto* b = new QCPBars(xAxis, yAxis);
    b->setWidth(0.75);
    b->setPen(Qt::NoPen);
    b->setBrush(color);
    b->setBaseValue(kAxisFloor);
    return b;
  };
  okBars_ = makeBars(Theme::neutral());
  badBars_ = makeBars(QColor(0xEF, 0x53, 0x50));
  firstBars_ = makeBars(Theme::alarm());

  floor_ = addGraph();
  floor_->setPen(QPen(Theme::ok(), 1, Qt::DashLine));
  floor_->setLineStyle(QCPGraph::lsStepLeft);
  // The selected layer: a pale band over the axis's whole height, behind the bars (an
  // outline reaching some height would read as a bar of that value).
  selected_ = new QCPItemRect(this);
  selected_->setLayer(QStringLiteral("grid"));
  selected_->setPen(Qt::NoPen);
  QColor band = Theme::selection();
  band.setAlpha(45);
  selected_->setBrush(band);
  selected_->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
  selected_->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
  firstLabel_ = new QCPItemText(this);
  firstLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  firstLabel_->position->setType(QCPItemPosition::ptAxisRectRatio);
  firstLabel_->position->setCoords(0.02, 0.02);
  firstLabel_->setBrush(QColor(255, 255, 255, 220));
  firstLabel_->setPadding(QMargins(3, 1, 3, 1));
  firstLabel_->setColor(Theme::alarm());
  firstLabel_->setFont(QFont(font().family(), font().pointSize(), QFont::Bold));


  connect(context_, &SelectionContext::snapshotChanged, this, [this] { refresh(); });
  connect(context_, &SelectionContext::selectionChanged, this, [this] { refresh(); });
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    values_.clear();
    refresh();
  });
  refresh();
}

void LayerOverviewView::refresh() {
  const auto& snap = context_->snapshot();
  const InspectionPoint& sel = context_->selection();
  if (snap && snap->point.request == sel.request && snap->point.step == sel.step &&
      snap->point.kind == sel.kind) {
    values_ = snap->layerMaxDiff;
    floors_ = snap->layerNoiseFloor;
  } else if (!context_->output()) {
    values_.clear();
  }
  floors_.resize(values_.size(), kDefaultNoiseFloor);
  for (double& f : floors_)
    if (!(f > 0)) f = kDefaultNoiseFloor;
  auto floorAt = [this](size_t l) { return floors_[l]; };
  QVector<double> okV, badV, firstV;
  firstDivergent_ = -1;
  for (size_t l = 0; l < values_.size(); ++l)
    if (!(values_[l] <= floorAt(l)) && !std::isnan(values_[l])) {
      firstDivergent_ = static_cast<int64_t>(l);
      break;
    }
  QVector<double> ko, kb, kf;
  double top = 1e-3;
  for (size_t l = 0; l < values_.size(); ++l) {
    const double v = shown(values_[l]);
    top = std::max(top, v);
    const auto layer = static_cast<double>(l);
    if (static_cast<int64_t>(l) == firstDivergent_) {
      kf << layer;
      firstV << v;
    } else if (v > floorAt(l)) {
      kb << layer;
      badV << v;
    } else {
      ko << layer;
      okV << v;
    }
  }
  QVector<double> fx, fy;  // a step line across each bar's whole width
  for (size_t l = 0; l < floors_.size(); ++l) {
    fx << static_cast<double>(l) - 0.5;
    fy << floors_[l];
  }
  if (!fx.isEmpty()) {
    fx << fx.back() + 1.0;
    fy << fy.back();
  }
  floor_->setData(fx, fy, true);
  okBars_->setData(ko, okV, true);
  badBars_->setData(kb, badV, true);
  firstBars_->setData(kf, firstV, true);
  const double n = std::max<double>(1.0, static_cast<double>(values_.size()));
  xAxis->setRange(-0.6, n - 0.4);
  yAxis->setRange(kAxisFloor, top * 30.0);
  selected_->setVisible(!values_.empty());
  selected_->topLeft->setCoords(static_cast<double>(sel.layer) - 0.5, 0.0);
  selected_->bottomRight->setCoords(static_cast<double>(sel.layer) + 0.5, 1.0);
  firstLabel_->setVisible(firstDivergent_ >= 0);
  if (firstDivergent_ >= 0) {
    firstLabel_->setText(tr("first divergent: L%1").arg(firstDivergent_));
  }
  setFittedTitle(title_, tr("Layers · step %1 · %2")
                             .arg(sel.step)
                             .arg(sel.kind == KvKind::Keys ? tr("keys") : tr("values")));
  replot(QCustomPlot::rpQueuedReplot);
}

QString LayerOverviewView::title() const { return fullTitle(title_); }

QPoint LayerOverviewView::layerCenter(int64_t layer) const {
  const double x = xAxis->coordToPixel(static_cast<double>(layer));
  const double y = (axisRect()->rect().top() + axisRect()->rect().bottom()) / 2.0;
  return QPoint(static_cast<int>(std::lround(x)), static_cast<int>(std::lround(y)));
}

int64_t LayerOverviewView::layerAt(const QPoint& widgetPos) const {
  if (values_.empty() || !axisRect()->rect().contains(widgetPos)) return -1;
  const auto l = static_cast<int64_t>(std::lround(xAxis->pixelToCoord(widgetPos.x())));
  return l >= 0 && l < static_cast<int64_t>(values_.size()) ? l : -1;
}

void LayerOverviewView::resizeEvent(QResizeEvent* event) {
  QCustomPlot::resizeEvent(event);
  refitTitles(this);
  fitLogTicks(yAxis, height() - 90);
}

void LayerOverviewView::mousePressEvent(QMouseEvent* event) {
  const int64_t l = layerAt(event->position().toPoint());
  if (l >= 0) {
    context_->setLayer(l);
    return;
  }
  QCustomPlot::mousePressEvent(event);
}

void LayerOverviewView::mouseMoveEvent(QMouseEvent* event) {
  QCustomPlot::mouseMoveEvent(event);
  const int64_t l = layerAt(event->position().toPoint());
  if (l < 0) {
    QToolTip::hideText();
    return;
  }
  const double v = values_[static_cast<size_t>(l)];
  QToolTip::showText(event->globalPosition().toPoint(),
                     std::isinf(v) ? tr("layer %1: cache shapes differ").arg(l)
                                   : tr("layer %1: max |Δ| %2").arg(l).arg(v, 0, 'g', 4),
                     this);
}

}  // namespace kvscope::ui
