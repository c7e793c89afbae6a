// Runs work on TF's CPU worker pool (the inter-op pool of the session or eager context).
#ifndef SOK_LITE_KERNELS_TF_CPU_PARALLEL_H_
#define SOK_LITE_KERNELS_TF_CPU_PARALLEL_H_

#include <cstdint>
#include <functional>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace sok_lite {

// Calls fn(begin, end) over disjoint ranges covering [0, total); cost_per_unit is the rough cost
// of one unit in cycles, which sets how finely the work is split.
inline void ParallelFor(tensorflow::OpKernelContext* ctx, int64_t total, int64_t cost_per_unit,
                        const std::function<void(int64_t, int64_t)>& fn) {
  const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, total, cost_per_unit, fn);
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_CPU_PARALLEL_H_
