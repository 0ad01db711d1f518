// A recurrent layer's conv state as a trace holds it: transformers keeps the causal conv's last
// K inputs ([C, K]); mlx-lm (and llama.cpp) keep the last K-1, all that the next step reads
// ([C, K-1]). The one rule the stage-1 fit check and the state comparisons follow.
#pragma once

#include <cstdint>
#include <vector>

#include "kvscope/FloatTensor.hpp"

namespace kvscope::detail {

/// Whether a recorded conv state of shape `recorded` is one of `channels` channels and a conv
/// of `kernel` taps: [C, K] or [C, K-1].
inline bool convStateFits(const std::vector<int64_t>& recorded, int64_t channels, int64_t kernel) {
  return recorded.size() == 2 && recorded[0] == channels && kernel >= 2 &&
         (recorded[1] == kernel || recorded[1] == kernel - 1);
}

/// The reference's conv state `reference` [C, K] as a state of shape `recorded` holds it: all of
/// it, or its last K-1 columns; empty when `recorded` is neither.
inline FloatTensor convStateAsRecorded(const FloatTensor& reference, const std::vector<int64_t>& recorded) {
  if (reference.shape.size() != 2 || !convStateFits(recorded, reference.shape[0], reference.shape[1])) return {};
  if (recorded[1] == reference.shape[1]) return reference;
  const int64_t C = reference.shape[0], K = reference.shape[1];
  FloatTensor out = FloatTensor::zeros({C, K - 1});
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 1; k < K; ++k)
      out.data[static_cast<size_t>(c * (K - 1) + k - 1)] = reference.data[static_cast<size_t>(c * K + k)];
  return out;
}

}  // namespace kvscope::detail
