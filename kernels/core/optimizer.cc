#include "kernels/core/optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/core/half_rows.h"
#include "kernels/core/isa_clones.h"
#include "kernels/core/prefetch.h"

namespace sok_lite {

bool ParseOptimizerKind(const std::string& name, OptimizerKind* kind) {
  static const std::pair<const char*, OptimizerKind> kNames[] = {
      {"sgd", OptimizerKind::kSgd},           {"momentum", OptimizerKind::kMomentum},
      {"nesterov", OptimizerKind::kNesterov}, {"adam", OptimizerKind::kAdam},
      {"amsgrad", OptimizerKind::kAmsgrad},   {"adagrad", OptimizerKind::kAdagrad},
      {"rmsprop", OptimizerKind::kRmsprop},   {"ftrl", OptimizerKind::kFtrl},
      {"adamax", OptimizerKind::kAdamax},     {"adadelta", OptimizerKind::kAdadelta},
  };
  for (const auto& [n, k] : kNames) {
    if (name == n) {
      *kind = k;
      return true;
    }
  }
  return false;
}

int NumParams(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      return 1;
    case OptimizerKind::kAdagrad:
    case OptimizerKind::kAdadelta:
      return 2;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAmsgrad:
    case OptimizerKind::kAdamax:
      return 4;
    case OptimizerKind::kRmsprop:
    case OptimizerKind::kFtrl:
      return 5;
  }
  return 0;
}

int NumSlots(OptimizerKind kind, const std::vector<double>& p) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
    case OptimizerKind::kAdagrad:
      return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kFtrl:
    case OptimizerKind::kAdamax:
    case OptimizerKind::kAdadelta:
      return 2;
    case OptimizerKind::kAmsgrad:
      return 3;
    case OptimizerKind::kRmsprop:
      return 1 + (p.size() > 1 && p[1] > 0) + (p.size() > 3 && p[3] != 0);
  }
  return 0;
}

namespace {

constexpr int kMaxSlots = 4;

// The update of rows [i0, i1): locate(i, &w, slot_rows) points w at row i's values and
// slot_rows[s] at its slot s (false: no row, skipped); prefetch(i) fetches them ahead; finish(i)
// runs after row i's update (a 16-bit table stores its widened row back there).
template <typename T, typename Locate, typename Prefetch, typename Finish>
void UpdateRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const T* grads,
                int64_t i0, int64_t i1, const Locate& locate, const Prefetch& prefetch,
                const Finish& finish) {
  const T lr = static_cast<T>(h.lr);
  const T wd = static_cast<T>(h.weight_decay);
  auto p = [&](size_t i) { return static_cast<T>(h.p[i]); };
  // Per-call constants, computed once and in T as Keras does.
  T alpha = 0, one_minus_b1 = 0, one_minus_b2 = 0, adamax_bias = 0;
  if (kind == OptimizerKind::kAdam || kind == OptimizerKind::kAmsgrad) {
    const T step = p(3);
    alpha = lr * std::sqrt(T(1) - std::pow(p(1), step)) / (T(1) - std::pow(p(0), step));
    one_minus_b1 = T(1) - p(0);
    one_minus_b2 = T(1) - p(1);
  }
  if (kind == OptimizerKind::kAdamax) {
    one_minus_b1 = T(1) - p(0);
    adamax_bias = T(1) - std::pow(p(0), p(3));
  }
  const bool rms_momentum = kind == OptimizerKind::kRmsprop && h.p[1] > 0;
  const bool rms_centered = kind == OptimizerKind::kRmsprop && h.p[3] != 0;
  const bool eps_outside = (kind == OptimizerKind::kAdagrad && h.p[1] != 0) ||
                           (kind == OptimizerKind::kRmsprop && h.p[4] != 0);
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetchDistance < i1) prefetch(i + kPrefetchDistance);
    T* w = nullptr;
    T* slots[kMaxSlots] = {};
    if (!locate(i, &w, slots)) continue;
    const T* g = grads + i * dim;
    if (wd != T(0)) {
      for (int64_t d = 0; d < dim; ++d) w[d] = w[d] - w[d] * wd * lr;
    }
    switch (kind) {
      case OptimizerKind::kSgd:
        for (int64_t d = 0; d < dim; ++d) w[d] -= g[d] * lr;
        break;
      case OptimizerKind::kMomentum:
      case OptimizerKind::kNesterov: {
        T* m = slots[0];
        const T mu = p(0);
        for (int64_t d = 0; d < dim; ++d) {
          m[d] = m[d] * mu - g[d] * lr;
          w[d] += kind == OptimizerKind::kNesterov ? m[d] * mu - g[d] * lr : m[d];
        }
        break;
      }
      case OptimizerKind::kAdam:
      case OptimizerKind::kAmsgrad: {
        T* m = slots[0];
        T* v = slots[1];
        T* v_hat = kind == OptimizerKind::kAmsgrad ? slots[2] : nullptr;
        const T eps = p(2);
        for (int64_t d = 0; d < dim; ++d) {
          m[d] += (g[d] - m[d]) * one_minus_b1;
          v[d] += (g[d] * g[d] - v[d]) * one_minus_b2;
          T denom_v = v[d];
          if (v_hat) denom_v = v_hat[d] = std::max(v_hat[d], v[d]);
          w[d] -= (m[d] * alpha) / (std::sqrt(denom_v) + eps);
        }
        break;
      }
      case OptimizerKind::kAdagrad: {
        T* acc = slots[0];
        const T eps = p(0);
        for (int64_t d = 0; d < dim; ++d) {
          acc[d] += g[d] * g[d];
          w[d] -= eps_outside ? (lr * g[d]) / (std::sqrt(acc[d]) + eps)
                              : (lr * g[d]) / std::sqrt(acc[d] + eps);
        }
        break;
      }
      case OptimizerKind::kRmsprop: {
        T* vel = slots[0];
        T* mom = rms_momentum ? slots[1] : nullptr;
        T* avg = rms_centered ? slots[rms_momentum ? 2 : 1] : nullptr;
        const T rho = p(0), mu = p(1), eps = p(2);
        for (int64_t d = 0; d < dim; ++d) {
          vel[d] = rho * vel[d] + (T(1) - rho) * (g[d] * g[d]);
          T denom = vel[d];
          if (avg) {
            avg[d] = rho * avg[d] + (T(1) - rho) * g[d];
            denom = vel[d] - avg[d] * avg[d];
          }
          const T inc = eps_outside ? (lr * g[d]) / (std::sqrt(denom) + eps)
                                    : (lr * g[d]) / std::sqrt(denom + eps);
          if (mom) {
            mom[d] = mu * mom[d] + inc;
            w[d] -= mom[d];
          } else {
            w[d] -= inc;
          }
        }
        break;
      }
      case OptimizerKind::kFtrl: {
        T* accum = slots[0];
        T* linear = slots[1];
        const T lr_power = p(0), l1 = p(1), l2 = p(2) + p(3) / (T(2) * lr), shrink = p(4);
        for (int64_t d = 0; d < dim; ++d) {
          const T grad_to_use = g[d] + T(2) * shrink * w[d];
          const T new_accum = accum[d] + g[d] * g[d];
          const T new_pow = std::pow(new_accum, -lr_power);
          linear[d] += grad_to_use - (new_pow - std::pow(accum[d], -lr_power)) / lr * w[d];
          const T quadratic = new_pow / lr + T(2) * l2;
          const T clipped = std::min(std::max(linear[d], -l1), l1);
          w[d] = (clipped - linear[d]) / quadratic;
          accum[d] = new_accum;
        }
        break;
      }
      case OptimizerKind::kAdamax: {
        T* m = slots[0];
        T* u = slots[1];
        const T b2 = p(1), eps = p(2);
        for (int64_t d = 0; d < dim; ++d) {
          m[d] += (g[d] - m[d]) * one_minus_b1;
          u[d] = std::max(b2 * u[d], std::abs(g[d]));
          w[d] -= (lr * m[d]) / (adamax_bias * (u[d] + eps));
        }
        break;
      }
      case OptimizerKind::kAdadelta: {
        T* acc_grad = slots[0];
        T* acc_delta = slots[1];
        const T rho = p(0), eps = p(1);
        for (int64_t d = 0; d < dim; ++d) {
          acc_grad[d] = rho * acc_grad[d] + (T(1) - rho) * (g[d] * g[d]);
          const T delta = -((std::sqrt(acc_delta[d] + eps) * g[d]) / std::sqrt(acc_grad[d] + eps));
          acc_delta[d] = rho * acc_delta[d] + (T(1) - rho) * (delta * delta);
          w[d] += lr * delta;
        }
        break;
      }
    }
    finish(i);
  }
}

// No work after a row's update: rows stored in T are updated in place.
constexpr auto kInPlace = [](int64_t) {};

}  // namespace

template <typename T>
void ApplyRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
               const T* grads, int64_t i0, int64_t i1, T* var, const std::vector<T*>& slots) {
  const int num_slots = static_cast<int>(slots.size());
  const auto locate = [&](int64_t i, T** w, T** slot_rows) {
    const int64_t off = rows[i] * dim;
    *w = var + off;
    for (int s = 0; s < std::min(num_slots, kMaxSlots); ++s) slot_rows[s] = slots[s] + off;
    return true;
  };
  const auto prefetch = [&](int64_t i) {
    const int64_t off = rows[i] * dim;
    PrefetchBytes<1>(var + off, dim * sizeof(T));
    for (T* slot : slots) PrefetchBytes<1>(slot + off, dim * sizeof(T));
  };
  UpdateRows(kind, h, dim, grads, i0, i1, locate, prefetch, kInPlace);
}

namespace {

// The 16-bit conversions of the optimizer rows, compiled as ISA clones (isa_clones.h): the AVX2
// clone also has a native 32-bit multiply for the rounding draws, which baseline SSE2 emulates.
SOK_LITE_ISA_CLONES void WidenHalfRow(HalfFormat format, const uint16_t* src, int64_t dim,
                                      float* dst) {
  WidenRow(format, src, dim, dst);
}

SOK_LITE_ISA_CLONES void NarrowBfloat16RowFast(uint64_t row_key, int64_t col0, const float* src,
                                               int64_t dim, uint16_t* dst) {
  NarrowBfloat16Row(row_key, col0, src, dim, dst);
}

SOK_LITE_ISA_CLONES void NarrowFloat16RowFast(const float* src, int64_t dim, uint16_t* dst) {
  NarrowFloat16Row(src, dim, dst);
}

// ApplyHalfRows for float32 slots (Slot = float, updated in place) or bfloat16 slots (Slot =
// uint16_t, widened beside the row and narrowed back with it).
template <typename Slot>
void ApplyHalfRowsOf(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
                     const float* grads, int64_t i0, int64_t i1, uint16_t* var,
                     const std::vector<Slot*>& slots, const HalfRounding& rounding) {
  constexpr bool kHalfSlots = std::is_same_v<Slot, uint16_t>;
  const int num_slots = std::min(static_cast<int>(slots.size()), kMaxSlots);
  // One scratch per call: the row being updated, then (16-bit slots) its slots, widened.
  std::vector<float> wide((kHalfSlots ? 1 + num_slots : 1) * dim);
  // The per-step half of the row keys once; a row then costs one mix (RoundingRowKeyOfStep).
  const uint64_t step_key = RoundingStepKey(rounding.seed, rounding.step);
  const auto locate = [&](int64_t i, float** w, float** slot_rows) {
    const int64_t off = rows[i] * dim;
    WidenHalfRow(rounding.format, var + off, dim, wide.data());
    *w = wide.data();
    for (int s = 0; s < num_slots; ++s) {
      if constexpr (kHalfSlots) {
        float* slot = wide.data() + (s + 1) * dim;
        WidenHalfRow(HalfFormat::kBfloat16, slots[s] + off, dim, slot);
        slot_rows[s] = slot;
      } else {
        slot_rows[s] = slots[s] + off;
      }
    }
    return true;
  };
  const auto prefetch = [&](int64_t i) {
    const int64_t off = rows[i] * dim;
    PrefetchBytes<1>(var + off, dim * sizeof(uint16_t));
    for (Slot* slot : slots) PrefetchBytes<1>(slot + off, dim * sizeof(Slot));
  };
  const bool bf16_row = rounding.format == HalfFormat::kBfloat16;
  const auto narrow = [&](int64_t i) {
    const int64_t off = rows[i] * dim;
    uint64_t key = 0;
    if (bf16_row || kHalfSlots) {
      key = RoundingRowKeyOfStep(step_key, rows[i] * rounding.row_stride + rounding.row_offset);
    }
    if (bf16_row) {
      NarrowBfloat16RowFast(key, 0, wide.data(), dim, var + off);
    } else {
      NarrowFloat16RowFast(wide.data(), dim, var + off);
    }
    if constexpr (kHalfSlots) {
      for (int s = 0; s < num_slots; ++s) {
        NarrowBfloat16RowFast(key, (s + 1) * dim, wide.data() + (s + 1) * dim, dim, slots[s] + off);
      }
    }
  };
  UpdateRows(kind, h, dim, grads, i0, i1, locate, prefetch, narrow);
}

}  // namespace

void ApplyHalfRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
                   const float* grads, int64_t i0, int64_t i1, uint16_t* var,
                   const std::vector<float*>& slots, const HalfRounding& rounding) {
  ApplyHalfRowsOf(kind, h, dim, rows, grads, i0, i1, var, slots, rounding);
}

void ApplyHalfRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
                   const float* grads, int64_t i0, int64_t i1, uint16_t* var,
                   const std::vector<uint16_t*>& bf16_slots, const HalfRounding& rounding) {
  ApplyHalfRowsOf(kind, h, dim, rows, grads, i0, i1, var, bf16_slots, rounding);
}

template <typename T>
void ApplyRowRecords(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, int num_slots,
                     T* const* records, const T* grads, int64_t i0, int64_t i1) {
  const auto locate = [&](int64_t i, T** w, T** slot_rows) {
    if (records[i] == nullptr) return false;
    *w = records[i];
    for (int s = 0; s < std::min(num_slots, kMaxSlots); ++s) {
      slot_rows[s] = records[i] + (s + 1) * dim;
    }
    return true;
  };
  const auto prefetch = [&](int64_t i) {
    if (records[i] != nullptr) PrefetchBytes<1>(records[i], (1 + num_slots) * dim * sizeof(T));
  };
  UpdateRows(kind, h, dim, grads, i0, i1, locate, prefetch, kInPlace);
}

void TrackRows(const int64_t* rows, int64_t i0, int64_t i1, int64_t step, int64_t* tracker) {
  // One random entry a row of a tracker as long as the table, a cache miss each: prefetched
  // ahead as the rows are, so that the misses overlap.
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetchDistance < i1) {
      PrefetchBytes<1>(tracker + rows[i + kPrefetchDistance], sizeof(int64_t));
    }
    tracker[rows[i]] = step;
  }
}

template void ApplyRows<float>(OptimizerKind, const OptimizerHyper&, int64_t, const int64_t*,
                               const float*, int64_t, int64_t, float*, const std::vector<float*>&);
template void ApplyRows<double>(OptimizerKind, const OptimizerHyper&, int64_t, const int64_t*,
                                const double*, int64_t, int64_t, double*,
                                const std::vector<double*>&);
template void ApplyRowRecords<float>(OptimizerKind, const OptimizerHyper&, int64_t, int,
                                     float* const*, const float*, int64_t, int64_t);

}  // namespace sok_lite
