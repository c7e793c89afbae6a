#include "kernels/core/disk_index.h"

#include <algorithm>

namespace sok_lite {
namespace {

// A shard grows once more than 95% of its entries would be full, to 92% full (no doubling: the
// budget charges its bytes for every key stored).
constexpr int64_t kGrowPercent = 95;
constexpr int64_t kGrownPercent = 92;

uint32_t Next(uint32_t pos, uint32_t cap) { return pos + 1 == cap ? 0 : pos + 1; }
uint32_t GrownCap(int64_t keys) { return static_cast<uint32_t>(keys * 100 / kGrownPercent + 2); }

}  // namespace

int64_t DiskIndex::BytesFor(int64_t keys) const {
  if (!compact() && keys <= kCompactFrom) {
    return IndexCapacityFor(keys) * static_cast<int64_t>(sizeof(SlotIndex::Entry));
  }
  // Shards: 4,096, or as many as `keys` split them into (each then holds 512 on average), or as
  // many as there are. Each holds at most its keys * 100 / 92 + 2 entries and a spare byte.
  const int64_t shards = std::max<int64_t>(
      {int64_t{1} << kFirstShardBits, keys / (kSplitAt / 2) + 1, int64_t(shards_.size())});
  return shards * static_cast<int64_t>(sizeof(Shard) + 1 + 3 * kEntryBytes) +
         kEntryBytes * (keys * 100 / kGrownPercent);
}

template <typename F>
int64_t DiskIndex::Probe(const Shard& s, uint32_t tag, F fn) const {
  if (s.cap == 0) return -1;
  const uint32_t home = Home(tag, s.cap);
  // Robin Hood keeps a chain in order of the entries' homes, and homes follow tags: a smaller
  // tag than the key's is an earlier home (skipped without computing it). A larger one ends
  // the chain once its home is past the key's, unless it wrapped around from the last entry.
  uint32_t pos = home;
  for (; pos < s.cap; ++pos) {
    const uint64_t e = s.Get(pos);
    if (Slot(e) == kEmpty) return -1;
    const uint32_t t = Tag(e);
    if (t == tag) {
      if (fn(pos, e)) return pos;
    } else if (t > tag) {
      const uint32_t h = Home(t, s.cap);
      if (h != home && h <= pos) return -1;
    }
  }
  // Wrapped around: from entry 0 on, by distances (an entry nearer its home than the key would
  // be ends the chain).
  for (uint32_t d = s.cap - home, i = 0;; ++d, i = Next(i, s.cap)) {
    const uint64_t e = s.Get(i);
    if (Slot(e) == kEmpty || Distance(s, i, e) < d) return -1;
    if (Tag(e) == tag && fn(i, e)) return i;
  }
}

bool DiskIndex::MayContain(int64_t key) const {
  if (!compact()) return exact_.Contains(key);
  const uint64_t h = Hash(key);
  return Probe(shards_[ShardOf(h)], TagOf(h), [](uint32_t, uint64_t) { return true; }) >= 0;
}

void DiskIndex::Candidates(int64_t key, std::vector<uint32_t>* slots) const {
  if (!compact()) {
    const uint32_t slot = exact_.Get(key);
    if (slot != kEmpty) slots->push_back(slot);
    return;
  }
  const uint64_t h = Hash(key);
  Probe(shards_[ShardOf(h)], TagOf(h), [slots](uint32_t, uint64_t e) {
    slots->push_back(Slot(e));
    return false;
  });
}

bool DiskIndex::Holds(int64_t key, uint32_t slot) const {
  if (slot == kEmpty) return false;
  if (!compact()) return exact_.Get(key) == slot;
  const uint64_t h = Hash(key);
  return Probe(shards_[ShardOf(h)], TagOf(h),
               [slot](uint32_t, uint64_t e) { return Slot(e) == slot; }) >= 0;
}

void DiskIndex::Place(Shard* s, uint64_t e) {
  // Robin Hood: e goes before the first entry nearer its home than e would be there (or into an
  // empty entry), and the entries from there to the next empty one move on by one, in order.
  const uint32_t cap = s->cap;
  uint32_t pos = Home(Tag(e), cap);
  for (uint32_t d = 0;; ++d, pos = Next(pos, cap)) {
    const uint64_t resident = s->Get(pos);
    if (Slot(resident) == kEmpty) {
      s->Set(pos, e);
      return;
    }
    if (Distance(*s, pos, resident) < d) break;
  }
  uint32_t end = pos;
  while (Slot(s->Get(end)) != kEmpty) end = Next(end, cap);
  uint8_t* bytes = s->bytes.get();
  if (end < pos) {  // the run wraps: [0, end) moves on, the last entry to the first
    std::memmove(bytes + kEntryBytes, bytes, end * kEntryBytes);
    s->Set(0, s->Get(cap - 1));
    end = cap - 1;
  }
  std::memmove(bytes + (pos + 1) * kEntryBytes, bytes + pos * kEntryBytes,
               (end - pos) * kEntryBytes);
  s->Set(pos, e);
}

std::vector<uint64_t> DiskIndex::SortedEntries(const Shard& s) const {
  // Read from after an empty entry, the entries come in order of their homes, once around:
  // rotated to the smallest home first, they are ordered by tag but within each home (whose
  // few entries an insertion sort orders).
  std::vector<uint64_t> sorted;
  sorted.reserve(s.size);
  uint32_t start = 0;
  while (start < s.cap && Slot(s.Get(start)) != kEmpty) ++start;
  for (uint32_t k = 1; k <= s.cap; ++k) {
    const uint64_t e = s.Get((start + k) % s.cap);
    if (Slot(e) != kEmpty) sorted.push_back(e);
  }
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (Home(Tag(sorted[i]), s.cap) < Home(Tag(sorted[i - 1]), s.cap)) {
      std::rotate(sorted.begin(), sorted.begin() + i, sorted.end());
      break;
    }
  }
  for (size_t i = 1; i < sorted.size(); ++i) {
    const uint64_t e = sorted[i];
    size_t j = i;
    for (; j > 0 && sorted[j - 1] > e; --j) sorted[j] = sorted[j - 1];
    sorted[j] = e;
  }
  return sorted;
}

void DiskIndex::LayOut(const std::vector<uint64_t>& sorted, uint32_t cap, Shard* s) const {
  s->cap = cap;
  s->size = static_cast<uint32_t>(sorted.size());
  s->bytes.reset(new uint8_t[int64_t{cap} * kEntryBytes + 1]);
  for (uint32_t i = 0; i < cap; ++i) s->Set(i, kEmptyEntry);
  // Each entry at its home or right after the one before, whichever is later; those pushed past
  // the last entry wrap to the first ones, which then start after them (until that settles).
  const auto place = [&](int64_t over, bool store) {
    int64_t last = over - 1;
    for (uint64_t e : sorted) {
      last = std::max<int64_t>(Home(Tag(e), cap), last + 1);
      if (store) s->Set(static_cast<uint32_t>(last % cap), e);
    }
    return std::max<int64_t>(last - cap + 1, 0);
  };
  int64_t over = 0;
  for (int64_t more = place(0, false); more > over; more = place(over, false)) over = more;
  place(over, true);
}

void DiskIndex::Resize(Shard* s, uint32_t cap) { LayOut(SortedEntries(*s), cap, s); }

void DiskIndex::Split() {
  // The next shard bit is the top one of the tag bits a shard's keys do not share yet: each
  // shard's entries, in tag order, part into two runs in tag order.
  std::vector<Shard> shards(shards_.size() * 2);
  const uint32_t bit = uint32_t{1} << (FreeBits() - 1);
  std::vector<uint64_t> low, high;
  for (size_t i = 0; i < shards_.size(); ++i) {
    low.clear();
    high.clear();
    for (uint64_t e : SortedEntries(shards_[i])) (Tag(e) & bit ? high : low).push_back(e);
    shards_[i] = Shard();  // freed before the next shard's halves are allocated
    ++shard_bits_;
    LayOut(low, low.empty() ? 0 : GrownCap(low.size()), &shards[2 * i]);
    LayOut(high, high.empty() ? 0 : GrownCap(high.size()), &shards[2 * i + 1]);
    --shard_bits_;
  }
  ++shard_bits_;
  shards_ = std::move(shards);
}

void DiskIndex::RemoveAt(Shard* s, uint32_t pos) {
  // Backward shift: the chain's later entries that are away from their homes (up to the first
  // empty entry or one at its home) move up by one, in order.
  const uint32_t cap = s->cap;
  uint32_t end = Next(pos, cap);
  for (uint64_t e = s->Get(end); Slot(e) != kEmpty && Distance(*s, end, e) > 0; e = s->Get(end)) {
    end = Next(end, cap);
  }
  // Entries [pos + 1, end) move to [pos, end - 1), cyclically; end - 1 empties.
  uint8_t* bytes = s->bytes.get();
  if (end < pos) {  // the run wraps: up to the last entry, the first one to it, then [1, end)
    std::memmove(bytes + pos * kEntryBytes, bytes + (pos + 1) * kEntryBytes,
                 (cap - 1 - pos) * kEntryBytes);
    if (end == 0) {
      s->Set(cap - 1, kEmptyEntry);
    } else {
      s->Set(cap - 1, s->Get(0));
      std::memmove(bytes, bytes + kEntryBytes, (end - 1) * kEntryBytes);
      s->Set(end - 1, kEmptyEntry);
    }
  } else {
    const uint32_t last = end == 0 ? cap - 1 : end - 1;  // end == 0: the run reached the end
    std::memmove(bytes + pos * kEntryBytes, bytes + (pos + 1) * kEntryBytes,
                 (last - pos) * kEntryBytes);
    s->Set(last, kEmptyEntry);
  }
  --s->size;
}

void DiskIndex::MakeCompact() {
  shards_.resize(size_t{1} << kFirstShardBits);
  shard_bits_ = kFirstShardBits;
  const SlotIndex exact = std::move(exact_);
  exact_ = SlotIndex();
  size_ = 0;
  exact.ForEach([this](int64_t key, uint32_t slot) { Insert(key, slot); });
}

void DiskIndex::Insert(int64_t key, uint32_t slot) {
  if (!compact() && size_ + 1 > kCompactFrom) MakeCompact();
  if (compact() && size_ + 1 > static_cast<int64_t>(shards_.size()) * kSplitAt && FreeBits() > 8) {
    Split();
  }
  ++size_;
  if (!compact()) {
    exact_.Insert(key, slot);
    return;
  }
  const uint64_t h = Hash(key);
  Shard& s = shards_[ShardOf(h)];
  const int64_t n = int64_t{s.size} + 1;
  if (n * 100 > int64_t{s.cap} * kGrowPercent) Resize(&s, GrownCap(n));
  Place(&s, (uint64_t{TagOf(h)} << 32) | slot);
  ++s.size;
}

bool DiskIndex::Erase(int64_t key, uint32_t slot) {
  if (!compact()) {
    if (slot == kEmpty || exact_.Get(key) != slot) return false;
    exact_.Erase(key);
    --size_;
    return true;
  }
  const uint64_t h = Hash(key);
  Shard& s = shards_[ShardOf(h)];
  const int64_t pos = Probe(s, TagOf(h), [slot](uint32_t, uint64_t e) { return Slot(e) == slot; });
  if (pos < 0) return false;
  RemoveAt(&s, static_cast<uint32_t>(pos));
  --size_;
  return true;
}

bool DiskIndex::Relocate(int64_t key, uint32_t from, uint32_t to) {
  if (from == kEmpty) return false;
  if (!compact()) {
    uint32_t* at = exact_.Find(key);
    if (at == nullptr || *at != from) return false;
    *at = to;
    return true;
  }
  const uint64_t h = Hash(key);
  Shard& s = shards_[ShardOf(h)];
  const int64_t pos = Probe(s, TagOf(h), [from](uint32_t, uint64_t e) { return Slot(e) == from; });
  if (pos < 0) return false;
  s.Set(static_cast<uint32_t>(pos), (uint64_t{TagOf(h)} << 32) | to);
  return true;
}

void DiskIndex::Clear() {
  exact_.Clear();
  shards_.clear();
  shards_.shrink_to_fit();
  shard_bits_ = kFirstShardBits;
  size_ = 0;
}

int64_t DiskIndex::AllocatedBytes() const {
  int64_t bytes = exact_.allocated_bytes() + shards_.capacity() * sizeof(Shard);
  for (const Shard& s : shards_) {
    if (s.cap > 0) bytes += s.cap * kEntryBytes + 1;
  }
  return bytes;
}

bool DiskIndex::Consistent() const {
  if (!compact()) return exact_.size() == size_ && exact_.Consistent();
  if (shards_.size() != (size_t{1} << shard_bits_)) return false;
  int64_t total = 0;
  const uint32_t shared = shard_bits_ - kFirstShardBits;  // shard bits within the tag
  for (size_t k = 0; k < shards_.size(); ++k) {
    const Shard& s = shards_[k];
    uint32_t used = 0;
    for (uint32_t i = 0; i < s.cap; ++i) {
      const uint64_t e = s.Get(i);
      if (Slot(e) == kEmpty) {
        if (e != kEmptyEntry) return false;
        continue;
      }
      ++used;
      // In its own shard, and found from its home at this very entry.
      if (shared > 0 && (Tag(e) >> (kTagBits - shared)) != (k & ((size_t{1} << shared) - 1))) {
        return false;
      }
      const int64_t at = Probe(s, Tag(e), [i](uint32_t pos, uint64_t) { return pos == i; });
      if (at != i) return false;
    }
    if (used != s.size || (s.cap > 0 && int64_t{s.size} * 100 > int64_t{s.cap} * kGrowPercent)) {
      return false;
    }
    total += used;
  }
  return total == size_ && exact_.size() == 0;
}

}  // namespace sok_lite
