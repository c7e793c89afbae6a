// GPU registration of SokLiteRowSplitsFromRowIds (op in kernels/tf/lookup_ops.cc). Its inputs and
// output live in host memory: the row ids of a SparseTensor are scanned once, in order, to check
// row-major order, and the splits are small; TF copies them across as needed. The kernel class is
// in kernels/tf/lookup_kernels.h.
#include "kernels/tf/lookup_kernels.h"

namespace sok_lite {

REGISTER_KERNEL_BUILDER(Name("SokLiteRowSplitsFromRowIds")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("row_ids")
                            .HostMemory("nrows")
                            .HostMemory("row_splits"),
                        RowSplitsFromRowIdsOp<GPUDevice>);

}  // namespace sok_lite
