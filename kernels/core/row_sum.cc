#include "kernels/core/row_sum.h"

#include <type_traits>

#include "kernels/core/isa_clones.h"

namespace sok_lite {
namespace {

// 32 bytes of a row as one value: GCC's vector extension, an AVX2 register in the AVX2 clone, two
// SSE registers in the baseline one. Element-wise arithmetic, so the same bits as scalar code.
typedef float FloatVec __attribute__((vector_size(32)));
typedef double DoubleVec __attribute__((vector_size(32)));
// The same, read and written in place in a row: any alignment of the element, may alias it.
// (Plain typedefs: GCC drops the alignment of one reached through a template parameter.)
typedef float FloatVecInRow __attribute__((vector_size(32), aligned(4), may_alias));
typedef double DoubleVecInRow __attribute__((vector_size(32), aligned(8), may_alias));

SOK_LITE_INLINE_IN_CLONES const FloatVecInRow* InRow(const float* p) {
  return reinterpret_cast<const FloatVecInRow*>(p);
}
SOK_LITE_INLINE_IN_CLONES FloatVecInRow* InRow(float* p) {
  return reinterpret_cast<FloatVecInRow*>(p);
}
SOK_LITE_INLINE_IN_CLONES const DoubleVecInRow* InRow(const double* p) {
  return reinterpret_cast<const DoubleVecInRow*>(p);
}
SOK_LITE_INLINE_IN_CLONES DoubleVecInRow* InRow(double* p) {
  return reinterpret_cast<DoubleVecInRow*>(p);
}

template <typename T>
struct Lanes {
  typedef std::conditional_t<std::is_same_v<T, float>, FloatVec, DoubleVec> Vec;
};

// Columns [col, col + kVecs * lanes) of the sum: the partial sums stay in kVecs registers while
// every row adds its piece. (Written with explicit vectors: GCC's unroll-and-jam turns the plain
// loop over j then columns into a scalar loop over pairs of rows.)
template <typename T, int kVecs>
SOK_LITE_INLINE_IN_CLONES void SumVectors(const T* const* rows, const T* w, int64_t n, int64_t col,
                                          bool add, T* dst) {
  using Vec = typename Lanes<T>::Vec;
  constexpr int kLanes = sizeof(Vec) / sizeof(T);
  Vec acc[kVecs];
  int64_t j = 0;
  if (add) {
    for (int i = 0; i < kVecs; ++i) acc[i] = *InRow(dst + col + i * kLanes);
  } else {
    const T* r = rows[0] + col;
    if (w) {
      for (int i = 0; i < kVecs; ++i) acc[i] = w[0] * *InRow(r + i * kLanes);
    } else {
      for (int i = 0; i < kVecs; ++i) acc[i] = *InRow(r + i * kLanes);
    }
    j = 1;
  }
  if (w) {
    for (; j < n; ++j) {
      const T* r = rows[j] + col;
      const T f = w[j];
      for (int i = 0; i < kVecs; ++i) acc[i] += f * *InRow(r + i * kLanes);
    }
  } else {
    for (; j < n; ++j) {
      const T* r = rows[j] + col;
      for (int i = 0; i < kVecs; ++i) acc[i] += *InRow(r + i * kLanes);
    }
  }
  for (int i = 0; i < kVecs; ++i) *InRow(dst + col + i * kLanes) = acc[i];
}

// One column, for what remains of a row narrower than a vector.
template <typename T>
SOK_LITE_INLINE_IN_CLONES void SumColumn(const T* const* rows, const T* w, int64_t n, int64_t col,
                                         bool add, T* dst) {
  T acc = add ? dst[col] : (w ? w[0] * rows[0][col] : rows[0][col]);
  for (int64_t j = add ? 0 : 1; j < n; ++j) acc += w ? w[j] * rows[j][col] : rows[j][col];
  dst[col] = acc;
}

template <typename T>
SOK_LITE_INLINE_IN_CLONES void SumRowsOf(const T* const* rows, const T* w, int64_t n, int64_t dim,
                                         bool add, T* dst) {
  // 128 bytes of columns at a time (4 AVX2 registers of partial sums, the rest of the 16 free for
  // the rows' values), then narrower blocks for what remains of the row.
  constexpr int64_t kLanes = sizeof(typename Lanes<T>::Vec) / sizeof(T);
  int64_t col = 0;
  for (; col + 4 * kLanes <= dim; col += 4 * kLanes) SumVectors<T, 4>(rows, w, n, col, add, dst);
  if (col + 2 * kLanes <= dim) {
    SumVectors<T, 2>(rows, w, n, col, add, dst);
    col += 2 * kLanes;
  }
  if (col + kLanes <= dim) {
    SumVectors<T, 1>(rows, w, n, col, add, dst);
    col += kLanes;
  }
  for (; col < dim; ++col) SumColumn(rows, w, n, col, add, dst);
}

}  // namespace

SOK_LITE_ISA_CLONES void SumRows(const float* const* rows, const float* w, int64_t n, int64_t dim,
                                 bool add, float* dst) {
  SumRowsOf(rows, w, n, dim, add, dst);
}

SOK_LITE_ISA_CLONES void SumRows(const double* const* rows, const double* w, int64_t n, int64_t dim,
                                 bool add, double* dst) {
  SumRowsOf(rows, w, n, dim, add, dst);
}

}  // namespace sok_lite
