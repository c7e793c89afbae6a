// Weighted sums of a few rows, the inner loop of lookup_sparse's combine (the rows of a sample)
// and of its gradient (the output rows of a unique row's ids).
#ifndef SOK_LITE_KERNELS_CORE_ROW_SUM_H_
#define SOK_LITE_KERNELS_CORE_ROW_SUM_H_

#include <cstdint>

namespace sok_lite {

// dst[0, dim) = w[0] * rows[0] + w[1] * rows[1] + ... + w[n - 1] * rows[n - 1], each element
// summed in that order (w[j] = 1, no multiply, when w is null); with `add`, dst's own values come
// first: dst + w[0] * rows[0] + .... Without `add` the first term is assigned (0 + x == x). The
// same bits as the plain loop over j then d, only with the partial sums held in registers across
// the rows. n >= 1 unless `add`; dst must not alias a row.
void SumRows(const float* const* rows, const float* w, int64_t n, int64_t dim, bool add,
             float* dst);
void SumRows(const double* const* rows, const double* w, int64_t n, int64_t dim, bool add,
             double* dst);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_ROW_SUM_H_
