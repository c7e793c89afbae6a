#include "kernels/core/disk_index.h"

#include <algorithm>

namespace sok_lite {
namespace {

// A shard grows once more than 98% of its entries would be full, to 96% full (no doubling: the
// budget charges its bytes for every key stored). Buckets of 9 entries with two choices each
// fill to ~99.9% before walks fail, so 98% keeps the walks short.
constexpr int64_t kGrowPercent = 98;
constexpr int64_t kGrownPercent = 96;
constexpr int kMaxKicks = 512;

int64_t BucketCapacity(int64_t buckets) { return buckets * DiskIndex::kBucketEntries; }
uint32_t GrownBuckets(int64_t keys) {
  return static_cast<uint32_t>(keys * 100 / (kGrownPercent * DiskIndex::kBucketEntries) + 1);
}

}  // namespace

int64_t DiskIndex::BytesFor(int64_t keys) const {
  if (!compact() && keys <= kCompactFrom) {
    return IndexCapacityFor(keys) * static_cast<int64_t>(sizeof(SlotIndex::Entry));
  }
  // Shards: 4,096, or as many as `keys` split them into (each then holds 512 on average), or as
  // many as there are. Each has at most GrownBuckets(its keys) buckets.
  const int64_t shards = std::max<int64_t>(
      {int64_t{1} << kFirstShardBits, keys / (kSplitAt / 2) + 1, int64_t(shards_.size())});
  return shards * static_cast<int64_t>(sizeof(Shard) + kBucketBytes) +
         kBucketBytes * (keys * 100 / (kGrownPercent * kBucketEntries)) +
         static_cast<int64_t>(stash_.capacity() * sizeof(Stashed));
}

template <typename F>
DiskIndex::Where DiskIndex::Probe(uint64_t k, uint32_t tag, F fn) const {
  const Shard& s = shards_[k];
  if (s.buckets > 0) {
    const uint32_t first = First(tag, s.buckets), second = Second(tag, s.buckets);
    for (uint32_t b : {first, second}) {
      for (int i = 0, n = s.Used(b); i < n; ++i) {
        const uint64_t e = s.Get(b, i);
        if (Tag(e) == tag && fn(e)) return {b, i};
      }
      if (second == first) break;
    }
  }
  for (size_t i = 0; i < stash_.size(); ++i) {
    const Stashed& st = stash_[i];
    if (st.shard == k && Tag(st.entry) == tag && fn(st.entry)) {
      return {kInStash, static_cast<int64_t>(i)};
    }
  }
  return {kNowhere, 0};
}

bool DiskIndex::MayContain(int64_t key) const {
  if (!compact()) return exact_.Contains(key);
  const uint64_t h = Hash(key);
  return Probe(ShardOf(h), TagOf(h), [](uint64_t) { return true; }).bucket != kNowhere;
}

void DiskIndex::Candidates(int64_t key, std::vector<uint32_t>* slots) const {
  if (!compact()) {
    const uint32_t slot = exact_.Get(key);
    if (slot != kEmpty) slots->push_back(slot);
    return;
  }
  const uint64_t h = Hash(key);
  Probe(ShardOf(h), TagOf(h), [slots](uint64_t e) {
    slots->push_back(Slot(e));
    return false;
  });
}

bool DiskIndex::Holds(int64_t key, uint32_t slot) const {
  if (slot == kEmpty) return false;
  if (!compact()) return exact_.Get(key) == slot;
  const uint64_t h = Hash(key);
  return Probe(ShardOf(h), TagOf(h), [slot](uint64_t e) { return Slot(e) == slot; }).bucket !=
         kNowhere;
}

bool DiskIndex::Place(Shard* s, uint64_t e, uint64_t* homeless) {
  const uint32_t buckets = s->buckets;
  uint32_t from = UINT32_MAX;  // the bucket e was just moved out of: it goes to its other one
  for (int kick = 0; kick <= kMaxKicks; ++kick) {
    const uint32_t first = First(Tag(e), buckets), second = Second(Tag(e), buckets);
    const int n1 = s->Used(first), n2 = s->Used(second);
    if (n1 < kBucketEntries || n2 < kBucketEntries) {
      s->Append(n2 == kBucketEntries || (n1 <= n2 && n1 < kBucketEntries) ? first : second, e);
      return true;
    }
    // Both full: an entry of either bucket whose other bucket has room moves there (a shard's
    // buckets are few enough to stay cached, so looking costs little).
    for (uint32_t b : {first, second}) {
      for (int i = 0; i < kBucketEntries; ++i) {
        const uint64_t x = s->Get(b, i);
        const uint32_t other = Other(x, b, buckets);
        if (other != b && s->Used(other) < kBucketEntries) {
          s->Append(other, x);
          s->Set(b, i, e);
          return true;
        }
      }
    }
    // None: e takes a random entry's place, in its bucket other than the one it left.
    walk_ ^= walk_ << 13;
    walk_ ^= walk_ >> 7;
    walk_ ^= walk_ << 17;
    uint32_t b = (walk_ >> 32) & 1 ? first : second;
    if (first != second && b == from) b = b == first ? second : first;
    const int i = static_cast<int>(walk_ % kBucketEntries);
    const uint64_t out = s->Get(b, i);
    s->Set(b, i, e);
    e = out;
    from = b;
  }
  *homeless = e;
  return false;
}

void DiskIndex::LayOut(const std::vector<uint64_t>& entries, uint32_t buckets, uint64_t k,
                       Shard* s) {
  s->buckets = buckets;
  s->size = static_cast<uint32_t>(entries.size());
  if (buckets == 0) {  // only for no entries (a split's empty half)
    s->bytes.reset();
    return;
  }
  s->bytes.reset(new (std::align_val_t{kBucketBytes}) uint8_t[int64_t{buckets} * kBucketBytes]);
  std::memset(s->bytes.get(), 0, int64_t{buckets} * kBucketBytes);
  for (uint64_t e : entries) {
    uint64_t homeless;
    if (!Place(s, e, &homeless)) stash_.push_back({k, homeless});
  }
}

std::vector<uint64_t> DiskIndex::BucketEntries(const Shard& s) const {
  std::vector<uint64_t> entries;
  entries.reserve(s.size);
  for (uint32_t b = 0; b < s.buckets; ++b) {
    for (int i = 0, n = s.Used(b); i < n; ++i) entries.push_back(s.Get(b, i));
  }
  return entries;
}

std::vector<uint64_t> DiskIndex::TakeEntries(uint64_t k) {
  std::vector<uint64_t> entries = BucketEntries(shards_[k]);
  size_t kept = 0;
  for (const Stashed& st : stash_) {
    if (st.shard == k) {
      entries.push_back(st.entry);
    } else {
      stash_[kept++] = st;
    }
  }
  stash_.resize(kept);
  return entries;
}

void DiskIndex::Resize(uint64_t k, uint32_t buckets) {
  LayOut(TakeEntries(k), buckets, k, &shards_[k]);
}

void DiskIndex::Split() {
  // The next shard bit is the top one of the tag bits a shard's keys do not share yet.
  std::vector<Shard> shards(shards_.size() * 2);
  const uint32_t bit = uint32_t{1} << (FreeBits() - 1);
  std::vector<uint64_t> low, high;
  std::vector<Stashed> stash;  // the parents' stash; the halves' fills stash_ anew
  stash.swap(stash_);
  for (size_t i = 0; i < shards_.size(); ++i) {
    low.clear();
    high.clear();
    for (uint64_t e : BucketEntries(shards_[i])) (Tag(e) & bit ? high : low).push_back(e);
    for (const Stashed& st : stash) {
      if (st.shard == i) (Tag(st.entry) & bit ? high : low).push_back(st.entry);
    }
    shards_[i] = Shard();  // freed before the next shard's halves are allocated
    ++shard_bits_;
    LayOut(low, low.empty() ? 0 : GrownBuckets(low.size()), 2 * i, &shards[2 * i]);
    LayOut(high, high.empty() ? 0 : GrownBuckets(high.size()), 2 * i + 1, &shards[2 * i + 1]);
    --shard_bits_;
  }
  ++shard_bits_;
  shards_ = std::move(shards);
}

void DiskIndex::RemoveAt(Shard* s, Where at) {
  if (at.bucket == kInStash) {
    stash_[at.i] = stash_.back();
    stash_.pop_back();
  } else {
    // The bucket's last entry fills the hole: used entries stay first.
    const auto b = static_cast<uint32_t>(at.bucket);
    const int last = s->Used(b) - 1;
    s->Set(b, static_cast<int>(at.i), s->Get(b, last));
    s->SetUsed(b, last);
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

void DiskIndex::Add(uint64_t k, uint64_t e) {
  Shard& s = shards_[k];
  const int64_t n = int64_t{s.size} + 1;
  if (n * 100 > BucketCapacity(s.buckets) * kGrowPercent) Resize(k, GrownBuckets(n));
  uint64_t homeless;
  if (!Place(&s, e, &homeless)) stash_.push_back({k, homeless});
  ++s.size;
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
  Add(ShardOf(h), (uint64_t{TagOf(h)} << 32) | slot);
}

bool DiskIndex::Erase(int64_t key, uint32_t slot) {
  if (!compact()) {
    if (slot == kEmpty || exact_.Get(key) != slot) return false;
    exact_.Erase(key);
    --size_;
    return true;
  }
  const uint64_t h = Hash(key);
  const uint64_t k = ShardOf(h);
  const Where at = Probe(k, TagOf(h), [slot](uint64_t e) { return Slot(e) == slot; });
  if (at.bucket == kNowhere) return false;
  RemoveAt(&shards_[k], at);
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
  const uint64_t k = ShardOf(h);
  const Where at = Probe(k, TagOf(h), [from](uint64_t e) { return Slot(e) == from; });
  if (at.bucket == kNowhere) return false;
  const uint64_t e = (uint64_t{TagOf(h)} << 32) | to;
  if (at.bucket == kInStash) {
    stash_[at.i].entry = e;
  } else {
    shards_[k].Set(static_cast<uint32_t>(at.bucket), static_cast<int>(at.i), e);
  }
  return true;
}

void DiskIndex::Clear() {
  exact_.Clear();
  shards_.clear();
  shards_.shrink_to_fit();
  stash_.clear();
  stash_.shrink_to_fit();
  shard_bits_ = kFirstShardBits;
  size_ = 0;
}

int64_t DiskIndex::AllocatedBytes() const {
  int64_t bytes = exact_.allocated_bytes() + shards_.capacity() * sizeof(Shard) +
                  stash_.capacity() * sizeof(Stashed);
  for (const Shard& s : shards_) bytes += int64_t{s.buckets} * kBucketBytes;
  return bytes;
}

bool DiskIndex::Consistent() const {
  if (!compact()) return exact_.size() == size_ && exact_.Consistent() && stash_.empty();
  if (shards_.size() != (size_t{1} << shard_bits_)) return false;
  const uint32_t shared = shard_bits_ - kFirstShardBits;  // shard bits within the tag
  const auto in_shard = [&](size_t k, uint64_t e) {
    return shared == 0 || (Tag(e) >> (kTagBits - shared)) == (k & ((size_t{1} << shared) - 1));
  };
  std::vector<uint32_t> stashed(shards_.size(), 0);
  for (const Stashed& st : stash_) {
    if (st.shard >= shards_.size() || Slot(st.entry) == kEmpty || !in_shard(st.shard, st.entry)) {
      return false;
    }
    ++stashed[st.shard];
  }
  int64_t total = 0;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const Shard& s = shards_[k];
    uint32_t used = 0;
    for (uint32_t b = 0; b < s.buckets; ++b) {
      const int n = s.Used(b);
      if (n > kBucketEntries) return false;
      for (int i = 0; i < n; ++i) {
        const uint64_t e = s.Get(b, i);
        ++used;
        // A slot, in its own shard and in one of its two buckets.
        if (Slot(e) == kEmpty || !in_shard(k, e)) return false;
        if (b != First(Tag(e), s.buckets) && b != Second(Tag(e), s.buckets)) return false;
      }
    }
    if (used + stashed[k] != s.size ||
        int64_t{s.size} * 100 > BucketCapacity(s.buckets) * kGrowPercent) {
      return false;
    }
    total += s.size;
  }
  return total == size_ && exact_.size() == 0;
}

}  // namespace sok_lite
