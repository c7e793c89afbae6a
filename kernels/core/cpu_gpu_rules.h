// What the CPU kernels (kernels/core) and the CUDA kernels (kernels/cuda) must agree on bit for
// bit, defined once for both: the integer mixes, which rank owns a row or a key, the counter-based
// draws of initial rows, and the codes that cross the CUDA C API as ints. Included from .cc and
// .cu files; the codes alone also compile as C. sok_lite/tables/key_hash.py is the Python mirror
// of the key hash and the owner rules.
#ifndef SOK_LITE_KERNELS_CORE_CPU_GPU_RULES_H_
#define SOK_LITE_KERNELS_CORE_CPU_GPU_RULES_H_

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SOK_LITE_HOST_DEVICE __host__ __device__
#else
#define SOK_LITE_HOST_DEVICE
#endif

// Combiner codes: sok_lite::Combiner and SOK_LITE_CUDA_SUM... take these values.
enum SokLiteCombinerCode {
  SOK_LITE_COMBINER_SUM = 0,
  SOK_LITE_COMBINER_MEAN = 1,
  SOK_LITE_COMBINER_SQRTN = 2,
};

// Optimizer codes: sok_lite::OptimizerKind and SOK_LITE_CUDA_SGD... take these values.
enum SokLiteOptimizerCode {
  SOK_LITE_OPTIMIZER_SGD = 0,
  SOK_LITE_OPTIMIZER_MOMENTUM = 1,
  SOK_LITE_OPTIMIZER_NESTEROV = 2,
  SOK_LITE_OPTIMIZER_ADAM = 3,
  SOK_LITE_OPTIMIZER_AMSGRAD = 4,
  SOK_LITE_OPTIMIZER_ADAGRAD = 5,
  SOK_LITE_OPTIMIZER_RMSPROP = 6,
  SOK_LITE_OPTIMIZER_FTRL = 7,
  SOK_LITE_OPTIMIZER_ADAMAX = 8,
  SOK_LITE_OPTIMIZER_ADADELTA = 9,
};

// Initializer codes: sok_lite::InitKind and SOK_LITE_CUDA_INIT_NORMAL... take these values.
enum SokLiteInitCode {
  SOK_LITE_INIT_NORMAL = 0,
  SOK_LITE_INIT_TRUNCATED_NORMAL = 1,
  SOK_LITE_INIT_UNIFORM = 2,
  SOK_LITE_INIT_CONSTANT = 3,
};

// Owner codes of a table: >= 0 is the rank holding the whole table (localized).
enum SokLiteOwnerCode {
  SOK_LITE_OWNER_DISTRIBUTED = -1,  // static row i: rank RowOwner(i), row LocalRow(i) there
  SOK_LITE_OWNER_HASHED = -2,       // hash-table key k: rank HashOwner(k), stored as k
};

#ifdef __cplusplus
namespace sok_lite {

// splitmix64's finalizer (no increment): the probe hash of the id deduplication and of the hash
// tables (CPU and GPU). Spreads sequential and Zipf-clustered ids over a whole table.
SOK_LITE_HOST_DEVICE inline uint64_t SplitMix64Finalizer(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// One splitmix64 step (golden-ratio increment, then the finalizer): the mix of the key hash and
// of the initial-row draws.
SOK_LITE_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  return SplitMix64Finalizer(x + 0x9e3779b97f4a7c15ULL);
}

// The hash of a hash-table key that places it on a rank.
SOK_LITE_HOST_DEVICE inline uint64_t KeyHash(int64_t key) {
  return SplitMix64(static_cast<uint64_t>(key));
}

// The rank that owns hash-table key `key` among num_ranks; the key keeps its value there. A
// mix, so that sequential or strided keys still spread evenly.
SOK_LITE_HOST_DEVICE inline int64_t HashOwner(int64_t key, int64_t num_ranks) {
  return static_cast<int64_t>(KeyHash(key) % static_cast<uint64_t>(num_ranks));
}

// Static (distributed) tables: row id i lives on rank i % N at local row i / N. Ids are
// validated non-negative before they get here.
SOK_LITE_HOST_DEVICE inline int64_t RowOwner(int64_t id, int64_t num_ranks) {
  return id % num_ranks;
}
SOK_LITE_HOST_DEVICE inline int64_t LocalRow(int64_t id, int64_t num_ranks) {
  return id / num_ranks;
}

// The rank holding `id` of a table with owner code `owner`, and its row there.
SOK_LITE_HOST_DEVICE inline int64_t OwnerRank(int64_t owner, int64_t id, int64_t num_ranks) {
  if (owner == SOK_LITE_OWNER_DISTRIBUTED) return RowOwner(id, num_ranks);
  if (owner == SOK_LITE_OWNER_HASHED) return HashOwner(id, num_ranks);
  return owner;
}
SOK_LITE_HOST_DEVICE inline int64_t OwnerLocalRow(int64_t owner, int64_t id, int64_t num_ranks) {
  return owner == SOK_LITE_OWNER_DISTRIBUTED ? LocalRow(id, num_ranks) : id;
}

// Initial rows: a uniform double in (0, 1) from (seed, id, column, draw), a counter-based
// generator, so a value does not depend on the device, the rank count or the creation order.
SOK_LITE_HOST_DEVICE inline double InitUniform(uint64_t seed, int64_t id, int64_t col,
                                               uint64_t draw) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(id)) ^
                                (static_cast<uint64_t>(col) * 0x100000001b3ULL) ^ (draw << 40));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A standard normal by Box-Muller from two uniforms of the same cell. The integer part is
// bit-identical on both sides; the device's log / cos / sqrt may differ from the host's by an
// ulp, which the cast to float almost always absorbs.
SOK_LITE_HOST_DEVICE inline double InitNormal(uint64_t seed, int64_t id, int64_t col,
                                              uint64_t draw) {
  const double u1 = InitUniform(seed, id, col, 2 * draw);
  const double u2 = InitUniform(seed, id, col, 2 * draw + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// Stochastic rounding of bfloat16 tables (kernels/core/half_rows.h): the random bits of (row,
// column) at an optimizer step are a function of (seed, step, global row, column) only, so any
// rank count, thread count or device rounds a row alike. One 64-bit mix per row (after two per
// step, RoundingStepKey), then a cheap 32-bit mix per value that vectorizes: the row key folded to
// 32 bits, xor the column times an odd constant (distinct columns, distinct inputs), through a
// multiply-xorshift bijection. Slot s of a bfloat16-slot table draws at
// columns (s + 1) * dim + c, apart from its row's.
SOK_LITE_HOST_DEVICE inline uint64_t RoundingStepKey(uint64_t seed, int64_t step) {
  return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(step));
}
SOK_LITE_HOST_DEVICE inline uint64_t RoundingRowKeyOfStep(uint64_t step_key, int64_t row) {
  return SplitMix64(step_key ^ static_cast<uint64_t>(row));
}
SOK_LITE_HOST_DEVICE inline uint64_t RoundingRowKey(uint64_t seed, int64_t step, int64_t row) {
  return RoundingRowKeyOfStep(RoundingStepKey(seed, step), row);
}
// The 32 bits of a row key that its per-value draws mix.
SOK_LITE_HOST_DEVICE inline uint32_t RoundingKey32(uint64_t row_key) {
  return static_cast<uint32_t>(row_key ^ (row_key >> 32));
}
SOK_LITE_HOST_DEVICE inline uint32_t RoundingBits32(uint32_t key32, uint32_t col) {
  uint32_t x = key32 ^ (col * 0x9e3779b9u);
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x >> 16;  // the best-mixed half
}
SOK_LITE_HOST_DEVICE inline uint32_t RoundingBits(uint64_t row_key, int64_t col) {
  return RoundingBits32(RoundingKey32(row_key), static_cast<uint32_t>(col));
}

}  // namespace sok_lite
#endif  // __cplusplus

#endif  // SOK_LITE_KERNELS_CORE_CPU_GPU_RULES_H_
