// CPU functors of the dynamic (hash) table family over kernels/core's HashTable, and the
// DEVICE_CPU registrations of the shared kernels (kernels/tf/hash_table_kernels.h).
#include "kernels/tf/hash_table_kernels.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "kernels/core/lookup_unique.h"
#include "kernels/core/optimizer.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/hash_table_resource.h"

namespace sok_lite {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

template <>
struct DynamicTableTraits<CPUDevice> {
  using Table = DynamicTableResource;
  static constexpr bool kPolicies = true;
  static constexpr int64_t kMaxSlots = INT64_MAX;
  static constexpr int64_t kMaxStepKeys = INT64_MAX;
};

template <>
absl::Status DynamicCreateFunctor<CPUDevice>::Compute(OpKernelContext*, const TableConfig& config,
                                                      DynamicTableResource** out) {
  TableConfig logged = config;  // the table's warnings go to TF's log, naming its tier directory
  logged.warn = [dir = config.tier_dir](const std::string& message) {
    LOG(WARNING) << "disk tier " << dir << ": " << message;
  };
  auto* table = new DynamicTableResource(logged);
  if (!config.tier_dir.empty()) {
    const std::string problem = table->table.AttachTier();
    if (!problem.empty()) {
      table->Unref();
      return tensorflow::errors::InvalidArgument(problem);
    }
  }
  *out = table;
  return absl::OkStatus();
}

template <>
absl::Status DynamicLookupFunctor<CPUDevice>::Compute(OpKernelContext* ctx, DynamicTableResource* t,
                                                      const int64_t* keys, int64_t n, float* out,
                                                      std::string* problem) {
  const HashTable::Runner run = [ctx](int64_t total,
                                      const std::function<void(int64_t, int64_t)>& fn) {
    ParallelFor(ctx, total, 2000, fn);
  };
  *problem = t->table.Lookup(keys, n, out, run);
  return absl::OkStatus();
}

template <>
absl::Status DynamicApplyFunctor<CPUDevice>::Compute(OpKernelContext* ctx, DynamicTableResource* t,
                                                     OptimizerKind kind,
                                                     const OptimizerHyper& hyper,
                                                     const Tensor& keys, const Tensor& grads,
                                                     int64_t step) {
  HashTable& table = t->table;
  const int64_t dim = table.config().dim;
  // Sum the gradients of repeated keys (lookup_sparse's never repeat, so no copy then), then
  // update each stored row once, rows found and updated on all threads.
  std::vector<int64_t> unique;
  std::vector<float> summed;
  const float* g = SumRepeatedRows(keys.flat<int64_t>().data(), keys.NumElements(),
                                   grads.flat<float>().data(), dim, &unique, &summed);
  const int64_t* k = unique.data();
  const int64_t u = unique.size();
  const HashTable::Runner run = [ctx](int64_t total,
                                      const std::function<void(int64_t, int64_t)>& fn) {
    ParallelFor(ctx, total, 500, fn);
  };
  std::vector<float*> records(u);
  const std::string problem = table.RecordsForUpdate(k, u, step, records.data(), run);
  if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
  if (!table.config().half_values) {
    ParallelFor(ctx, u, 40 * dim * (1 + table.num_slots()), [&](int64_t i0, int64_t i1) {
      ApplyRowRecords(kind, hyper, dim, table.num_slots(), records.data(), g, i0, i1);
    });
    return absl::OkStatus();
  }
  // 16-bit values: each range widens its rows into float32 scratch, steps them there and
  // narrows them back (the optimizer math is float32's).
  const int64_t width = table.row_width();
  std::vector<float*> wide(u);
  ParallelFor(ctx, u, 60 * dim * (1 + table.num_slots()), [&](int64_t i0, int64_t i1) {
    std::vector<float> scratch((i1 - i0) * width);
    for (int64_t i = i0; i < i1; ++i) {
      wide[i] = records[i] ? scratch.data() + (i - i0) * width : nullptr;
      if (records[i]) table.ReadRow(records[i], true, wide[i]);
    }
    ApplyRowRecords(kind, hyper, dim, table.num_slots(), wide.data(), g, i0, i1);
    for (int64_t i = i0; i < i1; ++i) {
      if (records[i]) table.WriteUpdatedRow(wide[i], k[i], step, records[i]);
    }
  });
  return absl::OkStatus();
}

template <>
absl::Status DynamicExportFunctor<CPUDevice>::Count(OpKernelContext*, DynamicTableResource* t,
                                                    int64_t since, int64_t* n) {
  const std::string problem = t->table.CountSince(since, n);
  if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
  return absl::OkStatus();
}

template <>
absl::Status DynamicExportFunctor<CPUDevice>::Export(OpKernelContext*, DynamicTableResource* t,
                                                     int64_t since, bool with_slots, int64_t,
                                                     int64_t* keys, float* values) {
  const int64_t width = with_slots ? t->stride() : t->dim();
  int64_t i = 0;
  const std::string problem = t->table.ForEach(since, [&](int64_t key, const float* record) {
    keys[i] = key;
    t->table.ReadRow(record, with_slots, values + i * width);
    ++i;
  });
  if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
  return absl::OkStatus();
}

template <>
absl::Status DynamicAssignFunctor<CPUDevice>::Compute(OpKernelContext*, DynamicTableResource* t,
                                                      const int64_t* keys, int64_t n,
                                                      const float* values, bool with_slots,
                                                      int64_t step) {
  const std::string problem = t->table.Assign(keys, n, values, with_slots, step);
  if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
  return absl::OkStatus();
}

template <>
absl::Status DynamicMaintenanceFunctor<CPUDevice>::Size(OpKernelContext*, DynamicTableResource* t,
                                                        Tensor* out) {
  out->scalar<int64_t>()() = t->table.size();
  return absl::OkStatus();
}

template <>
absl::Status DynamicMaintenanceFunctor<CPUDevice>::Evict(OpKernelContext*, DynamicTableResource* t,
                                                         int64_t steps, int64_t* evicted) {
  const std::string problem = t->table.EvictUnseen(steps, evicted);
  if (!problem.empty()) return tensorflow::errors::InvalidArgument(problem);
  return absl::OkStatus();
}

template <>
absl::Status DynamicMaintenanceFunctor<CPUDevice>::Clear(OpKernelContext*,
                                                         DynamicTableResource* t) {
  t->table.Clear();
  return absl::OkStatus();
}

using ::tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicClear").Device(DEVICE_CPU), DynamicClearOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicTable").Device(DEVICE_CPU), DynamicTableOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicLookup").Device(DEVICE_CPU),
                        DynamicLookupOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicApply").Device(DEVICE_CPU), DynamicApplyOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicExport").Device(DEVICE_CPU),
                        DynamicExportOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicAssign").Device(DEVICE_CPU),
                        DynamicAssignOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicSize").Device(DEVICE_CPU), DynamicSizeOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicEvict").Device(DEVICE_CPU), DynamicEvictOp<CPUDevice>);

}  // namespace sok_lite
