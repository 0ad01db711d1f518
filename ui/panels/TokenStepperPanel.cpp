#include "ui/panels/TokenStepperPanel.hpp"

#include <QAction>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QTextDocumentFragment>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/RequestListModel.hpp"
#include "ui/views/Theme.hpp"
#include "ui/views/TokenStripView.hpp"

namespace kvscope::ui {

TokenStepperPanel::TokenStepperPanel(SelectionContext* context, QWidget* parent)
    : QWidget(parent), context_(context) {
  requestModel_ = new RequestListModel(this);
  requests_ = new QComboBox(this);
  requests_->setModel(requestModel_);
  requests_->setModelColumn(RequestListModel::LabelColumn);
  requests_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  requests_->setMinimumContentsLength(26);
  requests_->setToolTip(tr("Request to inspect"));

  previous_ = new QAction(tr("Previous step"), this);
  previous_->setShortcuts({QKeySequence(Qt::Key_Left), QKeySequence(Qt::Key_P)});
  next_ = new QAction(tr("Next step"), this);
  next_->setShortcuts({QKeySequence(Qt::Key_Right), QKeySequence(Qt::Key_N)});
  divergence_ = new QAction(tr("Jump to first divergence"), this);
  divergence_->setShortcuts({QKeySequence(Qt::Key_D), QKeySequence(Qt::CTRL | Qt::Key_D)});
  // Wherever the focus is (StepKeyFilter keeps spin boxes from claiming the keys).
  for (QAction* a : {previous_, next_, divergence_}) {
    a->setShortcutContext(Qt::ApplicationShortcut);
    addAction(a);
  }
  connect(previous_, &QAction::triggered, context_, &SelectionContext::previousStep);
  connect(next_, &QAction::triggered, context_, &SelectionContext::nextStep);
  connect(divergence_, &QAction::triggered, context_, [this] { context_->selectFirstDivergence(); });

  auto* prevButton = new QToolButton(this);
  prevButton->setDefaultAction(previous_);
  prevButton->setText(QStringLiteral("\u25C0"));
  prevButton->setToolTip(tr("Previous step (Left, P)"));
  auto* nextButton = new QToolButton(this);
  nextButton->setDefaultAction(next_);
  nextButton->setText(QStringLiteral("\u25B6"));
  nextButton->setToolTip(tr("Next step (Right, N)"));
  jump_ = new QPushButton(tr("Jump to divergence (D)"), this);
  jump_->setStyleSheet(QStringLiteral("QPushButton { color: white; background: %1; font-weight: bold;"
                                      " padding: 3px 10px; border-radius: 3px; }"
                                      " QPushButton:disabled { background: #BDBDBD; }")
                           .arg(Theme::alarm().name()));
  connect(jump_, &QPushButton::clicked, divergence_, &QAction::trigger);
  jump_->setToolTip(tr("Select the first divergent request, step and layer, with the kv head "
                       "and K/V kind that differ most (D, Ctrl+D)"));

  info_ = new QLabel(this);
  info_->setTextFormat(Qt::RichText);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  info_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // never widens the window
  info_->setWordWrap(true);  // a narrow window wraps the step line instead of cutting it
  legend_ = new QLabel(tr("token colours (?)"), this);
  legend_->setToolTip(colourLegend());

  strip_ = new TokenStripView(context_, this);
  scroll_ = new QScrollArea(this);
  scroll_->setWidget(strip_);
  scroll_->setWidgetResizable(false);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  scroll_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setFrameShape(QFrame::StyledPanel);
  scroll_->setFixedHeight(strip_->sizeHint().height() + scroll_->horizontalScrollBar()->sizeHint().height() + 4);
  // Centre the current step once the strip has its new size (queued: after layout).
  connect(strip_, &TokenStripView::currentRectChanged, this,
          [this] { QMetaObject::invokeMethod(this, [this] { revealCurrent(); }, Qt::QueuedConnection); });
  // Long prompts: when the first divergence is scrolled out of view, a button at that edge
  // of the strip names it and jumps there.
  divergencePin_ = new QToolButton(scroll_->viewport());
  divergencePin_->setObjectName(QStringLiteral("divergencePin"));
  divergencePin_->setStyleSheet(
      QStringLiteral("QToolButton { color: white; background: %1; font-weight: bold;"
                     " border-radius: 3px; padding: 1px 4px; }")
          .arg(Theme::alarm().name()));
  divergencePin_->hide();
  connect(divergencePin_, &QToolButton::clicked, divergence_, &QAction::trigger);
  connect(scroll_->horizontalScrollBar(), &QScrollBar::valueChanged, this,
          [this] { placeDivergencePin(); });
  connect(scroll_->horizontalScrollBar(), &QScrollBar::rangeChanged, this,
          [this] { placeDivergencePin(); });

  auto* top = new QHBoxLayout;
  top->setContentsMargins(0, 0, 0, 0);
  top->addWidget(new QLabel(tr("<b>Tokens</b>"), this));
  top->addWidget(requests_);
  top->addWidget(prevButton);
  top->addWidget(nextButton);
  top->addWidget(info_, 1);
  top->addWidget(legend_);
  top->addWidget(jump_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 2, 4, 2);
  layout->setSpacing(2);
  layout->addLayout(top);
  layout->addWidget(scroll_);

  connect(requests_, &QComboBox::activated, this, [this](int row) {
    const QVariant id = requestModel_->data(requestModel_->index(row, 0), RequestListModel::RequestIdRole);
    if (id.isValid()) context_->setRequest(id.toLongLong());
  });
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    requestModel_->setOutput(context_->output());
    refresh();
  });
  connect(context_, &SelectionContext::selectionChanged, this, [this] { refresh(); });
  refresh();
}

QString TokenStepperPanel::stepDescription() const { return info_->text(); }

QString TokenStepperPanel::colourLegend() {
  auto swatch = [](const QColor& fill, const QString& what, const QColor& border = QColor()) {
    return QStringLiteral(
               "<tr><td style='background:%1; border:2px solid %2'>&nbsp;&nbsp;&nbsp;&nbsp;</td>"
               "<td>&nbsp;%3</td></tr>")
        .arg(fill.name(), (border.isValid() ? border : fill).name(), what);
  };
  return QStringLiteral("<table cellspacing='3'>") +
         swatch(Theme::promptToken(), tr("prompt token")) +
         swatch(Theme::generatedToken(), tr("generated token, fed back")) +
         swatch(Theme::unfedToken(), tr("last choice, never fed (click: the step that chose it)")) +
         swatch(Theme::alarm(), tr("first divergent step")) +
         swatch(Theme::afterDivergence(), tr("after the divergence")) +
         swatch(QColor(Qt::white), tr("current step (outline)"), Theme::selection()) +
         QStringLiteral("</table>");
}

void TokenStepperPanel::revealCurrent() {
  QRect r = strip_->stepRect(context_->selection().step);
  if (r.isEmpty()) return;
  QScrollBar* bar = scroll_->horizontalScrollBar();
  const int viewport = scroll_->viewport()->width();
  constexpr int kMargin = 24;
  r.setRight(std::max(r.right(), r.left() + 64));  // its label reaches past a short step
  // A step wider than the view shows its start (where its label is).
  r.setWidth(std::min(r.width(), std::max(40, viewport - 2 * kMargin)));
  // The first divergence's start (its label) too, when both fit.
  const QRect div = strip_->stepRect(strip_->divergentStep());
  if (!div.isEmpty()) {
    const QRect both =
        r.united(QRect(div.left(), div.top(), std::min(div.width(), 170), div.height()));
    if (both.width() <= viewport - 2 * kMargin) r = both;
  }
  const int left = bar->value(), right = left + viewport;
  int value = left;
  if (r.left() < left + kMargin)
    value = r.left() - kMargin;
  else if (r.right() > right - kMargin)
    value = r.right() + kMargin - viewport;
  bar->setValue(std::clamp(value, bar->minimum(), bar->maximum()));
  placeDivergencePin();
}

void TokenStepperPanel::placeDivergencePin() {
  const int64_t step = strip_->divergentStep();
  const QRect div = step >= 0 ? strip_->stepRect(step) : QRect();  // a clean request: no pin
  const int left = scroll_->horizontalScrollBar()->value();
  const int right = left + scroll_->viewport()->width();
  // Its start (where "step N: divergence" is written) out of view.
  const bool offLeft = !div.isEmpty() && div.left() < left;
  const bool offRight = !div.isEmpty() && div.left() > right;
  divergencePin_->setVisible(offLeft || offRight);
  if (!divergencePin_->isVisible()) return;
  divergencePin_->setText(offLeft ? tr("\u25C0 step %1: divergence").arg(step)
                                  : tr("step %1: divergence \u25B6").arg(step));
  divergencePin_->setToolTip(tr("The first divergence is out of view: jump to it (D)"));
  divergencePin_->adjustSize();
  const int x = offLeft ? 2 : scroll_->viewport()->width() - divergencePin_->width() - 2;
  divergencePin_->move(x, scroll_->viewport()->height() - divergencePin_->height() - 2);
  divergencePin_->raise();
}

void TokenStepperPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fitEmptyStrip();
  revealCurrent();
  placeDivergencePin();
}

void TokenStepperPanel::fitEmptyStrip() {
  // The start-up hint spans the whole strip (the empty strip would be a few pixels wide).
  if (strip_->cells().empty())
    strip_->resize(std::max(100, scroll_->viewport()->width()), strip_->sizeHint().height());
}

void TokenStepperPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  QMetaObject::invokeMethod(this, [this] { revealCurrent(); }, Qt::QueuedConnection);
}

void TokenStepperPanel::refresh() {
  const AuditResult* result = context_->result();
  const InspectionPoint& sel = context_->selection();
  const int row = requestModel_->rowOf(sel.request);
  if (row >= 0 && requests_->currentIndex() != row) requests_->setCurrentIndex(row);
  const bool hasDivergence = result && result->report.firstDivergence.present;
  jump_->setEnabled(hasDivergence);
  divergence_->setEnabled(hasDivergence);
  if (!result) {
    info_->setText(tr("<i>no audit</i>"));
    fitEmptyStrip();
    placeDivergencePin();
    return;
  }
  const auto steps = context_->stepsOf(sel.request);
  const TraceStep* st = nullptr;
  for (const TraceStep* s : result->trace.stepsOf(sel.request))
    if (s->step == sel.step) st = s;
  const StepNumerics* sn = nullptr;
  for (const auto& n : result->report.steps)
    if (n.request == sel.request && n.step == sel.step) sn = &n;
  // Steps count from 0 (the prefill): "step 2 (of steps 0–7)" for eight steps.
  QString text = steps.empty() ? tr("step <b>%1</b>").arg(sel.step)
                               : tr("step <b>%1</b> (of steps %2\u2013%3)").arg(sel.step).arg(steps.front()).arg(steps.back());
  if (st) {
    const int64_t pos = st->positions.empty() ? -1 : st->positions.back();
    text += tr(" · fed %1 token(s), last at position <b>%2</b>").arg(st->realFedCount()).arg(pos);
    if (st->chosenToken >= 0) text += tr(" · chose #%1").arg(st->chosenToken);
  }
  if (sn) {
    const bool over = sn->maxLogitError > sn->tolerance;
    text += tr(" · max |Δlogit| <span style='color:%1'><b>%2</b></span>")
                .arg(over ? Theme::alarm().name() : Theme::ok().name())
                .arg(sn->maxLogitError, 0, 'g', 3);
    if (sn->referenceToken >= 0 && sn->referenceToken != sn->chosenToken)
      text += tr(" (reference chose #%1)").arg(sn->referenceToken);
  }
  info_->setText(text);
  info_->setToolTip(QTextDocumentFragment::fromHtml(text).toPlainText());
  placeDivergencePin();
}

}  // namespace kvscope::ui
