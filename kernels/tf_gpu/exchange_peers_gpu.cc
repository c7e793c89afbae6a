// GPU functors of the owner side of the exchange (kernels in kernels/tf/exchange_kernels.h):
// SokLiteGatherForPeers answers a received id message from local static tables and device hash
// tables, and SokLiteReduceForOwner (its gradient) sums what the peers sent back per local row.
// Float32 messages (16-bit tables widened as they are read); the id message stays on the device,
// its split sizes are in host memory.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/exchange_kernels.h"
#include "kernels/tf/table_dtype.h"
#include "kernels/tf_gpu/check_segments_gpu.h"
#include "kernels/tf_gpu/exchange_id_message_gpu.h"
#include "kernels/tf_gpu/exchange_peers_hash_table_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/hash_table_resource_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::Var;

template <>
absl::Status PeerHashTableCheck<GPUDevice>::Run(OpKernelContext* ctx, int t,
                                                const std::string& label, int64_t dim) {
  tensorflow::core::RefCountPtr<DynamicTableGpuResource> table;
  TF_RETURN_IF_ERROR(LookupDeviceTable(ctx, t, &table));
  tensorflow::tf_shared_lock lock(table->mu);
  if (table->dim() != dim)
    return tensorflow::errors::InvalidArgument(label, ": dimension mismatch");
  return absl::OkStatus();
}

template <>
absl::Status IdMessageParser<GPUDevice>::Parse(OpKernelContext* ctx, int first, int64_t num_tables,
                                               ParsedIds* parsed) {
  return ParseDeviceIdMessage(ctx, ctx->input(first), ctx->input(first + 1), num_tables, parsed);
}

// Static tables first, then hash tables (exchange_peers_hash_table_gpu.h). Rows are read in place
// under shared locks, taken in address order and held until every gather is queued, so that the
// checked shapes are the ones read; every range check comes back in one wait.
template <>
template <>
absl::Status GatherForPeersFunctor<GPUDevice>::Compute<float>(
    OpKernelContext* ctx, const PeerTables& tables, const int64_t* ids, const ParsedIds& parsed,
    const std::vector<int64_t>& offsets, int64_t num_ranks, float* out, BadRowRequest* bad) {
  const int num_tables = tables.dims.size();
  std::vector<Var*> order;
  for (auto& v : tables.vars) {
    if (v) order.push_back(v.get());
  }
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_ptr<tensorflow::tf_shared_lock>> locks;
  for (Var* v : order) locks.push_back(std::make_unique<tensorflow::tf_shared_lock>(*v->mu()));
  std::vector<absl::Status> table_status(num_tables);
  std::vector<int64_t> begin, count, limit;  // segments (t, r) of the tables that passed
  for (int t = 0; t < num_tables; ++t) {
    if (tables.dynamic[t]) continue;
    table_status[t] = ForTableType<GPUDevice, float>(
        tables.vars[t]->tensor()->dtype(), tables.Label(t), [&](auto stored) -> absl::Status {
          return CheckPeerTable<typename decltype(stored)::type>(tables, t);
        });
    if (!table_status[t].ok()) continue;
    for (int64_t r = 0; r < num_ranks; ++r) {
      begin.push_back(parsed.begin[r * num_tables + t]);
      count.push_back(parsed.count[r * num_tables + t]);
      limit.push_back(tables.vars[t]->tensor()->dim_size(0));
    }
  }
  Tensor bad_t;
  uint64_t* bad_at = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, begin.size(), &bad_t, &bad_at));
  TF_RETURN_IF_ERROR(LaunchSegmentChecks(ctx, ids, begin, count, limit, bad_at));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad_at, begin.size(), &host));
  // Problems in the CPU kernel's order: table by table, then rank by rank.
  for (int t = 0, s = 0; t < num_tables; ++t) {
    TF_RETURN_IF_ERROR(table_status[t]);
    for (int64_t r = 0; r < num_ranks && !tables.dynamic[t]; ++r, ++s) {
      if (host[s] == ~uint64_t{0}) continue;
      *bad = {t, r, 0, limit[s]};
      return ValueAt(ctx, ids + begin[s] + host[s], &bad->row);
    }
  }
  for (int t = 0; t < num_tables; ++t) {
    if (tables.dynamic[t]) continue;
    const Tensor& table = *tables.vars[t]->tensor();
    for (int64_t r = 0; r < num_ranks && tables.dims[t] > 0; ++r) {
      const int64_t seg = r * num_tables + t;
      const int64_t* seg_ids = ids + parsed.begin[seg];
      float* seg_out = out + offsets[seg];
      // A 16-bit table's rows are widened into the float32 message.
      TF_RETURN_IF_ERROR(ForTableType<GPUDevice, float>(
          table.dtype(), tables.Label(t), [&](auto stored) -> absl::Status {
            using Stored = typename decltype(stored)::type;
            const Stored* src = table.flat<Stored>().data();
            cudaError_t err;
            if constexpr (std::is_same_v<Stored, float>) {
              err = sok_lite_cuda_gather_rows(src, tables.dims[t], seg_ids, parsed.count[seg],
                                              seg_out, OpStream(ctx));
            } else {
              err = sok_lite_cuda_gather_half_rows(
                  HalfBits(src), static_cast<int>(HalfStorage<Stored>::kFormat), tables.dims[t],
                  seg_ids, parsed.count[seg], seg_out, OpStream(ctx));
            }
            return CudaStatus(err, "gather_rows");
          }));
    }
  }
  locks.clear();  // the static reads are queued
  for (int t = 0; t < num_tables; ++t) {
    if (!tables.dynamic[t]) continue;
    TF_RETURN_IF_ERROR(AnswerPeersFromDeviceTable(ctx, t, tables.Label(t), tables.dims[t], ids,
                                                  parsed, offsets, num_ranks, num_tables, out));
  }
  return absl::OkStatus();
}

template <>
struct ReduceForOwnerFunctor<GPUDevice>::Scratch {
  // Per table (device): the distinct requested rows and each request's distinct index.
  std::vector<Tensor> distinct, inverse;
  std::vector<int64_t> num_distinct;
};

// Per table: every rank's requests gathered into one list and deduplicated (first-occurrence
// order, as the CPU); the distinct counts come back in one copy.
template <>
absl::Status ReduceForOwnerFunctor<GPUDevice>::Distinct(OpKernelContext* ctx,
                                                        const int64_t* message,
                                                        const ParsedIds& parsed, int64_t num_ranks,
                                                        int64_t num_tables, Scratch* scratch,
                                                        std::vector<int64_t>* num_distinct) {
  cudaStream_t stream = OpStream(ctx);
  Tensor counts_t;
  uint64_t* counts = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, num_tables, &counts_t, &counts));
  scratch->distinct.resize(num_tables);
  scratch->inverse.resize(num_tables);
  for (int64_t t = 0; t < num_tables; ++t) {
    int64_t n = 0;
    for (int64_t r = 0; r < num_ranks; ++r) n += parsed.count[r * num_tables + t];
    Tensor requested_t, workspace_t;
    int64_t *requested = nullptr, *unique = nullptr;
    int32_t* inv = nullptr;
    uint8_t* workspace = nullptr;
    TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &requested_t, &requested));
    TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &scratch->distinct[t], &unique));
    TF_RETURN_IF_ERROR(DeviceTemp<int32_t>(ctx, n, &scratch->inverse[t], &inv));
    for (int64_t r = 0, at = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      if (parsed.count[seg] == 0) continue;
      TF_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(requested + at, message + parsed.begin[seg],
                          parsed.count[seg] * sizeof(int64_t), cudaMemcpyDeviceToDevice, stream),
          "request copy"));
      at += parsed.count[seg];
    }
    size_t bytes = 0;
    TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
    TF_RETURN_IF_ERROR(DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
    TF_RETURN_IF_ERROR(CudaStatus(
        sok_lite_cuda_unique_ids(requested, n, unique, inv, nullptr,
                                 reinterpret_cast<int64_t*>(counts + t), workspace, bytes, stream),
        "unique_ids"));
  }
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, counts, num_tables, &host));
  scratch->num_distinct.assign(host.begin(), host.end());
  *num_distinct = scratch->num_distinct;
  return absl::OkStatus();
}

template <>
template <>
absl::Status ReduceForOwnerFunctor<GPUDevice>::Sum<float>(
    OpKernelContext* ctx, const Scratch& scratch, const float* grads, const ParsedIds& parsed,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& dims, int64_t num_ranks,
    const std::vector<int64_t*>& rows, const std::vector<float*>& values) {
  cudaStream_t stream = OpStream(ctx);
  const int64_t num_tables = dims.size();
  for (int64_t t = 0; t < num_tables; ++t) {
    const int64_t v = scratch.num_distinct[t], dim = dims[t];
    if (v == 0) continue;
    TF_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(rows[t], scratch.distinct[t].flat<int64_t>().data(),
                                   v * sizeof(int64_t), cudaMemcpyDeviceToDevice, stream),
                   "distinct rows copy"));
    if (dim == 0) continue;
    TF_RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(values[t], 0, v * dim * sizeof(float), stream), "zero values"));
    const int32_t* inv = scratch.inverse[t].flat<int32_t>().data();
    for (int64_t r = 0, at = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      TF_RETURN_IF_ERROR(
          CudaStatus(sok_lite_cuda_scatter_add_rows(grads + offsets[seg], dim, inv + at,
                                                    parsed.count[seg], values[t], stream),
                     "scatter_add_rows"));
      at += parsed.count[seg];
    }
  }
  return absl::OkStatus();
}

REGISTER_KERNEL_BUILDER(Name("SokLiteGatherForPeers")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("vector_splits")
                            .TypeConstraint<float>("dtype"),
                        GatherForPeersOp<GPUDevice, float>);
REGISTER_KERNEL_BUILDER(Name("SokLiteReduceForOwner")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .TypeConstraint<float>("dtype"),
                        ReduceForOwnerOp<GPUDevice, float>);

}  // namespace sok_lite
