// An open-addressing index int64 key -> value: the one index of HashTable's RAM rows (value: row
// number) and of RowTierFile's records on disk (value: file slot). Linear probing over a
// power-of-two array of entries hashed by SplitMix64Finalizer; an insert that would pass 3/4 full
// first doubles the array (IndexCapacityFor states the rule); an erase shifts the rest of the
// probe chain back (no tombstones: a probe stops at the first empty entry). An entry is empty when
// its value is kEmpty, so every int64 is an ordinary key. Probing is inline, allocates nothing and
// calls nothing; TF-free. Readers may probe in parallel; the caller serializes changes.
#ifndef SOK_LITE_KERNELS_CORE_OPEN_INDEX_H_
#define SOK_LITE_KERNELS_CORE_OPEN_INDEX_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/huge_pages.h"

namespace sok_lite {

// Whether an index of `capacity` entries holding `keys` keys is past its load limit (3/4).
inline bool IndexOverfull(int64_t keys, int64_t capacity) { return keys * 4 > capacity * 3; }

// The entries an index grows to for `keys` keys: a power of two >= 16 that is not overfull.
int64_t IndexCapacityFor(int64_t keys);

// One entry: a key and its value. An 8-byte value gives a 16-byte entry (four to a cache line);
// a 4-byte one is packed to 12 bytes (the disk index holds every key on disk, so its bytes count
// against the RAM budget).
template <typename V, bool kPacked = (sizeof(V) < 8)>
struct IndexEntry {
  int64_t key;
  V value;
};
#pragma pack(push, 4)
template <typename V>
struct IndexEntry<V, true> {
  int64_t key;
  V value;
};
#pragma pack(pop)

template <typename V, V kEmpty>
class OpenIndex {
 public:
  using Entry = IndexEntry<V>;
  static constexpr int64_t kMinCapacity = 16;

  // The hash of a key, which picks its first probe entry. Not KeyHash: a rank among N holds only
  // keys with KeyHash(k) % N == rank, whose low bits then repeat (all of them when N is a power
  // of two), which would crowd the keys onto 1 / N of the entries (mean probes ~25 instead of
  // ~2.5 at 64 ranks).
  static uint64_t Hash(int64_t key) { return SplitMix64Finalizer(static_cast<uint64_t>(key)); }

  // The read side of an index as a pointer and a mask, for loops that probe many keys: they
  // stay in registers. Valid until the index changes.
  class View {
   public:
    View(const Entry* entries, uint64_t mask) : entries_(entries), mask_(mask) {}
    // The value of key (hash: Hash(key)), or kEmpty if the key is not stored.
    V Get(int64_t key, uint64_t hash) const {
      for (uint64_t pos = hash & mask_;; pos = (pos + 1) & mask_) {
        const Entry& e = entries_[pos];
        if (e.value == kEmpty) return kEmpty;
        if (e.key == key) return e.value;
      }
    }
    // Brings the first probe entry of a key with this hash into the cache.
    void Prefetch(uint64_t hash) const { __builtin_prefetch(&entries_[hash & mask_], 0, 3); }

   private:
    const Entry* entries_;
    uint64_t mask_;
  };

  OpenIndex() : entries_(kMinCapacity, Entry{0, kEmpty}) {}

  int64_t size() const { return size_; }                // keys stored
  int64_t capacity() const { return entries_.size(); }  // entries (a power of two)
  // Bytes the entries' allocation holds (may exceed capacity() entries after Clear).
  int64_t allocated_bytes() const {
    return static_cast<int64_t>(entries_.capacity() * sizeof(Entry));
  }

  View view() const { return View(entries_.data(), entries_.size() - 1); }
  V Get(int64_t key, uint64_t hash) const { return view().Get(key, hash); }
  V Get(int64_t key) const { return Get(key, Hash(key)); }
  bool Contains(int64_t key) const { return Get(key) != kEmpty; }
  // The stored value of key, to change in place (never to kEmpty), or null if key is not stored.
  V* Find(int64_t key) {
    const uint64_t mask = entries_.size() - 1;
    for (uint64_t pos = Hash(key) & mask;; pos = (pos + 1) & mask) {
      Entry& e = entries_[pos];
      if (e.value == kEmpty) return nullptr;
      if (e.key == key) return &e.value;
    }
  }

  // Grows (doubling) until `keys` keys fit the load limit.
  void Reserve(int64_t keys) {
    while (IndexOverfull(keys, capacity())) Rehash(capacity() * 2);
  }
  // Stores key -> value (value != kEmpty). The key must not be stored yet.
  void Insert(int64_t key, V value) {
    Reserve(size_ + 1);
    Place(key, value);
    ++size_;
  }
  // Removes key; returns its value, or kEmpty if it was not stored.
  V Erase(int64_t key);
  // Re-indexes every key into `capacity` entries (a power of two that holds them).
  void Rehash(int64_t capacity);
  // Removes every key; back to kMinCapacity entries (the allocation is kept).
  void Clear();

  // Calls fn(key, value) for every stored key, in entry order.
  template <typename F>
  void ForEach(F fn) const {
    for (const Entry& e : entries_) {
      if (e.value != kEmpty) fn(e.key, e.value);
    }
  }
  // Whether the entries are consistent: size() keys, each found from its hash, none past the
  // load limit. For tests; reads every entry.
  bool Consistent() const;

 private:
  // Puts key -> value into the first empty entry of its probe chain (room is there).
  void Place(int64_t key, V value) {
    const uint64_t mask = entries_.size() - 1;
    uint64_t pos = Hash(key) & mask;
    while (entries_[pos].value != kEmpty) pos = (pos + 1) & mask;
    entries_[pos] = Entry{key, value};
  }

  std::vector<Entry, HugePageAllocator<Entry>> entries_;  // probed at random: huge pages
  int64_t size_ = 0;
};

// The two indexes (instantiated in open_index.cc): RAM rows and records on disk.
using RowIndex = OpenIndex<int64_t, -1>;
using SlotIndex = OpenIndex<uint32_t, UINT32_MAX>;
static_assert(sizeof(RowIndex::Entry) == 16, "RAM index entries are charged as 16 bytes");
static_assert(sizeof(SlotIndex::Entry) == 12, "disk index entries are charged as 12 bytes");

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_OPEN_INDEX_H_
