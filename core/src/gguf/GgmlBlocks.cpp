#include "gguf/GgmlBlocks.hpp"

#include <cstring>

namespace kvscope::detail {

// The dequantising loops are what a decode step with a GGUF weight spends its time in: let the
// compiler vectorise them (-O2 keeps to its very cheap cost model), here only.
#pragma GCC push_options
#pragma GCC optimize("O3")

namespace {

constexpr int64_t kQK = 256;  // QK_K: the K-quants' super-block
constexpr int64_t kScaleBytes = 12;  // K_SCALE_SIZE

const GgmlType kTypes[] = {
    {kGgmlF32, "F32", 1, 4},
    {kGgmlF16, "F16", 1, 2},
    {kGgmlBF16, "BF16", 1, 2},
    {kGgmlQ8_0, "Q8_0", 32, 2 + 32},
    {kGgmlQ4_0, "Q4_0", 32, 2 + 16},
    {kGgmlQ4_1, "Q4_1", 32, 2 + 2 + 16},
    {kGgmlQ5_0, "Q5_0", 32, 2 + 4 + 16},
    {kGgmlQ5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {kGgmlQ2_K, "Q2_K", kQK, kQK / 16 + kQK / 4 + 2 + 2},
    {kGgmlQ3_K, "Q3_K", kQK, kQK / 8 + kQK / 4 + 12 + 2},
    {kGgmlQ4_K, "Q4_K", kQK, 2 + 2 + kScaleBytes + kQK / 2},
    {kGgmlQ5_K, "Q5_K", kQK, 2 + 2 + kScaleBytes + kQK / 8 + kQK / 2},
    {kGgmlQ6_K, "Q6_K", kQK, kQK / 2 + kQK / 4 + kQK / 16 + 2},
};

// ggml's type names by id (ggml.c type_traits), for messages about the ones not read.
const char* otherName(uint32_t id) {
  switch (id) {
    case 9: return "Q8_1";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return "unknown";
  }
}

float halfToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 packed bytes.
void scaleMin(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = halfToFloat(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d;
}

void q4_0(const uint8_t* b, float* y) {
  const float d = halfToFloat(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((q[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((q[j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = halfToFloat(b), m = halfToFloat(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(q[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(q[j] >> 4) * d + m;
  }
}

// Q5_0 / Q5_1: the fifth bits of the 32 values in one little-endian word.
uint32_t highBits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  return qh;
}

void q5_0(const uint8_t* b, float* y) {
  const float d = halfToFloat(b);
  const uint32_t qh = highBits(b + 2);
  const uint8_t* q = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = ((q[j] & 0x0F) | static_cast<int>(((qh >> (j + 0)) << 4) & 0x10)) - 16;
    const int x1 = ((q[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

void q5_1(const uint8_t* b, float* y) {
  const float d = halfToFloat(b), m = halfToFloat(b + 2);
  const uint32_t qh = highBits(b + 4);
  const uint8_t* q = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (q[j] & 0x0F) | static_cast<int>(((qh >> (j + 0)) << 4) & 0x10);
    const int x1 = (q[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + kQK / 16;
  const float d = halfToFloat(b + kQK / 16 + kQK / 4), min = halfToFloat(b + kQK / 16 + kQK / 4 + 2);
  int is = 0;
  for (int n = 0; n < kQK; n += 128, q += 32) {
    for (int j = 0, shift = 0; j < 4; ++j, shift += 2) {
      uint8_t sc = scales[is++];
      float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
      sc = scales[is++];
      dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
    }
  }
}

void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + kQK / 8;
  const uint8_t* packed = q + kQK / 4;
  const float dAll = halfToFloat(packed + 12);
  // The 16 six-bit scales, unpacked as ggml does (kmask1 0x03030303, kmask2 0x0f0f0f0f).
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
  aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
  aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
  aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK; n += 128, q += 32) {
    for (int j = 0, shift = 0; j < 4; ++j, shift += 2, m = static_cast<uint8_t>(m << 1)) {
      float dl = dAll * static_cast<float>(scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      dl = dAll * static_cast<float>(scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
    }
  }
}

void q4_k(const uint8_t* b, float* y) {
  const float d = halfToFloat(b), min = halfToFloat(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = scales + kScaleBytes;
  uint8_t sc, m;
  for (int j = 0, is = 0; j < kQK; j += 64, is += 2, q += 32) {
    scaleMin(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    scaleMin(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void q5_k(const uint8_t* b, float* y) {
  const float d = halfToFloat(b), min = halfToFloat(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = scales + kScaleBytes;
  const uint8_t* ql = qh + kQK / 8;
  uint8_t sc, m, u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    scaleMin(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    scaleMin(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + kQK / 2;
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQK / 2 + kQK / 4);
  const float d = halfToFloat(b + kQK / 2 + kQK / 4 + kQK / 16);
  for (int n = 0; n < kQK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

const GgmlType* ggmlType(uint32_t id) {
  for (const GgmlType& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlType* ggmlQuantTypeOfBlockBytes(int64_t blockBytes) {
  for (const GgmlType& t : kTypes)
    if (t.blockElements > 1 && t.blockBytes == blockBytes) return &t;
  return nullptr;
}

std::string ggmlTypeName(uint32_t id) {
  if (const GgmlType* t = ggmlType(id)) return t->name;
  return "type " + std::to_string(id) + " (" + otherName(id) + ")";
}

std::string ggmlReadableTypes() {
  std::string s;
  for (const GgmlType& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

void ggmlDequantize(const GgmlType& t, const uint8_t* src, int64_t n, float* out) {
  switch (t.id) {
    case kGgmlF32: std::memcpy(out, src, static_cast<size_t>(n) * 4); return;
    case kGgmlF16:
      for (int64_t i = 0; i < n; ++i) out[i] = halfToFloat(src + 2 * i);
      return;
    case kGgmlBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16ToFloat(src + 2 * i);
      return;
    default: break;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t.id) {
    case kGgmlQ8_0: block = q8_0; break;
    case kGgmlQ4_0: block = q4_0; break;
    case kGgmlQ4_1: block = q4_1; break;
    case kGgmlQ5_0: block = q5_0; break;
    case kGgmlQ5_1: block = q5_1; break;
    case kGgmlQ2_K: block = q2_k; break;
    case kGgmlQ3_K: block = q3_k; break;
    case kGgmlQ4_K: block = q4_k; break;
    case kGgmlQ5_K: block = q5_k; break;
    case kGgmlQ6_K: block = q6_k; break;
    default: return;
  }
  for (int64_t b = 0; b < n / t.blockElements; ++b) block(src + b * t.blockBytes, out + b * t.blockElements);
}

#pragma GCC pop_options

}  // namespace kvscope::detail
