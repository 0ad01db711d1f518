// The states of a model's recurrent (Gated DeltaNet) layers after some tokens: per model layer
// the causal conv's last K inputs [C, K] and the recurrent state [Hv, Dk, Dv]; empty tensors on
// the attention layers.
#pragma once

#include <vector>

#include "kvscope/FloatTensor.hpp"

namespace kvscope {

struct RecurrentStates {
  std::vector<FloatTensor> conv, recurrent;
};

}  // namespace kvscope
