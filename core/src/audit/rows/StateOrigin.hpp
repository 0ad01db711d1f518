// What the rows that explain a wrong recurrent state share: the step since the request's last
// recorded state that did something to its cache (rejected drafts, a prefix hit), and how far a
// recorded state lies from a re-derived one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "audit/StepAnalysis.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail::rows {

/// Of `request`'s steps after the last one before `at` that recorded `layer`'s state, up to and
/// including `at`: the first for which `did` holds; nullptr when none does.
const TraceStep* stepSinceLastState(const Trace& trace, int64_t request, const TraceStep& at, int64_t layer,
                                    const std::function<bool(const TraceStep&)>& did);

/// The largest difference between `recorded`'s state of `layer` (conv and recurrent) and the
/// state `run` ends in; a negative number when `run` holds none of that shape.
double stateDistance(const TraceLayerRecord& recorded, const ReferenceRun& run, int64_t layer);

/// Step `a` records no state and its first wrong K/V records (no structural evidence) sit above
/// recurrent layers, every recorded layer below exact: those layers, ascending (the nearest
/// answer's candidates); empty otherwise.
std::vector<int64_t> recurrentLayersBelowRecords(const Trace& trace, const StepAnalysis& a);

/// "layer F's K/V records are the first wrong ones, every layer below that holds records is
/// exact, recurrent layer(s) B below it record no state at this step": the nearest answers' start.
std::string recordsAboveStatesText(const StepAnalysis& a, const std::vector<int64_t>& below);

/// "layer L's recurrent state after the request's first N tokens differs from the reference's
/// by X (tolerance Y)": step `a`'s wrong state of `layer`.
std::string stateDifferenceText(const StepAnalysis& a, int64_t layer);

/// Adds row `id`'s finding about step `a` at recurrent `layer`: placed at the last token a wrong
/// recorded state has read, or (a nearest answer, no wrong state recorded at the step) at the
/// first wrong record's stream index.
void addStateFinding(DiagnosisContext& ctx, const char* id, const StepAnalysis& a, int64_t layer, double confidence,
                     const std::string& explanation, Evidence evidence);

}  // namespace kvscope::detail::rows
