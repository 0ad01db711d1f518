#include "model/WeightMatmul.hpp"

#include "gguf/GgmlBlocks.hpp"
#include "gguf/GgmlDot.hpp"
#include "util/KernelIsa.hpp"

// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_* as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kvscope/SafetensorsWriter.hpp"  // halfToFloat

namespace kvscope::detail {

namespace {

inline float bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <bool F16>
inline float toFloat(uint16_t v) {
  if constexpr (F16) return halfToFloat(v);
  else return bf16ToFloat(v);
}

// ---- fused kernels: out[m * N + n] = sum_k x[m * K + k] * w[n * K + k], rows n in [n0, n1)

template <int M, bool F16>
void dotRowsScalar(const float* x, int64_t K, const uint16_t* w, int64_t n0, int64_t n1,
                   float* out, int64_t N) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * K;
    for (int m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= K; k += 8)
        for (int j = 0; j < 8; ++j) acc[j] += toFloat<F16>(wr[k + j]) * xr[k + j];
      float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; k < K; ++k) s += toFloat<F16>(wr[k]) * xr[k];
      out[m * N + n] = s;
    }
  }
}

template <bool F16>
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (F16) return _mm512_cvtph_ps(raw);
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// NR weight rows at a time against all M input rows: each input vector loaded serves NR
// products and each weight vector M, so a prefill's few rows are not re-read from L2 for
// every weight row (one row at a time, an 8-token prefill of the 1B shape ran at 2.2x the
// time of a one-token decode pass; see docs/performance.md). NR keeps NR x M accumulators,
// NR weight vectors and one input vector in the 32 registers. Every (row, input) sum is
// accumulated in the same order whatever M and NR are, so a row's result does not depend on
// how many rows it was computed with.
template <int M>
constexpr int kRowBlock = M >= 6   ? 3
                          : M >= 4 ? 4
                                   : 6;

template <int M, int NR, bool F16>
__attribute__((target("avx512f"))) __attribute__((always_inline)) inline void dotBlockAvx512(
    const float* x, int64_t K, const uint16_t* w, int64_t n, float* out, int64_t N) {
  __m512 acc[NR][M];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = load16<F16>(w + (n + r) * K + k);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    const uint16_t* wr = w + (n + r) * K;
    for (int m = 0; m < M; ++m) {
      float s = _mm512_reduce_add_ps(acc[r][m]);
      for (int64_t j = k; j < K; ++j) s += toFloat<F16>(wr[j]) * x[m * K + j];
      out[m * N + n + r] = s;
    }
  }
}

template <int M, bool F16>
__attribute__((target("avx512f"))) void dotRowsAvx512(const float* x, int64_t K, const uint16_t* w,
                                                      int64_t n0, int64_t n1, float* out,
                                                      int64_t N) {
  constexpr int NR = kRowBlock<M>;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) dotBlockAvx512<M, NR, F16>(x, K, w, n, out, N);
  for (; n < n1; ++n) dotBlockAvx512<M, 1, F16>(x, K, w, n, out, N);
}

// Any number of input rows against weight rows [n0, n1): for each block of three weight
// rows, every chunk of up to eight input rows, so the weights stream from memory once
// while the input chunks come from the caches.
template <int M, bool F16>
__attribute__((target("avx512f"))) void dotChunkAvx512(const float* x, int64_t K, const uint16_t* w,
                                                       int64_t n, int nr, float* out, int64_t N) {
  if (nr == 3)
    dotBlockAvx512<M, 3, F16>(x, K, w, n, out, N);
  else
    dotBlockAvx512<M, 1, F16>(x, K, w, n, out, N);
}

using ChunkFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int, float*, int64_t);

template <bool F16>
__attribute__((target("avx512f"))) void dotTiledAvx512(const float* x, int64_t M, int64_t K,
                                                       const uint16_t* w, int64_t n0, int64_t n1,
                                                       float* out, int64_t N) {
  static constexpr ChunkFn kChunkByRows[8] = {dotChunkAvx512<1, F16>, dotChunkAvx512<2, F16>,
                                              dotChunkAvx512<3, F16>, dotChunkAvx512<4, F16>,
                                              dotChunkAvx512<5, F16>, dotChunkAvx512<6, F16>,
                                              dotChunkAvx512<7, F16>, dotChunkAvx512<8, F16>};
  for (int64_t n = n0; n < n1;) {
    const int nr = n + 3 <= n1 ? 3 : 1;
    for (int64_t m0 = 0; m0 < M; m0 += 8) {
      const float* xc = x + m0 * K;
      float* oc = out + m0 * N;
      kChunkByRows[std::min<int64_t>(8, M - m0) - 1](xc, K, w, n, nr, oc, N);
    }
    n += nr;
  }
}

template <bool F16>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (F16) return _mm256_cvtph_ps(raw);
  else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

template <int M, bool F16>
__attribute__((target("avx2,fma,f16c"))) void dotRowsAvx2(const float* x, int64_t K,
                                                          const uint16_t* w, int64_t n0,
                                                          int64_t n1, float* out, int64_t N) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * K;
    __m256 a0[M], a1[M];
    for (int m = 0; m < M; ++m) a0[m] = a1[m] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m256 w0 = load8<F16>(wr + k), w1 = load8<F16>(wr + k + 8);
      for (int m = 0; m < M; ++m) {
        a0[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * K + k), a0[m]);
        a1[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + m * K + k + 8), a1[m]);
      }
    }
    for (int m = 0; m < M; ++m) {
      float s = hsum8(_mm256_add_ps(a0[m], a1[m]));
      for (int64_t j = k; j < K; ++j) s += toFloat<F16>(wr[j]) * x[m * K + j];
      out[m * N + n] = s;
    }
  }
}

using DotFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t);

template <int M>
DotFn pickM(Isa which, bool f16) {
  switch (which) {
    case Isa::Avx512: return f16 ? dotRowsAvx512<M, true> : dotRowsAvx512<M, false>;
    case Isa::Avx2: return f16 ? dotRowsAvx2<M, true> : dotRowsAvx2<M, false>;
    case Isa::Scalar: break;
  }
  return f16 ? dotRowsScalar<M, true> : dotRowsScalar<M, false>;
}

DotFn pickDot(int64_t M, bool f16) {
  const Isa which = isa();
  switch (M) {
    case 1: return pickM<1>(which, f16);
    case 2: return pickM<2>(which, f16);
    case 3: return pickM<3>(which, f16);
    case 4: return pickM<4>(which, f16);
    case 5: return pickM<5>(which, f16);
    case 6: return pickM<6>(which, f16);
    case 7: return pickM<7>(which, f16);
    default: return pickM<8>(which, f16);
  }
}

// ---- upcast of a run of stored elements into float32

template <bool F16>
__attribute__((target("avx512f"))) void upcastAvx512(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16<F16>(src + i));
  for (; i < n; ++i) dst[i] = toFloat<F16>(src[i]);
}

template <bool F16>
void upcastScalar(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = toFloat<F16>(src[i]);
}

void upcast(const uint16_t* src, int64_t n, float* dst, bool f16) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    if (isa() == Isa::Avx512)
      f16 ? upcastAvx512<true>(src + b, e - b, dst + b) : upcastAvx512<false>(src + b, e - b, dst + b);
    else
      f16 ? upcastScalar<true>(src + b, e - b, dst + b) : upcastScalar<false>(src + b, e - b, dst + b);
  });
}

bool isHalf(const torch::Tensor& w) {
  if (w.scalar_type() == torch::kHalf) return true;
  if (w.scalar_type() == torch::kBFloat16) return false;
  throw std::invalid_argument("weight dtype must be float32, bfloat16 or float16");
}

const uint16_t* rawBits(const torch::Tensor& w) {
  return static_cast<const uint16_t*>(w.data_ptr());
}

// The float32 scratch of the blocked path: reused across calls so no product allocates
// (and page-faults in) a fresh buffer. One per thread that runs the model.
float* scratch(int64_t elements) {
  thread_local torch::Tensor buf;
  if (!buf.defined() || buf.numel() < elements) buf = torch::empty({elements}, torch::kFloat);
  return buf.data_ptr<float>();
}

constexpr int64_t kBlockElements = int64_t{1} << 22;  // 16 MB of float32 per block

// oneDNN's float32 GEMM (row-major; its C API, loaded from the libdnnl LibTorch already
// links). It picks AVX-512 kernels at run time, where the Debian OpenBLAS falls back to
// its generic Prescott kernels on CPUs it does not know (3.6x slower on the Sapphire
// Rapids CI machine for a 256-token prefill). KVSCOPE_GEMM=openblas keeps LibTorch's.
using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);
SgemmFn dnnlSgemm() {
  static const SgemmFn fn = []() -> SgemmFn {
    const char* env = std::getenv("KVSCOPE_GEMM");
    if (env && std::string(env) == "openblas") return nullptr;
    void* h = ::dlopen("libdnnl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = ::dlopen("libdnnl.so.2", RTLD_NOW);
    return h ? reinterpret_cast<SgemmFn>(::dlsym(h, "dnnl_sgemm")) : nullptr;
  }();
  return fn;
}

std::vector<int64_t> outShape(const torch::Tensor& x, int64_t n) {
  auto s = x.sizes().vec();
  s.back() = n;
  return s;
}

}  // namespace

const char* gemmName() { return dnnlSgemm() ? "oneDNN sgemm" : "LibTorch (BLAS)"; }

int64_t fusedMaxRows() { return isa() == Isa::Avx512 ? 32 : 8; }

const char* fusedKernelName() {
  switch (isa()) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Scalar: break;
  }
  return "scalar";
}

namespace {

const GgmlType& ggmlTypeOf(const torch::Tensor& w) {
  const GgmlType* t = w.scalar_type() == torch::kByte && w.dim() == 3 ? ggmlQuantTypeOfBlockBytes(w.size(2)) : nullptr;
  TORCH_CHECK(t != nullptr, "a block-quantised weight is a uint8 [rows, blocks, block bytes] tensor of a ggml type");
  TORCH_CHECK(w.is_contiguous(), "a block-quantised weight must be contiguous");
  return *t;
}

// Rows [r0, r0 + n) of a block-quantised weight dequantised into `dst` ([n, K] float32),
// the rows shared out over the threads.
void dequantizeRows(const torch::Tensor& w, const GgmlType& t, int64_t r0, int64_t n, float* dst) {
  const int64_t K = w.size(1) * t.blockElements, rowBytes = w.size(1) * w.size(2);
  const uint8_t* base = w.data_ptr<uint8_t>();
  at::parallel_for(0, n, 16, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) ggmlDequantize(t, base + (r0 + r) * rowBytes, K, dst + r * K);
  });
}

// out [M, N] = x2 [M, K] times the weight's N rows, transposed: `fill(r0, nr, buf)` makes rows
// [r0, r0 + nr) float32 in the reused scratch a block at a time, each block one float32 GEMM
// (never a float32 copy of the whole matrix).
template <typename Fill>
void blockedProduct(const torch::Tensor& x2, int64_t N, int64_t K, torch::Tensor& out, Fill fill) {
  const int64_t M = x2.size(0);
  const int64_t rows = std::max<int64_t>(64, kBlockElements / std::max<int64_t>(K, 1));
  float* buf = scratch(std::min(rows, N) * K);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t nr = std::min(rows, N - r0);
    fill(r0, nr, buf);
    float* dstp = out.data_ptr<float>() + r0;
    if (SgemmFn gemm = dnnlSgemm();
        gemm && gemm('N', 'T', M, nr, K, 1.0f, x2.data_ptr<float>(), K, buf, K, 0.0f, dstp, N) == 0)
      continue;
    auto block = torch::from_blob(buf, {nr, K}, torch::kFloat);
    auto dst = out.narrow(1, r0, nr);
    at::mm_out(dst, x2, block.t());
  }
}

// x w^T for a block-quantised w, dequantised as ggml does: decode-sized inputs row by row in
// cache (GgmlDot.hpp), longer ones a block of rows at a time into GEMMs.
torch::Tensor linearBlockQuantized(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const GgmlType& t = ggmlTypeOf(w);
  const int64_t N = w.size(0), K = w.size(1) * t.blockElements;
  const auto x2 = x.reshape({-1, K}).to(torch::kFloat).contiguous();
  const int64_t M = x2.size(0);
  auto out = torch::empty({M, N}, torch::kFloat);
  if (M <= 8) {
    const uint8_t* wp = w.data_ptr<uint8_t>();
    const int64_t rowBytes = w.size(1) * w.size(2);
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
      ggmlDotRows(t, wp, rowBytes, K, x2.data_ptr<float>(), M, n0, n1, out.data_ptr<float>(), N);
    });
  } else {
    blockedProduct(x2, N, K, out, [&](int64_t r0, int64_t nr, float* buf) { dequantizeRows(w, t, r0, nr, buf); });
  }
  if (b.defined()) out.add_(b.to(torch::kFloat));
  return out.view(outShape(x, N));
}

}  // namespace

torch::Tensor linearStored(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (w.scalar_type() == torch::kFloat)
    return b.defined() ? torch::nn::functional::linear(x, w, b) : torch::matmul(x, w.t());
  if (w.scalar_type() == torch::kByte) return linearBlockQuantized(x, w, b);
  const bool f16 = isHalf(w);
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "stored weight must be a contiguous matrix");
  const int64_t N = w.size(0), K = w.size(1);
  const auto x2 = x.reshape({-1, K}).to(torch::kFloat).contiguous();
  const int64_t M = x2.size(0);
  auto out = torch::empty({M, N}, torch::kFloat);
  const uint16_t* wp = rawBits(w);
  if (M <= fusedMaxRows()) {
    const float* xp = x2.data_ptr<float>();
    float* op = out.data_ptr<float>();
    if (isa() == Isa::Avx512 && M > 8) {
      at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
        f16 ? dotTiledAvx512<true>(xp, M, K, wp, n0, n1, op, N)
            : dotTiledAvx512<false>(xp, M, K, wp, n0, n1, op, N);
      });
    } else
      // Rows of eight at a time.
      for (int64_t m0 = 0; m0 < M; m0 += 8) {
        const int64_t mm = std::min<int64_t>(8, M - m0);
        const DotFn dot = pickDot(mm, f16);
        at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
          dot(xp + m0 * K, K, wp, n0, n1, op + m0 * N, N);
        });
      }
  } else {
    blockedProduct(x2, N, K, out, [&](int64_t r0, int64_t nr, float* buf) { upcast(wp + r0 * K, nr * K, buf, f16); });
  }
  if (b.defined()) out.add_(b.to(torch::kFloat));
  return out.view(outShape(x, N));
}

torch::Tensor conv1dStored(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto x2 = x.reshape({-1, w.size(0)});
  if (w.scalar_type() != torch::kFloat) {
    isHalf(w);  // throws for other dtypes
    // GPT-2-sized matrices: one upcast per product, then LibTorch's out-of-place addmm (the
    // row-blocked variants writing into a preset output disagreed with it for some row
    // counts on this LibTorch; GPT-2 checkpoints are small enough not to need them).
    const auto wf = w.to(torch::kFloat);
    x2 = x2.to(torch::kFloat);
    auto out = b.defined() ? torch::addmm(b.to(torch::kFloat), x2, wf) : torch::mm(x2, wf);
    return out.view(outShape(x, w.size(1)));
  }
  auto out = b.defined() ? torch::addmm(b, x2, w) : torch::mm(x2, w);
  return out.view(outShape(x, w.size(1)));
}

torch::Tensor splitKProduct(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                            int64_t parts, bool conv1dLayout) {
  const int64_t in = conv1dLayout ? w.size(0) : w.size(1);
  auto x2 = x.reshape({-1, in}).to(torch::kFloat);
  torch::Tensor out;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t lo = in * p / parts, hi = in * (p + 1) / parts;
    if (hi <= lo) continue;
    const auto wPart = conv1dLayout ? w.narrow(0, lo, hi - lo).to(torch::kFloat)
                                    : w.narrow(1, lo, hi - lo).to(torch::kFloat).t();
    const auto partial = torch::mm(x2.narrow(1, lo, hi - lo), wPart);
    out = out.defined() ? out + partial : partial;
  }
  if (b.defined()) out = out + b.to(torch::kFloat);
  return out.view(outShape(x, out.size(1)));
}

torch::Tensor upcastRows(const torch::Tensor& w, const torch::Tensor& rows) {
  if (w.scalar_type() == torch::kFloat) return w.index_select(0, rows);
  if (w.scalar_type() == torch::kByte) {
    const GgmlType& t = ggmlTypeOf(w);
    const auto ids = rows.to(torch::kLong).contiguous();
    auto out = torch::empty({ids.numel(), w.size(1) * t.blockElements}, torch::kFloat);
    for (int64_t i = 0; i < ids.numel(); ++i) {
      const int64_t r = ids.data_ptr<int64_t>()[i];
      TORCH_CHECK(r >= 0 && r < w.size(0), "row ", r, " outside the weight's ", w.size(0), " rows");
      dequantizeRows(w, t, r, 1, out.data_ptr<float>() + i * out.size(1));
    }
    return out;
  }
  return w.index_select(0, rows).to(torch::kFloat);
}

}  // namespace kvscope::detail
