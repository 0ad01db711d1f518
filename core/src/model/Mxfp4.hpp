// MXFP4 weights (OCP microscaling FP4, as GPT-OSS's released checkpoints store their experts):
// `*_blocks` uint8 [E, out, G, 16] hold two e2m1 values per byte (the low nibble first), 32
// per block, and `*_scales` uint8 [E, out, G] one power-of-two exponent per block (2^(s - 127)).
// transformers' integrations/mxfp4.py (convert_moe_packed_tensors) dequantizes them the same
// way; here one expert at a time, when the forward needs it, so the model never holds a dense
// copy of its experts.
#pragma once

#include <torch/torch.h>

namespace kvscope::detail {

/// Expert `e`'s weight [out, in] in float32 (every value exact) from blocks [E, out, G, 16]
/// and scales [E, out, G].
torch::Tensor dequantizeMxfp4(const torch::Tensor& blocks, const torch::Tensor& scales, int64_t e);

}  // namespace kvscope::detail
