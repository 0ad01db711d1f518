#include "ui/InspectorController.hpp"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QEventLoop>
#include <QTimer>

#include "ui/EngineController.hpp"
#include "ui/SelectionContext.hpp"
#include "ui/StepSnapshotBuilder.hpp"

namespace kvscope::ui {

InspectorController::InspectorController(SelectionContext* context, EngineController* engine,
                                         QObject* parent)
    : QObject(parent), context_(context), engine_(engine),
      builder_(std::make_shared<StepSnapshotBuilder>()) {
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
  auto output = context_->output();
  if (!output) return;
  const uint64_t serial = context_->outputSerial();
  const Selection selection = context_->selection();
  if (context_->snapshot() && context_->snapshot()->outputSerial == serial &&
      context_->snapshot()->selection == selection)
    return;
  auto builder = builder_;
  engine_->post(snapshotTag(), [output, serial, selection, builder](const EngineTaskContext&) -> EnginePayload {
    return builder->build(*output, serial, selection);
  });
}

bool InspectorController::settled() const {
  if (!engine_->isIdle()) return false;
  if (!context_->output()) return true;
  const auto& snap = context_->snapshot();
  return snap && snap->outputSerial == context_->outputSerial() &&
         snap->selection == context_->selection();
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
