// The devices an op's one kernel class is templated on. The class (attribute reads, input
// checks, output allocation, error texts) is shared by both op libraries; only the functor it
// calls is defined per device: for CPUDevice over kernels/core in kernels/tf (the CPU library),
// for GPUDevice over the kernels/cuda launchers in kernels/tf_gpu (the GPU library).
#ifndef SOK_LITE_KERNELS_TF_DEVICE_H_
#define SOK_LITE_KERNELS_TF_DEVICE_H_

namespace sok_lite {

struct CPUDevice {};
struct GPUDevice {};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_DEVICE_H_
