#include "kernels/core/unique.h"

#include <algorithm>
#include <vector>

namespace sok_lite {
namespace {

// splitmix64 finalizer: spreads sequential and Zipf-clustered ids over the whole table.
inline uint64_t MixBits(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Distinct keys in order of first occurrence, appended to `unique`. Open addressing with linear
// probing; a slot holds an index into `unique` (or -1), so no key value is reserved as the empty
// marker. The index starts small and doubles at load 1/2: with skewed ids the distinct count is a
// fraction of the ids, and a small index stays in cache.
template <typename K>
class FirstSeen {
 public:
  FirstSeen(K* unique, int64_t n) : unique_(unique) {
    uint64_t capacity = 64;
    while (capacity < static_cast<uint64_t>(n < 2048 ? n : 2048) * 2) capacity <<= 1;
    slots_.assign(capacity, -1);
  }

  int32_t size() const { return size_; }

  // The position of key in `unique`, appending it if it is new.
  int32_t Add(K key) {
    const uint64_t mask = slots_.size() - 1;
    for (uint64_t pos = MixBits(static_cast<uint64_t>(key)) & mask;; pos = (pos + 1) & mask) {
      const int32_t slot = slots_[pos];
      if (slot < 0) break;
      if (unique_[slot] == key) return slot;
    }
    unique_[size_] = key;
    Place(size_);
    if (static_cast<uint64_t>(size_ + 1) * 2 > slots_.size()) Grow();
    return size_++;
  }

 private:
  void Place(int32_t index) {
    const uint64_t mask = slots_.size() - 1;
    uint64_t pos = MixBits(static_cast<uint64_t>(unique_[index])) & mask;
    while (slots_[pos] >= 0) pos = (pos + 1) & mask;
    slots_[pos] = index;
  }

  void Grow() {
    slots_.assign(slots_.size() * 2, -1);
    for (int32_t j = 0; j <= size_; ++j) Place(j);
  }

  K* unique_;
  std::vector<int32_t> slots_;
  int32_t size_ = 0;
};

constexpr int kShardBits = 6;
constexpr int64_t kShards = int64_t{1} << kShardBits;
constexpr int64_t kBlock = 8192;  // ids per unit of the parallel passes over positions

}  // namespace

template <typename K>
int64_t UniqueIds(const K* ids, int64_t n, K* unique, int32_t* inverse) {
  FirstSeen<K> seen(unique, n);
  for (int64_t i = 0; i < n; ++i) inverse[i] = seen.Add(ids[i]);
  return seen.size();
}

template <typename K>
int64_t UniqueIdsParallel(const K* ids, int64_t n, K* unique, int32_t* inverse,
                          const RangeRunner& run) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto for_blocks = [&](const std::function<void(int64_t, int64_t, int64_t)>& fn) {
    run(blocks, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) fn(b, b * kBlock, std::min(n, (b + 1) * kBlock));
    });
  };
  // 1. The shard of every id (top hash bits) and how many ids each block sends to each shard.
  std::vector<uint8_t> shard(n);
  std::vector<int64_t> next(blocks * kShards, 0);
  for_blocks([&](int64_t b, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      shard[i] = MixBits(static_cast<uint64_t>(ids[i])) >> (64 - kShardBits);
      ++next[b * kShards + shard[i]];
    }
  });
  // 2. Positions grouped by shard, ascending within each shard (blocks are laid out in order).
  std::vector<int64_t> shard_begin(kShards + 1);
  int64_t total = 0;
  for (int64_t s = 0; s < kShards; ++s) {
    shard_begin[s] = total;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t count = next[b * kShards + s];
      next[b * kShards + s] = total;
      total += count;
    }
  }
  shard_begin[kShards] = total;
  std::vector<int32_t> order(n);
  for_blocks([&](int64_t b, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) order[next[b * kShards + shard[i]]++] = i;
  });
  // 3. Each shard deduplicated on its own, in position order: inverse[i] temporarily holds the
  // shard-local index, and first[i] marks the first occurrence of each distinct id.
  std::vector<std::vector<K>> shard_unique(kShards);
  std::vector<uint8_t> first(n, 0);
  run(kShards, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      std::vector<K>& local = shard_unique[s];
      local.resize(shard_begin[s + 1] - shard_begin[s]);
      FirstSeen<K> seen(local.data(), local.size());
      for (int64_t j = shard_begin[s]; j < shard_begin[s + 1]; ++j) {
        const int32_t i = order[j];
        const int32_t before = seen.size();
        inverse[i] = seen.Add(ids[i]);
        first[i] = inverse[i] == before;
      }
      local.resize(seen.size());
    }
  });
  // 4. A distinct id's position in `unique` is the number of first occurrences before it.
  std::vector<int64_t> firsts_before(blocks + 1, 0);
  for_blocks([&](int64_t b, int64_t i0, int64_t i1) {
    int64_t count = 0;
    for (int64_t i = i0; i < i1; ++i) count += first[i];
    firsts_before[b + 1] = count;
  });
  for (int64_t b = 0; b < blocks; ++b) firsts_before[b + 1] += firsts_before[b];
  std::vector<std::vector<int32_t>> to_global(kShards);
  for (int64_t s = 0; s < kShards; ++s) to_global[s].resize(shard_unique[s].size());
  for_blocks([&](int64_t b, int64_t i0, int64_t i1) {
    int64_t g = firsts_before[b];
    for (int64_t i = i0; i < i1; ++i) {
      if (!first[i]) continue;
      to_global[shard[i]][inverse[i]] = g;
      unique[g++] = ids[i];
    }
  });
  for_blocks([&](int64_t, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) inverse[i] = to_global[shard[i]][inverse[i]];
  });
  return firsts_before[blocks];
}

#define SOK_LITE_INSTANTIATE_UNIQUE(K)                            \
  template int64_t UniqueIds<K>(const K*, int64_t, K*, int32_t*); \
  template int64_t UniqueIdsParallel<K>(const K*, int64_t, K*, int32_t*, const RangeRunner&);
SOK_LITE_INSTANTIATE_UNIQUE(int32_t)
SOK_LITE_INSTANTIATE_UNIQUE(int64_t)
#undef SOK_LITE_INSTANTIATE_UNIQUE

}  // namespace sok_lite
