// Answers peers from a device hash table (the hash-table branch of SokLiteGatherForPeers): the
// requests of all ranks are gathered into one key list on the device, looked up in one step,
// and each rank's rows are copied to its place in the vector message.
#include "kernels/tf_gpu/exchange_peers_hash_table_gpu.h"

#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/hash_table_resource_gpu.h"

namespace sok_lite {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

absl::Status AnswerPeersFromDeviceTable(OpKernelContext* ctx, int t, const std::string& label,
                                        int64_t dim, const int64_t* message,
                                        const ParsedIds& parsed,
                                        const std::vector<int64_t>& offsets, int64_t num_ranks,
                                        int64_t num_tables, float* out) {
  tensorflow::core::RefCountPtr<DynamicTableGpuResource> table;
  TF_RETURN_IF_ERROR(LookupDeviceTable(ctx, t, &table));
  cudaStream_t stream = OpStream(ctx);
  int64_t n = 0;
  for (int64_t r = 0; r < num_ranks; ++r) n += parsed.count[r * num_tables + t];
  Tensor keys_t, slots_t, rows_t;
  int64_t *keys = nullptr, *slots = nullptr;
  float* rows = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &keys_t, &keys));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
  TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, n * dim, &rows_t, &rows));
  for (int64_t r = 0, at = 0; r < num_ranks; ++r) {
    const int64_t seg = r * num_tables + t;
    if (parsed.count[seg] == 0) continue;
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(keys + at, message + parsed.begin[seg], parsed.count[seg] * sizeof(int64_t),
                        cudaMemcpyDeviceToDevice, stream),
        "request copy"));
    at += parsed.count[seg];
  }
  {
    tensorflow::mutex_lock lock(table->mu);
    if (table->dim() != dim) return errors::InvalidArgument(label, ": dimension mismatch");
    // Keys asked by several ranks repeat here; the table inserts each once.
    const int64_t step = table->NextStep();
    TF_RETURN_IF_ERROR(table->FindOrInsert(ctx, keys, n, step, slots, rows));
  }
  for (int64_t r = 0, at = 0; r < num_ranks && dim > 0; ++r) {
    const int64_t seg = r * num_tables + t;
    if (parsed.count[seg] == 0) continue;
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out + offsets[seg], rows + at * dim,
                        parsed.count[seg] * dim * sizeof(float), cudaMemcpyDeviceToDevice, stream),
        "row copy"));
    at += parsed.count[seg];
  }
  return absl::OkStatus();
}

}  // namespace sok_lite
