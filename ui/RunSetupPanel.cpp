#include "ui/RunSetupPanel.hpp"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

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
  prompts_ = new QPlainTextEdit(this);
  prompts_->setPlaceholderText(tr("One prompt per line"));
  prompts_->setTabChangesFocus(true);
  prompts_->setMaximumHeight(90);
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
  form->addRow(tr("Prompts"), prompts_);
  form->addRow(tr("Max new tokens"), maxNew_);
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-k"), topK_);
  form->addRow(tr("Top-p"), topP_);
  form->addRow(tr("Seed"), seed_);
  connect(browseModel, &QToolButton::clicked, this, &RunSetupPanel::browseModelRequested);
  connect(browseTrace, &QToolButton::clicked, this, &RunSetupPanel::browseTraceRequested);
  connect(browseRef, &QToolButton::clicked, this, &RunSetupPanel::browseReferenceRequested);

  run_ = new QPushButton(tr("Run audit"), this);
  run_->setDefault(true);
  run_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  run_->setToolTip(tr("Run the audit on the engine thread (Ctrl+R)"));
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setEnabled(false);
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
}

AuditJobSpec RunSetupPanel::spec() const {
  AuditJobSpec s;
  s.modelDir = model_->text().trimmed().toStdString();
  s.traceFile = trace_->text().trimmed().toStdString();
  s.referenceTraceFile = reference_->text().trimmed().toStdString();
  for (const QString& line : prompts_->toPlainText().split(QLatin1Char('\n'))) {
    if (!line.trimmed().isEmpty()) s.prompts.push_back(line.toStdString());
  }
  s.maxNewTokens = maxNew_->value();
  s.policy.temperature = temperature_->value();
  if (topK_->value() > 0) s.policy.topK = topK_->value();
  if (topP_->value() < 1.0) s.policy.topP = topP_->value();
  s.policy.seed = static_cast<uint64_t>(seed_->value());
  return s;
}

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
