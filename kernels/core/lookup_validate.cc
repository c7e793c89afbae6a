#include "kernels/core/lookup_validate.h"

namespace sok_lite {

std::string CheckRowSplits(const int64_t* row_splits, int64_t batch, int64_t n) {
  if (row_splits[0] != 0) {
    return "row_splits must start at 0, got " + std::to_string(row_splits[0]);
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (row_splits[b + 1] < row_splits[b]) {
      return "row_splits decrease at sample " + std::to_string(b);
    }
  }
  if (row_splits[batch] != n) {
    return "row_splits end at " + std::to_string(row_splits[batch]) + " but there are " +
           std::to_string(n) + " ids";
  }
  return "";
}

std::string CheckIds(const int64_t* ids, const int64_t* row_splits, int64_t batch, int64_t num_rows,
                     int64_t hotness) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = row_splits[b + 1] - row_splits[b];
    if (hotness > 0 && len > hotness) {
      return "sample " + std::to_string(b) + " has " + std::to_string(len) +
             " ids, more than hotness " + std::to_string(hotness);
    }
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const int64_t id = ids[k];
      if (num_rows >= 0 && (id < 0 || id >= num_rows)) {
        return "id " + std::to_string(id) + " of sample " + std::to_string(b) +
               " is out of range [0, " + std::to_string(num_rows) + ")";
      }
    }
  }
  return "";
}

std::string CheckInverse(const int32_t* inverse, int64_t n, int64_t num_unique) {
  for (int64_t k = 0; k < n; ++k) {
    if (inverse[k] < 0 || inverse[k] >= num_unique) {
      return "inverse index " + std::to_string(inverse[k]) + " at position " + std::to_string(k) +
             " is out of range [0, " + std::to_string(num_unique) + ")";
    }
  }
  return "";
}

std::string RowSplitsFromRowIds(const int64_t* row_ids, int64_t n, int64_t nrows,
                                int64_t* row_splits) {
  int64_t row = 0;  // row_splits[0, row] are final
  row_splits[0] = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = row_ids[k];
    if (r < 0 || r >= nrows) {
      return "row id " + std::to_string(r) + " at position " + std::to_string(k) +
             " is out of range [0, " + std::to_string(nrows) + ")";
    }
    if (r < row) {
      return "indices are not in row-major order at position " + std::to_string(k) + " (row " +
             std::to_string(r) + " after row " + std::to_string(row) + ")";
    }
    while (row < r) row_splits[++row] = k;
  }
  while (row < nrows) row_splits[++row] = n;
  return "";
}

}  // namespace sok_lite
