// Turns the device-side checks of sok_lite_cuda_check_ragged into the CPU kernels' errors.
#ifndef SOK_LITE_KERNELS_TF_GPU_LOOKUP_VALIDATE_GPU_H_
#define SOK_LITE_KERNELS_TF_GPU_LOOKUP_VALIDATE_GPU_H_

#include <cstdint>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// Number of uint64 results of one check_ragged call.
constexpr int kRaggedChecks = 4;

// "" when all passed, else the problem of the first failing check (bad: kRaggedChecks values).
inline std::string RaggedProblem(const uint64_t* bad, int64_t num_rows, int64_t hotness,
                                 int64_t num_unique) {
  constexpr uint64_t kPassed = ~uint64_t{0};
  if (bad[0] != kPassed) {
    return "row_splits are invalid at entry " + std::to_string(bad[0]) +
           " (must start at 0, never decrease and end at the number of ids)";
  }
  if (bad[1] != kPassed) {
    return "sample " + std::to_string(bad[1]) + " has more than " + std::to_string(hotness) +
           " ids";
  }
  if (bad[2] != kPassed) {
    return "id at position " + std::to_string(bad[2]) + " is out of range [0, " +
           std::to_string(num_rows) + ")";
  }
  if (bad[3] != kPassed) {
    return "inverse at position " + std::to_string(bad[3]) + " is out of range [0, " +
           std::to_string(num_unique) + ")";
  }
  return "";
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_LOOKUP_VALIDATE_GPU_H_
