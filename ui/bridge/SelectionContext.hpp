// The one selection context of the inspector (after RenderDoc's capture context): the
// audit output being inspected with its kvscope::Inspector, the current inspection point
// (request, step, layer, head and K/V kind) and the step snapshot the engine thread
// computed for it. Every view listens to this object; no view talks to another. A point
// with autoHead/autoKind (the first divergence, a finding) is resolved by the inspector on
// the engine thread; the resolved point becomes the selection when its snapshot arrives.
#pragma once

#include <QObject>
#include <QString>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "kvscope/Inspection.hpp"
#include "ui/bridge/StepSnapshot.hpp"

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
  /// The inspector over the current output (nullptr without one). Its view() runs on the
  /// engine thread only; the shape queries this context uses are safe here.
  const std::shared_ptr<Inspector>& inspector() const { return inspector_; }
  /// Index of the current output, incremented by every setOutput (snapshots carry it).
  uint64_t outputSerial() const { return outputSerial_; }

  /// Marks the shown output as no longer answering the run setup (another model or trace
  /// opened, an input error, a new run under way): every view keeps it, visibly marked
  /// with `reason`, until the next setOutput clears the mark. Empty reason: current.
  void setStale(const QString& reason);
  bool stale() const { return !staleReason_.isEmpty(); }
  const QString& staleReason() const { return staleReason_; }

  const InspectionPoint& selection() const { return selection_; }
  void select(InspectionPoint s);  // clamps every field to the data, emits selectionChanged
  void setRequest(int64_t request);
  void setStep(int64_t step);
  void setLayer(int64_t layer);
  void setHead(int64_t head);
  void setKind(KvKind kind);
  void nextStep();
  void previousStep();
  /// Selects the first divergence (request, step, layer; the head and kind that differ
  /// most, resolved on the engine thread). Returns false when the report has none.
  bool selectFirstDivergence();
  /// Selects where a finding points (Inspector::locate: its request, step and layer, the
  /// head and kind that differ most there), also when it is already selected.
  void selectFinding(const Finding& finding);

  // Shape of the data, for views and clamping.
  std::vector<int64_t> requestIds() const;
  int requestIndex(int64_t request) const;  // index into trace.requests / tokenPieces, -1
  std::vector<int64_t> stepsOf(int64_t request) const;  // step numbers in order
  int64_t numLayers() const;
  int64_t numKvHeads() const;

  /// The snapshot for the current selection (nullptr until the engine delivered it).
  const std::shared_ptr<const StepSnapshot>& snapshot() const { return snapshot_; }
  /// Accepts a snapshot only when it matches the current output and selection; a snapshot
  /// for an auto point makes its resolved point the selection.
  bool setSnapshot(std::shared_ptr<const StepSnapshot> snapshot);
  /// The snapshot answers the current selection (asked for it, or shows exactly it).
  bool snapshotCurrent() const;

 Q_SIGNALS:
  void outputChanged();
  void selectionChanged(const kvscope::InspectionPoint& current,
                        const kvscope::InspectionPoint& previous);
  void snapshotChanged();
  void staleChanged();

 private:
  InspectionPoint clamp(InspectionPoint s) const;
  void selectResolving(InspectionPoint p);

  std::shared_ptr<const AuditJobOutput> output_;
  std::shared_ptr<Inspector> inspector_;
  uint64_t outputSerial_ = 0;
  QString staleReason_;
  InspectionPoint selection_;
  std::shared_ptr<const StepSnapshot> snapshot_;
};

}  // namespace kvscope::ui
