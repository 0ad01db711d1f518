#include "ui/panels/DiagnosisPanel.hpp"

#include <QHeaderView>
#include <QAbstractTextDocumentLayout>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QTableView>
#include <QTextBrowser>
#include <QTreeView>
#include <QVBoxLayout>

#include <QCoreApplication>
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "kvscope/FindingGroups.hpp"
#include "ui/models/FailureMatrixModel.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/models/StageListModel.hpp"
#include "ui/views/Theme.hpp"
#include "ui/models/WrappingItemDelegate.hpp"

namespace kvscope::ui {

namespace {

QWidget* titled(const QString& title, QWidget* body, QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(1);
  auto* label = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), box);
  layout->addWidget(label);
  layout->addWidget(body);
  return box;
}

// A section is as tall as its content (issue 27: four tiny scroll boxes in a short dock);
// the dock's one scroll area scrolls them all. Its width is the dock's.
void fitToContent(QAbstractScrollArea* view) {
  view->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  view->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  view->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
}

}  // namespace

DiagnosisPanel::DiagnosisPanel(SelectionContext* context, QWidget* parent)
    : QWidget(parent), context_(context) {
  stages_ = new StageListModel(this);
  findings_ = new FindingsModel(this);
  matrix_ = new FailureMatrixModel(this);

  verdict_ = new QLabel(this);
  verdict_->setWordWrap(true);

  stageView_ = new QTreeView(this);
  stageView_->setModel(stages_);
  stageView_->setRootIsDecorated(true);
  new WrappingItemDelegate(stageView_);  // summaries and checks wrap in a narrow dock
  stageView_->setIconSize(QSize(18, 18));
  stageView_->setHeaderHidden(true);
  stageView_->header()->setStretchLastSection(true);
  stageView_->header()->setSectionResizeMode(StageListModel::StageColumn, QHeaderView::ResizeToContents);
  stageView_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  stageView_->setSelectionMode(QAbstractItemView::SingleSelection);

  findingsView_ = new QTableView(this);
  findingsView_->setModel(findings_);
  findingsView_->setSelectionBehavior(QAbstractItemView::SelectRows);
  findingsView_->setSelectionMode(QAbstractItemView::SingleSelection);
  findingsView_->verticalHeader()->hide();
  findingsView_->horizontalHeader()->setStretchLastSection(true);
  findingsView_->setWordWrap(false);
  // The observation and first check are in the matrix and the evidence below.
  findingsView_->setColumnHidden(FindingsModel::MatrixRowColumn, true);
  findingsView_->setColumnHidden(FindingsModel::FirstCheckColumn, true);

  evidence_ = new QTextBrowser(this);
  evidence_->setOpenLinks(false);

  matrixView_ = new QTableView(this);
  matrixView_->setModel(matrix_);
  matrixView_->verticalHeader()->hide();
  matrixView_->setSelectionMode(QAbstractItemView::NoSelection);
  matrixView_->setWordWrap(true);
  matrixView_->horizontalHeader()->setSectionResizeMode(FailureMatrixModel::ObservationColumn, QHeaderView::Stretch);
  matrixView_->horizontalHeader()->setSectionResizeMode(FailureMatrixModel::FirstCheckColumn, QHeaderView::Stretch);
  matrixView_->horizontalHeader()->setSectionResizeMode(FailureMatrixModel::FindingColumn, QHeaderView::ResizeToContents);
  matrixView_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);

  for (QAbstractScrollArea* view :
       std::initializer_list<QAbstractScrollArea*>{stageView_, findingsView_, matrixView_})
    fitToContent(view);
  matrixView_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // The evidence is rich text: its height follows the laid-out document.
  evidence_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  evidence_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  evidence_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  connect(evidence_->document()->documentLayout(),
          &QAbstractTextDocumentLayout::documentSizeChanged, this, [this](const QSizeF& size) {
            evidence_->setFixedHeight(static_cast<int>(std::ceil(size.height())) +
                                      2 * evidence_->frameWidth());
          });

  auto* content = new QWidget(this);
  auto* sections = new QVBoxLayout(content);
  sections->setContentsMargins(0, 0, 0, 0);
  sections->setSpacing(6);
  sections->addWidget(verdict_);
  sections->addWidget(titled(tr("Stages (dependency order)"), stageView_, content));
  sections->addWidget(titled(tr("Findings (click to select)"), findingsView_, content));
  sections->addWidget(titled(tr("Evidence"), evidence_, content));
  sections->addWidget(titled(tr("Failure matrix"), matrixView_, content));
  sections->addStretch(1);

  scroll_ = new QScrollArea(this);
  scroll_->setObjectName(QStringLiteral("diagnosisScroll"));
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setWidget(content);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 2, 4, 2);
  layout->addWidget(scroll_, 1);

  connect(findingsView_, &QAbstractItemView::clicked, this,
          [this](const QModelIndex& index) { activateFinding(index.row()); });
  connect(findingsView_, &QAbstractItemView::activated, this,
          [this](const QModelIndex& index) { activateFinding(index.row()); });
  connect(context_, &SelectionContext::outputChanged, this, [this] { refresh(); });
  refresh();
}

QString DiagnosisPanel::evidenceText() const { return evidence_->toPlainText(); }

void DiagnosisPanel::refresh() {
  const auto& out = context_->output();
  report_ = out ? std::shared_ptr<const AuditReport>(out, &out->result.report) : nullptr;
  stages_->setReport(report_);
  findings_->setReport(report_);
  matrix_->setReport(report_);
  // The heading above KV Scope's additions reads across the table.
  if (const int heading = FailureMatrixModel::additionsHeadingRow(); heading >= 0)
    matrixView_->setSpan(heading, 0, 1, FailureMatrixModel::ColumnCount);
  // Checks span both columns under their stage.
  for (int i = 0; i < stages_->rowCount(); ++i) {
    const QModelIndex stage = stages_->index(i, 0);
    for (int j = 0; j < stages_->rowCount(stage); ++j) stageView_->setFirstColumnSpanned(j, stage, true);
  }
  stageView_->expandAll();
  findingsView_->resizeColumnsToContents();
  findingsView_->resizeRowsToContents();
  if (!report_) {
    verdict_->setText(tr("<i>No audit yet.</i>"));
    evidence_->clear();
    return;
  }
  const int root = stages_->rootCauseRow();
  if (report_->clean()) {
    // A stage that could not run (a saved cache has no logits) is not a pass: say so.
    const auto skipped = std::count_if(report_->stages.begin(), report_->stages.end(),
                                       [](const auto& st) { return st.status == StageStatus::Skipped; });
    verdict_->setText(skipped == 0 ? tr("<b style='color:%1'>Clean</b> — every stage passed.").arg(Theme::ok().name())
                                   : tr("<b style='color:%1'>Clean</b> — every stage that ran passed; %2 not "
                                        "checked (below).")
                                         .arg(Theme::ok().name())
                                         .arg(skipped));
  } else {
    const QString rootText = root >= 0 ? tr("root stage: <b>%1</b>")
                                             .arg(QString::fromStdString(report_->stages[static_cast<size_t>(root)].title).toHtmlEscaped())
                                       : QString();
    verdict_->setText(tr("<b style='color:%1'>Divergent</b> — %2; %3")
                          .arg(Theme::alarm().name())
                          .arg(QString::fromStdString(findingCountText(report_->findings)))
                          .arg(rootText));
  }
  if (!report_->findings.empty()) {
    findingsView_->selectRow(0);
    showEvidence(0);
  } else {
    evidence_->setHtml(tr("<p>No findings.</p><p>%1</p>").arg(QString::fromStdString(report_->stopSummary).toHtmlEscaped()));
  }
}

void DiagnosisPanel::showEvidence(int row) {
  const Finding* f = findings_->finding(row);
  if (!f) return;
  matrix_->setFocusFinding(*f);
  matrixView_->resizeRowsToContents();
  QString html = QStringLiteral("<p><b style='color:%1'>%2</b> — %3</p>")
                     .arg(Theme::alarm().name(), QString::fromStdString(f->id).toHtmlEscaped(),
                          QString::fromStdString(f->explanation).toHtmlEscaped());
  if (!f->causedBy.empty())
    html += tr("<p>A consequence of <b>%1</b>, not a separate cause.</p>")
                .arg(QString::fromStdString(f->causedBy).toHtmlEscaped());
  html += tr("<p>Observation: <i>%1</i><br>First check: <b>%2</b></p>")
              .arg(QString::fromStdString(f->matrixRow).toHtmlEscaped(),
                   QString::fromStdString(f->firstCheck).toHtmlEscaped());
  QStringList where;
  if (f->request >= 0) where << tr("request %1").arg(f->request);
  if (f->step >= 0) where << tr("step %1").arg(f->step);
  if (f->layer >= 0) where << tr("layer %1").arg(f->layer);
  if (f->position >= 0) where << tr("position %1").arg(f->position);
  html += tr("<p>Where: %1 · confidence %2%</p>")
              .arg(where.isEmpty() ? tr("the whole run") : where.join(QStringLiteral(", ")))
              .arg(qRound(f->confidence * 100.0));
  if (const FindingGroup* g = findings_->group(row); g && g->members.size() > 1)
    html += tr("<p>Shown in %1 (evidence below: request %2, the earliest).</p>")
                .arg(QString::fromStdString(g->onsets()).toHtmlEscaped())
                .arg(f->request);
  if (!f->evidence.empty()) {
    html += QStringLiteral("<table cellspacing='0' cellpadding='2'>");
    for (const auto& [name, value] : f->evidence)
      html += QStringLiteral("<tr><td>%1</td><td align='right'><tt>%2</tt></td></tr>")
                  .arg(QString::fromStdString(name).toHtmlEscaped())
                  .arg(value, 0, 'g', 6);
    html += QStringLiteral("</table>");
  }
  evidence_->setHtml(html);
}

void DiagnosisPanel::showFocusRow() {
  // The sections size themselves through posted layout requests: settle them first.
  for (int i = 0; i < 3; ++i) {
    QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
    if (scroll_->widget()->layout()) scroll_->widget()->layout()->activate();
  }
  const Finding* f = findings_->finding(findingsView_->currentIndex().row());
  const int row = f ? FailureMatrixModel::rowFor(*f) : -1;
  if (row < 0) return;
  const QRect cell = matrixView_->visualRect(matrix_->index(row, 0));
  if (!cell.isValid()) return;
  const QPoint top = matrixView_->viewport()->mapTo(scroll_->widget(), cell.topLeft());
  // The row and the matrix's title above it, in view.
  scroll_->ensureVisible(top.x(), top.y() + cell.height() / 2, 0, cell.height() / 2 + 40);
}

int DiagnosisPanel::findingRow(const QString& idOrRow) const {
  const QString key = idOrRow.trimmed();
  for (int row = 0; row < findings_->rowCount(); ++row)
    if (QString::fromStdString(findings_->finding(row)->id) == key) return row;
  bool isNumber = false;
  const int row = key.toInt(&isNumber);
  return isNumber && findings_->finding(row) ? row : -1;
}

void DiagnosisPanel::activateFinding(int row) {
  const Finding* f = findings_->finding(row);
  if (!f) return;
  if (findingsView_->currentIndex().row() != row) findingsView_->selectRow(row);
  showEvidence(row);
  context_->selectFinding(*f);
}

}  // namespace kvscope::ui
