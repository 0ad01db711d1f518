#include "ui/SelectionContext.hpp"

#include "ui/StepSnapshotBuilder.hpp"

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

SelectionContext::SelectionContext(QObject* parent) : QObject(parent) {}

void SelectionContext::setOutput(std::shared_ptr<const AuditJobOutput> output) {
  output_ = std::move(output);
  ++outputSerial_;
  snapshot_.reset();
  const Selection previous = selection_;
  selection_ = clamp(Selection{});
  Q_EMIT outputChanged();
  if (!selectFirstDivergence()) Q_EMIT selectionChanged(selection_, previous);
  Q_EMIT snapshotChanged();
}

const AuditResult* SelectionContext::result() const {
  return output_ ? &output_->result : nullptr;
}

std::vector<int64_t> SelectionContext::requestIds() const {
  std::vector<int64_t> ids;
  if (!output_) return ids;
  for (const auto& r : output_->result.trace.requests) ids.push_back(r.id);
  return ids;
}

int SelectionContext::requestIndex(int64_t request) const {
  if (!output_) return -1;
  const auto& reqs = output_->result.trace.requests;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].id == request) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> SelectionContext::stepsOf(int64_t request) const {
  std::vector<int64_t> steps;
  if (!output_) return steps;
  for (const TraceStep* s : output_->result.trace.stepsOf(request)) steps.push_back(s->step);
  return steps;
}

int64_t SelectionContext::numLayers() const {
  return output_ ? output_->result.trace.model.numLayers : 0;
}

int64_t SelectionContext::numKvHeads() const {
  return output_ ? output_->result.trace.model.numKvHeads : 0;
}

Selection SelectionContext::clamp(Selection s) const {
  if (!output_) return s;
  const auto ids = requestIds();
  if (!ids.empty() && std::find(ids.begin(), ids.end(), s.request) == ids.end())
    s.request = ids.front();
  const auto steps = stepsOf(s.request);
  if (!steps.empty()) {
    if (std::find(steps.begin(), steps.end(), s.step) == steps.end()) {
      // Nearest recorded step at or below the requested one, else the first.
      auto it = std::upper_bound(steps.begin(), steps.end(), s.step);
      s.step = it == steps.begin() ? steps.front() : *(it - 1);
    }
  } else {
    s.step = 0;
  }
  s.layer = std::clamp<int64_t>(s.layer, 0, std::max<int64_t>(0, numLayers() - 1));
  s.head = std::clamp<int64_t>(s.head, 0, std::max<int64_t>(0, numKvHeads() - 1));
  return s;
}

void SelectionContext::select(Selection s) {
  s = clamp(s);
  if (s == selection_) return;
  const Selection previous = selection_;
  selection_ = s;
  // The old snapshot stays until the new one arrives (no flicker); views compare
  // snapshot()->selection with selection() when they need to know.
  Q_EMIT selectionChanged(selection_, previous);
}

void SelectionContext::setRequest(int64_t request) {
  Selection s = selection_;
  if (s.request == request) return;
  s.request = request;
  s.step = 0;
  select(s);
}

void SelectionContext::setStep(int64_t step) {
  Selection s = selection_;
  s.step = step;
  select(s);
}

void SelectionContext::setLayer(int64_t layer) {
  Selection s = selection_;
  s.layer = layer;
  select(s);
}

void SelectionContext::setHead(int64_t head) {
  Selection s = selection_;
  s.head = head;
  select(s);
}

void SelectionContext::setKind(KvKind kind) {
  Selection s = selection_;
  s.kind = kind;
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
  const AuditResult* r = result();
  if (!r || !r->report.firstDivergence.present) return false;
  const FirstDivergence& fd = r->report.firstDivergence;
  Selection s = selection_;
  s.request = fd.request;
  s.step = fd.step;
  if (fd.layer >= 0) s.layer = fd.layer;
  s = clamp(s);
  // The head where the step's own records differ most at the divergent layer.
  const int64_t head = StepSnapshotBuilder::worstHead(*r, s.request, s.step, s.layer, s.kind);
  if (head >= 0) s.head = head;
  const Selection previous = selection_;
  selection_ = s;
  Q_EMIT selectionChanged(selection_, previous);
  return true;
}

void SelectionContext::selectLocation(int64_t request, int64_t step, int64_t layer) {
  Selection s = selection_;
  if (request >= 0) s.request = request;
  if (step >= 0) s.step = step;
  if (layer >= 0) s.layer = layer;
  s = clamp(s);
  if (const AuditResult* r = result()) {
    const int64_t head =
        StepSnapshotBuilder::worstCacheHead(*r, s.request, s.step, s.layer, s.kind);
    if (head >= 0) s.head = head;
  }
  select(s);
}

bool SelectionContext::setSnapshot(std::shared_ptr<const StepSnapshot> snapshot) {
  if (!snapshot || snapshot->outputSerial != outputSerial_ || snapshot->selection != selection_)
    return false;
  snapshot_ = std::move(snapshot);
  Q_EMIT snapshotChanged();
  return true;
}

}  // namespace kvscope::ui
