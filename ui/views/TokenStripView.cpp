#include "ui/views/TokenStripView.hpp"

#include <QFontMetrics>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPaintEvent>
#include <QPainter>

#include <algorithm>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {
constexpr int kTop = 4;
constexpr int kCellHeight = 44;
constexpr int kStepLabelHeight = 16;
constexpr int kGap = 3;
constexpr int kStepGap = 8;
}  // namespace

TokenStripView::TokenStripView(SelectionContext* context, QWidget* parent)
    : QWidget(parent), context_(context) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setToolTip(placeholderText());
  connect(context_, &SelectionContext::outputChanged, this, [this] { rebuild(); });
  connect(context_, &SelectionContext::selectionChanged, this,
          [this](const InspectionPoint& cur, const InspectionPoint& prev) {
            if (cur.request != request_ || cur.request != prev.request) rebuild();
            update();
            Q_EMIT currentRectChanged(stepRect(cur.step));
          });
  rebuild();
}

QString TokenStripView::placeholderText() {
  return tr("No audit loaded — open a model or a trace and run the audit");
}

QString TokenStripView::stepLabel(int64_t step, bool divergent) {
  return divergent ? tr("\u25B2 step %1: divergence").arg(step) : tr("step %1").arg(step);
}

QString TokenStripView::visible(const QString& piece) {
  QString s = piece;
  s.replace(QLatin1Char('\n'), QStringLiteral("\u21B5"));
  s.replace(QLatin1Char('\t'), QStringLiteral("\u21E5"));
  s.replace(QLatin1Char(' '), QStringLiteral("\u00B7"));
  if (s.size() > 14) s = s.left(13) + QStringLiteral("\u2026");
  return s.isEmpty() ? QStringLiteral("\u2205") : s;
}

void TokenStripView::rebuild() {
  cells_.clear();
  divergentStep_ = -1;
  request_ = context_->selection().request;
  const AuditResult* result = context_->result();
  setToolTip(result ? QString() : placeholderText());
  if (!result) {
    width_ = 0;
    updateGeometry();
    update();
    return;
  }
  const RequestTimeline& timeline = context_->inspector()->timeline(request_);
  divergentStep_ = timeline.divergentStep;

  QFont f = font();
  QFontMetrics fm(f);
  int x = 4;
  auto pieceText = [](const TimelineToken& t) {
    return t.piece.empty() && t.id >= 0 ? QStringLiteral("#%1").arg(t.id) : QString::fromStdString(t.piece);
  };
  auto place = [&](Cell c) {
    const int w = std::max(fm.horizontalAdvance(c.text), fm.horizontalAdvance(QString::number(c.tokenId))) + 12;
    c.rect = QRect(x, kTop, std::max(w, 28), kCellHeight);
    x += c.rect.width() + kGap;
    cells_.push_back(c);
  };
  QFont labelFont = font();
  labelFont.setBold(true);
  const QFontMetrics labelMetrics(labelFont);
  for (const TimelineStep& st : timeline.steps) {
    const int groupStart = x;
    for (const TimelineToken& t : st.fed) {
      if (!t.real) continue;
      Cell c;
      c.step = st.step;
      c.tokenId = t.id;
      c.position = t.position;
      c.text = visible(pieceText(t));
      c.prompt = t.prompt;
      place(c);
    }
    // Leave room for the step label under the group.
    x = std::max(x, groupStart + labelMetrics.horizontalAdvance(stepLabel(st.step, st.step == divergentStep_)) + 4);
    x += kStepGap;
  }
  // Generated tokens that were never fed back (the last choice).
  for (const TimelineToken& t : timeline.unfed) {
    Cell c;
    c.tokenId = t.id;
    c.text = visible(pieceText(t));
    place(c);
  }
  width_ = x + 4;
  updateGeometry();
  resize(std::max(width_, 10), sizeHint().height());
  update();
}

int64_t TokenStripView::lastStep() const {
  int64_t last = -1;
  for (const auto& c : cells_) last = std::max(last, c.step);
  return last;
}

QRect TokenStripView::stepRect(int64_t step) const {
  QRect r;
  if (step < 0) return r;  // no step (a clean request's divergentStep()): not the unfed cells
  for (const auto& c : cells_)
    if (c.step == step) r = r.united(c.rect);
  return r;
}

QSize TokenStripView::sizeHint() const {
  return QSize(std::max(width_, 200), kTop + kCellHeight + kStepLabelHeight + 6);
}

QSize TokenStripView::minimumSizeHint() const { return QSize(100, sizeHint().height()); }

void TokenStripView::paintEvent(QPaintEvent* event) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(event->rect(), palette().base());
  if (cells_.empty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect().adjusted(6, 0, -6, 0), Qt::AlignCenter | Qt::TextWordWrap, placeholderText());
    return;
  }
  const int64_t current = context_->selection().step;
  QFont small = font();
  small.setPointSizeF(std::max(6.0, font().pointSizeF() * 0.8));
  QFont bold = font();
  bold.setBold(true);
  const QRect exposed = event->rect().adjusted(-220, 0, 0, 0);  // step labels reach right
  for (size_t i = 0; i < cells_.size(); ++i) {
    const Cell& c = cells_[i];
    const bool firstOfStep = i == 0 || cells_[i - 1].step != c.step;
    if (c.rect.right() < exposed.left()) continue;
    if (c.rect.left() > exposed.right()) break;  // cells are laid out left to right
    const bool isDiv = divergentStep_ >= 0 && c.step == divergentStep_;
    const bool after = divergentStep_ >= 0 && c.step > divergentStep_;
    const bool isCur = c.step == current && c.step >= 0;
    QColor bg = c.prompt ? Theme::promptToken() : Theme::generatedToken();
    QColor fg = palette().color(QPalette::Text);
    if (c.step < 0) bg = Theme::unfedToken();
    if (after) bg = Theme::afterDivergence();
    if (isDiv) {
      bg = Theme::alarm();
      fg = Qt::white;
    }
    p.setPen(Qt::NoPen);
    p.setBrush(bg);
    p.drawRoundedRect(c.rect, 4, 4);
    if (isCur) {
      p.setPen(QPen(Theme::selection(), 3));
      p.setBrush(Qt::NoBrush);
      p.drawRoundedRect(c.rect.adjusted(1, 1, -1, -1), 4, 4);
    }
    p.setPen(fg);
    p.setFont(isDiv || isCur ? bold : font());
    p.drawText(c.rect.adjusted(2, 2, -2, -c.rect.height() / 2), Qt::AlignCenter, c.text);
    p.setFont(small);
    p.setPen(isDiv ? QColor(Qt::white) : palette().color(QPalette::PlaceholderText));
    p.drawText(c.rect.adjusted(2, c.rect.height() / 2, -2, -2), Qt::AlignCenter, QString::number(c.tokenId));
    if (firstOfStep && c.step >= 0) {
      p.setPen(isDiv ? Theme::alarm() : palette().color(QPalette::PlaceholderText));
      p.setFont(isDiv || isCur ? bold : small);
      const QString label = stepLabel(c.step, isDiv);
      p.drawText(QRect(c.rect.left(), c.rect.bottom() + 2, 200, kStepLabelHeight),
                 Qt::AlignLeft | Qt::AlignVCenter, label);
    }
  }
}

void TokenStripView::mousePressEvent(QMouseEvent* event) {
  setFocus(Qt::MouseFocusReason);
  for (const auto& c : cells_)
    if (c.rect.contains(event->position().toPoint())) {
      // A token chosen but never fed back: the step that chose it (the last one).
      const int64_t step = c.step >= 0 ? c.step : lastStep();
      if (step >= 0) context_->setStep(step);
      return;
    }
  QWidget::mousePressEvent(event);
}

void TokenStripView::keyPressEvent(QKeyEvent* event) {
  switch (event->key()) {
    case Qt::Key_Right:
    case Qt::Key_N: context_->nextStep(); return;
    case Qt::Key_Left:
    case Qt::Key_P: context_->previousStep(); return;
    case Qt::Key_D: context_->selectFirstDivergence(); return;
    default: QWidget::keyPressEvent(event);
  }
}

}  // namespace kvscope::ui
