// The one selection context of the inspector (after RenderDoc's capture context): the
// audit output being inspected, the current request, step, layer, head and K/V kind, and
// the step snapshot computed for that selection. Every view listens to this object; no
// view talks to another.
#pragma once

#include <QObject>

#include <cstdint>
#include <memory>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "ui/Selection.hpp"
#include "ui/StepSnapshot.hpp"

namespace kvscope::ui {

class SelectionContext : public QObject {
  Q_OBJECT

 public:
  explicit SelectionContext(QObject* parent = nullptr);

  /// Replaces the inspected output (an immutable value); resets the selection to the first
  /// divergence when there is one, else to request 0, step 0.
  void setOutput(std::shared_ptr<const AuditJobOutput> output);
  const std::shared_ptr<const AuditJobOutput>& output() const { return output_; }
  /// Convenience: the result inside the output, or nullptr.
  const AuditResult* result() const;
  /// Index of the current output, incremented by every setOutput (snapshots carry it).
  uint64_t outputSerial() const { return outputSerial_; }

  const Selection& selection() const { return selection_; }
  void select(Selection s);  // clamps every field to the data, emits selectionChanged
  void setRequest(int64_t request);
  void setStep(int64_t step);
  void setLayer(int64_t layer);
  void setHead(int64_t head);
  void setKind(KvKind kind);
  void nextStep();
  void previousStep();
  /// Selects the first divergence (request, step, layer; the head with the largest
  /// difference). Returns false when the report has none.
  bool selectFirstDivergence();
  /// Selects a place a finding points at: request, step and layer (negative: keep the
  /// current one), with the kv head whose cache differs most there.
  void selectLocation(int64_t request, int64_t step, int64_t layer);

  // Shape of the data, for views and clamping.
  std::vector<int64_t> requestIds() const;
  int requestIndex(int64_t request) const;  // index into trace.requests / tokenPieces, -1
  std::vector<int64_t> stepsOf(int64_t request) const;  // step numbers in order
  int64_t numLayers() const;
  int64_t numKvHeads() const;

  /// The snapshot for the current selection (nullptr until the engine delivered it).
  const std::shared_ptr<const StepSnapshot>& snapshot() const { return snapshot_; }
  /// Accepts a snapshot only when it matches the current output and selection.
  bool setSnapshot(std::shared_ptr<const StepSnapshot> snapshot);

 Q_SIGNALS:
  void outputChanged();
  void selectionChanged(const kvscope::ui::Selection& current,
                        const kvscope::ui::Selection& previous);
  void snapshotChanged();

 private:
  Selection clamp(Selection s) const;

  std::shared_ptr<const AuditJobOutput> output_;
  uint64_t outputSerial_ = 0;
  Selection selection_;
  std::shared_ptr<const StepSnapshot> snapshot_;
};

}  // namespace kvscope::ui
