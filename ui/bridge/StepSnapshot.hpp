// What every per-step panel paints: the inspection layer's StepView for the current
// selection (computed on the engine thread by kvscope::Inspector), tagged with the audit
// output it belongs to so a late one for an older output is dropped.
#pragma once

#include <cstdint>

#include "kvscope/Inspection.hpp"

namespace kvscope::ui {

struct StepSnapshot : StepView {
  uint64_t outputSerial = 0;  // SelectionContext::outputSerial() it was computed for
};

}  // namespace kvscope::ui
