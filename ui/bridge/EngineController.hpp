// The GUI side of the engine bridge (RenderDoc's replay manager, hotspot's job tracker).
// Owns ONE engine thread; every piece of core work the GUI needs is posted here with a
// tag. A newer task with the same tag replaces a queued one (scrubbing stays smooth),
// results come back on the GUI thread as immutable values tagged with a generation id,
// and results of superseded generations are dropped.
#pragma once

#include <QHash>
#include <QObject>
#include <QThread>

#include <functional>
#include <memory>

#include "kvscope/AuditJob.hpp"
#include "ui/bridge/EngineTask.hpp"

namespace kvscope::ui {

class EngineWorker;

class EngineController : public QObject {
  Q_OBJECT

 public:
  /// The audit itself; the app injects kvscope::runAuditJob, tests a fake.
  using AuditJobFunction = std::function<AuditJobOutput(const AuditJobSpec&)>;

  explicit EngineController(AuditJobFunction job, QObject* parent = nullptr);
  ~EngineController() override;

  static QString auditTag() { return QStringLiteral("audit"); }

  /// Posts an audit (tag "audit"); returns its generation. When the audit left requests
  /// without a reference but has a reference trace (trace+trace mode, stage 1 failed),
  /// the engine thread builds those references from the trace before delivering.
  uint64_t postAudit(const AuditJobSpec& spec);
  /// Posts any work; returns its generation. The work runs on the engine thread.
  uint64_t post(const QString& tag, EngineWork work);
  /// Cancels the running task and drops queued ones (all tags when `tag` is empty).
  void cancel(const QString& tag = QString());

  /// Runs the audit job on the calling thread (headless mode, where nothing else runs).
  AuditJobOutput runAuditNow(const AuditJobSpec& spec) const;

  bool isIdle() const { return inFlight_ == 0; }
  uint64_t latestGeneration(const QString& tag) const { return latest_.value(tag, 0); }
  int coalescedCount() const { return coalesced_; }
  int staleDroppedCount() const { return staleDropped_; }
  QThread* engineThread() { return &thread_; }

 Q_SIGNALS:
  void auditFinished(quint64 generation, std::shared_ptr<const kvscope::AuditJobOutput> output);
  void auditFailed(quint64 generation, const QString& message, bool inputError);
  void auditCancelled(quint64 generation);
  void taskFinished(const QString& tag, quint64 generation, kvscope::ui::EnginePayload payload);
  void taskFailed(const QString& tag, quint64 generation, const QString& message);
  void progress(const QString& tag, double fraction, const QString& what);
  void staleDropped(const QString& tag, quint64 generation);
  void busyChanged(bool busy);

 private:
  void receive(EngineOutcome outcome);  // GUI thread
  void settle(int count);               // `count` posted tasks have ended

  AuditJobFunction job_;
  QThread thread_;
  EngineWorker* worker_ = nullptr;
  QHash<QString, uint64_t> latest_;
  uint64_t nextGeneration_ = 0;
  int inFlight_ = 0;
  int coalesced_ = 0;
  int staleDropped_ = 0;
};

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(std::shared_ptr<const kvscope::AuditJobOutput>)
