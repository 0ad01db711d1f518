// What to audit and how to generate: a model directory, a trace file (and an optional
// reference trace), the prompts (one per line), their arrival ticks, generation settings
// (max new tokens, temperature, top-k, top-p, seed), and Run / Cancel with a progress bar.
#pragma once

#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <vector>

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

  /// The job as the controls describe it (faults are added by the caller). Arrival ticks
  /// that do not parse are left out; check validate() first.
  AuditJobSpec spec() const;
  /// Sets every control from a spec (faults and prompt ids are not shown here).
  void setSpec(const AuditJobSpec& spec);
  /// False with a message when the controls do not describe a runnable job's settings
  /// (today: the arrival ticks).
  bool validate(QString* error) const;

  /// Parses "0, 3" (commas and/or spaces; empty = every prompt at tick 0) into ticks >= 0.
  static bool parseArrivalTicks(const QString& text, std::vector<int64_t>* ticks, QString* error);
  static QString formatArrivalTicks(const std::vector<int64_t>& ticks);
  void setArrivalTicks(const std::vector<int64_t>& ticks);
  QString arrivalText() const;
  QLineEdit* arrivalEdit() const { return arrivals_; }
  QLineEdit* traceEdit() const { return trace_; }
  void setModelDir(const QString& dir);
  void setTraceFile(const QString& file);
  void setReferenceTraceFile(const QString& file);
  void setPrompts(const QStringList& prompts);
  void setMaxNewTokens(int maxNew);
  QString modelDir() const;
  QString traceFile() const;
  /// True when a trace is given: the built-in engine does not run, so the prompts, arrival
  /// ticks, max new tokens and sampling fields are disabled (their tooltips say why).
  bool usesTrace() const;
  /// Marks the trace (role "Trace") or reference field with what is wrong with its file
  /// ("" clears it): a red frame and the reason as the field's tooltip.
  void setTraceProblem(const QString& role, const QString& problem);

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
  /// The model, trace or reference field changed (what applies may have changed).
  void inputsChanged();

 private:
  void checkArrivals();
  void updateApplicability();

  QLineEdit* model_;
  QLineEdit* trace_;
  QLineEdit* reference_;
  QLineEdit* weights_;  // "1=DIR; 2=DIR": checkpoints of later weights versions
  QPlainTextEdit* prompts_;
  QLineEdit* arrivals_;
  QLabel* arrivalError_;
  QSpinBox* maxNew_;
  QDoubleSpinBox* temperature_;
  QSpinBox* topK_;
  QDoubleSpinBox* topP_;
  QSpinBox* seed_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* progressText_;
  QString traceProblem_, referenceProblem_;
};

}  // namespace kvscope::ui
