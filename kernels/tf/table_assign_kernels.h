// A new buffer for a CPU table variable, advised for huge pages before it is written: what a
// whole-table assign (SokLiteAssignTable) and the private copy before an in-place update make.
#ifndef SOK_LITE_KERNELS_TF_TABLE_ASSIGN_KERNELS_H_
#define SOK_LITE_KERNELS_TF_TABLE_ASSIGN_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace sok_lite {

// Copies from's bytes into *to, a host tensor of the same size just allocated and not yet
// written, advising it for huge pages first.
void CopyIntoNewTableBuffer(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& from,
                            tensorflow::Tensor* to);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_TABLE_ASSIGN_KERNELS_H_
