// Where a step sits in its request's stream: the step record and the real tokens its
// request consumed before it (so its own tokens occupy cache positions
// [realBefore, realBefore + streamEntries())). One walk for the inspector's questions.
#pragma once

#include <cstdint>

#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct StepPlace {
  const TraceStep* step = nullptr;  // nullptr: the request has no such step
  int64_t realBefore = 0;

  static StepPlace of(const Trace& trace, int64_t request, int64_t step) {
    StepPlace place;
    for (const TraceStep* st : trace.stepsOf(request)) {
      if (st->step == step) {
        place.step = st;
        break;
      }
      place.realBefore += st->streamEntries();
    }
    return place;
  }
};

}  // namespace kvscope::detail
