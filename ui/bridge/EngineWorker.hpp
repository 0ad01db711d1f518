// The engine thread's side of the bridge: a queue of tagged tasks, drained one at a time on
// the QThread this object lives in. It is the only place that runs core work for the GUI.
#pragma once

#include <QObject>

#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "ui/bridge/EngineTask.hpp"

namespace kvscope::ui {

class EngineWorker : public QObject {
  Q_OBJECT

 public:
  using Deliver = std::function<void(EngineOutcome)>;
  using Progress = std::function<void(const QString& tag, double, const QString&)>;

  EngineWorker(Deliver deliver, Progress progress);

  /// Thread-safe. Queues the task; a queued task with the same tag is replaced (its
  /// generation is returned), and a running one with the same tag is asked to cancel.
  std::optional<uint64_t> enqueue(EngineTask task);
  /// Thread-safe. Cancels the running task (matching `tag`, or any when empty) and drops
  /// matching queued ones; returns how many queued tasks were dropped.
  int cancel(const QString& tag);
  /// Thread-safe. Stops draining for good (shutdown).
  void stop();

  /// Engine thread: runs queued tasks until the queue is empty.
  void drain();

 private:
  Deliver deliver_;
  Progress progress_;
  std::mutex mutex_;
  std::deque<EngineTask> queue_;
  std::shared_ptr<std::atomic<bool>> runningCancel_;
  QString runningTag_;
  bool stopped_ = false;
};

}  // namespace kvscope::ui
