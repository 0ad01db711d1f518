#include "ui/views/HeadlineView.hpp"

#include <QLabel>
#include <QVBoxLayout>

#include "kvscope/FindingGroups.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

HeadlineView::HeadlineView(SelectionContext* context, QWidget* parent)
    : QFrame(parent), context_(context) {
  setAutoFillBackground(true);
  setFrameShape(QFrame::NoFrame);
  title_ = new QLabel(this);
  QFont f = title_->font();
  f.setPointSizeF(f.pointSizeF() * 1.45);
  f.setBold(true);
  title_->setFont(f);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  title_->setWordWrap(true);  // a narrow window wraps the verdict instead of cutting it
  detail_ = new QLabel(this);
  detail_->setWordWrap(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(12, 6, 12, 6);
  layout->setSpacing(1);
  layout->addWidget(title_);
  layout->addWidget(detail_);
  connect(context_, &SelectionContext::outputChanged, this, [this] { refresh(); });
  connect(context_, &SelectionContext::staleChanged, this, [this] { showStale(); });
  refresh();
}

void HeadlineView::showStale() {
  if (!context_->stale()) return;  // the next output repaints the banner
  // A message (an input error, "Running audit…") keeps its line; the detail says what the
  // panels below show, so the banner never claims the old verdict for the new inputs.
  if (!messageShown_) {
    title_->setText(tr("Inputs changed — run the audit again (Ctrl+R)"));
    title_->setToolTip(title_->text());
    setColours(Theme::neutral());
  }
  detail_->setText(tr("The panels below still show the previous audit, marked: %1.")
                       .arg(context_->staleReason()));
}

QString HeadlineView::headline() const { return title_->text(); }

QString HeadlineView::headlineFor(const AuditReport& report) {
  if (report.clean()) return tr("Clean: cached generation matches the uncached reference");
  const FirstDivergence& fd = report.firstDivergence;
  QString where;
  if (fd.present) {
    where = tr("request %1, step %2").arg(fd.request).arg(fd.step);
    if (fd.layer >= 0) where += tr(", layer %1").arg(fd.layer);
  }
  // The root finding at the divergence, else the first root (a consequence never heads).
  const Finding* main = nullptr;
  for (const auto& f : report.findings)
    if (f.causedBy.empty() && f.request == fd.request && f.step == fd.step &&
        (fd.layer < 0 || f.layer == fd.layer)) {
      main = &f;
      break;
    }
  for (const auto& f : report.findings)
    if (!main && f.causedBy.empty()) main = &f;
  if (!main && !report.findings.empty()) main = &report.findings.front();
  QString text = tr("Divergent");
  if (!where.isEmpty()) text += QStringLiteral(": ") + where;
  if (main) {
    text += QStringLiteral(" \u2014 ") + QString::fromStdString(main->id);
    // The explanation's first sentence when it is short, else the failure-matrix
    // observation (always short): the banner must read whole in one line.
    QString why = QString::fromStdString(main->explanation);
    const int dot = why.indexOf(QStringLiteral(". "));
    if (dot > 0) why = why.left(dot);
    if (why.isEmpty() || why.size() > 64) why = QString::fromStdString(main->matrixRow);
    if (why.size() > 90) why = why.left(88) + QStringLiteral("\u2026");
    if (!why.isEmpty()) text += QStringLiteral(" (") + why + QStringLiteral(")");
  }
  return text;
}

void HeadlineView::setColours(const QColor& background) {
  QPalette pal = palette();
  pal.setColor(QPalette::Window, background);
  pal.setColor(QPalette::WindowText, Qt::white);
  setPalette(pal);
  for (QLabel* l : {title_, detail_}) {
    QPalette lp = l->palette();
    lp.setColor(QPalette::WindowText, Qt::white);
    l->setPalette(lp);
  }
}

void HeadlineView::showMessage(const QString& text, bool error) {
  messageShown_ = true;
  title_->setText(text);
  title_->setToolTip(text);
  detail_->clear();
  setColours(error ? QColor(0xBF, 0x36, 0x0C) : Theme::neutral());
}

void HeadlineView::refresh() {
  messageShown_ = false;
  const AuditResult* r = context_->result();
  if (!r) {
    title_->setText(tr("No audit yet"));
    detail_->setText(tr("Open a model directory or a trace (File menu, or drop it here), then Run audit."));
    setColours(Theme::neutral());
    return;
  }
  title_->setText(headlineFor(r->report));
  title_->setToolTip(title_->text());
  QStringList more;
  // A bug that several requests show is named once, with each request's onset.
  const std::vector<FindingGroup> groups = groupFindings(r->report.findings);
  if (groups.size() > 1 || (groups.size() == 1 && groups.front().members.size() > 1)) {
    QStringList ids;
    for (const FindingGroup& g : groups) {
      QString id = QString::fromStdString(g.id);
      if (!g.causedBy.empty()) id = tr("%1 (caused by %2)").arg(id, QString::fromStdString(g.causedBy));
      if (g.members.size() > 1) id += QStringLiteral(" [") + QString::fromStdString(g.onsets()) + QStringLiteral("]");
      ids << id;
    }
    more << tr("%1: %2")
                .arg(QString::fromStdString(findingCountText(r->report.findings)))
                .arg(ids.join(QStringLiteral(", ")));
  }
  if (!r->report.inputDescription.empty()) more << QString::fromStdString(r->report.inputDescription);
  if (!r->trace.faults.empty()) {
    QStringList faults;
    for (size_t i = 0; i < r->trace.faults.size(); ++i)
      faults << QString::fromStdString(r->report.faultLine(i));
    more << tr("injected faults: %1").arg(faults.join(QStringLiteral("; ")));
  }
  detail_->setText(more.join(QStringLiteral("   \u2022   ")));
  setColours(r->report.clean() ? Theme::ok() : Theme::alarm());
}

}  // namespace kvscope::ui
