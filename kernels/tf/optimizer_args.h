// The optimizer attribute and hyper-parameter input of SokLiteSparseApply and
// SokLiteDynamicApply, parsed and checked by the same code in their CPU and GPU kernels, so a
// bad argument gets the same error on either device.
#ifndef SOK_LITE_KERNELS_TF_OPTIMIZER_ARGS_H_
#define SOK_LITE_KERNELS_TF_OPTIMIZER_ARGS_H_

#include <string>

#include "kernels/core/optimizer.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// The "kind" attribute.
inline absl::Status ReadOptimizerKind(tensorflow::OpKernelConstruction* ctx, OptimizerKind* kind) {
  std::string name;
  TF_RETURN_IF_ERROR(ctx->GetAttr("kind", &name));
  if (!ParseOptimizerKind(name, kind)) {
    return tensorflow::errors::InvalidArgument("unknown optimizer kind '", name, "'");
  }
  return absl::OkStatus();
}

// Reads hyper = [lr, weight_decay, params...] (float64, host memory) into *out, checking that
// it holds the NumParams(kind) parameters the update reads (a shorter vector would be read past
// its end) and that the optimizer needs `num_slots` slots. label names the variable or table.
inline absl::Status ReadOptimizerHyper(const tensorflow::Tensor& hyper, OptimizerKind kind,
                                       int num_slots, const std::string& label,
                                       OptimizerHyper* out) {
  namespace errors = tensorflow::errors;
  if (hyper.NumElements() < 2) {
    return errors::InvalidArgument(label, ": hyper needs learning rate and weight decay");
  }
  const auto hv = hyper.flat<double>();
  out->lr = hv(0);
  out->weight_decay = hv(1);
  out->p.assign(hv.data() + 2, hv.data() + hv.size());
  if (static_cast<int64_t>(out->p.size()) < NumParams(kind)) {
    return errors::InvalidArgument(label, ": optimizer needs ", NumParams(kind),
                                   " parameters after lr and weight decay, got ", out->p.size());
  }
  if (NumSlots(kind, out->p) != num_slots) {
    return errors::InvalidArgument(label, ": optimizer needs ", NumSlots(kind, out->p),
                                   " slots, got ", num_slots);
  }
  return absl::OkStatus();
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_OPTIMIZER_ARGS_H_
