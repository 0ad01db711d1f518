// The inspector's minimal reproducer (issue 15): Audit → "Minimize trace for a bug report…"
// and the bug-report bundle's minimized.kvtrace. The minimization audits candidate traces,
// so it runs on the engine thread (ExportController::minimizeWork, posted with the tag
// "minimize"); the window waits for it in a local event loop, so the GUI keeps painting.
#include <QAction>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QStatusBar>

#include "kvscope/TraceMinimizer.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/InspectorWindow.hpp"

namespace kvscope::ui {

namespace {
const QString kMinimizeTag = QStringLiteral("minimize");
}  // namespace

void InspectorWindow::buildMinimizeAction(QMenu* audit) {
  minimizeAction_ = audit->addAction(tr("&Minimize trace for a bug report…"), this,
                                     [this] { minimizeTraceInteractive(); });
  minimizeAction_->setObjectName(QStringLiteral("minimizeTraceAction"));
  minimizeAction_->setStatusTip(
      tr("Write the smallest trace that still shows the first finding, and the kvscope-cli "
         "command that reproduces the verdict on it"));
  auto update = [this] {
    minimizeAction_->setEnabled(
        ExportController::canMinimize(auditedSpec_, context_->output().get()));
  };
  connect(context_, &SelectionContext::outputChanged, this, update);
  update();
}

std::shared_ptr<const Reproducer> InspectorWindow::runMinimize(const QString& path,
                                                               const QString& commandPath,
                                                               QString* error) {
  const auto output = context_->output();
  if (!ExportController::canMinimize(auditedSpec_, output.get())) {
    *error =
        tr("the audit on screen has no finding to minimize a trace for, or its inputs are "
           "not known");
    return nullptr;
  }
  statusBar()->showMessage(tr("Minimizing the trace…"));
  std::shared_ptr<const Reproducer> result;
  QEventLoop loop;
  uint64_t generation = 0;
  const auto done = connect(engine_, &EngineController::taskFinished, &loop,
                            [&](const QString& tag, quint64 g, EnginePayload payload) {
                              if (tag != kMinimizeTag || g != generation) return;
                              result = std::static_pointer_cast<const Reproducer>(payload);
                              loop.quit();
                            });
  const auto failed = connect(engine_, &EngineController::taskFailed, &loop,
                              [&](const QString& tag, quint64 g, const QString& message) {
                                if (tag != kMinimizeTag || g != generation) return;
                                *error = message;
                                loop.quit();
                              });
  generation = engine_->post(
      kMinimizeTag, ExportController::minimizeWork(auditedSpec_, output, path, commandPath));
  loop.exec();
  disconnect(done);
  disconnect(failed);
  statusBar()->clearMessage();
  if (!result && error->isEmpty()) *error = tr("the minimization was cancelled");
  return result;
}

bool InspectorWindow::minimizeTrace(const QString& path, QString* message) {
  QString error;
  const QString abs = QFileInfo(path).absoluteFilePath();
  const auto r = runMinimize(abs, abs, &error);
  const QString text = r ? tr("Wrote %1 (%2 bytes, from %3). Reproduce: %4")
                               .arg(abs)
                               .arg(static_cast<qulonglong>(r->bytesAfter))
                               .arg(static_cast<qulonglong>(r->bytesBefore))
                               .arg(QString::fromStdString(r->command))
                         : tr("No minimized trace: %1").arg(error);
  statusBar()->showMessage(text, 15000);
  if (message) *message = r ? QString::fromStdString(r->command) : error;
  return r != nullptr;
}

void InspectorWindow::minimizeTraceInteractive() {
  const QString path =
      QFileDialog::getSaveFileName(this, tr("Minimize trace for a bug report"),
                                   QStringLiteral("minimized.kvtrace"), traceFileFilter());
  if (!path.isEmpty()) minimizeTrace(path);
}

}  // namespace kvscope::ui
