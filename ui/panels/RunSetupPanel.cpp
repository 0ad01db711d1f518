#include "ui/panels/RunSetupPanel.hpp"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>

#include "kvscope/TraceFileSniffer.hpp"

namespace kvscope::ui {

namespace {

QWidget* withBrowse(QLineEdit* edit, QToolButton** button, QWidget* parent) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(edit, 1);
  *button = new QToolButton(row);
  (*button)->setText(QStringLiteral("\u2026"));
  layout->addWidget(*button);
  return row;
}

}  // namespace

RunSetupPanel::RunSetupPanel(QWidget* parent) : QWidget(parent) {
  model_ = new QLineEdit(this);
  model_->setPlaceholderText(tr("model directory (config.json, *.safetensors)"));
  trace_ = new QLineEdit(this);
  trace_->setPlaceholderText(tr("cached trace (empty: run the built-in engine)"));
  reference_ = new QLineEdit(this);
  reference_->setPlaceholderText(tr("uncached reference trace (trace+trace mode)"));
  weights_ = new QLineEdit(this);
  weights_->setPlaceholderText(tr("later checkpoints, e.g. 1=ckpt/step-2000 (weights versions)"));
  weights_->setToolTip(tr(
      "The checkpoint of each weights version the trace's steps name, as N=DIR, separated by ';'.\n"
      "The model above is version 0. Without them, steps of later versions are not "
      "value-checked."));
  prompts_ = new QPlainTextEdit(this);
  prompts_->setPlaceholderText(tr("One prompt per line"));
  prompts_->setTabChangesFocus(true);
  prompts_->setMaximumHeight(90);
  arrivals_ = new QLineEdit(this);
  arrivals_->setPlaceholderText(tr("e.g. 0, 3 (one per prompt; empty: all at 0)"));
  arrivals_->setToolTip(
      tr("Engine tick at which each prompt's request arrives, in prompt order.\n"
         "A later arrival joins a running batch (the cross-request faults need one)."));
  arrivalError_ = new QLabel(this);
  arrivalError_->setObjectName(QStringLiteral("arrivalError"));
  arrivalError_->setWordWrap(true);
  arrivalError_->setStyleSheet(QStringLiteral("color: #C62828;"));
  arrivalError_->hide();
  maxNew_ = new QSpinBox(this);
  maxNew_->setRange(1, 100000);
  maxNew_->setValue(16);
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setRange(0.0, 100.0);
  temperature_->setDecimals(2);
  temperature_->setSingleStep(0.1);
  temperature_->setSpecialValueText(tr("0 (greedy)"));
  topK_ = new QSpinBox(this);
  topK_->setRange(0, 1000000);
  topK_->setSpecialValueText(tr("off"));
  topP_ = new QDoubleSpinBox(this);
  topP_->setRange(0.01, 1.0);
  topP_->setDecimals(2);
  topP_->setSingleStep(0.05);
  topP_->setValue(1.0);
  seed_ = new QSpinBox(this);
  seed_->setRange(0, 2147483647);

  QToolButton *browseModel = nullptr, *browseTrace = nullptr, *browseRef = nullptr;
  auto* form = new QFormLayout;
  form->setContentsMargins(0, 0, 0, 0);
  form->addRow(tr("Model"), withBrowse(model_, &browseModel, this));
  form->addRow(tr("Trace"), withBrowse(trace_, &browseTrace, this));
  form->addRow(tr("Reference"), withBrowse(reference_, &browseRef, this));
  form->addRow(tr("Later weights"), weights_);
  form->addRow(tr("Prompts"), prompts_);
  form->addRow(tr("Arrival ticks"), arrivals_);
  form->addRow(arrivalError_);
  form->addRow(tr("Max new tokens"), maxNew_);
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-k"), topK_);
  form->addRow(tr("Top-p"), topP_);
  form->addRow(tr("Seed"), seed_);
  connect(arrivals_, &QLineEdit::textChanged, this, &RunSetupPanel::checkArrivals);
  connect(prompts_, &QPlainTextEdit::textChanged, this, &RunSetupPanel::checkArrivals);
  connect(browseModel, &QToolButton::clicked, this, &RunSetupPanel::browseModelRequested);
  connect(browseTrace, &QToolButton::clicked, this, &RunSetupPanel::browseTraceRequested);
  connect(browseRef, &QToolButton::clicked, this, &RunSetupPanel::browseReferenceRequested);
  for (QLineEdit* edit : {model_, trace_, reference_})
    connect(edit, &QLineEdit::textChanged, this, [this, edit] {
      if (edit == trace_) traceProblem_.clear();  // the problem was the previous file's
      if (edit == reference_) referenceProblem_.clear();
      updateApplicability();
      Q_EMIT inputsChanged();
    });
  browseModel->setToolTip(tr("Choose the model directory (Ctrl+O)"));
  browseTrace->setToolTip(tr("Choose the trace to audit (Ctrl+Shift+O)"));
  browseRef->setToolTip(tr("Choose the uncached reference trace (Ctrl+Alt+O)"));
  model_->setToolTip(
      tr("The model the trace was recorded with (config.json, *.safetensors, tokenizer.json)"));

  run_ = new QPushButton(tr("Run audit"), this);
  run_->setDefault(true);
  // Ctrl+R is the Audit menu's Run audit (one owner for a shortcut, shown in the menu).
  run_->setToolTip(tr("Run the audit on the engine thread (Ctrl+R)"));
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setEnabled(false);
  cancel_->setToolTip(tr("Cancel the running audit (Esc)"));
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  progress_->setTextVisible(false);
  progressText_ = new QLabel(this);
  progressText_->setWordWrap(true);
  connect(run_, &QPushButton::clicked, this, &RunSetupPanel::runRequested);
  connect(cancel_, &QPushButton::clicked, this, &RunSetupPanel::cancelRequested);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_, 1);
  buttons->addWidget(cancel_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addWidget(progress_);
  layout->addWidget(progressText_);
  layout->addStretch(1);
  updateApplicability();
}

bool RunSetupPanel::usesTrace() const { return !trace_->text().trimmed().isEmpty(); }

void RunSetupPanel::setTraceProblem(const QString& role, const QString& problem) {
  (role == tr("Reference trace") ? referenceProblem_ : traceProblem_) = problem;
  updateApplicability();
}

void RunSetupPanel::updateApplicability() {
  const bool trace = usesTrace();
  const bool model = !model_->text().trimmed().isEmpty();
  const QString notUsed = tr(
      "Not used with a trace: the trace records its own prompts, arrivals, lengths and sampling.\n"
      "Clear the Trace field to run the built-in engine with these settings.");
  const QString prompts = tr("One prompt per line; each is one request of the built-in engine.");
  const QString sampling = tr("Sampling of the built-in engine (0 = greedy / off).");
  // A saved cache (llama.cpp state, mlx-lm prompt cache) holds one sequence: the one prompt
  // given says what it was made from (an mlx-lm cache may name no tokens of its own).
  const bool savedCache =
      trace && [&] {
        const FileKind k = describeFile(trace_->text().trimmed().toStdString()).kind;
        return k == FileKind::MlxCache || k == FileKind::LlamaState;
      }();
  prompts_->setEnabled(!trace || savedCache);
  prompts_->setToolTip(savedCache ? tr("A saved cache holds one sequence: the text it was made from, on one "
                                       "line (needed when the file names no tokens; checked against its "
                                       "own when it does).")
                       : trace    ? notUsed
                                  : prompts);
  arrivals_->setEnabled(!trace);
  arrivals_->setToolTip(
      trace ? notUsed
            : tr("Engine tick at which each prompt's request arrives, in prompt order.\n"
                 "A later arrival joins a running batch (the cross-request faults need one)."));
  for (QWidget* w : std::initializer_list<QWidget*>{maxNew_, temperature_, topK_, topP_, seed_}) {
    w->setEnabled(!trace);
    w->setToolTip(trace          ? notUsed
                  : w == maxNew_ ? tr("Tokens each request generates after its prompt")
                                 : sampling);
  }
  const bool referenceApplies = trace && !model;
  reference_->setEnabled(referenceApplies || !reference_->text().trimmed().isEmpty());
  QString refTip =
      referenceApplies ? tr("The uncached run the trace is compared with (trace+trace mode)")
      : model ? tr("Not used with a model: the model computes the uncached reference itself.\n"
                   "Clear the Model field to compare two traces.")
              : tr("Used in trace+trace mode: open a trace first (the cached run).");
  if (!referenceProblem_.isEmpty()) refTip = referenceProblem_ + QStringLiteral("\n\n") + refTip;
  reference_->setToolTip(refTip);
  trace_->setToolTip(
      traceProblem_.isEmpty()
          ? tr("The cached run to audit, a .kvtrace file; empty: run the built-in engine")
          : traceProblem_);
  trace_->setStyleSheet(traceProblem_.isEmpty()
                            ? QString()
                            : QStringLiteral("QLineEdit { border: 2px solid #C62828; }"));
  reference_->setStyleSheet(referenceProblem_.isEmpty()
                                ? QString()
                                : QStringLiteral("QLineEdit { border: 2px solid #C62828; }"));
}

AuditJobSpec RunSetupPanel::spec() const {
  AuditJobSpec s;
  s.modelDir = model_->text().trimmed().toStdString();
  s.traceFile = trace_->text().trimmed().toStdString();
  s.referenceTraceFile = reference_->text().trimmed().toStdString();
  for (const QString& item : weights_->text().split(QLatin1Char(';'), Qt::SkipEmptyParts)) {
    try {
      addWeightsVersion(s, item.trimmed().toStdString(), "Later weights");
    } catch (const std::exception&) {
      // validate() reports it; spec() leaves a bad item out
    }
  }
  for (const QString& line : prompts_->toPlainText().split(QLatin1Char('\n'))) {
    if (!line.trimmed().isEmpty()) s.prompts.push_back(line.toStdString());
  }
  std::vector<int64_t> ticks;
  QString ignored;
  if (parseArrivalTicks(arrivals_->text(), &ticks, &ignored)) s.arrivalTicks = ticks;
  s.maxNewTokens = maxNew_->value();
  s.policy.temperature = temperature_->value();
  if (topK_->value() > 0) s.policy.topK = topK_->value();
  if (topP_->value() < 1.0) s.policy.topP = topP_->value();
  s.policy.seed = static_cast<uint64_t>(seed_->value());
  return s;
}

void RunSetupPanel::setSpec(const AuditJobSpec& s) {
  model_->setText(QString::fromStdString(s.modelDir));
  trace_->setText(QString::fromStdString(s.traceFile));
  reference_->setText(QString::fromStdString(s.referenceTraceFile));
  QStringList items;
  for (const auto& item : weightsVersionItems(s)) items << QString::fromStdString(item);
  weights_->setText(items.join(QStringLiteral("; ")));
  QStringList prompts;
  for (const auto& p : s.prompts) prompts << QString::fromStdString(p);
  setPrompts(prompts);
  setArrivalTicks(s.arrivalTicks);
  maxNew_->setValue(static_cast<int>(
      std::clamp<int64_t>(s.maxNewTokens, maxNew_->minimum(), maxNew_->maximum())));
  temperature_->setValue(s.policy.temperature);
  topK_->setValue(s.policy.topK ? static_cast<int>(*s.policy.topK) : 0);
  topP_->setValue(s.policy.topP ? *s.policy.topP : 1.0);
  seed_->setValue(
      static_cast<int>(std::min<uint64_t>(s.policy.seed, static_cast<uint64_t>(seed_->maximum()))));
}

bool RunSetupPanel::parseArrivalTicks(const QString& text, std::vector<int64_t>* ticks,
                                      QString* error) {
  ticks->clear();
  static const QRegularExpression separators(QStringLiteral("[,;\\s]+"));
  for (const QString& part : text.split(separators, Qt::SkipEmptyParts)) {
    bool ok = false;
    const qlonglong tick = part.toLongLong(&ok);
    if (!ok || tick < 0) {
      *error = tr("arrival ticks: '%1' is not a tick (an integer >= 0)").arg(part);
      ticks->clear();
      return false;
    }
    ticks->push_back(static_cast<int64_t>(tick));
  }
  return true;
}

QString RunSetupPanel::formatArrivalTicks(const std::vector<int64_t>& ticks) {
  QStringList parts;
  for (int64_t t : ticks) parts << QString::number(t);
  return parts.join(QStringLiteral(", "));
}

void RunSetupPanel::setArrivalTicks(const std::vector<int64_t>& ticks) {
  arrivals_->setText(formatArrivalTicks(ticks));
}

QString RunSetupPanel::arrivalText() const { return arrivals_->text(); }

bool RunSetupPanel::validate(QString* error) const {
  AuditJobSpec check;
  check.modelDir = model_->text().trimmed().toStdString();
  try {
    for (const QString& item : weights_->text().split(QLatin1Char(';'), Qt::SkipEmptyParts))
      addWeightsVersion(check, item.trimmed().toStdString(), "Later weights");
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    return false;
  }
  std::vector<int64_t> ticks;
  if (!parseArrivalTicks(arrivals_->text(), &ticks, error)) return false;
  const auto prompts = spec().prompts.size();
  if (ticks.size() > prompts) {
    *error = tr("arrival ticks: %1 ticks for %2 prompt(s); give at most one per prompt")
                 .arg(ticks.size())
                 .arg(prompts);
    return false;
  }
  return true;
}

void RunSetupPanel::checkArrivals() {
  QString error;
  const bool ok = validate(&error);
  arrivals_->setStyleSheet(ok ? QString()
                              : QStringLiteral("QLineEdit { border: 2px solid #C62828; }"));
  arrivalError_->setText(ok ? QString() : error);
  arrivalError_->setVisible(!ok);
}

void RunSetupPanel::setMaxNewTokens(int maxNew) { maxNew_->setValue(maxNew); }

void RunSetupPanel::setModelDir(const QString& dir) { model_->setText(dir); }
void RunSetupPanel::setTraceFile(const QString& file) { trace_->setText(file); }
void RunSetupPanel::setReferenceTraceFile(const QString& file) { reference_->setText(file); }
void RunSetupPanel::setPrompts(const QStringList& prompts) { prompts_->setPlainText(prompts.join(QLatin1Char('\n'))); }
QString RunSetupPanel::modelDir() const { return model_->text(); }
QString RunSetupPanel::traceFile() const { return trace_->text(); }

void RunSetupPanel::setRunning(bool running) {
  run_->setEnabled(!running);
  cancel_->setEnabled(running);
  if (running) {
    progress_->setValue(0);
    progressText_->setText(tr("starting…"));
  }
}

void RunSetupPanel::setProgress(double fraction, const QString& what) {
  progress_->setValue(static_cast<int>(fraction * 1000.0));
  progressText_->setText(what);
}

}  // namespace kvscope::ui
