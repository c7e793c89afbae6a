// The TF resource that holds a DynamicVariable's hash table on this rank.
#ifndef SOK_LITE_KERNELS_TF_DYNAMIC_TABLE_H_
#define SOK_LITE_KERNELS_TF_DYNAMIC_TABLE_H_

#include <string>

#include "kernels/core/hash_table.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/platform/mutex.h"

namespace sok_lite {

class DynamicTableResource : public tensorflow::ResourceBase {
 public:
  explicit DynamicTableResource(const TableConfig& config) : table(config) {}
  std::string DebugString() const override { return "SokLiteDynamicTable"; }

  tensorflow::mutex mu;
  HashTable table;  // guarded by mu
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_DYNAMIC_TABLE_H_
