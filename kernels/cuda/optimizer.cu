// Row-wise optimizer updates (kernels/core/optimizer.cc on the GPU). Each thread owns W
// consecutive columns of one updated row: it loads the row's variable and slots, applies the
// same float formulas in the same order as the CPU code, and stores them back. Per-call
// constants (Adam's alpha, FTRL's l2, Adamax's bias) are computed on the host exactly as the CPU
// code does.
// Build with -fmad=false to keep nvcc from fusing a * b + c, which the CPU build does not do.
#include <cmath>
#include <type_traits>

#include "kernels/core/half_rows.h"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/vec.cuh"

namespace sok_lite {
namespace cuda {
namespace {

struct Hyper {
  float lr, wd;
  float p[5];
  float alpha, one_minus_b1, one_minus_b2;  // adam / amsgrad (one_minus_b1: adamax too)
  float ftrl_l2;                            // l2 + beta / (2 lr)
  float adamax_bias;                        // 1 - beta_1^step
  bool eps_outside;                         // adagrad / rmsprop: g / (sqrt(acc) + eps)
};

// Fixed slot positions per kind; rmsprop's optional slots go to 1 (momentum), 2 (average_grad)
// and stay null when off.
struct Slots {
  float* s[3];
};

// bfloat16 slots (bit patterns) at the same positions; order[j] is the caller's index of the
// slot at position j, which picks its rounding draws (columns (order[j] + 1) * dim + c).
struct HalfSlots {
  uint16_t* s[3];
  int order[3];
};

// Reading and writing a slot value: float32 as is, bfloat16 widened and rounded
// stochastically with the row's key, as core ApplyHalfRows does.
__device__ __forceinline__ float LoadSlot(const Slots& s, int j, int64_t off) {
  return s.s[j][off];
}
__device__ __forceinline__ float LoadSlot(const HalfSlots& s, int j, int64_t off) {
  return Bfloat16ToFloat(s.s[j][off]);
}
__device__ __forceinline__ void StoreSlot(const Slots& s, int j, int64_t off, float v, uint32_t,
                                          int64_t, int64_t) {
  s.s[j][off] = v;
}
__device__ __forceinline__ void StoreSlot(const HalfSlots& s, int j, int64_t off, float v,
                                          uint32_t key32, int64_t dim, int64_t col) {
  const uint32_t c = static_cast<uint32_t>((s.order[j] + 1) * dim + col);
  s.s[j][off] = FloatToBfloat16Stochastic(v, RoundingBits32(key32, c));
}

template <int K>
__device__ __forceinline__ void Update(const Hyper& h, float g, float& w, float& s0, float& s1,
                                       float& s2, bool has_s1, bool has_s2) {
  const float lr = h.lr;
  if constexpr (K == SOK_LITE_CUDA_SGD) {
    w -= g * lr;
  } else if constexpr (K == SOK_LITE_CUDA_MOMENTUM || K == SOK_LITE_CUDA_NESTEROV) {
    const float mu = h.p[0];
    s0 = s0 * mu - g * lr;
    w += K == SOK_LITE_CUDA_NESTEROV ? s0 * mu - g * lr : s0;
  } else if constexpr (K == SOK_LITE_CUDA_ADAM || K == SOK_LITE_CUDA_AMSGRAD) {
    s0 += (g - s0) * h.one_minus_b1;
    s1 += (g * g - s1) * h.one_minus_b2;
    float denom_v = s1;
    if constexpr (K == SOK_LITE_CUDA_AMSGRAD) denom_v = s2 = s2 < s1 ? s1 : s2;  // std::max
    w -= (s0 * h.alpha) / (sqrtf(denom_v) + h.p[2]);
  } else if constexpr (K == SOK_LITE_CUDA_ADAGRAD) {
    s0 += g * g;
    w -= h.eps_outside ? (lr * g) / (sqrtf(s0) + h.p[0]) : (lr * g) / sqrtf(s0 + h.p[0]);
  } else if constexpr (K == SOK_LITE_CUDA_RMSPROP) {
    const float rho = h.p[0], mu = h.p[1], eps = h.p[2];
    s0 = rho * s0 + (1.0f - rho) * (g * g);
    float denom = s0;
    if (has_s2) {
      s2 = rho * s2 + (1.0f - rho) * g;
      denom = s0 - s2 * s2;
    }
    const float inc =
        h.eps_outside ? (lr * g) / (sqrtf(denom) + eps) : (lr * g) / sqrtf(denom + eps);
    if (has_s1) {
      s1 = mu * s1 + inc;
      w -= s1;
    } else {
      w -= inc;
    }
  } else if constexpr (K == SOK_LITE_CUDA_FTRL) {
    const float lr_power = h.p[0], l1 = h.p[1], shrink = h.p[4];
    const float grad_to_use = g + 2.0f * shrink * w;
    const float new_accum = s0 + g * g;
    const float new_pow = powf(new_accum, -lr_power);
    s1 += grad_to_use - (new_pow - powf(s0, -lr_power)) / lr * w;
    const float quadratic = new_pow / lr + 2.0f * h.ftrl_l2;
    const float lo = s1 < -l1 ? -l1 : s1;     // std::max(linear, -l1)
    const float clipped = l1 < lo ? l1 : lo;  // std::min(..., l1)
    w = (clipped - s1) / quadratic;
    s0 = new_accum;
  } else if constexpr (K == SOK_LITE_CUDA_ADAMAX) {
    s0 += (g - s0) * h.one_minus_b1;
    const float decayed = h.p[1] * s1, abs_g = fabsf(g);
    s1 = decayed < abs_g ? abs_g : decayed;  // std::max
    w -= (lr * s0) / (h.adamax_bias * (s1 + h.p[2]));
  } else if constexpr (K == SOK_LITE_CUDA_ADADELTA) {
    const float rho = h.p[0], eps = h.p[1];
    s0 = rho * s0 + (1.0f - rho) * (g * g);
    const float delta = -((sqrtf(s1 + eps) * g) / sqrtf(s0 + eps));
    s1 = rho * s1 + (1.0f - rho) * (delta * delta);
    w += lr * delta;
  }
}

template <int K, int W>
__global__ void ApplyRowsKernel(Hyper h, int64_t dim, const int64_t* __restrict__ rows,
                                const float* __restrict__ grads, int64_t n, float* var,
                                Slots slots) {
  const int64_t vectors = dim / W;
  const int64_t total = n * vectors;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool has[3] = {slots.s[0] != nullptr, slots.s[1] != nullptr, slots.s[2] != nullptr};
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t i = t / vectors;
    if (rows[i] < 0) continue;  // a hash-table key without a stored row
    const int64_t col = (t % vectors) * W;
    const int64_t off = rows[i] * dim + col;
    const Vec<W> g = Load<W>(grads + i * dim + col);
    Vec<W> w = Load<W>(var + off);
    Vec<W> s[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) s[j] = has[j] ? Load<W>(slots.s[j] + off) : Zeros<W>();
#pragma unroll
    for (int e = 0; e < W; ++e) {
      if (h.wd != 0.0f) w.v[e] = w.v[e] - w.v[e] * h.wd * h.lr;
      Update<K>(h, g.v[e], w.v[e], s[0].v[e], s[1].v[e], s[2].v[e], has[1], has[2]);
    }
    Store<W>(var + off, w);
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      if (has[j]) Store<W>(slots.s[j] + off, s[j]);
    }
  }
}

// How a 16-bit table's updated values are narrowed (core HalfRounding); step_key is
// RoundingStepKey(seed, step), computed once on the host.
struct Narrowing {
  HalfFormat format;
  uint64_t step_key;
  int64_t row_stride, row_offset;
};

// One thread per value of a 16-bit table: widen, the float32 update of ApplyRowsKernel, narrow.
// SlotPtrs: Slots (float32, updated in place) or HalfSlots (bfloat16, rounded back).
template <int K, typename SlotPtrs>
__global__ void ApplyHalfRowsKernel(Hyper h, int64_t dim, const int64_t* __restrict__ rows,
                                    const float* __restrict__ grads, int64_t n, uint16_t* var,
                                    SlotPtrs slots, Narrowing narrowing) {
  const int64_t total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool has[3] = {slots.s[0] != nullptr, slots.s[1] != nullptr, slots.s[2] != nullptr};
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t i = t / dim, col = t % dim;
    if (rows[i] < 0) continue;
    const int64_t off = rows[i] * dim + col;
    const float g = grads[t];
    float w = HalfToFloat(narrowing.format, var[off]);
    float s[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) s[j] = has[j] ? LoadSlot(slots, j, off) : 0.0f;
    if (h.wd != 0.0f) w = w - w * h.wd * h.lr;
    Update<K>(h, g, w, s[0], s[1], s[2], has[1], has[2]);
    const int64_t global_row = rows[i] * narrowing.row_stride + narrowing.row_offset;
    const uint32_t key32 = RoundingKey32(RoundingRowKeyOfStep(narrowing.step_key, global_row));
    if (narrowing.format == HalfFormat::kFloat16) {
      var[off] = FloatToFloat16Nearest(w);
    } else {
      var[off] = FloatToBfloat16Stochastic(w, RoundingBits32(key32, static_cast<uint32_t>(col)));
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      if (has[j]) StoreSlot(slots, j, off, s[j], key32, dim, col);
    }
  }
}

template <int K, typename SlotPtrs>
cudaError_t LaunchHalf(const Hyper& h, int64_t dim, const int64_t* rows, const float* grads,
                       int64_t n, uint16_t* var, const SlotPtrs& slots, const Narrowing& narrowing,
                       cudaStream_t stream) {
  int grid = 0;
  cudaError_t err = GridFor(ApplyHalfRowsKernel<K, SlotPtrs>, n * dim, &grid);
  if (err != cudaSuccess) return err;
  ApplyHalfRowsKernel<K, SlotPtrs>
      <<<grid, kBlockThreads, 0, stream>>>(h, dim, rows, grads, n, var, slots, narrowing);
  return cudaGetLastError();
}

template <int K, int W>
cudaError_t Launch(const Hyper& h, int64_t dim, const int64_t* rows, const float* grads, int64_t n,
                   float* var, const Slots& slots, cudaStream_t stream) {
  int grid = 0;
  cudaError_t err = GridFor(ApplyRowsKernel<K, W>, n * (dim / W), &grid);
  if (err != cudaSuccess) return err;
  ApplyRowsKernel<K, W><<<grid, kBlockThreads, 0, stream>>>(h, dim, rows, grads, n, var, slots);
  return cudaGetLastError();
}

template <int K>
cudaError_t LaunchKind(const Hyper& h, int64_t dim, const int64_t* rows, const float* grads,
                       int64_t n, float* var, const Slots& slots, cudaStream_t stream) {
  if (CanUseFloat4(dim, {grads, var, slots.s[0], slots.s[1], slots.s[2]})) {
    return Launch<K, 4>(h, dim, rows, grads, n, var, slots, stream);
  }
  return Launch<K, 1>(h, dim, rows, grads, n, var, slots, stream);
}

constexpr int kNumKinds = 10;  // SOK_LITE_CUDA_SGD .. SOK_LITE_CUDA_ADADELTA

// As core NumParams / NumSlots; -1 for an unknown kind.
int NumParams(int kind) {
  static const int kParams[kNumKinds] = {0, 1, 1, 4, 4, 2, 5, 5, 4, 2};
  return kind >= 0 && kind < kNumKinds ? kParams[kind] : -1;
}

int NumSlots(int kind, const double* p) {
  static const int kSlots[kNumKinds] = {0, 1, 1, 2, 3, 1, -1, 2, 2, 2};
  if (kind == SOK_LITE_CUDA_RMSPROP) return 1 + (p[1] > 0) + (p[3] != 0);
  return kind >= 0 && kind < kNumKinds ? kSlots[kind] : -1;
}

Hyper MakeHyper(int kind, double learning_rate, double weight_decay, const double* params,
                int num_params) {
  Hyper h = {};
  h.lr = static_cast<float>(learning_rate);
  h.wd = static_cast<float>(weight_decay);
  for (int i = 0; i < num_params && i < 5; ++i) h.p[i] = static_cast<float>(params[i]);
  if (kind == SOK_LITE_CUDA_ADAM || kind == SOK_LITE_CUDA_AMSGRAD) {
    // Same float expression as core ApplyRows, so alpha is bit-identical.
    const float step = h.p[3];
    h.alpha = h.lr * std::sqrt(1.0f - std::pow(h.p[1], step)) / (1.0f - std::pow(h.p[0], step));
    h.one_minus_b1 = 1.0f - h.p[0];
    h.one_minus_b2 = 1.0f - h.p[1];
  }
  if (kind == SOK_LITE_CUDA_FTRL) h.ftrl_l2 = h.p[2] + h.p[3] / (2.0f * h.lr);
  if (kind == SOK_LITE_CUDA_ADAMAX) {
    // As core ApplyRows: 1 - beta_1 and 1 - beta_1^step in float.
    h.one_minus_b1 = 1.0f - h.p[0];
    h.adamax_bias = 1.0f - std::pow(h.p[0], h.p[3]);
  }
  if (kind == SOK_LITE_CUDA_ADAGRAD) h.eps_outside = params[1] != 0;
  if (kind == SOK_LITE_CUDA_RMSPROP) h.eps_outside = params[4] != 0;
  return h;
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

namespace sok_lite {
namespace cuda {
namespace {

// The checks and slot positions shared by the launchers; false for bad arguments. order[j]:
// the caller's index of the slot at kernel position j.
template <typename Slot>
bool PrepareApply(int kind, const double* params, int num_params, int64_t dim, int64_t n,
                  Slot* const* slots, int num_slots, Slot* (&s)[3], int (&order)[3]) {
  const int needed = NumParams(kind);
  if (needed < 0 || num_params < needed || (needed > 0 && !params)) return false;
  if (num_slots != NumSlots(kind, params) || (num_slots > 0 && !slots)) return false;
  if (dim <= 0 || n < 0) return false;
  for (int j = 0; j < 3; ++j) {
    s[j] = nullptr;
    order[j] = j;
  }
  for (int j = 0; j < num_slots; ++j) {
    if (!slots[j]) return false;
    s[j] = slots[j];
  }
  if (kind == SOK_LITE_CUDA_RMSPROP) {
    // Caller order: velocity [, momentum][, average_grad]; kernel positions are fixed.
    const bool momentum = params[1] > 0, centered = params[3] != 0;
    const int avg = momentum ? 2 : 1;
    s[1] = momentum ? slots[1] : nullptr;
    s[2] = centered ? slots[avg] : nullptr;
    order[2] = avg;
  }
  return true;
}

bool PrepareApply(int kind, const double* params, int num_params, int64_t dim, int64_t n,
                  float* const* slots, int num_slots, Slots* s) {
  int order[3];
  return PrepareApply(kind, params, num_params, dim, n, slots, num_slots, s->s, order);
}

// Calls launch(std::integral_constant<int, K>{}) for the optimizer code `kind`.
template <typename Fn>
cudaError_t ForKind(int kind, Fn&& launch) {
  switch (kind) {
    case SOK_LITE_CUDA_SGD:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_SGD>{});
    case SOK_LITE_CUDA_MOMENTUM:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_MOMENTUM>{});
    case SOK_LITE_CUDA_NESTEROV:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_NESTEROV>{});
    case SOK_LITE_CUDA_ADAM:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_ADAM>{});
    case SOK_LITE_CUDA_AMSGRAD:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_AMSGRAD>{});
    case SOK_LITE_CUDA_ADAGRAD:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_ADAGRAD>{});
    case SOK_LITE_CUDA_RMSPROP:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_RMSPROP>{});
    case SOK_LITE_CUDA_FTRL:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_FTRL>{});
    case SOK_LITE_CUDA_ADAMAX:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_ADAMAX>{});
    case SOK_LITE_CUDA_ADADELTA:
      return launch(std::integral_constant<int, SOK_LITE_CUDA_ADADELTA>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_apply_rows(int kind, double learning_rate, double weight_decay,
                                                const double* params, int num_params, int64_t dim,
                                                const int64_t* rows, const float* grads, int64_t n,
                                                float* var, float* const* slots, int num_slots,
                                                cudaStream_t stream) {
  using namespace sok_lite::cuda;
  Slots s;
  if (!PrepareApply(kind, params, num_params, dim, n, slots, num_slots, &s)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (!rows || !grads || !var) return cudaErrorInvalidValue;
  const Hyper h = MakeHyper(kind, learning_rate, weight_decay, params, num_params);
  return ForKind(kind, [&](auto k) {
    return LaunchKind<decltype(k)::value>(h, dim, rows, grads, n, var, s, stream);
  });
}

namespace sok_lite {
namespace cuda {
namespace {

template <typename SlotPtrs>
cudaError_t ApplyHalf(int kind, double learning_rate, double weight_decay, const double* params,
                      int num_params, int64_t dim, const int64_t* rows, const float* grads,
                      int64_t n, uint16_t* var, const SlotPtrs& s, int format, uint64_t seed,
                      int64_t step, int64_t row_stride, int64_t row_offset, cudaStream_t stream) {
  if (format < 0 || format > 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!rows || !grads || !var) return cudaErrorInvalidValue;
  const Hyper h = MakeHyper(kind, learning_rate, weight_decay, params, num_params);
  const Narrowing narrowing = {static_cast<HalfFormat>(format), RoundingStepKey(seed, step),
                               row_stride, row_offset};
  return ForKind(kind, [&](auto k) {
    return LaunchHalf<decltype(k)::value>(h, dim, rows, grads, n, var, s, narrowing, stream);
  });
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_apply_half_rows(
    int kind, double learning_rate, double weight_decay, const double* params, int num_params,
    int64_t dim, const int64_t* rows, const float* grads, int64_t n, uint16_t* var,
    float* const* slots, int num_slots, int format, uint64_t seed, int64_t step, int64_t row_stride,
    int64_t row_offset, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  Slots s;
  if (!PrepareApply(kind, params, num_params, dim, n, slots, num_slots, &s)) {
    return cudaErrorInvalidValue;
  }
  return ApplyHalf(kind, learning_rate, weight_decay, params, num_params, dim, rows, grads, n, var,
                   s, format, seed, step, row_stride, row_offset, stream);
}

extern "C" cudaError_t sok_lite_cuda_apply_half_rows_bf16_slots(
    int kind, double learning_rate, double weight_decay, const double* params, int num_params,
    int64_t dim, const int64_t* rows, const float* grads, int64_t n, uint16_t* var,
    uint16_t* const* bf16_slots, int num_slots, int format, uint64_t seed, int64_t step,
    int64_t row_stride, int64_t row_offset, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  HalfSlots s;
  if (!PrepareApply(kind, params, num_params, dim, n, bf16_slots, num_slots, s.s, s.order)) {
    return cudaErrorInvalidValue;
  }
  return ApplyHalf(kind, learning_rate, weight_decay, params, num_params, dim, rows, grads, n, var,
                   s, format, seed, step, row_stride, row_offset, stream);
}

namespace sok_lite {
namespace cuda {
namespace {

__global__ void MarkRowsKernel(const int64_t* __restrict__ rows, int64_t n, int64_t value,
                               int64_t* tracker) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    if (rows[i] >= 0) tracker[rows[i]] = value;
  }
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_mark_rows(const int64_t* rows, int64_t n, int64_t value,
                                               int64_t* tracker, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (n == 0) return cudaSuccess;
  if (!rows || !tracker || n < 0) return cudaErrorInvalidValue;
  int grid = 0;
  cudaError_t err = GridFor(MarkRowsKernel, n, &grid);
  if (err != cudaSuccess) return err;
  MarkRowsKernel<<<grid, kBlockThreads, 0, stream>>>(rows, n, value, tracker);
  return cudaGetLastError();
}
