// Helpers shared by the kernels that read embedding tables held in resource variables.
#ifndef SOK_LITE_KERNELS_TF_TABLE_UTIL_H_
#define SOK_LITE_KERNELS_TF_TABLE_UTIL_H_

#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/types.h"

namespace sok_lite {

// "table 1 ('items')" (or "table 1" without a name), the prefix of every error message.
inline std::string TableLabel(const std::vector<std::string>& names, int t) {
  std::string label = "table " + std::to_string(t);
  if (t < static_cast<int>(names.size()) && !names[t].empty()) label += " ('" + names[t] + "')";
  return label;
}

// "dynamic table 'name'" (or "dynamic table"): how the hash-table kernels name a table.
inline std::string DynamicTableLabel(const std::string& name) {
  return name.empty() ? "dynamic table" : "dynamic table '" + name + "'";
}

// Checks, under the variable's lock, that it holds an initialized 2-D tensor of type T.
template <typename T>
absl::Status CheckTable(tensorflow::Var* var, const std::string& label) {
  if (!var->is_initialized) {
    return tensorflow::errors::FailedPrecondition(label, ": variable is not initialized");
  }
  const tensorflow::Tensor& table = *var->tensor();
  if (table.dtype() != tensorflow::DataTypeToEnum<T>::v()) {
    return tensorflow::errors::InvalidArgument(label, ": variable dtype ",
                                               tensorflow::DataTypeString(table.dtype()),
                                               " does not match the lookup dtype");
  }
  if (table.dims() != 2) {
    return tensorflow::errors::InvalidArgument(label, ": variable must be 2-D, got shape ",
                                               table.shape().DebugString());
  }
  return absl::OkStatus();
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_TABLE_UTIL_H_
