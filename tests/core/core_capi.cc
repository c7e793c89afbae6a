// A C ABI over a few kernels/core functions and kernels/core/cpu_gpu_rules.h, so that
// test_core_without_tf.py can call them through ctypes without TensorFlow. Arrays are
// caller-owned; every function handles n elements.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/combine.h"
#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/exchange.h"
#include "kernels/core/half_rows.h"
#include "kernels/core/huge_pages.h"
#include "kernels/core/optimizers.h"
#include "kernels/core/unique.h"

using sok_lite::Combiner;
using sok_lite::OptimizerKind;

extern "C" {

void sok_core_splitmix64(const uint64_t* x, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::SplitMix64(x[i]);
}

void sok_core_splitmix64_finalizer(const uint64_t* x, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::SplitMix64Finalizer(x[i]);
}

void sok_core_key_hash(const int64_t* keys, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::KeyHash(keys[i]);
}

void sok_core_hash_owner(const int64_t* keys, int64_t n, int64_t num_ranks, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::HashOwner(keys[i], num_ranks);
}

void sok_core_row_owner(const int64_t* ids, int64_t n, int64_t num_ranks, int64_t* rank,
                        int64_t* local) {
  for (int64_t i = 0; i < n; ++i) {
    rank[i] = sok_lite::RowOwner(ids[i], num_ranks);
    local[i] = sok_lite::LocalRow(ids[i], num_ranks);
  }
}

// Through the exchange's Owner, for a table with owner code `owner`.
void sok_core_owner(int64_t owner, const int64_t* ids, int64_t n, int64_t num_ranks, int64_t* rank,
                    int64_t* local) {
  const sok_lite::Owner o{owner};
  for (int64_t i = 0; i < n; ++i) {
    rank[i] = o.Rank(ids[i], num_ranks);
    local[i] = o.LocalRow(ids[i], num_ranks);
  }
}

void sok_core_init_uniform(uint64_t seed, const int64_t* ids, int64_t n, int64_t col, uint64_t draw,
                           double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::InitUniform(seed, ids[i], col, draw);
}

// The code of a combiner / optimizer name as the op attributes are parsed; -1 if unknown.
int sok_core_combiner_code(const char* name) {
  Combiner c;
  return sok_lite::ParseCombiner(name, &c) ? static_cast<int>(c) : -1;
}

int sok_core_optimizer_code(const char* name) {
  OptimizerKind k;
  return sok_lite::ParseOptimizerKind(name, &k) ? static_cast<int>(k) : -1;
}

int64_t sok_core_unique_ids(const int64_t* ids, int64_t n, int64_t* unique, int32_t* inverse) {
  return sok_lite::UniqueIds(ids, n, unique, inverse);
}

// out [batch, dim] = the combined rows of each sample; weights may be null.
void sok_core_combine(const float* rows, int64_t dim, const int32_t* inverse,
                      const int64_t* row_splits, int64_t batch, const float* weights, int combiner,
                      float* out) {
  std::vector<float> scale(batch);
  const auto c = static_cast<Combiner>(combiner);
  sok_lite::SampleScales(row_splits, weights, c, 0, batch, scale.data());
  sok_lite::CombineForward(rows, dim, inverse, row_splits, weights, scale.data(), 0, batch, out);
}

// One row-wise update of rows[0, n) of var and its num_slots slots.
void sok_core_apply_rows(int kind, double lr, double weight_decay, const double* p, int num_p,
                         int64_t dim, const int64_t* rows, const float* grads, int64_t n,
                         float* var, float* const* slots, int num_slots) {
  sok_lite::OptimizerHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.p.assign(p, p + num_p);
  const std::vector<float*> slot_list(slots, slots + num_slots);
  sok_lite::ApplyRows(static_cast<OptimizerKind>(kind), h, dim, rows, grads, 0, n, var, slot_list);
}

// Huge-page advice for [p, p + bytes): 1 if given by this call.
int sok_core_advise_huge_pages(void* p, int64_t bytes) {
  return sok_lite::AdviseHugePages(p, static_cast<size_t>(bytes)) ? 1 : 0;
}

// 16-bit storage (kernels/core/half_rows.h), element by element. format: 0 bfloat16, 1 float16.
void sok_core_half_to_float(int format, const uint16_t* bits, int64_t n, float* out) {
  const auto f = static_cast<sok_lite::HalfFormat>(format);
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::HalfToFloat(f, bits[i]);
}

void sok_core_float_to_bfloat16_nearest(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToBfloat16Nearest(x[i]);
}

void sok_core_float_to_bfloat16_stochastic(const float* x, const uint32_t* random16, int64_t n,
                                           uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToBfloat16Stochastic(x[i], random16[i]);
}

void sok_core_float_to_float16_nearest(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToFloat16Nearest(x[i]);
}

// The rounding bits of columns [0, dim) of global row `row` at `step`.
void sok_core_rounding_bits(uint64_t seed, int64_t step, int64_t row, int64_t dim, uint32_t* out) {
  const uint64_t key = sok_lite::RoundingRowKey(seed, step, row);
  for (int64_t d = 0; d < dim; ++d) out[d] = sok_lite::RoundingBits(key, d);
}

// sok_core_apply_rows for a 16-bit var (bit patterns) with float32 slots.
void sok_core_apply_half_rows(int kind, double lr, double weight_decay, const double* p, int num_p,
                              int64_t dim, const int64_t* rows, const float* grads, int64_t n,
                              uint16_t* var, float* const* slots, int num_slots, int format,
                              uint64_t seed, int64_t step, int64_t row_stride, int64_t row_offset) {
  sok_lite::OptimizerHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.p.assign(p, p + num_p);
  const std::vector<float*> slot_list(slots, slots + num_slots);
  sok_lite::HalfRounding rounding;
  rounding.format = static_cast<sok_lite::HalfFormat>(format);
  rounding.seed = seed;
  rounding.step = step;
  rounding.row_stride = row_stride;
  rounding.row_offset = row_offset;
  sok_lite::ApplyHalfRows(static_cast<OptimizerKind>(kind), h, dim, rows, grads, 0, n, var,
                          slot_list, rounding);
}

// The same with bfloat16 slots (bit patterns).
void sok_core_apply_half_rows_bf16_slots(int kind, double lr, double weight_decay, const double* p,
                                         int num_p, int64_t dim, const int64_t* rows,
                                         const float* grads, int64_t n, uint16_t* var,
                                         uint16_t* const* slots, int num_slots, int format,
                                         uint64_t seed, int64_t step, int64_t row_stride,
                                         int64_t row_offset) {
  sok_lite::OptimizerHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.p.assign(p, p + num_p);
  const std::vector<uint16_t*> slot_list(slots, slots + num_slots);
  sok_lite::HalfRounding rounding;
  rounding.format = static_cast<sok_lite::HalfFormat>(format);
  rounding.seed = seed;
  rounding.step = step;
  rounding.row_stride = row_stride;
  rounding.row_offset = row_offset;
  sok_lite::ApplyHalfRows(static_cast<OptimizerKind>(kind), h, dim, rows, grads, 0, n, var,
                          slot_list, rounding);
}

}  // extern "C"
