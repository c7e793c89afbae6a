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

// c ? a : b with bit masks: GCC if-converts a ternary of integers but not always a chain of
// them beside float arithmetic, and a branch in a row loop stops its vectorization.
SOK_LITE_HOST_DEVICE inline uint32_t SelectBits(bool c, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  return (a & mask) | (b & ~mask);
}

// bfloat16 is the upper half of a float32: widening is exact.
SOK_LITE_HOST_DEVICE inline float Bfloat16ToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

// Adds 16 random bits below the kept ones and truncates: x rounds away from zero with
// probability (dropped bits) / 2^16, so the expected result is x. NaN stays a (quiet) NaN.
// Selects instead of branches, so that row loops vectorize.
SOK_LITE_HOST_DEVICE inline uint16_t FloatToBfloat16Stochastic(float x, uint32_t random16) {
  const uint32_t u = FloatBits(x);
  const uint32_t nan = (u >> 16) | 0x0040u;
  const uint32_t rounded = (u + (random16 & 0xffffu)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Round to nearest even (for values written without a step: initial rows, checkpoints).
SOK_LITE_HOST_DEVICE inline uint16_t FloatToBfloat16Nearest(float x) {
  const uint32_t u = FloatBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Branch-free (selects), so that row loops vectorize.
SOK_LITE_HOST_DEVICE inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t special = 0x7f800000u | (mant << 13);  // inf / NaN
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  // Zero or subnormal: mant * 2^-24, exact, and a normal float32 (flush-to-zero cannot touch it).
  const uint32_t subnormal =
      FloatBits(static_cast<float>(static_cast<int32_t>(mant)) * 5.9604644775390625e-8f);
  return BitsFloat(sign |
                   SelectBits(exp == 0x1fu, special, SelectBits(exp != 0, normal, subnormal)));
}

// Round to nearest even; overflow gives infinity, as IEEE conversion does. Branch-free.
SOK_LITE_HOST_DEVICE inline uint16_t FloatToFloat16Nearest(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quiet, payload kept
  // Normal results: exponent bias 127 -> 15, the 13 dropped bits rounded to nearest even (a
  // carry into the exponent is right, up to 0x7c00 = inf).
  const uint32_t rebased = a - (112u << 23);
  const uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  // Below 2^-14 (a subnormal float16, or zero): 0.5 has an ulp of 2^-24, the float16 subnormal
  // step, so the hardware's round-to-nearest-even addition leaves the result in the low bits.
  // The sum is normal, so flush-to-zero modes do not change it.
  const uint32_t subnormal = FloatBits(BitsFloat(a) + 0.5f) - 0x3f000000u;
  const uint32_t finite = SelectBits(a >= 0x477ff000u, 0x7c00u,  // >= 65520: inf
                                     SelectBits(a < 0x38800000u, subnormal, normal));
  const uint32_t magnitude = SelectBits(a > 0x7f800000u, nan, finite);
  return static_cast<uint16_t>(sign | magnitude);
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

// The row loops below are branch-free so that GCC -O3 vectorizes them (the format test is
// outside the loops).

// dst[0, dim) = src[0, dim) widened to float32.
inline void WidenRow(HalfFormat format, const uint16_t* src, int64_t dim, float* dst) {
  if (format == HalfFormat::kBfloat16) {
    for (int64_t d = 0; d < dim; ++d) dst[d] = Bfloat16ToFloat(src[d]);
  } else {
    for (int64_t d = 0; d < dim; ++d) dst[d] = Float16ToFloat(src[d]);
  }
}

// dst[0, dim) = src[0, dim) rounded to bfloat16 stochastically, with the draws of columns
// col0 + d of row key `row_key` (a row's own values use col0 = 0, its slots further columns).
inline void NarrowBfloat16Row(uint64_t row_key, int64_t col0, const float* src, int64_t dim,
                              uint16_t* dst) {
  const uint32_t key32 = RoundingKey32(row_key);
  const uint32_t c0 = static_cast<uint32_t>(col0);
  for (int64_t d = 0; d < dim; ++d) {
    dst[d] =
        FloatToBfloat16Stochastic(src[d], RoundingBits32(key32, c0 + static_cast<uint32_t>(d)));
  }
}

// dst[0, dim) = src[0, dim) rounded to float16, nearest even.
inline void NarrowFloat16Row(const float* src, int64_t dim, uint16_t* dst) {
  for (int64_t d = 0; d < dim; ++d) dst[d] = FloatToFloat16Nearest(src[d]);
}

// dst[0, dim) = src[0, dim) narrowed as `rounding` says, for local row `local_row`.
inline void NarrowRow(const HalfRounding& rounding, int64_t local_row, const float* src,
                      int64_t dim, uint16_t* dst) {
  if (rounding.format == HalfFormat::kFloat16) {
    NarrowFloat16Row(src, dim, dst);
    return;
  }
  const uint64_t key = RoundingRowKey(rounding.seed, rounding.step,
                                      local_row * rounding.row_stride + rounding.row_offset);
  NarrowBfloat16Row(key, 0, src, dim, dst);
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HALF_ROWS_H_
