// Would a static table gain from storing each row beside its optimizer slots? The row-wise Adam
// update of the rows a DLRM step touches, on one thread, over two layouts of the same values:
// three arrays (table, m, v: a static table and its Keras slot variables, ApplyRows) and one
// record per row (row, m, v adjacent: a hash table's layout, ApplyRowRecords). Both are
// advised for huge pages before their first write, as the op library does. The two alternate
// step by step on the same rows and gradients; then the rows-updated tracker's write of the same
// rows (one int64 a row), in order as the update op did before and by the op library's TrackRows,
// prefetched ahead. Prints one JSON line.
//
// Usage: row_layout_bench ROWS STEPS   (built and run by benchmarks/row_layout_bench.py)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "benchmarks/native/bench_timing.h"
#include "kernels/core/huge_pages.h"
#include "kernels/core/lookup_unique.h"
#include "kernels/core/optimizer.h"

namespace {

using sok_lite::OptimizerHyper;
using sok_lite::OptimizerKind;

constexpr int64_t kDim = 16, kSlots = 2;
// The DLRM step of e2e_bench.py: 26 features of one id, batch 4096, ids Zipf(1.1).
constexpr int64_t kIds = 26 * 4096;

// n values, mapped and advised for huge pages before the fill writes them.
template <typename T>
T* NewBuffer(int64_t n, T fill) {
  T* p = static_cast<T*>(sok_lite::MappedAllocate(n * sizeof(T), false));
  sok_lite::AdviseHugePagesBeforeFirstWrite(p, n * sizeof(T));
  std::fill(p, p + n, fill);
  return p;
}

// The distinct rows of a step: Zipf(1.1) ranks (bounded at 4M) scattered over the table.
std::vector<int64_t> StepRows(const std::vector<double>& cdf, int64_t rows, std::mt19937_64* rng) {
  std::uniform_real_distribution<double> u(0, cdf.back());
  std::vector<int64_t> ids(kIds), unique(kIds);
  std::vector<int32_t> inverse(kIds);
  for (int64_t& id : ids) {
    const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(*rng)) - cdf.begin();
    id = (rank * 2654435761LL + 12345) % rows;
  }
  unique.resize(sok_lite::UniqueIds(ids.data(), kIds, unique.data(), inverse.data()));
  return unique;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 10000000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
  std::mt19937_64 rng(1);
  std::vector<double> cdf(std::min<int64_t>(rows, 4000000));
  double total = 0;
  for (size_t i = 0; i < cdf.size(); ++i) cdf[i] = (total += std::pow(i + 1.0, -1.1));
  std::vector<std::vector<int64_t>> batches;
  for (int i = 0; i < 16; ++i) batches.push_back(StepRows(cdf, rows, &rng));

  float* table = NewBuffer<float>(rows * kDim, 0.01f);
  std::vector<float*> slots = {NewBuffer<float>(rows * kDim, 0.0f),
                               NewBuffer<float>(rows * kDim, 0.0f)};
  float* records = NewBuffer<float>(rows * kDim * (1 + kSlots), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(records + r * kDim * (1 + kSlots), records + r * kDim * (1 + kSlots) + kDim, 0.01f);
  }
  int64_t* tracker = NewBuffer<int64_t>(rows, 0);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> grads(kIds * kDim);
  for (float& g : grads) g = normal(rng);
  std::vector<float*> record_ptrs(kIds);

  OptimizerHyper h;
  h.lr = 1e-3;
  std::vector<double> arrays_ms, records_ms, track_ms, track_prefetched_ms;
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t>& b = batches[step % batches.size()];
    const int64_t n = b.size();
    h.p = {0.9, 0.999, 1e-7, static_cast<double>(step + 1)};
    const auto t0 = std::chrono::steady_clock::now();
    sok_lite::ApplyRows<float>(OptimizerKind::kAdam, h, kDim, b.data(), grads.data(), 0, n, table,
                               slots);
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) record_ptrs[i] = records + b[i] * kDim * (1 + kSlots);
    sok_lite::ApplyRowRecords<float>(OptimizerKind::kAdam, h, kDim, kSlots, record_ptrs.data(),
                                     grads.data(), 0, n);
    const auto t2 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) tracker[b[i]] = step;
    const auto t3 = std::chrono::steady_clock::now();
    sok_lite::TrackRows(b.data(), 0, n, step, tracker);
    const auto t4 = std::chrono::steady_clock::now();
    if (step < 2) continue;  // first touches
    arrays_ms.push_back(Ms(t0, t1));
    records_ms.push_back(Ms(t1, t2));
    track_ms.push_back(Ms(t2, t3));
    track_prefetched_ms.push_back(Ms(t3, t4));
  }
  bool same = true;  // the records' values and slots against the three arrays, row by row
  for (int64_t r = 0; r < rows && same; ++r) {
    const float* rec = records + r * kDim * (1 + kSlots);
    same = std::memcmp(rec, table + r * kDim, kDim * sizeof(float)) == 0;
    for (int s = 0; s < kSlots && same; ++s) {
      same = std::memcmp(rec + (1 + s) * kDim, slots[s] + r * kDim, kDim * sizeof(float)) == 0;
    }
  }
  std::printf(
      "{\"rows\": %lld, \"distinct\": %zu, \"arrays_ms\": %.3f, \"records_ms\": %.3f, "
      "\"track_ms\": %.3f, \"track_prefetched_ms\": %.3f, \"same_bits\": %s}\n",
      static_cast<long long>(rows), batches[0].size(), Median(arrays_ms), Median(records_ms),
      Median(track_ms), Median(track_prefetched_ms), same ? "true" : "false");
  return 0;
}
