// Op registrations of the exchange family: packing the id and vector messages of the distributed
// lookup around the communicator's all-to-alls (see kernels/core/exchange.h for the layout).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

int64_t Attr(InferenceContext* c, const char* name) {
  int64_t v = 0;
  if (!c->GetAttr(name, &v).ok()) return -1;
  return v;
}

Status PartitionByOwnerShape(InferenceContext* c) {
  const int64_t n = Attr(c, "N");
  const int64_t ranks = Attr(c, "num_ranks");
  if (n < 1 || ranks < 1 || ranks > (int64_t{1} << 20)) {
    return ::tensorflow::errors::InvalidArgument("bad N or num_ranks");
  }
  for (int64_t t = 0; t < n; ++t) {
    ShapeHandle unused;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(t), 1, &unused));
  }
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));  // message
  c->set_output(1, c->Vector(ranks));                          // splits
  c->set_output(2, c->Vector(ranks * n));                      // counts
  c->set_output(3, c->Vector(InferenceContext::kUnknownDim));  // send_pos
  return absl::OkStatus();
}

Status GatherForPeersShape(InferenceContext* c) {
  const int64_t n = Attr(c, "N");
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(n), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(n + 1), 1, &unused));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  c->set_output(1, c->input(n + 1));
  return absl::OkStatus();
}

// dims must name exactly the N outputs (set_output beyond them would throw inside TF).
Status CheckDimsAttr(InferenceContext* c, const std::vector<int64_t>& dims, int64_t outputs) {
  if (static_cast<int64_t>(dims.size()) != outputs) {
    return ::tensorflow::errors::InvalidArgument("dims has ", dims.size(), " entries for ", outputs,
                                                 " tables");
  }
  return absl::OkStatus();
}

Status UnpackRowsShape(InferenceContext* c) {
  std::vector<int64_t> dims;
  TF_RETURN_IF_ERROR(c->GetAttr("dims", &dims));
  TF_RETURN_IF_ERROR(CheckDimsAttr(c, dims, c->num_outputs()));
  for (size_t t = 0; t < dims.size(); ++t) {
    c->set_output(t, c->Matrix(InferenceContext::kUnknownDim, dims[t]));
  }
  return absl::OkStatus();
}

Status PackRowsShape(InferenceContext* c) {
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

Status ReduceForOwnerShape(InferenceContext* c) {
  std::vector<int64_t> dims;
  TF_RETURN_IF_ERROR(c->GetAttr("dims", &dims));
  TF_RETURN_IF_ERROR(CheckDimsAttr(c, dims, c->num_outputs() / 2));
  const int32_t n = dims.size();
  for (int32_t t = 0; t < n; ++t) {
    c->set_output(t, c->Vector(InferenceContext::kUnknownDim));
    c->set_output(n + t, c->Matrix(InferenceContext::kUnknownDim, dims[t]));
  }
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("SokLitePartitionByOwner")
    .Input("unique_ids: N * int64")
    .Output("message: int64")
    .Output("splits: int64")
    .Output("counts: int64")
    .Output("send_pos: int32")
    .Attr("N: int >= 1")
    .Attr("num_ranks: int >= 1")
    .Attr("localized_ranks: list(int)")
    .SetShapeFn(PartitionByOwnerShape)
    .Doc(R"doc(
Builds the id message of the distributed lookup from each table's unique global ids.

localized_ranks: per table, -1 for a distributed table (row i on rank i % num_ranks), -2 for a
  hash table (key k on the rank its hash selects, sent as is) or the rank holding the whole table.
message: per destination rank, T counts then the owner-local rows, table by table.
splits: [num_ranks] segment sizes of message.
counts: [num_ranks * N] ids of table t sent to rank r at r * N + t.
send_pos: per id of the message (headers skipped), its index in its table's unique ids.
)doc");

REGISTER_OP("SokLiteGatherForPeers")
    .Input("handles: N * resource")
    .Input("message: int64")
    .Input("splits: int64")
    .Output("vectors: dtype")
    .Output("vector_splits: int64")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("dims: list(int)")
    .Attr("dynamic: list(bool)")
    .Attr("table_names: list(string)")
    .SetShapeFn(GatherForPeersShape)
    .Doc(R"doc(
Answers received id messages: reads the requested local rows of N variables in place and
flattens them in message order. vector_splits: elements answered to each rank. dims: the
variables' row widths (checked; the gradient needs them statically). dynamic: per table, whether
the handle is a hash table (rows found or created by key) rather than a resource variable.
dtype: the message's dtype; with float, variables may also hold bfloat16 or float16 rows, which
are widened to float32 as they are copied.
)doc");

REGISTER_OP("SokLiteUnpackRows")
    .Input("vectors: dtype")
    .Input("counts: int64")
    .Input("send_pos: int32")
    .Output("rows: N * dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("dims: list(int)")
    .SetShapeFn(UnpackRowsShape)
    .Doc(R"doc(
Puts the received vector message back into per-table [num_unique, dim] rows in unique order.
)doc");

REGISTER_OP("SokLitePackRows")
    .Input("rows: N * dtype")
    .Input("counts: int64")
    .Input("send_pos: int32")
    .Output("vectors: dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .SetShapeFn(PackRowsShape)
    .Doc(R"doc(
The inverse of SokLiteUnpackRows (its gradient): per-table rows into the vector message layout.
)doc");

REGISTER_OP("SokLiteReduceForOwner")
    .Input("grads: dtype")
    .Input("message: int64")
    .Input("splits: int64")
    .Output("rows: N * int64")
    .Output("values: N * dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("dims: list(int)")
    .SetShapeFn(ReduceForOwnerShape)
    .Doc(R"doc(
Gradient of SokLiteGatherForPeers: sums the gradient rows that all ranks sent back for the same
local row; per table the distinct local rows and their summed gradients.
)doc");

}  // namespace sok_lite
