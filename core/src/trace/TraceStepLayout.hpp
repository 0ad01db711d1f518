// Where one step's tensors sit in a version 2 trace file (docs/trace-format.md): its row
// of `logits` and `checksums`, and per layer how many columns it owns in the packed
// `layer{l}.k|v` (appended records) and `layer{l}.cache_k|cache_v` (snapshots) tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvscope::detail {

struct StepLayout {
  int64_t logitsRow = -1;                         // -1: no logits row
  std::vector<std::optional<int64_t>> appended;   // per layer; empty: none stored
  std::vector<std::optional<int64_t>> snapshot;   // per layer; empty: none stored
  int64_t checksumRow = -1;                       // -1: no checksums
  int64_t ringRow = -1;                           // -1: no ring slot maps
  int64_t expertRow = -1;                         // -1: no expert choices
  int64_t stateRow = -1;                          // -1: no recurrent states

  bool hasLayerData() const {
    for (const auto* v : {&appended, &snapshot})
      for (const auto& n : *v)
        if (n) return true;
    return false;
  }
};

}  // namespace kvscope::detail
