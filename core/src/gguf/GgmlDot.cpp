#include "gguf/GgmlDot.hpp"

#include <immintrin.h>

#include <vector>

#include "util/KernelIsa.hpp"

namespace kvscope::detail {

namespace {

float dotScalar(const float* a, const float* b, int64_t K) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight partial sums: independent chains
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[k + j] * b[k + j];
  for (; k < K; ++k) s[0] += a[k] * b[k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

__attribute__((target("avx2,fma"))) float dotAvx2(const float* a, const float* b, int64_t K) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
  }
  const __m256 s = _mm256_add_ps(s0, s1);
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float r = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
  for (; k < K; ++k) r += a[k] * b[k];
  return r;
}

// GCC 12 reports its own _mm512_reduce_add_ps as reading an uninitialised value.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) float dotAvx512(const float* a, const float* b, int64_t K) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), s1);
  }
  float r = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  for (; k < K; ++k) r += a[k] * b[k];
  return r;
}
#pragma GCC diagnostic pop

using DotFn = float (*)(const float*, const float*, int64_t);

DotFn pickDot() {
  switch (isa()) {
    case Isa::Avx512: return dotAvx512;
    case Isa::Avx2: return dotAvx2;
    case Isa::Scalar: break;
  }
  return dotScalar;
}

}  // namespace

void ggmlDotRows(const GgmlType& t, const uint8_t* w, int64_t rowBytes, int64_t K, const float* x, int64_t M,
                 int64_t n0, int64_t n1, float* out, int64_t N) {
  static const DotFn dot = pickDot();
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    ggmlDequantize(t, w + n * rowBytes, K, row.data());
    for (int64_t m = 0; m < M; ++m) out[m * N + n] = dot(x + m * K, row.data(), K);
  }
}

}  // namespace kvscope::detail
