// Deterministic initial values of embedding rows: value (row, column) is a pure function of
// (seed, row id, column), so a table holds the same numbers whatever the number of ranks, the
// order in which rows are created, or (for hash tables) a rehash.
#ifndef SOK_LITE_KERNELS_CORE_ROW_INIT_H_
#define SOK_LITE_KERNELS_CORE_ROW_INIT_H_

#include <cstdint>
#include <string>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

enum class InitKind {
  kNormal = SOK_LITE_INIT_NORMAL,
  kTruncatedNormal = SOK_LITE_INIT_TRUNCATED_NORMAL,
  kUniform = SOK_LITE_INIT_UNIFORM,
  kConstant = SOK_LITE_INIT_CONSTANT,
};

struct RowInit {
  InitKind kind = InitKind::kNormal;
  uint64_t seed = 0;
  double a = 0.0;  // mean (normal kinds), minval (uniform), value (constant)
  double b = 1.0;  // stddev (normal kinds), maxval (uniform)
};

// Parses "random_normal", "truncated_normal", "random_uniform" or "constant".
[[nodiscard]] bool ParseInitKind(const std::string& name, InitKind* kind);

// out[i, :] = the initial row of row id ids[i], for i in [i0, i1); out is [n, dim].
template <typename T>
void InitRows(const RowInit& init, const int64_t* ids, int64_t dim, int64_t i0, int64_t i1, T* out);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_ROW_INIT_H_
