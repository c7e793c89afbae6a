// Times the disk tier's key index (kernels/core/disk_index.h) against the exact open-addressing
// index it replaces past 2^15 keys (OpenIndex<uint32_t>, 12-byte entries), on the same random
// keys: fill, probes of stored and of absent keys, and churn (erase a key, insert another: what
// a spill and a read-back do). Each loop brings the entries of the key kAhead calls on into the
// cache first, as the table's loops do. Prints one JSON line per index; built and run by
// benchmarks/disk_index_bench.py.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/core/disk_index.h"
#include "kernels/core/open_index.h"

namespace {

using Clock = std::chrono::steady_clock;

double NsPer(Clock::time_point a, Clock::time_point b, int64_t n) {
  return std::chrono::duration<double, std::nano>(b - a).count() / static_cast<double>(n);
}

// The two indexes behind one interface: insert, may-contain, erase of a key at its slot.
struct Exact {
  sok_lite::SlotIndex ix;
  void Insert(int64_t k, uint32_t s) { ix.Insert(k, s); }
  bool May(int64_t k) const { return ix.Contains(k); }
  void Erase(int64_t k, uint32_t) { ix.Erase(k); }
  void Prefetch(int64_t k) const { ix.view().Prefetch(sok_lite::SlotIndex::Hash(k)); }
  int64_t Bytes() const { return ix.allocated_bytes(); }
  static const char* Name() { return "exact"; }
};
struct Compact {
  sok_lite::DiskIndex ix;
  void Insert(int64_t k, uint32_t s) { ix.Insert(k, s); }
  bool May(int64_t k) const { return ix.MayContain(k); }
  void Erase(int64_t k, uint32_t s) { ix.Erase(k, s); }
  void Prefetch(int64_t k) const { ix.Prefetch(k); }
  int64_t Bytes() const { return ix.AllocatedBytes(); }
  static const char* Name() { return "compact"; }
};

constexpr int64_t kAhead = sok_lite::kPrefetchDistance;

template <typename Index>
void Run(const std::vector<int64_t>& keys, const std::vector<int64_t>& absent, int64_t churn) {
  const int64_t n = keys.size() - churn;  // the last `churn` keys come in during the churn
  Index index;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index.Prefetch(keys[i + kAhead]);
    index.Insert(keys[i], static_cast<uint32_t>(i));
  }
  const auto t1 = Clock::now();
  int64_t found = 0;
  for (int64_t i = 0; i < n; ++i) {
    index.Prefetch(keys[((i + kAhead) * 7919) % n]);
    found += index.May(keys[(i * 7919) % n]);
  }
  const auto t2 = Clock::now();
  int64_t seeming = 0;
  for (size_t i = 0; i < absent.size(); ++i) {
    if (i + kAhead < absent.size()) index.Prefetch(absent[i + kAhead]);
    seeming += index.May(absent[i]);
  }
  const auto t3 = Clock::now();
  for (int64_t i = 0; i < churn; ++i) {
    if (i + kAhead < churn) {
      index.Prefetch(keys[i + kAhead]);
      index.Prefetch(keys[n + i + kAhead]);
    }
    index.Erase(keys[i], static_cast<uint32_t>(i));
    index.Insert(keys[n + i], static_cast<uint32_t>(n + i));
  }
  const auto t4 = Clock::now();
  std::printf(
      "{\"index\": \"%s\", \"keys\": %ld, \"fill_ns\": %.1f, \"probe_stored_ns\": %.1f, "
      "\"probe_absent_ns\": %.1f, \"erase_insert_ns\": %.1f, \"bytes_per_key\": %.2f, "
      "\"found\": %ld, \"absent_seeming\": %ld, \"absent\": %zu}\n",
      Index::Name(), n, NsPer(t0, t1, n), NsPer(t1, t2, n), NsPer(t2, t3, absent.size()),
      NsPer(t3, t4, churn), static_cast<double>(index.Bytes()) / n, found, seeming, absent.size());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 4000000;
  std::mt19937_64 rng(argc > 2 ? std::atoll(argv[2]) : 1);
  const int64_t churn = std::min<int64_t>(n / 4, 1000000);
  std::vector<int64_t> keys(n + churn), absent(std::min<int64_t>(n, 1000000));
  for (int64_t& k : keys) k = static_cast<int64_t>(rng());
  for (int64_t& k : absent) k = static_cast<int64_t>(rng());  // distinct from keys: 2^-64 odds
  Run<Exact>(keys, absent, churn);
  Run<Compact>(keys, absent, churn);
  return 0;
}
