// The TF resource that holds a DynamicVariable's hash table on this rank.
#ifndef SOK_LITE_KERNELS_TF_HASH_TABLE_RESOURCE_H_
#define SOK_LITE_KERNELS_TF_HASH_TABLE_RESOURCE_H_

#include <climits>
#include <string>
#include <vector>

#include "kernels/core/hash_table.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/platform/mutex.h"

namespace sok_lite {

class DynamicTableResource : public tensorflow::ResourceBase {
 public:
  explicit DynamicTableResource(const TableConfig& config) : table(config) {}
  std::string DebugString() const override { return "SokLiteDynamicTable"; }

  tensorflow::mutex mu;
  HashTable table;  // guarded by mu
  // The table's lookup step at the last SokLiteDynamicPrefetch (guarded by mu).
  int64_t prefetch_step = INT64_MIN;

  // The accessors the shared kernels (kernels/tf/hash_table_kernels.h) use on either device's
  // table; all require mu.
  int64_t dim() const { return table.config().dim; }
  int num_slots() const { return table.num_slots(); }
  int64_t stride() const { return table.row_width(); }  // float32 columns, not the record
  absl::Status AddSlots(tensorflow::OpKernelContext*, const std::vector<float>& initial_values) {
    const std::string problem = table.AddSlots(initial_values);
    if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
    return absl::OkStatus();
  }
  void SetSlotInit(const std::vector<float>& initial_values) { table.SetSlotInit(initial_values); }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_HASH_TABLE_RESOURCE_H_
