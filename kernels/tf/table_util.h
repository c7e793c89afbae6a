// Helpers shared by the kernels that read embedding tables held in resource variables.
#ifndef SOK_LITE_KERNELS_TF_TABLE_UTIL_H_
#define SOK_LITE_KERNELS_TF_TABLE_UTIL_H_

#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/types.h"

namespace sok_lite {

// The prefix of every error message about table t of a list op: the label the caller passed in
// table_names (lookup_sparse passes "table 1 ('items')": the table's position in its caller's
// list and its name, which the op's own list index need not be), else "table t".
inline std::string TableLabel(const std::vector<std::string>& labels, int t) {
  if (t < static_cast<int>(labels.size()) && !labels[t].empty()) return labels[t];
  return "table " + std::to_string(t);
}

// How the hash-table kernels name a table: the label the caller passed in table_name
// ("table 0 ('clicks')" from lookup_sparse, "hash table 'clicks'" from the optimizer), else
// "hash table".
inline std::string DynamicTableLabel(const std::string& label) {
  return label.empty() ? "hash table" : label;
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
