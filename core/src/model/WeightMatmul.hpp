// Matrix products against weights kept in their stored dtype (float32, bfloat16 or
// float16, usually a view of the memory-mapped file), computed in float32.
//
// float32 weights go straight to LibTorch (BLAS), exactly as before. Reduced-precision
// weights are never upcast as a whole: decode-sized inputs and short prompts use a fused
// kernel that converts each weight row in registers and accumulates in float32 (one pass
// over the stored bytes: the memory-bandwidth floor); longer inputs (prefill, the
// teacher-forced reference) upcast one block of weight rows at a time into a reused
// float32 buffer and multiply it with a float32 GEMM (oneDNN's when available). Both give float32
// results whose only difference from an upcast-then-matmul is the summation order.
// Block-quantised GGUF weights (uint8 [rows, blocks, block bytes], the ggml type known by
// its block size: gguf/GgmlBlocks.hpp) take the blocked path, dequantised as ggml does.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace kvscope::detail {

/// nn.Linear: x [..., in] float32, w [out, in] (F32/BF16/F16) or block-quantised, b [out] or
/// undefined.
/// Returns x w^T + b, float32 [..., out].
torch::Tensor linearStored(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);

/// GPT-2 Conv1D: x [..., in] float32, w [in, out], b [out] or undefined. Returns x w + b.
/// BF16/F16 GPT-2 weights are upcast one whole matrix per product (GPT-2 sizes are small).
torch::Tensor conv1dStored(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);

/// x w^T + b (conv1dLayout: x w + b) summed over the input dimension in `parts` slices, one
/// product per slice added in order: a split-K reduction, equal to the one-product result up
/// to float rounding. Only the batch_variance fault uses it (a kernel that picks split-K by
/// batch size).
torch::Tensor splitKProduct(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                            int64_t parts, bool conv1dLayout);

/// Rows `rows` of a [R, C] weight in its stored dtype as float32 [rows.size, C] (copies).
torch::Tensor upcastRows(const torch::Tensor& w, const torch::Tensor& rows);

/// Which GEMM the blocked path uses: "oneDNN sgemm" or "LibTorch (BLAS)".
const char* gemmName();

/// Which kernel the fused path uses on this CPU: "avx512", "avx2" or "scalar".
const char* fusedKernelName();

/// Inputs with at most this many rows take the fused kernel (more rows: blocked BLAS): 32
/// with AVX-512, whose kernel streams the weights once for any number of rows (a 1B-shape
/// prefill of 18 tokens: 0.77 s fused, 1.0-1.4 s blocked; of 64 tokens: 2.5 s fused,
/// 1.7-1.8 s blocked), 8 otherwise (the other kernels take eight rows per pass).
int64_t fusedMaxRows();

}  // namespace kvscope::detail
