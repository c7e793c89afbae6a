// CPU functors of the exchange family (kernels in exchange_kernels.h) over kernels/core, and
// the DEVICE_CPU registrations.
#include "kernels/tf/exchange_kernels.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/core/lookup_unique.h"
#include "kernels/core/prefetch.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/hash_table_resource.h"
#include "kernels/tf/table_dtype.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernelContext;
namespace errors = ::tensorflow::errors;

template <>
absl::Status PartitionByOwnerFunctor<CPUDevice>::FindNegativeId(
    OpKernelContext*, const std::vector<const int64_t*>& ids, const std::vector<int64_t>& sizes,
    const std::vector<Owner>& owners, int64_t* table, int64_t* id) {
  *table = -1;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (owners[t].localized_rank == Owner::kHashed) continue;
    for (int64_t i = 0; i < sizes[t]; ++i) {
      if (ids[t][i] < 0) {
        *table = t;
        *id = ids[t][i];
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

template <>
absl::Status PartitionByOwnerFunctor<CPUDevice>::Compute(
    OpKernelContext*, const std::vector<const int64_t*>& ids, const std::vector<int64_t>& sizes,
    const std::vector<Owner>& owners, int64_t num_ranks, int64_t* counts, int64_t* message,
    int64_t* splits, int32_t* send_pos) {
  PartitionByOwner(ids, sizes, owners, num_ranks, counts, message, splits, send_pos);
  return absl::OkStatus();
}

template <>
absl::Status PeerHashTableCheck<CPUDevice>::Run(OpKernelContext* ctx, int t,
                                                const std::string& label, int64_t dim) {
  tensorflow::core::RefCountPtr<DynamicTableResource> table;
  TF_RETURN_IF_ERROR(LookupResource(ctx, HandleFromInput(ctx, t), &table));
  if (table->table.config().dim != dim) {  // the configuration never changes
    return errors::InvalidArgument(label, ": dimension mismatch");
  }
  return absl::OkStatus();
}

template <>
absl::Status IdMessageParser<CPUDevice>::Parse(OpKernelContext* ctx, int first, int64_t num_tables,
                                               ParsedIds* parsed) {
  const tensorflow::Tensor& message = ctx->input(first);
  const tensorflow::Tensor& splits = ctx->input(first + 1);
  const std::string problem =
      ParseIdMessage(message.flat<int64_t>().data(), message.NumElements(),
                     splits.flat<int64_t>().data(), splits.NumElements(), num_tables, parsed);
  if (!problem.empty()) return errors::InvalidArgument(problem);
  return absl::OkStatus();
}

namespace {

// Hash tables: every rank's keys of table t in one lookup step (finding or creating rows),
// written to each requester's place in the vector message.
template <typename T>
absl::Status AnswerFromHashTable(OpKernelContext* ctx, const PeerTables& tables, int t,
                                 const int64_t* message, const ParsedIds& parsed,
                                 const std::vector<int64_t>& offsets, int64_t num_ranks, T* out) {
  if constexpr (!std::is_same_v<T, float>) {
    return errors::InvalidArgument(tables.Label(t), ": hash tables hold float32 rows");
  } else {
    tensorflow::core::RefCountPtr<DynamicTableResource> table;
    TF_RETURN_IF_ERROR(LookupResource(ctx, HandleFromInput(ctx, t), &table));
    const int64_t num_tables = tables.dims.size(), dim = tables.dims[t];
    std::vector<int64_t> keys;
    for (int64_t r = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      keys.insert(keys.end(), message + parsed.begin[seg],
                  message + parsed.begin[seg] + parsed.count[seg]);
    }
    std::vector<int64_t> unique(keys.size());
    std::vector<int32_t> inverse(keys.size());
    const int64_t u = UniqueIds(keys.data(), keys.size(), unique.data(), inverse.data());
    std::vector<float> rows(u * dim);
    {
      tensorflow::mutex_lock lock(table->mu);
      if (table->table.config().dim != dim) {
        return errors::InvalidArgument(tables.Label(t), ": dimension mismatch");
      }
      const HashTable::Runner run = [ctx](int64_t total,
                                          const std::function<void(int64_t, int64_t)>& fn) {
        ParallelFor(ctx, total, 2000, fn);
      };
      const std::string problem = table->table.Lookup(unique.data(), u, rows.data(), run);
      if (!problem.empty()) return errors::InvalidArgument(tables.Label(t), ": ", problem);
    }
    int64_t k = 0;
    for (int64_t r = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      for (int64_t j = 0; j < parsed.count[seg]; ++j, ++k) {
        std::copy_n(rows.data() + static_cast<int64_t>(inverse[k]) * dim, dim,
                    out + offsets[seg] + j * dim);
      }
    }
    return absl::OkStatus();
  }
}

// Static table t's requested rows (read in place; the caller holds its shared lock), converted
// from the table's storage type to T. Stops at the first request out of range (*bad).
template <typename Stored, typename T>
void AnswerFromVariable(OpKernelContext* ctx, const PeerTables& tables, int t,
                        const int64_t* message, const ParsedIds& parsed,
                        const std::vector<int64_t>& offsets, int64_t num_ranks, T* out,
                        BadRowRequest* bad) {
  const int num_tables = tables.dims.size();
  const tensorflow::Tensor& table = *tables.vars[t]->tensor();
  const int64_t rows = table.dim_size(0), dim = tables.dims[t];
  const Stored* src = table.flat<Stored>().data();
  for (int64_t r = 0; r < num_ranks; ++r) {
    const int64_t seg = r * num_tables + t;
    const int64_t* ids = message + parsed.begin[seg];
    for (int64_t j = 0; j < parsed.count[seg]; ++j) {
      if (ids[j] < 0 || ids[j] >= rows) {
        *bad = {t, r, ids[j], rows};
        return;
      }
    }
    T* dst = out + offsets[seg];
    ParallelFor(ctx, parsed.count[seg], 4 * dim, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        if (j + kPrefetchDistance < j1) {
          PrefetchBytes<0>(src + ids[j + kPrefetchDistance] * dim, dim * sizeof(Stored));
        }
        ReadRow(src + ids[j] * dim, dim, dst + j * dim);
      }
    });
  }
}

}  // namespace

// Tables are answered in order; a static one is read in place under its shared lock (a 16-bit
// one widened to the float32 message: the vectors exchanged are float32 whatever the storage).
template <>
template <typename T>
absl::Status GatherForPeersFunctor<CPUDevice>::Compute(
    OpKernelContext* ctx, const PeerTables& tables, const int64_t* message, const ParsedIds& parsed,
    const std::vector<int64_t>& offsets, int64_t num_ranks, T* out, BadRowRequest* bad) {
  const int num_tables = tables.dims.size();
  for (int t = 0; t < num_tables && bad->table < 0; ++t) {
    if (tables.dynamic[t]) {
      TF_RETURN_IF_ERROR(
          AnswerFromHashTable<T>(ctx, tables, t, message, parsed, offsets, num_ranks, out));
      continue;
    }
    tensorflow::tf_shared_lock lock(*tables.vars[t]->mu());
    TF_RETURN_IF_ERROR(ForTableType<CPUDevice, T>(
        tables.vars[t]->tensor()->dtype(), tables.Label(t), [&](auto stored) -> absl::Status {
          using Stored = typename decltype(stored)::type;
          TF_RETURN_IF_ERROR(CheckPeerTable<Stored>(tables, t));
          AnswerFromVariable<Stored>(ctx, tables, t, message, parsed, offsets, num_ranks, out, bad);
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

template <>
absl::Status SendPosCheck<CPUDevice>::FindOutOfRange(OpKernelContext*, const int32_t* pos,
                                                     const RowLayout& layout, bool* found,
                                                     int32_t* value) {
  const int64_t num_tables = layout.num_unique.size();
  *found = false;
  for (size_t s = 0, p = 0; s < layout.count.size(); ++s) {
    const int64_t limit = layout.num_unique[s % num_tables];
    for (int64_t j = 0; j < layout.count[s]; ++j, ++p) {
      if (pos[p] < 0 || pos[p] >= limit) {
        *found = true;
        *value = pos[p];
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

template <>
template <typename T>
absl::Status UnpackRowsFunctor<CPUDevice>::Compute(OpKernelContext*, const T* src,
                                                   const int32_t* pos, const RowLayout& layout,
                                                   const std::vector<int64_t>& dims,
                                                   const std::vector<T*>& rows,
                                                   const std::vector<int64_t>& rows_elements) {
  const int64_t num_tables = dims.size();
  for (int64_t t = 0; t < num_tables; ++t) std::fill(rows[t], rows[t] + rows_elements[t], T(0));
  for (size_t s = 0, p = 0; s < layout.count.size(); ++s) {
    const int64_t t = s % num_tables, dim = dims[t];
    for (int64_t j = 0; j < layout.count[s]; ++j, ++p) {
      const T* from = src + layout.offsets[s] + j * dim;
      std::copy(from, from + dim, rows[t] + static_cast<int64_t>(pos[p]) * dim);
    }
  }
  return absl::OkStatus();
}

template <>
template <typename T>
absl::Status PackRowsFunctor<CPUDevice>::Compute(OpKernelContext*,
                                                 const std::vector<const T*>& rows,
                                                 const int32_t* pos, const RowLayout& layout,
                                                 const std::vector<int64_t>& dims, T* dst) {
  const int64_t num_tables = dims.size();
  for (size_t s = 0, p = 0; s < layout.count.size(); ++s) {
    const int64_t t = s % num_tables, dim = dims[t];
    for (int64_t j = 0; j < layout.count[s]; ++j, ++p) {
      const T* from = rows[t] + static_cast<int64_t>(pos[p]) * dim;
      std::copy(from, from + dim, dst + layout.offsets[s] + j * dim);
    }
  }
  return absl::OkStatus();
}

template <>
struct ReduceForOwnerFunctor<CPUDevice>::Scratch {
  // Per table: the distinct requested rows, and for each request its distinct index.
  std::vector<std::vector<int64_t>> distinct;
  std::vector<std::vector<int32_t>> inverse;
  std::vector<int64_t> num_distinct;
};

template <>
absl::Status ReduceForOwnerFunctor<CPUDevice>::Distinct(OpKernelContext*, const int64_t* message,
                                                        const ParsedIds& parsed, int64_t num_ranks,
                                                        int64_t num_tables, Scratch* scratch,
                                                        std::vector<int64_t>* num_distinct) {
  scratch->distinct.resize(num_tables);
  scratch->inverse.resize(num_tables);
  scratch->num_distinct.resize(num_tables);
  for (int64_t t = 0; t < num_tables; ++t) {
    std::vector<int64_t> requested;
    for (int64_t r = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      requested.insert(requested.end(), message + parsed.begin[seg],
                       message + parsed.begin[seg] + parsed.count[seg]);
    }
    std::vector<int64_t>& distinct = scratch->distinct[t];
    std::vector<int32_t>& inverse = scratch->inverse[t];
    distinct.resize(requested.size());
    inverse.resize(requested.size());
    scratch->num_distinct[t] =
        UniqueIds(requested.data(), requested.size(), distinct.data(), inverse.data());
  }
  *num_distinct = scratch->num_distinct;
  return absl::OkStatus();
}

template <>
template <typename T>
absl::Status ReduceForOwnerFunctor<CPUDevice>::Sum(
    OpKernelContext*, const Scratch& scratch, const T* grads, const ParsedIds& parsed,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& dims, int64_t num_ranks,
    const std::vector<int64_t*>& rows, const std::vector<T*>& values) {
  const int64_t num_tables = dims.size();
  for (int64_t t = 0; t < num_tables; ++t) {
    const int64_t dim = dims[t];
    const std::vector<int32_t>& inverse = scratch.inverse[t];
    const int64_t v = scratch.num_distinct[t];
    std::copy_n(scratch.distinct[t].begin(), v, rows[t]);
    std::fill(values[t], values[t] + v * dim, T(0));
    for (int64_t r = 0, k = 0; r < num_ranks; ++r) {
      const int64_t seg = r * num_tables + t;
      for (int64_t j = 0; j < parsed.count[seg]; ++j, ++k) {
        const T* from = grads + offsets[seg] + j * dim;
        T* dst = values[t] + static_cast<int64_t>(inverse[k]) * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += from[d];
      }
    }
  }
  return absl::OkStatus();
}

REGISTER_KERNEL_BUILDER(Name("SokLitePartitionByOwner").Device(DEVICE_CPU),
                        PartitionByOwnerOp<CPUDevice>);

#define SOK_LITE_REGISTER_CPU(T)                                                                   \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteGatherForPeers").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      GatherForPeersOp<CPUDevice, T>);                                                             \
  REGISTER_KERNEL_BUILDER(Name("SokLiteUnpackRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          UnpackRowsOp<CPUDevice, T>);                                             \
  REGISTER_KERNEL_BUILDER(Name("SokLitePackRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),   \
                          PackRowsOp<CPUDevice, T>);                                               \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteReduceForOwner").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      ReduceForOwnerOp<CPUDevice, T>);
SOK_LITE_REGISTER_CPU(float)
SOK_LITE_REGISTER_CPU(double)
#undef SOK_LITE_REGISTER_CPU

}  // namespace sok_lite
