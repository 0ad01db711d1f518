#include "ui/panels/StepComparePanel.hpp"

#include <QGridLayout>
#include <QLabel>
#include <algorithm>
#include <initializer_list>

#include "ui/bridge/EngineController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/KvHeatmapView.hpp"

namespace kvscope::ui {

namespace {

bool samePlace(const InspectionPoint& a, const InspectionPoint& b) {
  return a.layer == b.layer && a.head == b.head && a.kind == b.kind;
}

QString kindName(KvKind k) { return k == KvKind::Keys ? QStringLiteral("K") : QStringLiteral("V"); }

}  // namespace

StepComparePanel::StepComparePanel(SelectionContext* context, EngineController* engine,
                                   QWidget* parent)
    : QWidget(parent), context_(context), engine_(engine) {
  setObjectName(QStringLiteral("stepComparePanel"));
  heading_ = new QLabel(this);
  heading_->setWordWrap(true);
  pinnedTitle_ = new QLabel(this);
  currentTitle_ = new QLabel(this);
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("compareSummary"));
  summary_->setWordWrap(true);
  pinnedView_ = new KvHeatmapView(KvHeatmapView::Role::Difference, this);
  currentView_ = new KvHeatmapView(KvHeatmapView::Role::Difference, this);
  for (KvHeatmapView* v : {pinnedView_, currentView_}) {
    // Small enough that the dock fits under the plots of a 768-pixel screen (issue 27).
    v->setMinimumSize(160, 120);
    v->setToolTip(
        tr("|cached − reference| of one step at the current layer, kv head and K/V; "
           "both maps share one colour scale"));
  }
  grid_ = new QGridLayout(this);
  grid_->setContentsMargins(4, 2, 4, 2);
  placeMaps(false);

  connect(engine_, &EngineController::taskFinished, this,
          [this](const QString& tag, quint64, EnginePayload payload) {
            if (tag != pinnedTag() || !pinned()) return;
            auto snap = std::static_pointer_cast<const StepSnapshot>(payload);
            if (!snap || snap->outputSerial != context_->outputSerial()) return;
            if (snap->requested.request != pinnedRequest_ || snap->requested.step != pinnedStep_)
              return;
            pinnedSnap_ = std::move(snap);
            repaint();
          });
  connect(context_, &SelectionContext::outputChanged, this, [this] { unpin(); });
  connect(context_, &SelectionContext::snapshotChanged, this, [this] {
    if (!pinned()) return;
    const auto& cur = context_->snapshot();
    if (cur && (!pinnedSnap_ || !samePlace(pinnedSnap_->point, cur->point))) requestPinned();
    repaint();
  });
  unpin();
}

bool StepComparePanel::pinCurrent() {
  if (!context_->output()) return false;
  pinnedRequest_ = context_->selection().request;
  pinnedStep_ = context_->selection().step;
  pinnedSnap_.reset();
  const auto& cur = context_->snapshot();
  if (cur && cur->point.request == pinnedRequest_ && cur->point.step == pinnedStep_)
    pinnedSnap_ = cur;
  else
    requestPinned();
  repaint();
  Q_EMIT pinChanged(true);
  return true;
}

void StepComparePanel::unpin() {
  const bool was = pinned();
  pinnedRequest_ = pinnedStep_ = -1;
  pinnedSnap_.reset();
  heading_->setText(
      tr("<b>Compare steps</b>: no step pinned. Select a step and press Ctrl+B (Navigate → Pin "
         "step for comparison); its difference map then stays here beside the current step's."));
  pinnedTitle_->clear();
  currentTitle_->clear();
  summary_->clear();
  pinnedView_->clearBuffer(tr("no step pinned"));
  currentView_->clearBuffer(tr("current step"));
  if (was) Q_EMIT pinChanged(false);
}

void StepComparePanel::requestPinned() {
  std::shared_ptr<Inspector> inspector = context_->inspector();
  if (!inspector || !pinned()) return;
  InspectionPoint point =
      context_->snapshot() ? context_->snapshot()->point : context_->selection();
  point.request = pinnedRequest_;
  point.step = pinnedStep_;
  point.autoHead = point.autoKind = false;
  const uint64_t serial = context_->outputSerial();
  engine_->post(pinnedTag(), [inspector, serial, point](const EngineTaskContext&) -> EnginePayload {
    auto snap = std::make_shared<StepSnapshot>();
    static_cast<StepView&>(*snap) = inspector->view(point);
    snap->outputSerial = serial;
    return std::shared_ptr<const StepSnapshot>(std::move(snap));
  });
}

void StepComparePanel::placeMaps(bool stacked) {
  stacked_ = stacked;
  for (QWidget* w : std::initializer_list<QWidget*>{heading_, pinnedTitle_, currentTitle_,
                                                    pinnedView_, currentView_, summary_})
    grid_->removeWidget(w);
  for (int r = 0; r < 6; ++r) grid_->setRowStretch(r, 0);
  grid_->addWidget(heading_, 0, 0, 1, 2);
  if (stacked) {
    grid_->addWidget(pinnedTitle_, 1, 0, 1, 2);
    grid_->addWidget(pinnedView_, 2, 0, 1, 2);
    grid_->addWidget(currentTitle_, 3, 0, 1, 2);
    grid_->addWidget(currentView_, 4, 0, 1, 2);
    grid_->addWidget(summary_, 5, 0, 1, 2);
    grid_->setRowStretch(2, 1);
    grid_->setRowStretch(4, 1);
  } else {
    grid_->addWidget(pinnedTitle_, 1, 0);
    grid_->addWidget(currentTitle_, 1, 1);
    grid_->addWidget(pinnedView_, 2, 0);
    grid_->addWidget(currentView_, 2, 1);
    grid_->addWidget(summary_, 3, 0, 1, 2);
    grid_->setRowStretch(2, 1);
  }
}

void StepComparePanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  const bool tall = height() > width();
  if (tall != stacked_) placeMaps(tall);
}

QString StepComparePanel::summary() const { return summary_->text(); }

void StepComparePanel::repaint() {
  if (!pinned()) return;
  const auto& cur = context_->snapshot();
  const InspectionPoint where = cur ? cur->point : context_->selection();
  heading_->setText(
      tr("<b>Compare steps</b> at layer %1 · head %2 · %3: pinned request %4 step %5 (left) | "
         "current request %6 step %7 (right). Ctrl+Shift+B unpins.")
          .arg(where.layer)
          .arg(where.head)
          .arg(kindName(where.kind))
          .arg(pinnedRequest_)
          .arg(pinnedStep_)
          .arg(where.request)
          .arg(where.step));
  pinnedTitle_->setText(tr("Pinned: request %1, step %2").arg(pinnedRequest_).arg(pinnedStep_));
  currentTitle_->setText(tr("Current: request %1, step %2").arg(where.request).arg(where.step));
  const bool pinnedReady = pinnedSnap_ && (!cur || samePlace(pinnedSnap_->point, cur->point));
  float upper = 1e-6f;
  if (pinnedReady) upper = std::max(upper, pinnedSnap_->diffMax);
  if (cur) upper = std::max(upper, cur->diffMax);
  const QString what =
      tr("layer %1 · head %2 · %3").arg(where.layer).arg(where.head).arg(kindName(where.kind));
  auto paint = [&](KvHeatmapView* view, const std::shared_ptr<const StepSnapshot>& s) {
    if (!s) {
      view->clearBuffer(tr("computing…"));
      return;
    }
    if (s->absDiff.empty()) {
      view->clearBuffer(tr("no comparison"));
      return;
    }
    const int64_t t = std::min(s->cachedPositions, s->referencePositions);
    view->setBuffer(s->absDiff, t, s->headDim, QCPRange(0.0, upper),
                    tr("%1 · max %2").arg(what).arg(s->diffMax, 0, 'g', 3));
    const int64_t first = s->appendedCount > 0 ? s->appendedFirst : -1;
    view->setMarkedPositions(first, first >= 0 ? first + s->appendedCount - 1 : -1);
  };
  paint(pinnedView_, pinnedReady ? pinnedSnap_ : nullptr);
  paint(currentView_, cur);
  // One position axis for both, so that a position sits at the same x in each map.
  const int64_t span = std::max(pinnedView_->positions(), currentView_->positions());
  if (span > 0)
    for (KvHeatmapView* v : {pinnedView_, currentView_})
      v->setVisiblePositions(0.0, static_cast<double>(span));
  if (pinnedReady && cur) {
    summary_->setText(tr("max |difference|: pinned %1 at pos %2 · current %3 at pos %4 (%5)")
                          .arg(pinnedSnap_->diffMax, 0, 'g', 3)
                          .arg(pinnedSnap_->diffArgPosition)
                          .arg(cur->diffMax, 0, 'g', 3)
                          .arg(cur->diffArgPosition)
                          .arg(cur->diffMax > pinnedSnap_->diffMax   ? tr("grew")
                               : cur->diffMax < pinnedSnap_->diffMax ? tr("shrank")
                                                                     : tr("unchanged")));
  } else {
    summary_->setText(tr("computing the pinned step…"));
  }
}

}  // namespace kvscope::ui
