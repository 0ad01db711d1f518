#include "ui/bridge/EngineController.hpp"

#include <QMetaObject>
#include <QPointer>

#include "kvscope/Error.hpp"
#include "ui/bridge/EngineWorker.hpp"

namespace kvscope::ui {

EngineController::EngineController(AuditJobFunction job, QObject* parent)
    : QObject(parent), job_(std::move(job)) {
  thread_.setObjectName(QStringLiteral("kvscope-engine"));
  QPointer<EngineController> self(this);
  worker_ = new EngineWorker(
      [self](EngineOutcome outcome) {
        // Engine thread -> GUI thread. The controller may be gone by then: QPointer and the
        // context object both guard against delivering into a destroyed controller.
        if (!self) return;
        QMetaObject::invokeMethod(
            self.data(), [self, outcome = std::move(outcome)]() mutable {
              if (self) self->receive(std::move(outcome));
            },
            Qt::QueuedConnection);
      },
      [self](const QString& tag, double fraction, const QString& what) {
        if (!self) return;
        QMetaObject::invokeMethod(
            self.data(), [self, tag, fraction, what] {
              if (self) Q_EMIT self->progress(tag, fraction, what);
            },
            Qt::QueuedConnection);
      });
  worker_->moveToThread(&thread_);
  thread_.start();
}

EngineController::~EngineController() {
  worker_->stop();
  thread_.quit();
  thread_.wait();
  delete worker_;
}

uint64_t EngineController::post(const QString& tag, EngineWork work) {
  EngineTask task;
  task.tag = tag;
  task.generation = ++nextGeneration_;
  task.work = std::move(work);
  latest_[tag] = task.generation;
  const uint64_t generation = task.generation;
  const bool wasIdle = inFlight_ == 0;
  ++inFlight_;
  if (worker_->enqueue(std::move(task))) {
    ++coalesced_;
    --inFlight_;  // the replaced task will never report back
  }
  QMetaObject::invokeMethod(worker_, &EngineWorker::drain, Qt::QueuedConnection);
  if (wasIdle) Q_EMIT busyChanged(true);
  return generation;
}

uint64_t EngineController::postAudit(const AuditJobSpec& spec) {
  AuditJobFunction job = job_;
  return post(auditTag(), [job, spec](const EngineTaskContext& context) -> EnginePayload {
    AuditJobSpec local = spec;
    auto userProgress = spec.options.progress;
    local.options.cancelled = [context, previous = spec.options.cancelled] {
      return context.cancelled() || (previous && previous());
    };
    local.options.progress = [context, userProgress](double fraction, const std::string& what) {
      context.progress(fraction, what);
      if (userProgress) userProgress(fraction, what);
    };
    if (!job) throw UsageError("no audit engine is available in this build");
    AuditJobOutput output = job(local);
    return std::make_shared<const AuditJobOutput>(std::move(output));
  });
}

AuditJobOutput EngineController::runAuditNow(const AuditJobSpec& spec) const {
  if (!job_) throw UsageError("no audit engine is available in this build");
  return job_(spec);
}

void EngineController::cancel(const QString& tag) {
  const int dropped = worker_->cancel(tag);
  settle(dropped);
}

void EngineController::settle(int count) {
  if (count <= 0) return;
  inFlight_ -= count;
  if (inFlight_ < 0) inFlight_ = 0;
  if (inFlight_ == 0) Q_EMIT busyChanged(false);
}

void EngineController::receive(EngineOutcome outcome) {
  const bool audit = outcome.tag == auditTag();
  if (outcome.generation != latest_.value(outcome.tag, 0)) {
    ++staleDropped_;
    Q_EMIT staleDropped(outcome.tag, outcome.generation);
  } else if (outcome.error == EngineErrorKind::None) {
    if (audit)
      Q_EMIT auditFinished(outcome.generation,
                           std::static_pointer_cast<const AuditJobOutput>(outcome.payload));
    Q_EMIT taskFinished(outcome.tag, outcome.generation, outcome.payload);
  } else if (outcome.error == EngineErrorKind::Cancelled) {
    if (audit) Q_EMIT auditCancelled(outcome.generation);
    Q_EMIT taskFailed(outcome.tag, outcome.generation, outcome.message);
  } else {
    if (audit)
      Q_EMIT auditFailed(outcome.generation, outcome.message,
                         outcome.error == EngineErrorKind::Input);
    Q_EMIT taskFailed(outcome.tag, outcome.generation, outcome.message);
  }
  settle(1);
}

}  // namespace kvscope::ui
