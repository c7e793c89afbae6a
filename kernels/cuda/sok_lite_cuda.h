// C API of the CUDA kernels: raw device pointers, sizes and a stream in; a cudaError_t out
// (cudaSuccess = 0). Nothing here includes TF, so the same launchers serve the op library and
// the ctypes harness in tests/gpu. Every launcher is asynchronous on `stream` and only checks
// its arguments and the launch itself; ids and row indices must be validated upstream (as
// kernels/core/lookup_validate.h does for the CPU path), out-of-range values are not detected here.
//
// Layouts follow kernels/core: tables and gradients are row-major float32 [rows, dim], samples
// are ragged (sample b owns positions [row_splits[b], row_splits[b + 1])), `inverse` maps a
// position to its unique row. Vectorized (float4) paths are taken when dim % 4 == 0 and every
// row pointer is 16-byte aligned; otherwise a scalar path gives the same results.
#ifndef SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_
#define SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/core/cpu_gpu_rules.h"

#ifdef __cplusplus
extern "C" {
#endif

// The codes of kernels/core/cpu_gpu_rules.h, under the names of this API.
enum SokLiteCudaCombiner {
  SOK_LITE_CUDA_SUM = SOK_LITE_COMBINER_SUM,
  SOK_LITE_CUDA_MEAN = SOK_LITE_COMBINER_MEAN,
  SOK_LITE_CUDA_SQRTN = SOK_LITE_COMBINER_SQRTN,
};

// Hyper-parameters and slots as sok_lite::OptimizerKind (kernels/core/optimizer.h).
enum SokLiteCudaOptimizer {
  SOK_LITE_CUDA_SGD = SOK_LITE_OPTIMIZER_SGD,
  SOK_LITE_CUDA_MOMENTUM = SOK_LITE_OPTIMIZER_MOMENTUM,
  SOK_LITE_CUDA_NESTEROV = SOK_LITE_OPTIMIZER_NESTEROV,
  SOK_LITE_CUDA_ADAM = SOK_LITE_OPTIMIZER_ADAM,
  SOK_LITE_CUDA_AMSGRAD = SOK_LITE_OPTIMIZER_AMSGRAD,
  SOK_LITE_CUDA_ADAGRAD = SOK_LITE_OPTIMIZER_ADAGRAD,
  SOK_LITE_CUDA_RMSPROP = SOK_LITE_OPTIMIZER_RMSPROP,
  SOK_LITE_CUDA_FTRL = SOK_LITE_OPTIMIZER_FTRL,
  SOK_LITE_CUDA_ADAMAX = SOK_LITE_OPTIMIZER_ADAMAX,
  SOK_LITE_CUDA_ADADELTA = SOK_LITE_OPTIMIZER_ADADELTA,
};

// scale[b] for b in [0, batch): 1 (sum), 1 / sum(w) (mean), 1 / sqrt(sum(w^2)) (sqrtn), with
// w = 1 when weights is null; 0 when the denominator is 0. As core SampleScales.
cudaError_t sok_lite_cuda_sample_scales(const int64_t* row_splits, const float* weights,
                                        int64_t batch, int combiner, float* scale,
                                        cudaStream_t stream);

// out[b, :] = scale[b] * sum_k w[k] * rows[inverse[k], :]; a sample with no ids gives zeros.
// Sums in position order, as core CombineForward. weights may be null (w = 1).
cudaError_t sok_lite_cuda_combine_forward(const float* rows, int64_t dim, const int32_t* inverse,
                                          const int64_t* row_splits, const float* weights,
                                          const float* scale, int64_t batch, float* out,
                                          cudaStream_t stream);

// grad_rows[u, :] = sum over positions k with inverse[k] == u of
// w[k] * scale[s] * grad_out[s, :], s being the sample of k. grad_rows ([num_unique, dim]) is
// zeroed first. Uses float atomicAdd: the summation order, hence the last bits of a row fed by
// several positions, varies from run to run.
cudaError_t sok_lite_cuda_combine_backward(const float* grad_out, int64_t dim,
                                           const int32_t* inverse, const int64_t* row_splits,
                                           int64_t batch, const float* weights, const float* scale,
                                           int64_t num_unique, float* grad_rows,
                                           cudaStream_t stream);

// out[i, :] = table[indices[i], :] for i in [0, n).
cudaError_t sok_lite_cuda_gather_rows(const float* table, int64_t dim, const int64_t* indices,
                                      int64_t n, float* out, cudaStream_t stream);

// Row-wise optimizer update, as core ApplyRows: rows rows[i] of var (and of every slot) get
// gradient grads[i, :], i in [0, n). Rows must be distinct. params (host memory, num_params
// values, at least NumParams(kind)) are the optimizer-specific hyper-parameters p of
// OptimizerHyper; slots (a host array of num_slots device pointers, exactly NumSlots(kind, p))
// are ordered as documented on sok_lite::OptimizerKind. A negative rows[i] is skipped (a hash
// table key without a stored row). Returns cudaErrorInvalidValue for an
// unknown kind or a wrong number of params / slots.
cudaError_t sok_lite_cuda_apply_rows(int kind, double learning_rate, double weight_decay,
                                     const double* params, int num_params, int64_t dim,
                                     const int64_t* rows, const float* grads, int64_t n, float* var,
                                     float* const* slots, int num_slots, cudaStream_t stream);

// tracker[rows[i]] = value for i in [0, n) (rows distinct and in range): which rows a step
// changed, for incremental dumps.
cudaError_t sok_lite_cuda_mark_rows(const int64_t* rows, int64_t n, int64_t value, int64_t* tracker,
                                    cudaStream_t stream);

// 16-bit tables (kernels/core/half_rows.h): `format` 0 is bfloat16, 1 float16; rows are uint16_t
// bit patterns.
// out[i, :] = table[indices[i], :] widened to float32, for i in [0, n).
cudaError_t sok_lite_cuda_gather_half_rows(const uint16_t* table, int format, int64_t dim,
                                           const int64_t* indices, int64_t n, float* out,
                                           cudaStream_t stream);

// sok_lite_cuda_apply_rows for a 16-bit var with float32 slots: each value is widened, updated
// in float32 and narrowed back as core ApplyHalfRows does (bfloat16 stochastically, with the
// bits of RoundingBits for (seed, step, rows[i] * row_stride + row_offset, column); float16 to
// nearest even).
cudaError_t sok_lite_cuda_apply_half_rows(int kind, double learning_rate, double weight_decay,
                                          const double* params, int num_params, int64_t dim,
                                          const int64_t* rows, const float* grads, int64_t n,
                                          uint16_t* var, float* const* slots, int num_slots,
                                          int format, uint64_t seed, int64_t step,
                                          int64_t row_stride, int64_t row_offset,
                                          cudaStream_t stream);

// sok_lite_cuda_apply_half_rows with bfloat16 slots (bit patterns): widened, updated in float32
// and rounded back stochastically as core ApplyHalfRows does (slot s of the caller's order with
// the draws of columns (s + 1) * dim + c).
cudaError_t sok_lite_cuda_apply_half_rows_bf16_slots(
    int kind, double learning_rate, double weight_decay, const double* params, int num_params,
    int64_t dim, const int64_t* rows, const float* grads, int64_t n, uint16_t* var,
    uint16_t* const* bf16_slots, int num_slots, int format, uint64_t seed, int64_t step,
    int64_t row_stride, int64_t row_offset, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Ids: checks, deduplication, partition by owner.

// Validates ragged ids on the device, as core CheckRowSplits / CheckIds / CheckInverse, without
// a copy to the host. bad[0..3] (device, 4 x uint64) receive the first failing index of each
// check, or UINT64_MAX when it passes:
//   bad[0]: b with row_splits[b] out of order (row_splits[0] != 0, a decrease, or the last
//           entry != n: then b = batch); bad[1]: sample b with more than `hotness` ids
//           (hotness <= 0: no limit); bad[2]: position k with ids[k] outside [0, num_rows)
//           (num_rows < 0: any value); bad[3]: position k with inverse[k] outside
//           [0, num_unique).
// ids / inverse may be null to skip their check. Checks 1 to 3 assume check 0 passed (the caller
// reads bad[0] first).
cudaError_t sok_lite_cuda_check_ragged(const int64_t* row_splits, int64_t batch, int64_t n,
                                       const int64_t* ids, int64_t num_rows, int64_t hotness,
                                       const int32_t* inverse, int64_t num_unique, uint64_t* bad,
                                       cudaStream_t stream);

// Bytes of device workspace sok_lite_cuda_unique_ids needs for n ids.
cudaError_t sok_lite_cuda_unique_workspace_size(int64_t n, size_t* bytes);

// As core UniqueIds: unique[0, *num_unique) = the distinct values of ids[0, n) in order of first
// occurrence, inverse[i] = position of ids[i] in unique, and (when counts is not null)
// counts[u] = occurrences of unique[u]. unique, inverse and counts need room for n entries;
// num_unique is one device int64. Every int64 value is an ordinary id. n must be < 2^31. The
// result does not depend on thread scheduling.
cudaError_t sok_lite_cuda_unique_ids(const int64_t* ids, int64_t n, int64_t* unique,
                                     int32_t* inverse, int32_t* counts, int64_t* num_unique,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Bytes of device workspace sok_lite_cuda_partition_by_owner needs for `total` ids over
// num_ranks x num_tables segments.
cudaError_t sok_lite_cuda_partition_workspace_size(int64_t total, int64_t num_ranks,
                                                   int64_t num_tables, size_t* bytes);

// As core PartitionByOwner (kernels/core/exchange.h), same message layout and order. Host
// arrays of num_tables entries: unique[t] (device pointer to table t's unique ids),
// num_unique[t], owners[t] (the Owner code: -1 distributed, -2 hashed, >= 0 localized rank).
// Device outputs: counts [num_ranks * num_tables], message [num_ranks * num_tables + total],
// splits [num_ranks], send_pos [total], total = sum of num_unique. Ids of non-hashed tables
// must be >= 0.
cudaError_t sok_lite_cuda_partition_by_owner(const int64_t* const* unique,
                                             const int64_t* num_unique, const int64_t* owners,
                                             int64_t num_tables, int64_t num_ranks, int64_t* counts,
                                             int64_t* message, int64_t* splits, int32_t* send_pos,
                                             void* workspace, size_t workspace_bytes,
                                             cudaStream_t stream);

// Range check of values grouped in num_segments segments: segment s holds
// values[begin[s] + j] for j in [0, ends[s] - ends[s - 1]) (ends: inclusive prefix sums of the
// segment sizes, ends[-1] = 0, total = ends[num_segments - 1]), each of which must lie in
// [0, limit[s]) (limit[s] < 0: only >= 0 is required). begin, ends and limit are device arrays;
// bad (device, num_segments x uint64) receives per segment the first failing j, or UINT64_MAX.
cudaError_t sok_lite_cuda_check_segments(const int64_t* values, const int64_t* begin,
                                         const int64_t* ends, const int64_t* limit,
                                         int64_t num_segments, int64_t total, uint64_t* bad,
                                         cudaStream_t stream);

// The same for int32 values (send positions).
cudaError_t sok_lite_cuda_check_segments_i32(const int32_t* values, const int64_t* begin,
                                             const int64_t* ends, const int64_t* limit,
                                             int64_t num_segments, int64_t total, uint64_t* bad,
                                             cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Row initialization and the dynamic (hash) table.

// As sok_lite::InitKind.
enum SokLiteCudaInitKind {
  SOK_LITE_CUDA_INIT_NORMAL = SOK_LITE_INIT_NORMAL,
  SOK_LITE_CUDA_INIT_TRUNCATED_NORMAL = SOK_LITE_INIT_TRUNCATED_NORMAL,
  SOK_LITE_CUDA_INIT_UNIFORM = SOK_LITE_INIT_UNIFORM,
  SOK_LITE_CUDA_INIT_CONSTANT = SOK_LITE_INIT_CONSTANT,
};

// As sok_lite::RowInit: a = mean / minval / value, b = stddev / maxval.
typedef struct SokLiteCudaRowInit {
  int kind;
  uint64_t seed;
  double a;
  double b;
} SokLiteCudaRowInit;

// out[i, :] = the initial row of id ids[i] (core InitRows), for i in [0, n); out is [n, dim].
cudaError_t sok_lite_cuda_init_rows(const SokLiteCudaRowInit* init, const int64_t* ids, int64_t n,
                                    int64_t dim, float* out, cudaStream_t stream);

// A fixed-capacity hash table of float rows in device memory: open addressing with linear
// probing over `capacity` (a power of two) slots. Occupancy is kept out of band in `state`, so
// every int64 value is a key. Slot p holds keys[p], its value row values[p * dim, (p+1) * dim)
// and the same row of each optimizer slot array, so a slot index is also a row index for
// sok_lite_cuda_apply_rows. The host owns every array (all device memory, sized by capacity)
// and this struct; launchers take it by pointer and read it on the host.
typedef struct SokLiteCudaTable {
  int64_t* keys;       // [capacity]
  int32_t* state;      // [capacity]: 0 empty, 1 being written, 2 present; zeroed by clear
  int64_t* last_seen;  // [capacity]: step of the last find-or-insert that used the key
  float* values;       // [capacity, dim]
  float* slots[3];     // optimizer slot rows, [capacity, dim] each; num_slots of them are used
  float slot_init[3];  // initial value of each optimizer slot for a new key
  int num_slots;
  int64_t dim;
  int64_t capacity;  // a power of two
  int64_t max_size;  // at most capacity - 1: inserts beyond it fail, so probing always ends
  int64_t* size;     // device int64: keys present
  // [capacity] or null: optimizer step of the last change of each row (-1 for a row never
  // changed since it was inserted), for incremental exports. Appended last so that the layout
  // of the fields above stays the same.
  int64_t* updated;
} SokLiteCudaTable;

// Empties the table (state and size to 0).
cudaError_t sok_lite_cuda_table_clear(const SokLiteCudaTable* table, cudaStream_t stream);

// For each of keys[0, n) (duplicates allowed: a key is inserted once): finds its slot or claims
// one, initializing a new key's row from `init` (core InitRows) and its optimizer slots from
// slot_init. slots_out[i] = the slot, or -1 when the table had no room (size would pass
// max_size); last_seen of every used slot = step, updated (when tracked) of a new key = -1.
// values_out (optional, [n, dim]) gets each key's row (the initial row for a key that found no
// room). *num_failed (device int64, set, not added to) = keys that found no room: the caller grows
// the table (sok_lite_cuda_table_rehash into a larger one) and repeats the call, which then only
// inserts what is missing.
cudaError_t sok_lite_cuda_table_find_or_insert(const SokLiteCudaTable* table,
                                               const SokLiteCudaRowInit* init, const int64_t* keys,
                                               int64_t n, int64_t step, int64_t* slots_out,
                                               float* values_out, int64_t* num_failed,
                                               cudaStream_t stream);

// Finds present keys only: slots_out[i] = slot of keys[i] or -1; values_out (optional,
// [n, dim]) gets the row, or zeros for an absent key. Does not modify the table.
cudaError_t sok_lite_cuda_table_find(const SokLiteCudaTable* table, const int64_t* keys, int64_t n,
                                     int64_t* slots_out, float* values_out, cudaStream_t stream);

// Copies every present key to keys_out and its rows to values_out ([max_out, dim]) and, when
// slots_out (host array of num_slots device pointers) is not null, to slots_out[j]. Order is
// unspecified. *count (device int64) = keys present; when it exceeds max_out only max_out were
// written.
cudaError_t sok_lite_cuda_table_export(const SokLiteCudaTable* table, int64_t max_out,
                                       int64_t* keys_out, float* values_out,
                                       float* const* slots_out, int64_t* count,
                                       cudaStream_t stream);

// Inserts every present key of src with last_seen >= min_last_seen into dst (already cleared,
// same dim and num_slots), with its rows, last_seen and (when both track it) updated. Growth: a
// larger dst and min_last_seen = INT64_MIN. Eviction of keys unseen for the last k steps at step s
// (core EvictUnseen): min_last_seen = s - k + 1; evicted = src size - dst size. *num_failed (device
// int64) = keys that found no room in dst.
cudaError_t sok_lite_cuda_table_rehash(const SokLiteCudaTable* src, const SokLiteCudaTable* dst,
                                       int64_t min_last_seen, int64_t* num_failed,
                                       cudaStream_t stream);

// Keys present with updated > since_step into *count (device int64); since_step = INT64_MIN
// counts every present key. A table without `updated` accepts INT64_MIN only.
cudaError_t sok_lite_cuda_table_count_since(const SokLiteCudaTable* table, int64_t since_step,
                                            int64_t* count, cudaStream_t stream);

// As sok_lite_cuda_table_export, filtered as count_since, into the CPU table's row layout:
// rows_out[i] ([max_out, width]) = the value row, then with_slots each optimizer slot row, so
// width = dim * (1 + num_slots) with slots and dim without. Order unspecified; *count = keys
// that pass the filter (only max_out written when it is larger).
cudaError_t sok_lite_cuda_table_export_rows(const SokLiteCudaTable* table, int64_t since_step,
                                            int with_slots, int64_t max_out, int64_t* keys_out,
                                            float* rows_out, int64_t* count, cudaStream_t stream);

// updated[slots[i]] = step for i in [0, n); negative slots are skipped. Needs `updated`.
cudaError_t sok_lite_cuda_table_mark_updated(const SokLiteCudaTable* table, const int64_t* slots,
                                             int64_t n, int64_t step, cudaStream_t stream);

// Writes rows[i] (layout of export_rows: [n, dim] or, with_slots, [n, dim * (1 + num_slots)])
// into slot slots[i]: the value row, and with_slots each optimizer slot row. Negative slots are
// skipped; when a slot repeats, which of its rows is stored is unspecified.
cudaError_t sok_lite_cuda_table_store_rows(const SokLiteCudaTable* table, const int64_t* slots,
                                           int64_t n, const float* rows, int with_slots,
                                           cudaStream_t stream);

// Sets every row of optimizer slot array j (< num_slots) to value: the initial value of a slot
// laid out after keys were stored.
cudaError_t sok_lite_cuda_table_fill_slot(const SokLiteCudaTable* table, int j, float value,
                                          cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Row copies of the exchange messages.

// dst[positions[i], :] = src[i, :] for i in [0, n) (dst and src [*, dim]); positions distinct.
cudaError_t sok_lite_cuda_scatter_rows(const float* src, int64_t dim, const int32_t* positions,
                                       int64_t n, float* dst, cudaStream_t stream);

// dst[i, :] = src[positions[i], :] for i in [0, n).
cudaError_t sok_lite_cuda_gather_rows_i32(const float* src, int64_t dim, const int32_t* positions,
                                          int64_t n, float* dst, cudaStream_t stream);

// dst[positions[i], :] += src[i, :] with float atomicAdd (positions may repeat; dst is not
// zeroed here).
cudaError_t sok_lite_cuda_scatter_add_rows(const float* src, int64_t dim, const int32_t* positions,
                                           int64_t n, float* dst, cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_
