// What the inspector looks at: one request, one of its steps, one layer, one kv head and
// keys or values. A plain value; SelectionContext owns the current one.
#pragma once

#include <cstdint>

#include "kvscope/AuditResult.hpp"

namespace kvscope::ui {

struct Selection {
  int64_t request = 0;  // TraceRequest::id
  int64_t step = 0;     // TraceStep::step of that request (0 = prefill)
  int64_t layer = 0;
  int64_t head = 0;     // kv head
  KvKind kind = KvKind::Keys;

  bool operator==(const Selection& o) const {
    return request == o.request && step == o.step && layer == o.layer && head == o.head &&
           kind == o.kind;
  }
  bool operator!=(const Selection& o) const { return !(*this == o); }
};

}  // namespace kvscope::ui
