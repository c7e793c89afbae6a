// The CPU-only kernels that the disk tier brought: an export a piece at a time over both tiers
// (sok.dump never holds a whole table), the memory counters of DynamicVariable.memory_stats and
// the prefetch of a coming batch's rows from disk.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/mapped_memory.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/hash_table_resource.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/lock_trace.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/platform/blocking_counter.h"
#include "tensorflow/core/platform/threadpool.h"

namespace sok_lite {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicExportRangeOp : public tensorflow::OpKernel {
 public:
  explicit DynamicExportRangeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string label = DynamicTableLabel(name_);
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    int64_t since = 0, cursor = 0, limit = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &since));
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 2, &cursor));
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3, &limit));
    OP_REQUIRES(ctx, limit >= 1 && cursor >= 0,
                errors::InvalidArgument(label, ": export range from ", cursor, " of ", limit,
                                        " rows; cursor must be >= 0 and limit >= 1"));
    // Reading rows back from disk moves nothing: a shared lock suffices.
    tensorflow::tf_shared_lock lock(t->mu);
    std::vector<int64_t> keys;
    std::vector<float> rows;
    int64_t next = -1;
    const std::string problem = t->table.ExportRange(since, cursor, limit, &keys, &rows, &next);
    OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(label, ": ", problem));
    // rows holds whole records (16-bit values packed); ReadRow gives them as float32 columns.
    const int64_t n = keys.size(), record = t->table.stride();
    const int64_t width = with_slots_ ? t->stride() : t->dim();
    Tensor *keys_out, *values_out, *next_out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &keys_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, width}), &values_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &next_out));
    std::copy(keys.begin(), keys.end(), keys_out->flat<int64_t>().data());
    float* values = values_out->flat<float>().data();
    for (int64_t i = 0; i < n; ++i) {
      t->table.ReadRow(rows.data() + i * record, with_slots_, values + i * width);
    }
    next_out->scalar<int64_t>()() = next;
  }

 private:
  bool with_slots_ = false;
  std::string name_;
};

class DynamicMemoryStatsOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    tensorflow::tf_shared_lock lock(t->mu);
    const std::vector<int64_t> stats = t->table.MemoryStats();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(stats.size())}), &out));
    std::copy(stats.begin(), stats.end(), out->flat<int64_t>().data());
  }
};

// A prefetch's file reads run on threads of their own, not on TF's compute threads: a read
// waits on the disk, and compute threads blocked in pread would hold up the ops of the step
// beside it (measured: a 24 ms step took 490 ms beside a prefetch reading from the disk). Eight
// of them keep eight reads in flight.
constexpr int kPrefetchReadThreads = 8;

void RunOnReadThreads(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  static tensorflow::thread::ThreadPool* const pool = new tensorflow::thread::ThreadPool(
      tensorflow::Env::Default(), "sok_lite_prefetch_read", kPrefetchReadThreads);
  const int64_t parts = std::min<int64_t>(n, kPrefetchReadThreads);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  tensorflow::BlockingCounter done(parts);
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t i0 = n * p / parts, i1 = n * (p + 1) / parts;
    pool->Schedule([&fn, &done, i0, i1] {
      fn(i0, i1);
      done.DecrementCount();
    });
  }
  done.Wait();
}

class DynamicPrefetchOp : public tensorflow::OpKernel {
 public:
  explicit DynamicPrefetchOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("owner", &owner_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rank", &rank_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_ranks", &num_ranks_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wait_for_lookup", &wait_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES(ctx, rank_ < num_ranks_ && owner_ >= SOK_LITE_OWNER_HASHED && owner_ < num_ranks_,
                errors::InvalidArgument(DynamicTableLabel(name_), ": prefetch for rank ", rank_,
                                        " of ", num_ranks_, " with owner code ", owner_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    const Tensor& keys_in = ctx->input(1);
    OP_REQUIRES(ctx, keys_in.dims() == 1,
                errors::InvalidArgument(DynamicTableLabel(name_),
                                        ": prefetch keys must be 1-D, "
                                        "got shape ",
                                        keys_in.shape().DebugString()));
    // This rank's keys; on one rank all of them.
    ScratchVector<int64_t> own;
    const auto keys = keys_in.flat<int64_t>();
    for (int64_t i = 0; i < keys.size(); ++i) {
      if (num_ranks_ == 1 || OwnerRank(owner_, keys(i), num_ranks_) == rank_) {
        own.push_back(keys(i));
      }
    }
    if (wait_) WaitForLookup(ctx, t.get());
    const HashTable::Runner run = [ctx](int64_t total,
                                        const std::function<void(int64_t, int64_t)>& fn) {
      ParallelFor(ctx, total, 2000, fn);
    };
    // The file is read without the table's lock, so that the step's update and the next lookup
    // do not wait for the disk; the rows are placed under it, those the table moved meanwhile
    // left where they are. Best effort: on an error nothing moved, and the lookup needing the
    // row reports it.
    int64_t read = 0;
    HashTable::PrefetchPlan plan;
    std::string problem;
    {
      LockTrace trace(t.get(), "prefetch-plan");
      tensorflow::mutex_lock lock(t->mu);
      trace.Held();
      t->prefetch_step = t->table.step();
      problem = t->table.BeginPrefetch(own.data(), own.size(), run, &plan);
    }
    if (problem.empty()) {
      {
        LockTrace trace(t.get(), "prefetch-read");  // without the lock
        HashTable::ReadPrefetch(&plan, RunOnReadThreads);
      }
      LockTrace trace(t.get(), "prefetch-place");
      tensorflow::mutex_lock lock(t->mu);
      trace.Held();
      problem = t->table.FinishPrefetch(&plan, run, &read);
    }
    if (!problem.empty()) {
      read = 0;
      LOG_EVERY_N_SEC(WARNING, 60) << DynamicTableLabel(name_) << ": prefetch skipped: " << problem;
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = read;
  }

 private:
  // Polls (every 200 us, at most 1 s) until the table has had a lookup step since the last
  // prefetch, or the op is cancelled (an input pipeline torn down).
  static void WaitForLookup(OpKernelContext* ctx, DynamicTableResource* t) {
    const uint64_t deadline = tensorflow::Env::Default()->NowMicros() + 1000000;
    while (true) {
      {
        tensorflow::tf_shared_lock lock(t->mu);
        // Any change counts: a checkpoint load swaps in rows with their own step counter.
        if (t->table.step() != t->prefetch_step) return;
      }
      if (ctx->cancellation_manager() && ctx->cancellation_manager()->IsCancelled()) return;
      if (tensorflow::Env::Default()->NowMicros() > deadline) return;
      tensorflow::Env::Default()->SleepForMicroseconds(200);
    }
  }

  int64_t owner_ = SOK_LITE_OWNER_HASHED;
  int64_t rank_ = 0;
  int64_t num_ranks_ = 1;
  bool wait_ = true;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicExportRange").Device(::tensorflow::DEVICE_CPU),
                        DynamicExportRangeOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicMemoryStats").Device(::tensorflow::DEVICE_CPU),
                        DynamicMemoryStatsOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicPrefetch").Device(::tensorflow::DEVICE_CPU),
                        DynamicPrefetchOp);

}  // namespace
}  // namespace sok_lite
