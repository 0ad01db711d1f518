#include "ui/panels/TokenStepperPanel.hpp"

#include <QAction>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>

#include "ui/models/RequestListModel.hpp"
#include "ui/bridge/SelectionContext.hpp"
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

  info_ = new QLabel(this);
  info_->setTextFormat(Qt::RichText);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  info_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // never widens the window

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

  auto* top = new QHBoxLayout;
  top->setContentsMargins(0, 0, 0, 0);
  top->addWidget(new QLabel(tr("<b>Tokens</b>"), this));
  top->addWidget(requests_);
  top->addWidget(prevButton);
  top->addWidget(nextButton);
  top->addWidget(info_, 1);
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

void TokenStepperPanel::revealCurrent() {
  const QRect r = strip_->stepRect(context_->selection().step);
  if (r.isEmpty()) return;
  QScrollBar* bar = scroll_->horizontalScrollBar();
  const int viewport = scroll_->viewport()->width();
  // Only move when the step is not comfortably inside the view.
  const int left = bar->value(), right = left + viewport;
  if (r.left() >= left + 40 && r.right() <= right - 40) return;
  bar->setValue(std::clamp(r.center().x() - viewport / 2, bar->minimum(), bar->maximum()));
}

void TokenStepperPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  revealCurrent();
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
    return;
  }
  const auto steps = context_->stepsOf(sel.request);
  const TraceStep* st = nullptr;
  for (const TraceStep* s : result->trace.stepsOf(sel.request))
    if (s->step == sel.step) st = s;
  const StepNumerics* sn = nullptr;
  for (const auto& n : result->report.steps)
    if (n.request == sel.request && n.step == sel.step) sn = &n;
  QString text = tr("step <b>%1</b> of %2").arg(sel.step).arg(steps.empty() ? 0 : steps.back());
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
}

}  // namespace kvscope::ui
