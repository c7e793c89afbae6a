// 16-bit storage of table rows (bfloat16, float16) as uint16_t bit patterns: widening to float32
// for the lookup and the optimizer math, and narrowing the updated rows back. bfloat16 rounds
// stochastically (unbiased: each neighbour with probability proportional to its closeness, from
// RoundingBits of cpu_gpu_rules.h), float16 to nearest even. Usable from .cc and .cu files.
#ifndef SOK_LITE_KERNELS_CORE_HALF_ROWS_H_
#define SOK_LITE_KERNELS_CORE_HALF_ROWS_H_

#include <stdint.h>
#include <string.h>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

// The 16-bit formats a table may be stored in.
enum class HalfFormat { kBfloat16, kFloat16 };

SOK_LITE_HOST_DEVICE inline uint32_t FloatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

SOK_LITE_HOST_DEVICE inline float BitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

// bfloat16 is the upper half of a float32: widening is exact.
SOK_LITE_HOST_DEVICE inline float Bfloat16ToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

// Adds 16 random bits below the kept ones and truncates: x rounds away from zero with
// probability (dropped bits) / 2^16, so the expected result is x. NaN stays a (quiet) NaN.
SOK_LITE_HOST_DEVICE inline uint16_t FloatToBfloat16Stochastic(float x, uint32_t random16) {
  const uint32_t u = FloatBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + (random16 & 0xffffu)) >> 16);
}

// Round to nearest even (for values written without a step: initial rows, checkpoints).
SOK_LITE_HOST_DEVICE inline uint16_t FloatToBfloat16Nearest(float x) {
  const uint32_t u = FloatBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

SOK_LITE_HOST_DEVICE inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return BitsFloat(sign | FloatBits(magnitude));
}

// Round to nearest even; overflow gives infinity, as IEEE conversion does.
SOK_LITE_HOST_DEVICE inline uint16_t FloatToFloat16Nearest(float x) {
  const uint32_t u = FloatBits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {                // below 2^-14: a subnormal float16, or zero
    if (a <= 0x33000000u) return sign;  // at most 2^-25: rounds to zero (2^-25 is a tie)
    // The value in units of 2^-24 is the 24-bit significand shifted right by 126 - exponent
    // (14 to 24 places); round the dropped bits to nearest even.
    const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (a >> 23);
    const uint32_t kept = significand >> shift;
    const uint32_t dropped = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t up = dropped > half || (dropped == half && (kept & 1u));
    return static_cast<uint16_t>(sign | (kept + up));
  }
  const uint32_t rebased = a - (112u << 23);  // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

SOK_LITE_HOST_DEVICE inline float HalfToFloat(HalfFormat format, uint16_t h) {
  return format == HalfFormat::kBfloat16 ? Bfloat16ToFloat(h) : Float16ToFloat(h);
}

// How an optimizer step narrows the rows it updated: the format, and what the stochastic
// rounding of bfloat16 draws from. Global row = local row * row_stride + row_offset, so the draw
// of a row is the same whichever rank holds it.
struct HalfRounding {
  HalfFormat format = HalfFormat::kBfloat16;
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t row_stride = 1;
  int64_t row_offset = 0;
};

// dst[0, dim) = src[0, dim) widened to float32.
inline void WidenRow(HalfFormat format, const uint16_t* src, int64_t dim, float* dst) {
  if (format == HalfFormat::kBfloat16) {
    for (int64_t d = 0; d < dim; ++d) dst[d] = Bfloat16ToFloat(src[d]);
  } else {
    for (int64_t d = 0; d < dim; ++d) dst[d] = Float16ToFloat(src[d]);
  }
}

// dst[0, dim) = src[0, dim) narrowed as `rounding` says, for local row `local_row`.
inline void NarrowRow(const HalfRounding& rounding, int64_t local_row, const float* src,
                      int64_t dim, uint16_t* dst) {
  if (rounding.format == HalfFormat::kFloat16) {
    for (int64_t d = 0; d < dim; ++d) dst[d] = FloatToFloat16Nearest(src[d]);
    return;
  }
  const uint64_t key = RoundingRowKey(rounding.seed, rounding.step,
                                      local_row * rounding.row_stride + rounding.row_offset);
  for (int64_t d = 0; d < dim; ++d) {
    dst[d] = FloatToBfloat16Stochastic(src[d], RoundingBits(key, d));
  }
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HALF_ROWS_H_
