// Op registrations of the dynamic (hash) table family.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

absl::Status LookupShape(InferenceContext* c) {
  ShapeHandle keys;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &keys));
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  c->set_output(0, c->Matrix(c->Dim(keys, 0), dim));
  return absl::OkStatus();
}

absl::Status LookupCombineShape(InferenceContext* c) {
  ShapeHandle ids, splits, weights;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &ids));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &splits));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &weights));
  ::tensorflow::shape_inference::DimensionHandle batch;
  TF_RETURN_IF_ERROR(c->Subtract(c->Dim(splits, 0), 1, &batch));
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  c->set_output(0, c->Matrix(batch, dim));
  return absl::OkStatus();
}

absl::Status ExportShape(InferenceContext* c) {
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  c->set_output(1, c->Matrix(InferenceContext::kUnknownDim, InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("SokLiteDynamicTable")
    .Output("table: resource")
    .Attr("container: string = ''")
    .Attr("shared_name: string")
    .Attr("dim: int >= 1")
    .Attr("init_kind: string")
    .Attr("seed: int")
    .Attr("init_a: float = 0.0")
    .Attr("init_b: float = 1.0")
    .Attr("capacity: int = 0")
    .Attr("policy: {'lru', 'lfu'} = 'lru'")
    .Attr("min_count: int = 1")
    .Attr("storage_dtype: {float, bfloat16, half} = DT_FLOAT")
    .Attr("rounding_seed: int = 0")
    .Attr("tier_path: string = ''")
    .Attr("ram_budget: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Creates (or finds, by shared_name) the hash table of a DynamicVariable on this rank.

init_kind, seed, init_a, init_b: the row initializer (SokLiteInitRows) applied to the key.
capacity: rows this rank may hold (0: unbounded); policy: which rows to evict when full.
min_count: a key gets a stored, trainable row from its min_count-th lookup on.
storage_dtype: the values' storage (bfloat16, half: 16 bits, CPU only; rows are read and
  written as float32 and optimizer slots stay float32). rounding_seed: with the optimizer step
  and the key, draws bfloat16's stochastic rounding of updated rows.
tier_path, ram_budget: with a tier_path, the rows beyond ram_budget bytes of RAM live in a file
in that directory (created fresh: a cache, not a checkpoint) and come back when looked up.
)doc");

REGISTER_OP("SokLiteDynamicLookup")
    .Input("table: resource")
    .Input("keys: int64")
    .Output("values: float")
    .Attr("dim: int >= 1")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(LookupShape)
    .Doc(R"doc(
One lookup step: finds or creates the rows of `keys` and returns their values in key order.
Keys may repeat; each distinct key counts once per step for eviction and admission.
)doc");

REGISTER_OP("SokLiteDynamicLookupCombine")
    .Input("table: resource")
    .Input("ids: int64")
    .Input("row_splits: int64")
    .Input("weights: float")
    .Output("combined: float")
    .Attr("dim: int >= 1")
    .Attr("combiner: {'sum', 'mean', 'sqrtn'} = 'sum'")
    .Attr("hotness: int >= 0 = 0")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(LookupCombineShape)
    .Doc(R"doc(
One rank's lookup_sparse on a hash table: one lookup step (as SokLiteDynamicLookup) over the ids,
not deduplicated, fused with the per-sample combine (as SokLiteSegmentCombine). Sample b's ids
are ids[row_splits[b], row_splits[b + 1]); weights: one per id, or empty (all 1). hotness: the
most ids a sample may have (0: no limit). Returns [batch, dim].
)doc");

REGISTER_OP("SokLiteDynamicApply")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("hyper: float64")
    .Input("step: int64")
    .Attr("kind: string")
    .Attr("slot_init: list(float)")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Applies an optimizer step (see SokLiteSparseApply) to the stored rows of `keys` and to their slots,
which live in the table beside each row; slot_init gives the slots' initial values. Keys without a
stored row (not admitted yet, or evicted) are skipped. step: the optimizer step, recorded per row
for incremental dumps.
)doc");

REGISTER_OP("SokLiteDynamicExport")
    .Input("table: resource")
    .Input("since_step: int64")
    .Output("keys: int64")
    .Output("values: float")
    .Attr("with_slots: bool = false")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(ExportShape)
    .Doc(R"doc(
Every stored key of this rank and its row ([dim], or [dim * (1 + slots)] with the slots); with
since_step > INT64_MIN only the rows an optimizer step or an assign changed after that step.
)doc");

REGISTER_OP("SokLiteDynamicExportRange")
    .Input("table: resource")
    .Input("since_step: int64")
    .Input("cursor: int64")
    .Input("limit: int64")
    .Output("keys: int64")
    .Output("values: float")
    .Output("next_cursor: int64")
    .Attr("with_slots: bool = false")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ExportShape(c));
      c->set_output(2, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
One piece of SokLiteDynamicExport: at most `limit` rows from position `cursor` (0 first) over the
RAM rows, then the rows on disk; next_cursor continues (-1: done). Positions stay valid while the
table does not change, so a dump reads a table of any size a piece at a time.
)doc");

REGISTER_OP("SokLiteDynamicMemoryStats")
    .Input("table: resource")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(9));
      return absl::OkStatus();
    })
    .Doc(R"doc(
This rank's rows_ram, rows_disk, bytes_ram, bytes_disk, ram_budget (-1: unbounded), hits, misses,
spills, evictions (counters since creation).
)doc");

REGISTER_OP("SokLiteDynamicPrefetch")
    .Input("table: resource")
    .Input("keys: int64")
    .Output("read: int64")
    .Attr("owner: int")
    .Attr("rank: int >= 0")
    .Attr("num_ranks: int >= 1")
    .Attr("wait_for_lookup: bool = true")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Reads the rows of a coming batch's keys that are on this rank's disk tier back into RAM before
the lookup that needs them, and keeps that batch's rows in RAM until it (HashTable::Prefetch).
Only the keys this rank owns count (owner: the localized rank, or -2 for keys by hash, of
num_ranks). With wait_for_lookup, first waits (at most a second, or until cancelled) for a lookup
after the previous prefetch, so that a prefetch running one batch ahead follows the current
batch's lookup instead of delaying it. Best effort: a failure of the tier moves nothing and is
not raised (the lookup that needs the row raises it); read: the rows read back (0 then).
)doc");

REGISTER_OP("SokLiteDynamicAssign")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .Input("step: int64")
    .Attr("with_slots: bool = false")
    .Attr("table_name: string = ''")
    .Attr("slot_init: list(float) = []")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Stores rows for keys (replacing existing ones); values are [n, dim] or, with_slots, full rows.
step: the optimizer step the rows count as changed at. slot_init: the initial values of the
slots a restore lays out (one per slot; empty: zeros until the first optimizer step sets them).
)doc");

REGISTER_OP("SokLiteDynamicSize")
    .Input("table: resource")
    .Output("size: int64")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_OP("SokLiteDynamicClear")
    .Input("table: resource")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Removes every row of this rank's table (before loading a checkpoint into it).");

REGISTER_OP("SokLiteDynamicEvict")
    .Input("table: resource")
    .Input("steps_unseen: int64")
    .Output("evicted: int64")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Removes the rows not looked up during the last steps_unseen lookup steps of this table.
)doc");

}  // namespace sok_lite
