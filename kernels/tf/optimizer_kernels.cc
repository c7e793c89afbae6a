// CPU functor and kernel registration of SokLiteSparseApply (kernel class in
// optimizer_kernels.h); the math lives in kernels/core/optimizer.
#include "kernels/tf/optimizer_kernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/core/lookup_unique.h"
#include "kernels/core/optimizer.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/table_assign_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

template <typename T>
class SparseApplyFunctor<CPUDevice, T> {
 public:
  static constexpr int64_t kMaxIndices = std::numeric_limits<int64_t>::max();

  // The distinct rows and the gradients summed per distinct row, on the host before locking.
  absl::Status Unique(tensorflow::OpKernelContext*, const tensorflow::Tensor& indices,
                      const tensorflow::Tensor& grads, int64_t dim) {
    g_ = SumRepeatedRows(indices.flat<int64_t>().data(), indices.NumElements(),
                         grads.flat<T>().data(), dim, &rows_, &summed_);
    return absl::OkStatus();
  }

  absl::Status FirstBadRow(tensorflow::OpKernelContext*, int64_t num_rows, bool* bad,
                           int64_t* row) {
    for (int64_t r : rows_) {
      if (r < 0 || r >= num_rows) {
        *bad = true;
        *row = r;
        break;
      }
    }
    return absl::OkStatus();
  }

  static absl::Status CopyBuffer(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& from,
                                 tensorflow::Tensor* to) {
    CopyIntoNewTableBuffer(ctx, from, to);  // the table's buffer from now on: huge pages
    return absl::OkStatus();
  }

  absl::Status Apply(tensorflow::OpKernelContext* ctx, OptimizerKind kind,
                     const OptimizerHyper& hyper, int64_t dim, T* w, const std::vector<T*>& slots) {
    ParallelFor(ctx, rows_.size(), 20 * dim + 10, [&](int64_t i0, int64_t i1) {
      ApplyRows(kind, hyper, dim, rows_.data(), g_, i0, i1, w, slots);
    });
    return absl::OkStatus();
  }

  absl::Status ApplyHalf(tensorflow::OpKernelContext* ctx, OptimizerKind kind,
                         const OptimizerHyper& hyper, int64_t dim, uint16_t* w,
                         const std::vector<T*>& slots, const HalfRounding& rounding) {
    // Instantiated for T = float only: ForTableType gives no 16-bit table to other row types.
    ParallelFor(ctx, rows_.size(), 24 * dim + 10, [&](int64_t i0, int64_t i1) {
      ApplyHalfRows(kind, hyper, dim, rows_.data(), g_, i0, i1, w, slots, rounding);
    });
    return absl::OkStatus();
  }

  absl::Status ApplyHalfSlots(tensorflow::OpKernelContext* ctx, OptimizerKind kind,
                              const OptimizerHyper& hyper, int64_t dim, uint16_t* w,
                              const std::vector<uint16_t*>& bf16_slots,
                              const HalfRounding& rounding) {
    // The scratch (row and slots widened) is allocated once per shard, not per row.
    ParallelFor(ctx, rows_.size(), 24 * dim + 10, [&](int64_t i0, int64_t i1) {
      ApplyHalfRows(kind, hyper, dim, rows_.data(), g_, i0, i1, w, bf16_slots, rounding);
    });
    return absl::OkStatus();
  }

  absl::Status Track(tensorflow::OpKernelContext* ctx, int64_t* tracker, int64_t step) {
    ParallelFor(ctx, rows_.size(), 4,
                [&](int64_t i0, int64_t i1) { TrackRows(rows_.data(), i0, i1, step, tracker); });
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> rows_;
  std::vector<T> summed_;
  const T* g_ = nullptr;  // the gradient of rows_[j] at row j: grads itself or summed_
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteSparseApply").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("dtype"),
    SparseApplyOp<CPUDevice, float>);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteSparseApply").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("dtype"),
    SparseApplyOp<CPUDevice, double>);

}  // namespace sok_lite
