#include "ui/bridge/EngineWorker.hpp"

#include <QElapsedTimer>

#include <exception>

#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"

namespace kvscope::ui {

EngineWorker::EngineWorker(Deliver deliver, Progress progress)
    : deliver_(std::move(deliver)), progress_(std::move(progress)) {}

std::optional<uint64_t> EngineWorker::enqueue(EngineTask task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (runningCancel_ && runningTag_ == task.tag) runningCancel_->store(true);
  for (auto& queued : queue_) {
    if (queued.tag == task.tag) {
      const uint64_t replaced = queued.generation;
      queued = std::move(task);
      return replaced;
    }
  }
  queue_.push_back(std::move(task));
  return std::nullopt;
}

int EngineWorker::cancel(const QString& tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (runningCancel_ && (tag.isEmpty() || runningTag_ == tag)) runningCancel_->store(true);
  int dropped = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (tag.isEmpty() || it->tag == tag) {
      it = queue_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

void EngineWorker::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopped_ = true;
  if (runningCancel_) runningCancel_->store(true);
  queue_.clear();
}

void EngineWorker::drain() {
  for (;;) {
    EngineTask task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_ || queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      runningCancel_ = task.cancelled;
      runningTag_ = task.tag;
    }
    EngineOutcome outcome;
    outcome.tag = task.tag;
    outcome.generation = task.generation;

    QElapsedTimer sinceProgress;
    sinceProgress.start();
    EngineTaskContext context;
    auto flag = task.cancelled;
    context.cancelled = [flag] { return flag->load(); };
    const QString tag = task.tag;
    context.progress = [this, tag, &sinceProgress](double fraction, const std::string& what) {
      // At most ~30 updates a second reach the GUI.
      if (fraction < 1.0 && sinceProgress.isValid() && sinceProgress.elapsed() < 33) return;
      sinceProgress.restart();
      if (progress_) progress_(tag, fraction, QString::fromStdString(what));
    };
    try {
      outcome.payload = task.work(context);
      if (!outcome.payload) {
        outcome.error = EngineErrorKind::Internal;
        outcome.message = QStringLiteral("the task produced no result");
      }
    } catch (const AuditCancelled&) {
      outcome.error = EngineErrorKind::Cancelled;
      outcome.message = QStringLiteral("cancelled");
    } catch (const InputError& e) {
      outcome.error = EngineErrorKind::Input;
      outcome.message = QString::fromStdString(e.what());
    } catch (const UsageError& e) {
      outcome.error = EngineErrorKind::Input;
      outcome.message = QString::fromStdString(e.what());
    } catch (const std::exception& e) {
      outcome.error = EngineErrorKind::Internal;
      outcome.message = QString::fromStdString(e.what());
    } catch (...) {
      outcome.error = EngineErrorKind::Internal;
      outcome.message = QStringLiteral("unknown error");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      runningCancel_.reset();
      runningTag_.clear();
    }
    if (deliver_) deliver_(std::move(outcome));
  }
}

}  // namespace kvscope::ui
