// Checks of user-supplied ragged ids, run before any row is touched so that bad input becomes an
// error message instead of an out-of-bounds access.
#ifndef SOK_LITE_KERNELS_CORE_LOOKUP_VALIDATE_H_
#define SOK_LITE_KERNELS_CORE_LOOKUP_VALIDATE_H_

#include <cstdint>
#include <string>

namespace sok_lite {

// Checks that row_splits[0, batch] starts at 0, never decreases and ends at n.
// Returns "" when valid, else a description of the first problem.
[[nodiscard]] std::string CheckRowSplits(const int64_t* row_splits, int64_t batch, int64_t n);

// Checks (valid row_splits assumed) that no sample has more than `hotness` ids (hotness <= 0: no
// limit) and that every id is in [0, num_rows) (num_rows < 0: any int64 value, e.g. the keys
// of a hash table).
// Returns "" when valid, else a description of the first problem.
[[nodiscard]] std::string CheckIds(const int64_t* ids, const int64_t* row_splits, int64_t batch,
                                   int64_t num_rows, int64_t hotness);

// Checks that every inverse[k] for k < n is in [0, num_unique).
[[nodiscard]] std::string CheckInverse(const int32_t* inverse, int64_t n, int64_t num_unique);

// Builds row_splits[0, nrows] from the row id of each of n values (a SparseTensor's
// indices[:, 0]). Returns "" on success, else the first problem: row ids that decrease (values
// out of row-major order) or fall outside [0, nrows).
[[nodiscard]] std::string RowSplitsFromRowIds(const int64_t* row_ids, int64_t n, int64_t nrows,
                                              int64_t* row_splits);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_LOOKUP_VALIDATE_H_
