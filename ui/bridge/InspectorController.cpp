#include "ui/bridge/InspectorController.hpp"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QEventLoop>
#include <QTimer>

#include "ui/bridge/EngineController.hpp"
#include "ui/bridge/SelectionContext.hpp"

namespace kvscope::ui {

InspectorController::InspectorController(SelectionContext* context, EngineController* engine,
                                         QObject* parent)
    : QObject(parent), context_(context), engine_(engine) {
  connect(engine_, &EngineController::auditFinished, this,
          [this](quint64 generation, std::shared_ptr<const AuditJobOutput> output) {
            if (generation != auditGeneration_) return;
            context_->setOutput(std::move(output));
            Q_EMIT auditSucceeded();
          });
  connect(engine_, &EngineController::auditFailed, this,
          [this](quint64 generation, const QString& message, bool inputError) {
            if (generation == auditGeneration_) Q_EMIT auditFailed(message, inputError);
          });
  connect(engine_, &EngineController::auditCancelled, this, [this](quint64 generation) {
    if (generation == auditGeneration_) Q_EMIT auditCancelled();
  });
  connect(engine_, &EngineController::taskFinished, this,
          [this](const QString& tag, quint64, EnginePayload payload) {
            if (tag == snapshotTag())
              context_->setSnapshot(std::static_pointer_cast<const StepSnapshot>(payload));
          });
  connect(context_, &SelectionContext::outputChanged, this, [this] { requestSnapshot(); });
  connect(context_, &SelectionContext::selectionChanged, this, [this] { requestSnapshot(); });
}

InspectorController::~InspectorController() = default;

uint64_t InspectorController::runAudit(const AuditJobSpec& spec) {
  auditGeneration_ = engine_->postAudit(spec);
  Q_EMIT auditStarted();
  return auditGeneration_;
}

void InspectorController::cancelAudit() { engine_->cancel(EngineController::auditTag()); }

void InspectorController::setOutput(std::shared_ptr<const AuditJobOutput> output) {
  context_->setOutput(std::move(output));
}

void InspectorController::requestSnapshot() {
  std::shared_ptr<Inspector> inspector = context_->inspector();
  if (!inspector || context_->snapshotCurrent()) return;
  const uint64_t serial = context_->outputSerial();
  const InspectionPoint point = context_->selection();
  // The inspector is single-threaded: every view() runs here, on the engine thread.
  engine_->post(snapshotTag(), [inspector, serial, point](const EngineTaskContext&) -> EnginePayload {
    auto snap = std::make_shared<StepSnapshot>();
    static_cast<StepView&>(*snap) = inspector->view(point);
    snap->outputSerial = serial;
    return std::shared_ptr<const StepSnapshot>(std::move(snap));
  });
}

bool InspectorController::settled() const {
  if (!engine_->isIdle()) return false;
  return !context_->output() || context_->snapshotCurrent();
}

bool InspectorController::waitUntilSettled(int timeoutMs) {
  QDeadlineTimer deadline(timeoutMs);
  if (!settled()) {
    // Sleep in an event loop (results arrive as posted events), checking every millisecond.
    QEventLoop loop;
    QTimer poll;
    poll.setInterval(1);
    connect(&poll, &QTimer::timeout, &loop, [&] {
      if (settled() || deadline.hasExpired()) loop.quit();
    });
    poll.start();
    loop.exec();
  }
  QCoreApplication::processEvents();
  return settled();
}

}  // namespace kvscope::ui
