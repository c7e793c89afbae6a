// Checks of op inputs that a graph's shape functions would catch but eager execution does not:
// a kernel must return an error, never CHECK-fail, on a scalar that is a vector, a matrix of the
// wrong rank, or a size that is negative or overflows.
#ifndef SOK_LITE_KERNELS_TF_INPUT_CHECKS_H_
#define SOK_LITE_KERNELS_TF_INPUT_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace sok_lite {

// The int64 scalar at input `i`.
inline absl::Status ScalarInput(tensorflow::OpKernelContext* ctx, int i, int64_t* value) {
  const tensorflow::Tensor& t = ctx->input(i);
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    return tensorflow::errors::InvalidArgument("input ", i, " must be a scalar, got shape ",
                                               t.shape().DebugString());
  }
  *value = t.scalar<int64_t>()();
  return absl::OkStatus();
}

// Checks that input `i` has rank `rank`.
inline absl::Status RankInput(tensorflow::OpKernelContext* ctx, int i, int rank) {
  const tensorflow::Tensor& t = ctx->input(i);
  if (t.dims() != rank) {
    return tensorflow::errors::InvalidArgument("input ", i, " must have rank ", rank,
                                               ", got shape ", t.shape().DebugString());
  }
  return absl::OkStatus();
}

// The row width of each table's [rows, width] input (SokLitePackRows).
inline absl::Status RowWidths(const tensorflow::OpInputList& rows, std::vector<int64_t>* widths) {
  for (int t = 0; t < rows.size(); ++t) {
    if (rows[t].dims() != 2) return tensorflow::errors::InvalidArgument("rows must be 2-D");
    widths->push_back(rows[t].dim_size(1));
  }
  return absl::OkStatus();
}

// Checks that table t's rows input holds num_unique[t] rows, one per id it answers.
inline absl::Status CheckRowCounts(const tensorflow::OpInputList& rows,
                                   const std::vector<int64_t>& num_unique) {
  for (int t = 0; t < rows.size(); ++t) {
    if (rows[t].dim_size(0) != num_unique[t]) {
      return tensorflow::errors::InvalidArgument("table ", t, ": ", rows[t].dim_size(0),
                                                 " rows for ", num_unique[t], " ids");
    }
  }
  return absl::OkStatus();
}

// A TensorShape of `dims`, or an error for a negative or overflowing size.
inline absl::Status SafeShape(std::initializer_list<int64_t> dims, tensorflow::TensorShape* shape) {
  std::vector<int64_t> d(dims);
  return tensorflow::TensorShapeUtils::MakeShape(d.data(), d.size(), shape);
}

// Checks that every entry of a dims attribute is a usable row width.
inline absl::Status CheckDims(const std::vector<int64_t>& dims, int64_t num_tables) {
  if (static_cast<int64_t>(dims.size()) != num_tables) {
    return tensorflow::errors::InvalidArgument("dims has ", dims.size(), " entries for ",
                                               num_tables, " tables");
  }
  for (int64_t d : dims) {
    if (d < 0 || d > (int64_t{1} << 24)) {
      return tensorflow::errors::InvalidArgument("row width ", d, " is out of range");
    }
  }
  return absl::OkStatus();
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_INPUT_CHECKS_H_
