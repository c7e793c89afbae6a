// Row-wise ("lazy") optimizer updates: only the rows that received a gradient change, their slots
// too. The formulas follow Keras 3's update_step of each optimizer, restricted to those rows
// (with the epsilon placement of tf_keras' legacy optimizers on request, see eps_outside).
#ifndef SOK_LITE_KERNELS_CORE_OPTIMIZER_H_
#define SOK_LITE_KERNELS_CORE_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/half_rows.h"

namespace sok_lite {

// Each kind's hyper-parameters p and slots.
enum class OptimizerKind {
  // hyper: -
  kSgd = SOK_LITE_OPTIMIZER_SGD,
  // hyper p: momentum; slots: m
  kMomentum = SOK_LITE_OPTIMIZER_MOMENTUM,
  // hyper p: momentum; slots: m
  kNesterov = SOK_LITE_OPTIMIZER_NESTEROV,
  // hyper p: beta_1, beta_2, epsilon, step (iterations + 1); slots: m, v
  kAdam = SOK_LITE_OPTIMIZER_ADAM,
  // as kAdam; slots: m, v, v_hat
  kAmsgrad = SOK_LITE_OPTIMIZER_AMSGRAD,
  // hyper p: epsilon, eps_outside (0/1); slots: accumulator
  kAdagrad = SOK_LITE_OPTIMIZER_ADAGRAD,
  // hyper p: rho, momentum, epsilon, centered (0/1), eps_outside (0/1); slots:
  //   velocity [, momentum if momentum > 0][, average_grad if centered]
  kRmsprop = SOK_LITE_OPTIMIZER_RMSPROP,
  // hyper p: learning_rate_power, l1, l2, beta, l2_shrinkage; slots: accum, linear
  kFtrl = SOK_LITE_OPTIMIZER_FTRL,
  // hyper p: beta_1, beta_2, epsilon, step (iterations + 1); slots: m, u
  kAdamax = SOK_LITE_OPTIMIZER_ADAMAX,
  // hyper p: rho, epsilon; slots: accumulated_grad, accumulated_delta_var
  kAdadelta = SOK_LITE_OPTIMIZER_ADADELTA,
};
// eps_outside selects where epsilon goes: 0 = Keras 3's g / sqrt(acc + eps), 1 = the tf_keras
// legacy optimizers' (TF's ApplyAdagradV2, and legacy RMSprop without momentum)
// g / (sqrt(acc) + eps).

// Parses "sgd", "momentum", "nesterov", "adam", "amsgrad", "adagrad", "rmsprop", "ftrl",
// "adamax", "adadelta".
[[nodiscard]] bool ParseOptimizerKind(const std::string& name, OptimizerKind* kind);

// The number of parameters `kind` reads from OptimizerHyper::p.
int NumParams(OptimizerKind kind);

// The number of slots `kind` needs given its hyper-parameters p (rmsprop depends on them).
int NumSlots(OptimizerKind kind, const std::vector<double>& p);

// Learning rate, decoupled weight decay (applied to the row first, as Keras does, 0 = off) and
// the optimizer-specific parameters documented on OptimizerKind.
struct OptimizerHyper {
  double lr = 0.0;
  double weight_decay = 0.0;
  std::vector<double> p;
};

// Updates rows rows[i] for i in [i0, i1) of `var` ([*, dim]) and of each slot, with gradient
// grads[i, :]. Rows must be distinct within the whole call.
template <typename T>
void ApplyRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
               const T* grads, int64_t i0, int64_t i1, T* var, const std::vector<T*>& slots);

// The same update for a table stored in 16 bits (var: bit patterns of rounding.format) with
// float32 gradients and slots: each row is widened, updated in float32 and narrowed back as
// `rounding` says.
void ApplyHalfRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
                   const float* grads, int64_t i0, int64_t i1, uint16_t* var,
                   const std::vector<float*>& slots, const HalfRounding& rounding);

// The same with bfloat16 slots (bit patterns): they are widened with the row, updated in float32
// and rounded back stochastically, slot s with the draws of columns (s + 1) * dim + c of the
// row's key (RoundingBits), so apart from the row's and from each other's.
void ApplyHalfRows(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, const int64_t* rows,
                   const float* grads, int64_t i0, int64_t i1, uint16_t* var,
                   const std::vector<uint16_t*>& bf16_slots, const HalfRounding& rounding);

// The same update for rows stored as records (a hash table's): records[i] points to the row's
// value, then each of its num_slots slots, dim values each; a null record is skipped. Records
// must be distinct within the whole call. At most 4 slots.
template <typename T>
void ApplyRowRecords(OptimizerKind kind, const OptimizerHyper& h, int64_t dim, int num_slots,
                     T* const* records, const T* grads, int64_t i0, int64_t i1);

// tracker[rows[i]] = step for i in [i0, i1): the rows-updated tracker (one entry a row of the
// table, for incremental dumps) after an update of those rows.
void TrackRows(const int64_t* rows, int64_t i0, int64_t i1, int64_t step, int64_t* tracker);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_OPTIMIZER_H_
