// Checks of user-supplied ragged ids, run before any row is touched so that bad input becomes an
// error message instead of an out-of-bounds access.
#ifndef SOK_LITE_KERNELS_CORE_VALIDATE_H_
#define SOK_LITE_KERNELS_CORE_VALIDATE_H_

#include <cstdint>
#include <string>

namespace sok_lite {

// Checks that row_splits[0, batch] starts at 0, never decreases and ends at n.
// Returns "" when valid, else a description of the first problem.
std::string CheckRowSplits(const int64_t* row_splits, int64_t batch, int64_t n);

// Checks (valid row_splits assumed) that no sample has more than `hotness` ids (hotness <= 0: no
// limit) and that every id is in [0, num_rows) (num_rows < 0: any id >= 0).
// Returns "" when valid, else a description of the first problem.
std::string CheckIds(const int64_t* ids, const int64_t* row_splits, int64_t batch, int64_t num_rows,
                     int64_t hotness);

// Checks that every inverse[k] for k < n is in [0, num_unique).
std::string CheckInverse(const int32_t* inverse, int64_t n, int64_t num_unique);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_VALIDATE_H_
