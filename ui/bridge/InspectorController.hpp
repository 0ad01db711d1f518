// Wires the selection context to the engine bridge: a finished audit becomes the
// context's output; every selection change posts a snapshot request (tag "snapshot", so
// fast scrubbing coalesces) whose result the context accepts only if it is still current.
#pragma once

#include <QObject>

#include <memory>

#include "kvscope/AuditJob.hpp"

namespace kvscope::ui {

class EngineController;
class SelectionContext;

class InspectorController : public QObject {
  Q_OBJECT

 public:
  InspectorController(SelectionContext* context, EngineController* engine, QObject* parent = nullptr);
  ~InspectorController() override;

  static QString snapshotTag() { return QStringLiteral("snapshot"); }

  /// Posts an audit to the engine thread; its output replaces the current one.
  uint64_t runAudit(const AuditJobSpec& spec);
  void cancelAudit();
  /// Shows an output computed elsewhere (headless mode, tests).
  void setOutput(std::shared_ptr<const AuditJobOutput> output);
  /// True when the engine is idle and the context's snapshot matches its selection.
  bool settled() const;
  /// Processes events until settled() or the timeout; returns settled().
  bool waitUntilSettled(int timeoutMs = 30000);

 Q_SIGNALS:
  void auditStarted();
  void auditSucceeded();
  void auditFailed(const QString& message, bool inputError);
  void auditCancelled();

 private:
  void requestSnapshot();

  SelectionContext* context_;
  EngineController* engine_;
  uint64_t auditGeneration_ = 0;
};

}  // namespace kvscope::ui
