#include "audit/rows/StateOrigin.hpp"

#include <algorithm>

#include "audit/NumberText.hpp"
#include "audit/RecordedConvState.hpp"

namespace kvscope::detail::rows {

const TraceStep* stepSinceLastState(const Trace& trace, int64_t request, const TraceStep& at, int64_t layer,
                                    const std::function<bool(const TraceStep&)>& did) {
  const auto L = static_cast<size_t>(layer);
  const TraceStep* first = nullptr;
  for (const TraceStep* st : trace.stepsOf(request)) {
    if (st == &at) return first ? first : (did(*st) ? st : nullptr);
    if (L < st->layers.size() && !st->layers[L].recurrentState.empty()) first = nullptr;  // that state was right
    else if (!first && did(*st)) first = st;
  }
  return nullptr;
}

double stateDistance(const TraceLayerRecord& recorded, const ReferenceRun& run, int64_t layer) {
  const auto L = static_cast<size_t>(layer);
  if (L >= run.recurrentStates.size() || L >= run.convStates.size()) return -1;
  const FloatTensor& state = run.recurrentStates[L];
  const FloatTensor conv = convStateAsRecorded(run.convStates[L], recorded.convState.shape);  // K or K-1 columns
  if (state.shape != recorded.recurrentState.shape || conv.empty()) return -1;
  return std::max(static_cast<double>(FloatTensor::maxAbsDiff(recorded.recurrentState, state)),
                  static_cast<double>(FloatTensor::maxAbsDiff(recorded.convState, conv)));
}

std::vector<int64_t> recurrentLayersBelowRecords(const Trace& trace, const StepAnalysis& a) {
  std::vector<int64_t> below;
  if (a.firstBadLayer < 0 || a.statesCompared > 0 || a.structural()) return below;
  for (const int64_t l : trace.recurrentLayers())
    if (l < a.firstBadLayer) below.push_back(l);
  return below;
}

std::string recordsAboveStatesText(const StepAnalysis& a, const std::vector<int64_t>& below) {
  return "layer " + std::to_string(a.firstBadLayer) + "'s K/V records are the first wrong ones, every layer below that "
         "holds records is exact, and recurrent " + std::string(below.size() == 1 ? "layer " : "layers ") +
         listText(below) + " below it record no state at this step";
}

std::string stateDifferenceText(const StepAnalysis& a, int64_t layer) {
  const auto L = static_cast<size_t>(layer);
  return "layer " + std::to_string(layer) + "'s recurrent state after the request's first " +
         std::to_string(a.stateLength) + " tokens differs from the reference's by " + numberText(a.stateError[L], 3) +
         " (tolerance " + numberText(a.stateTol[L], 3) + ")";
}

void addStateFinding(DiagnosisContext& ctx, const char* id, const StepAnalysis& a, int64_t layer, double confidence,
                     const std::string& explanation, Evidence evidence) {
  ctx.add(FindingDraft(id)
              .at(*a.step)
              .layer(layer)
              .position(a.firstBadStateLayer >= 0 ? std::max<int64_t>(a.stateLength - 1, 0) : a.firstBadStreamIndex)
              .confidence(confidence)
              .explanation(explanation)
              .evidence(std::move(evidence)),
          a);
}

}  // namespace kvscope::detail::rows
