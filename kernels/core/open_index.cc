#include "kernels/core/open_index.h"

namespace sok_lite {

int64_t IndexCapacityFor(int64_t keys) {
  int64_t capacity = OpenIndex<int64_t, -1>::kMinCapacity;
  while (IndexOverfull(keys, capacity)) capacity *= 2;
  return capacity;
}

template <typename V, V kEmpty>
V OpenIndex<V, kEmpty>::Erase(int64_t key) {
  const uint64_t mask = entries_.size() - 1;
  uint64_t hole = Hash(key) & mask;
  for (;; hole = (hole + 1) & mask) {
    if (entries_[hole].value == kEmpty) return kEmpty;
    if (entries_[hole].key == key) break;
  }
  const V value = entries_[hole].value;
  --size_;
  // Backward shift: each later entry of the chain moves into the hole unless its home entry lies
  // cyclically in (hole, pos], where a probe for it would stop at the hole before reaching it.
  for (uint64_t pos = (hole + 1) & mask; entries_[pos].value != kEmpty; pos = (pos + 1) & mask) {
    const uint64_t home = Hash(entries_[pos].key) & mask;
    const bool stays = hole <= pos ? (home > hole && home <= pos) : (home > hole || home <= pos);
    if (!stays) {
      entries_[hole] = entries_[pos];
      hole = pos;
    }
  }
  entries_[hole].value = kEmpty;
  return value;
}

template <typename V, V kEmpty>
void OpenIndex<V, kEmpty>::Rehash(int64_t capacity) {
  std::vector<Entry, HugePageAllocator<Entry>> old = std::move(entries_);
  entries_.assign(capacity, Entry{0, kEmpty});
  for (const Entry& e : old) {
    if (e.value != kEmpty) Place(e.key, e.value);
  }
}

template <typename V, V kEmpty>
void OpenIndex<V, kEmpty>::Clear() {
  entries_.assign(kMinCapacity, Entry{0, kEmpty});
  size_ = 0;
}

template <typename V, V kEmpty>
bool OpenIndex<V, kEmpty>::Consistent() const {
  int64_t stored = 0;
  for (size_t pos = 0; pos < entries_.size(); ++pos) {
    if (entries_[pos].value == kEmpty) continue;
    ++stored;
    // The probe for this key must reach this very entry: no empty entry before it, and no
    // earlier entry with the same key.
    const uint64_t mask = entries_.size() - 1;
    uint64_t probe = Hash(entries_[pos].key) & mask;
    while (probe != pos) {
      if (entries_[probe].value == kEmpty || entries_[probe].key == entries_[pos].key) return false;
      probe = (probe + 1) & mask;
    }
  }
  const int64_t cap = capacity();
  return stored == size_ && cap >= kMinCapacity && (cap & (cap - 1)) == 0 &&
         !IndexOverfull(size_, cap);
}

template class OpenIndex<int64_t, -1>;
template class OpenIndex<uint32_t, UINT32_MAX>;

}  // namespace sok_lite
