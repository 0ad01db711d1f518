// What to audit and how to generate: a model directory, a trace file (and an optional
// reference trace), the prompts (one per line), generation settings (max new tokens,
// temperature, top-k, top-p, seed), and Run / Cancel with a progress bar.
#pragma once

#include <QStringList>
#include <QWidget>

#include "kvscope/AuditJob.hpp"

class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace kvscope::ui {

class RunSetupPanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunSetupPanel(QWidget* parent = nullptr);

  /// The job as the controls describe it (faults are added by the caller).
  AuditJobSpec spec() const;
  void setModelDir(const QString& dir);
  void setTraceFile(const QString& file);
  void setReferenceTraceFile(const QString& file);
  void setPrompts(const QStringList& prompts);
  QString modelDir() const;
  QString traceFile() const;

  void setRunning(bool running);
  void setProgress(double fraction, const QString& what);
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }

 Q_SIGNALS:
  void runRequested();
  void cancelRequested();
  void browseModelRequested();
  void browseTraceRequested();
  void browseReferenceRequested();

 private:
  QLineEdit* model_;
  QLineEdit* trace_;
  QLineEdit* reference_;
  QPlainTextEdit* prompts_;
  QSpinBox* maxNew_;
  QDoubleSpinBox* temperature_;
  QSpinBox* topK_;
  QDoubleSpinBox* topP_;
  QSpinBox* seed_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* progressText_;
};

}  // namespace kvscope::ui
