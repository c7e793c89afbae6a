// Attributes that the CPU kernels (kernels/tf) and the GPU kernels (kernels/tf_gpu) of one op
// both read: parsed and checked by the same code, so a bad attribute gets the same error on
// either device.
#ifndef SOK_LITE_KERNELS_TF_KERNEL_ARGS_H_
#define SOK_LITE_KERNELS_TF_KERNEL_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/core/hash_table.h"
#include "kernels/core/lookup_combine.h"
#include "kernels/core/row_init.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// An initializer from the attributes `kind_attr` (its name), "seed", `a_attr` and `b_attr`.
inline absl::Status ReadRowInit(tensorflow::OpKernelConstruction* ctx, const char* kind_attr,
                                const char* a_attr, const char* b_attr, RowInit* init) {
  std::string kind;
  int64_t seed = 0;
  float a = 0, b = 1;
  TF_RETURN_IF_ERROR(ctx->GetAttr(kind_attr, &kind));
  TF_RETURN_IF_ERROR(ctx->GetAttr("seed", &seed));
  TF_RETURN_IF_ERROR(ctx->GetAttr(a_attr, &a));
  TF_RETURN_IF_ERROR(ctx->GetAttr(b_attr, &b));
  if (!ParseInitKind(kind, &init->kind)) {
    return tensorflow::errors::InvalidArgument("unknown initializer kind '", kind, "'");
  }
  init->seed = static_cast<uint64_t>(seed);
  init->a = a;
  init->b = b;
  return absl::OkStatus();
}

// The row width attribute "dim", checked against `max_dim`.
inline absl::Status ReadRowWidth(tensorflow::OpKernelConstruction* ctx, int64_t max_dim,
                                 int64_t* dim) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("dim", dim));
  if (*dim > max_dim) {
    return tensorflow::errors::InvalidArgument("row width ", *dim, " is out of range");
  }
  return absl::OkStatus();
}

// SokLiteDynamicTable's attributes: row width, initializer, policies and value storage.
inline absl::Status ReadTableConfig(tensorflow::OpKernelConstruction* ctx, TableConfig* config) {
  std::string policy;
  TF_RETURN_IF_ERROR(ReadRowWidth(ctx, int64_t{1} << 20, &config->dim));
  TF_RETURN_IF_ERROR(ReadRowInit(ctx, "init_kind", "init_a", "init_b", &config->init));
  TF_RETURN_IF_ERROR(ctx->GetAttr("capacity", &config->capacity));
  TF_RETURN_IF_ERROR(ctx->GetAttr("policy", &policy));
  TF_RETURN_IF_ERROR(ctx->GetAttr("min_count", &config->min_count));
  TF_RETURN_IF_ERROR(ctx->GetAttr("tier_path", &config->tier_dir));
  TF_RETURN_IF_ERROR(ctx->GetAttr("ram_budget", &config->ram_budget));
  config->policy = policy == "lfu" ? EvictPolicy::kLfu : EvictPolicy::kLru;
  tensorflow::DataType storage;
  int64_t rounding_seed = 0;
  TF_RETURN_IF_ERROR(ctx->GetAttr("storage_dtype", &storage));
  TF_RETURN_IF_ERROR(ctx->GetAttr("rounding_seed", &rounding_seed));
  config->half_values = storage != tensorflow::DT_FLOAT;
  config->half_format =
      storage == tensorflow::DT_HALF ? HalfFormat::kFloat16 : HalfFormat::kBfloat16;
  config->rounding_seed = static_cast<uint64_t>(rounding_seed);
  return absl::OkStatus();
}

// SokLitePartitionByOwner's "num_ranks" and "localized_ranks" (one owner code per table).
inline absl::Status ReadOwners(tensorflow::OpKernelConstruction* ctx, int64_t* num_ranks,
                               std::vector<Owner>* owners) {
  std::vector<int64_t> localized;
  TF_RETURN_IF_ERROR(ctx->GetAttr("num_ranks", num_ranks));
  TF_RETURN_IF_ERROR(ctx->GetAttr("localized_ranks", &localized));
  for (int64_t r : localized) {
    if (r < Owner::kHashed || r >= *num_ranks) {
      return tensorflow::errors::InvalidArgument("localized rank ", r, " of ", *num_ranks,
                                                 " ranks");
    }
    owners->push_back(Owner{r});
  }
  return absl::OkStatus();
}

// The "combiners" attribute of the segment-combine ops (one name per table).
inline absl::Status ReadCombiners(tensorflow::OpKernelConstruction* ctx,
                                  std::vector<Combiner>* combiners) {
  std::vector<std::string> names;
  TF_RETURN_IF_ERROR(ctx->GetAttr("combiners", &names));
  for (const auto& name : names) {
    Combiner c;
    if (!ParseCombiner(name, &c)) {
      return tensorflow::errors::InvalidArgument("unknown combiner '", name, "'");
    }
    combiners->push_back(c);
  }
  return absl::OkStatus();
}

// SokLiteUniqueIds' per-table attributes.
struct UniqueIdsArgs {
  std::vector<int64_t> num_rows;
  std::vector<int64_t> hotness;
  std::vector<std::string> names;

  absl::Status Read(tensorflow::OpKernelConstruction* ctx) {
    int n = 0;
    TF_RETURN_IF_ERROR(ctx->GetAttr("N", &n));
    TF_RETURN_IF_ERROR(ctx->GetAttr("num_rows", &num_rows));
    TF_RETURN_IF_ERROR(ctx->GetAttr("hotness", &hotness));
    TF_RETURN_IF_ERROR(ctx->GetAttr("table_names", &names));
    if (static_cast<int>(num_rows.size()) != n || static_cast<int>(hotness.size()) != n) {
      return tensorflow::errors::InvalidArgument("num_rows and hotness need one entry per table");
    }
    return absl::OkStatus();
  }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_KERNEL_ARGS_H_
