#include "ui/bridge/SelectionContext.hpp"

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

SelectionContext::SelectionContext(QObject* parent) : QObject(parent) {}

void SelectionContext::setOutput(std::shared_ptr<const AuditJobOutput> output) {
  output_ = std::move(output);
  inspector_ = output_ ? std::make_shared<Inspector>(output_) : nullptr;
  ++outputSerial_;
  snapshot_.reset();
  const InspectionPoint previous = selection_;
  selection_ = clamp(InspectionPoint{});
  Q_EMIT outputChanged();
  if (!selectFirstDivergence()) Q_EMIT selectionChanged(selection_, previous);
  Q_EMIT snapshotChanged();
  setStale(QString());
}

void SelectionContext::setStale(const QString& reason) {
  const QString shown = output_ ? reason : QString();  // nothing shown, nothing stale
  if (shown == staleReason_) return;
  staleReason_ = shown;
  Q_EMIT staleChanged();
}

const AuditResult* SelectionContext::result() const { return output_ ? &output_->result : nullptr; }

std::vector<int64_t> SelectionContext::requestIds() const {
  return inspector_ ? inspector_->requests() : std::vector<int64_t>{};
}

int SelectionContext::requestIndex(int64_t request) const {
  if (!output_) return -1;
  const auto& reqs = output_->result.trace.requests;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].id == request) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> SelectionContext::stepsOf(int64_t request) const {
  return inspector_ ? inspector_->steps(request) : std::vector<int64_t>{};
}

int64_t SelectionContext::numLayers() const { return inspector_ ? inspector_->layers() : 0; }

int64_t SelectionContext::numKvHeads() const { return inspector_ ? inspector_->kvHeads() : 0; }

InspectionPoint SelectionContext::clamp(InspectionPoint s) const {
  return inspector_ ? inspector_->clamp(s) : s;
}

void SelectionContext::select(InspectionPoint s) {
  s = clamp(s);
  if (s == selection_) return;
  const InspectionPoint previous = selection_;
  selection_ = s;
  // The old snapshot stays until the new one arrives (no flicker); views ask
  // snapshotCurrent() when they need to know.
  Q_EMIT selectionChanged(selection_, previous);
}

void SelectionContext::setRequest(int64_t request) {
  InspectionPoint s = selection_;
  if (s.request == request) return;
  s.request = request;
  s.step = 0;
  select(s);
}

void SelectionContext::setStep(int64_t step) {
  InspectionPoint s = selection_;
  s.step = step;
  select(s);
}

void SelectionContext::setLayer(int64_t layer) {
  InspectionPoint s = selection_;
  s.layer = layer;
  select(s);
}

void SelectionContext::setHead(int64_t head) {
  InspectionPoint s = selection_;
  s.head = head;
  s.autoHead = false;
  select(s);
}

void SelectionContext::setKind(KvKind kind) {
  InspectionPoint s = selection_;
  s.kind = kind;
  s.autoKind = false;
  select(s);
}

void SelectionContext::nextStep() {
  const auto steps = stepsOf(selection_.request);
  auto it = std::upper_bound(steps.begin(), steps.end(), selection_.step);
  if (it != steps.end()) setStep(*it);
}

void SelectionContext::previousStep() {
  const auto steps = stepsOf(selection_.request);
  auto it = std::lower_bound(steps.begin(), steps.end(), selection_.step);
  if (it != steps.begin()) setStep(*(it - 1));
}

bool SelectionContext::selectFirstDivergence() {
  if (!inspector_) return false;
  const std::optional<InspectionPoint> p = inspector_->firstDivergence();
  if (!p) return false;
  selectResolving(*p);
  return true;
}

void SelectionContext::selectFinding(const Finding& finding) {
  if (inspector_) selectResolving(inspector_->locate(finding));
}

void SelectionContext::selectResolving(InspectionPoint p) {
  // An auto point stays the selection until its snapshot names the head and kind; it is
  // announced even when the resolved point may equal the current one (a finding clicked
  // again goes there again).
  p = clamp(p);
  const InspectionPoint previous = selection_;
  selection_ = p;
  Q_EMIT selectionChanged(selection_, previous);
}

bool SelectionContext::setSnapshot(std::shared_ptr<const StepSnapshot> snapshot) {
  if (!snapshot || snapshot->outputSerial != outputSerial_) return false;
  const bool asked = snapshot->requested == selection_;
  if (!asked && snapshot->point != selection_) return false;
  snapshot_ = std::move(snapshot);
  if (asked && (selection_.autoHead || selection_.autoKind)) {
    const InspectionPoint previous = selection_;
    selection_ = snapshot_->point;
    Q_EMIT selectionChanged(selection_, previous);
  }
  Q_EMIT snapshotChanged();
  return true;
}

bool SelectionContext::snapshotCurrent() const {
  return snapshot_ && snapshot_->outputSerial == outputSerial_ &&
         (snapshot_->requested == selection_ || snapshot_->point == selection_);
}

}  // namespace kvscope::ui
