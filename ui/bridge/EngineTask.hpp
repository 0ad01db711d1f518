// Work posted to the engine thread: a tag (a newer task with the same tag replaces a queued
// one), a generation id (results of older generations are dropped on arrival), a cancel
// flag and the work itself, which returns an immutable value.
#pragma once

#include <QMetaType>
#include <QString>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kvscope::ui {

/// An immutable result value; the poster knows its real type.
using EnginePayload = std::shared_ptr<const void>;

/// What a running task may ask of the engine thread.
struct EngineTaskContext {
  std::function<bool()> cancelled;                               // poll between units of work
  std::function<void(double, const std::string&)> progress;      // fraction 0..1, what
};

using EngineWork = std::function<EnginePayload(const EngineTaskContext&)>;

struct EngineTask {
  QString tag;
  uint64_t generation = 0;
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  EngineWork work;
};

enum class EngineErrorKind { None, Input, Cancelled, Internal };

/// What came back from one task, delivered on the GUI thread.
struct EngineOutcome {
  QString tag;
  uint64_t generation = 0;
  EnginePayload payload;      // null on error
  EngineErrorKind error = EngineErrorKind::None;
  QString message;
};

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::ui::EnginePayload)
