// The backward pass of lookup_sparse and the row-wise optimizer update, as the op library runs
// them (the gradient of each distinct row summed into a [distinct, dim] buffer, then the rows
// updated from it) against a fused pass (positions grouped by row, each row's gradient summed
// from them and the row updated at once, as FBGEMM's CPU backward does), on one thread, the two
// alternating step by step on two copies of the same table. Prints one JSON line per optimizer.
//
// Usage: fused_update_bench ROWS STEPS   (built and run by benchmarks/fused_update_bench.py)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "benchmarks/native/bench_timing.h"
#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_unique.h"
#include "kernels/core/optimizer.h"
#include "kernels/core/prefetch.h"

namespace {

using sok_lite::OptimizerHyper;
using sok_lite::OptimizerKind;

constexpr int64_t kBatch = 16384, kHotness = 10, kDim = 64;

struct Batch {
  std::vector<int64_t> unique;   // distinct rows
  std::vector<int32_t> inverse;  // position -> index into unique
  std::vector<int64_t> splits;   // sample -> first position
  std::vector<float> grad_out;   // [kBatch, kDim] upstream gradient
};

Batch MakeBatch(const std::vector<double>& cdf, const std::vector<int64_t>& perm,
                std::mt19937_64* rng) {
  Batch b;
  const int64_t n = kBatch * kHotness;
  std::uniform_real_distribution<double> u(0, cdf.back());
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids)
    id = perm[std::lower_bound(cdf.begin(), cdf.end(), u(*rng)) - cdf.begin()];
  b.unique.resize(n);
  b.inverse.resize(n);
  b.unique.resize(sok_lite::UniqueIds(ids.data(), n, b.unique.data(), b.inverse.data()));
  b.splits.resize(kBatch + 1);
  for (int64_t s = 0; s <= kBatch; ++s) b.splits[s] = s * kHotness;
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  b.grad_out.resize(kBatch * kDim);
  for (float& g : b.grad_out) g = normal(*rng);
  return b;
}

// What the op library does: each distinct row's gradient summed into a buffer (positions grouped
// by row), then ApplyRows.
void Unfused(const Batch& b, OptimizerKind kind, const OptimizerHyper& h, std::vector<float>* grads,
             float* table, const std::vector<float*>& slots) {
  const int64_t nu = b.unique.size();
  const std::vector<float> scale(kBatch, 1.0f);
  grads->resize(nu * kDim);
  sok_lite::IdsByRow<float> groups;
  sok_lite::GroupIdsByRow(b.inverse.data(), b.splits.data(), kBatch,
                          static_cast<const float*>(nullptr), scale.data(), nu, &groups);
  sok_lite::CombineBackwardRows(b.grad_out.data(), kDim, groups, 0, nu, grads->data());
  sok_lite::ApplyRows<float>(kind, h, kDim, b.unique.data(), grads->data(), 0, nu, table, slots);
}

// Fused: a counting sort of the positions by row, then per row its gradient summed in the same
// order as the scatter-add above (positions ascending) and the row updated by the same code.
void Fused(const Batch& b, OptimizerKind kind, const OptimizerHyper& h, float* table,
           const std::vector<float*>& slots) {
  const int64_t nu = b.unique.size();
  const std::vector<float> scale(kBatch, 1.0f);
  sok_lite::IdsByRow<float> groups;
  sok_lite::GroupIdsByRow(b.inverse.data(), b.splits.data(), kBatch,
                          static_cast<const float*>(nullptr), scale.data(), nu, &groups);
  const std::vector<int64_t>& start = groups.begin;
  const std::vector<int32_t>& sample = groups.sample;
  float acc[kDim];
  constexpr int64_t ahead = sok_lite::kPrefetchDistance;
  for (int64_t u = 0; u < nu; ++u) {
    if (u + ahead < nu) {
      const int64_t r = b.unique[u + ahead];
      sok_lite::PrefetchBytes<1>(table + r * kDim, kDim * sizeof(float));
      for (float* slot : slots) sok_lite::PrefetchBytes<1>(slot + r * kDim, kDim * sizeof(float));
    }
    std::fill(acc, acc + kDim, 0.0f);
    for (int64_t j = start[u]; j < start[u + 1]; ++j) {
      const float* src = b.grad_out.data() + static_cast<int64_t>(sample[j]) * kDim;
      for (int64_t d = 0; d < kDim; ++d) acc[d] += src[d];
    }
    sok_lite::ApplyRows<float>(kind, h, kDim, &b.unique[u], acc, 0, 1, table, slots);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
  std::mt19937_64 rng(1);
  std::vector<double> cdf(rows);  // Zipf(1.2) over the rows, hot rows scattered by perm
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) cdf[i] = (total += std::pow(i + 1.0, -1.2));
  std::vector<int64_t> perm(rows);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(MakeBatch(cdf, perm, &rng));
  const struct {
    const char* name;
    OptimizerKind kind;
    std::vector<double> p;
  } optimizers[] = {{"sgd", OptimizerKind::kSgd, {}},
                    {"adagrad", OptimizerKind::kAdagrad, {1e-7, 0}}};
  for (const auto& opt : optimizers) {
    OptimizerHyper h;
    h.lr = 0.01;
    h.p = opt.p;
    const int num_slots = sok_lite::NumSlots(opt.kind, opt.p);
    // Two copies of the table and its slots: one per path.
    std::vector<std::vector<float>> state[2];
    for (auto& s : state) {
      s.assign(1 + num_slots, std::vector<float>(rows * kDim, 0.0f));
      std::fill(s[0].begin(), s[0].end(), 0.01f);
      if (opt.kind == OptimizerKind::kAdagrad) std::fill(s[1].begin(), s[1].end(), 0.1f);
    }
    std::vector<float*> slots[2];
    for (int p = 0; p < 2; ++p) {
      for (int s = 1; s <= num_slots; ++s) slots[p].push_back(state[p][s].data());
    }
    std::vector<float> grads;
    std::vector<double> unfused_ms, fused_ms;
    for (int step = 0; step < steps; ++step) {
      const Batch& b = batches[step % batches.size()];
      const auto t0 = std::chrono::steady_clock::now();
      Unfused(b, opt.kind, h, &grads, state[0][0].data(), slots[0]);
      const auto t1 = std::chrono::steady_clock::now();
      Fused(b, opt.kind, h, state[1][0].data(), slots[1]);
      const auto t2 = std::chrono::steady_clock::now();
      unfused_ms.push_back(Ms(t0, t1));
      fused_ms.push_back(Ms(t1, t2));
    }
    bool same = true;
    for (int s = 0; s <= num_slots; ++s) {
      same = same && std::memcmp(state[0][s].data(), state[1][s].data(),
                                 state[0][s].size() * sizeof(float)) == 0;
    }
    std::printf(
        "{\"optimizer\": \"%s\", \"rows\": %lld, \"distinct\": %zu, \"unfused_ms\": %.3f, "
        "\"fused_ms\": %.3f, \"same_bits\": %s}\n",
        opt.name, static_cast<long long>(rows), batches[0].unique.size(), Median(unfused_ms),
        Median(fused_ms), same ? "true" : "false");
  }
  return 0;
}
