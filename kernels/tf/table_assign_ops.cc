// Op registration of SokLiteAssignTable, a whole-table assign into a buffer of the variable's own
// (kernel in table_assign_kernels.cc).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace sok_lite {

REGISTER_OP("SokLiteAssignTable")
    .Input("table: resource")
    .Input("value: T")
    .Attr("T: {float, double, bfloat16, half, int64}")
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Copies `value` into a new buffer of the table variable (or its slot or rows-changed tracker),
which must be initialized with the same dtype and shape. On the CPU a large buffer is advised for huge pages before it is written
(kernels/core/huge_pages.h): a table restored from a checkpoint, or assigned whole, keeps the huge
pages it was created with, where TensorFlow's assign would hand it the value's buffer, or a copy in
one that was not advised.
)doc");

}  // namespace sok_lite
