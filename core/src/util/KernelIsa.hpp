// Which vector instructions KV Scope's own kernels use (the fused bf16/f16 products of
// WeightMatmul, the GGUF row products of GgmlDot): AVX-512 F, else AVX2 with FMA and F16C, else
// scalar code. KVSCOPE_KERNEL=avx2 or =scalar picks a lower one (tests and benchmarks compare
// them). Detected once per process.
#pragma once

namespace kvscope::detail {

enum class Isa { Avx512, Avx2, Scalar };

Isa isa();

}  // namespace kvscope::detail
