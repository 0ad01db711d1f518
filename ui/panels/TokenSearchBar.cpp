#include "ui/panels/TokenSearchBar.hpp"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/Theme.hpp"
#include "ui/views/TokenStripView.hpp"

namespace kvscope::ui {

TokenSearchBar::TokenSearchBar(SelectionContext* context, TokenStripView* strip, QWidget* parent)
    : QWidget(parent), context_(context), strip_(strip) {
  setObjectName(QStringLiteral("tokenSearchBar"));
  edit_ = new QLineEdit(this);
  edit_->setObjectName(QStringLiteral("tokenSearchEdit"));
  edit_->setClearButtonEnabled(true);
  edit_->setPlaceholderText(tr("Find a token: text, or #id"));
  edit_->setToolTip(
      tr("Find a token of this request by its text (case-insensitive) or its id (#311).\n"
         "Enter: next match · Shift+Enter: previous · Esc: close"));
  edit_->installEventFilter(this);
  previous_ = new QToolButton(this);
  previous_->setText(QStringLiteral("\u25B2"));
  previous_->setToolTip(tr("Previous match (Shift+Enter)"));
  next_ = new QToolButton(this);
  next_->setText(QStringLiteral("\u25BC"));
  next_->setToolTip(tr("Next match (Enter)"));
  auto* close = new QToolButton(this);
  close->setText(QStringLiteral("\u2715"));
  close->setToolTip(tr("Close the find bar (Esc)"));
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("tokenSearchStatus"));
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 0, 4, 0);
  layout->addWidget(new QLabel(tr("Find token:"), this));
  layout->addWidget(edit_);
  layout->addWidget(previous_);
  layout->addWidget(next_);
  layout->addWidget(status_, 1);
  layout->addWidget(close);
  connect(edit_, &QLineEdit::textChanged, this, &TokenSearchBar::search);
  connect(previous_, &QToolButton::clicked, this, [this] { findNext(true); });
  connect(next_, &QToolButton::clicked, this, [this] { findNext(false); });
  connect(close, &QToolButton::clicked, this, &QWidget::hide);
  // Another request or audit: the cells changed; search again.
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    if (isVisible()) search();
  });
  connect(context_, &SelectionContext::selectionChanged, this,
          [this](const InspectionPoint& now, const InspectionPoint& before) {
            if (isVisible() && now.request != before.request) search();
          });
  hide();
}

void TokenSearchBar::activate() {
  show();
  edit_->setFocus(Qt::ShortcutFocusReason);
  edit_->selectAll();
}

std::vector<int> TokenSearchBar::matches(const QString& query) const {
  std::vector<int> out;
  QString q = query.trimmed();
  if (q.isEmpty()) return out;
  bool idOnly = q.startsWith(QLatin1Char('#'));
  if (idOnly) q = q.mid(1).trimmed();
  bool isNumber = false;
  const qlonglong id = q.toLongLong(&isNumber);
  if (idOnly && !isNumber) return out;
  const auto& cells = strip_->cells();
  for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
    const TokenStripView::Cell& c = cells[static_cast<size_t>(i)];
    const bool idMatch = isNumber && c.tokenId == id;
    const bool textMatch = !idOnly && !query.trimmed().isEmpty() &&
                           c.text.contains(query.trimmed(), Qt::CaseInsensitive);
    if (idMatch || textMatch) out.push_back(i);
  }
  return out;
}

void TokenSearchBar::search() {
  matches_ = matches(edit_->text());
  matchIndex_ = -1;
  current_ = -1;
  if (!matches_.empty()) {
    goTo(0);
  } else {
    const bool typed = !edit_->text().trimmed().isEmpty();
    status_->setText(typed ? tr("<span style='color:%1'>no token of request %2 matches “%3”</span>")
                                 .arg(Theme::alarm().name())
                                 .arg(context_->selection().request)
                                 .arg(edit_->text().trimmed().toHtmlEscaped())
                           : QString());
    edit_->setStyleSheet(
        typed ? QStringLiteral("QLineEdit { border: 2px solid %1; }").arg(Theme::alarm().name())
              : QString());
  }
  previous_->setEnabled(matches_.size() > 1);
  next_->setEnabled(matches_.size() > 1);
}

bool TokenSearchBar::findNext(bool backwards) {
  if (matches_.empty()) search();
  if (matches_.empty()) return false;
  const int n = static_cast<int>(matches_.size());
  goTo(matchIndex_ < 0 ? 0 : (matchIndex_ + (backwards ? n - 1 : 1)) % n);
  return true;
}

void TokenSearchBar::goTo(int matchIndex) {
  matchIndex_ = matchIndex;
  current_ = matches_[static_cast<size_t>(matchIndex)];
  const TokenStripView::Cell& c = strip_->cells()[static_cast<size_t>(current_)];
  int64_t step = c.step;
  if (step < 0) {  // chosen by the last step, never fed back
    const auto steps = context_->stepsOf(context_->selection().request);
    step = steps.empty() ? 0 : steps.back();
  }
  edit_->setStyleSheet(QString());
  status_->setText(tr("%1 of %2: “%3” #%4 at position %5 (%6)")
                       .arg(matchIndex + 1)
                       .arg(matches_.size())
                       .arg(c.text.toHtmlEscaped())
                       .arg(c.tokenId)
                       .arg(c.position)
                       .arg(c.step >= 0 ? tr("fed by step %1").arg(c.step)
                                        : tr("chosen by step %1, not fed back").arg(step)));
  context_->setStep(step);
}

QString TokenSearchBar::status() const { return status_->text(); }

bool TokenSearchBar::eventFilter(QObject* watched, QEvent* event) {
  if (watched == edit_) {
    if (event->type() == QEvent::ShortcutOverride) {
      // Esc closes the bar here instead of cancelling the audit; Enter stays with the bar.
      const auto* key = static_cast<QKeyEvent*>(event);
      if (key->key() == Qt::Key_Escape || key->key() == Qt::Key_Return ||
          key->key() == Qt::Key_Enter) {
        event->accept();
        return true;
      }
    } else if (event->type() == QEvent::KeyPress) {
      const auto* key = static_cast<QKeyEvent*>(event);
      if (key->key() == Qt::Key_Escape) {
        hide();
        return true;
      }
      if (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) {
        findNext(key->modifiers().testFlag(Qt::ShiftModifier));
        return true;
      }
    }
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace kvscope::ui
