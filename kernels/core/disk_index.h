// The index of a disk tier's records: key -> record slot, in under 8 bytes a key at scale.
//
// Small, it is an exact OpenIndex (12-byte entries holding the key). Past kCompactFrom keys it
// turns compact for good (until Clear): the key itself is no longer kept, only 36 bits of its
// hash (its identity) beside the slot, 7 bytes an entry. The record on disk holds the key, so a
// reader confirms a candidate by reading it: the index answers with the slots that may hold a
// key (usually none or one). A key whose identity no stored key shares finds no candidate; one
// that shares it (about n / 2^36 of the absent keys, 0.2% at 120M keys) costs a record read that
// finds another key. Two stored keys with one identity each keep an entry, both candidates.
//
// Compact layout: shards by the hash's top bits (4,096 at first, split in two each time they
// average 1,024 keys), each a bucketed cuckoo table: buckets of one cache line holding 9 entries
// of 7 bytes, a 32-bit slot and a 24-bit tag, the hash's bits 12-35 from the top (a shard's own
// bits among them from the 13th shard bit on, so that a split needs no key). An entry lives in
// one of two buckets, both derived from the tag bits below the shard's, so a probe reads two
// cache lines, an erase clears one entry, and a shard re-lays itself out at any size. An insert
// into two full buckets moves an entry to its other bucket (and so on, a short random walk). A
// shard grows by ~2% at a time, from 98% full to 96%: with the shards' own bytes at most ~7.6
// bytes a key at its peak, instead of the 16-32 of a doubling index. An entry no walk can place
// (only keys sharing an identity 19 times over can cause that) waits in a small stash.
//
// TF-free. Readers may probe in parallel; the caller serializes changes.
#ifndef SOK_LITE_KERNELS_CORE_DISK_INDEX_H_
#define SOK_LITE_KERNELS_CORE_DISK_INDEX_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "kernels/core/open_index.h"
#include "kernels/core/prefetch.h"

namespace sok_lite {

class DiskIndex {
 public:
  static constexpr uint32_t kEmpty = UINT32_MAX;  // no slot; the largest slot is kEmpty - 1
  static constexpr int64_t kCompactFrom = int64_t{1} << 15;
  static constexpr int kFirstShardBits = 12;
  static constexpr int kIdentityBits = 36;  // shard bits and tag: the hash's top 36 bits
  static constexpr int kTagBits = kIdentityBits - kFirstShardBits;
  static constexpr int64_t kSplitAt = 1024;  // keys a shard holds on average before all split
  static constexpr int64_t kEntryBytes = 7;
  static constexpr int kBucketEntries = 9;
  static constexpr int64_t kBucketBytes = 64;  // one cache line

  // The most bytes AllocatedBytes() may reach while the index holds at most `keys` keys from now
  // on (for a RAM budget): exact up to kCompactFrom, compact past it or once compact.
  int64_t BytesFor(int64_t keys) const;

  int64_t size() const { return size_; }
  bool compact() const { return !shards_.empty(); }
  // Whether key may be stored: always when it is; when it is not, false but for the rare key
  // that shares a stored key's identity (compact only).
  bool MayContain(int64_t key) const;
  // Brings the two buckets a probe of key reads into the cache: loops over many keys call it
  // a few keys ahead, so that the probes' cache misses overlap (compact only; a shard's header
  // is read, the shards' headers being few enough to stay cached).
  void Prefetch(int64_t key) const {
    if (!compact()) return;
    const uint64_t h = Hash(key);
    const Shard& s = shards_[ShardOf(h)];
    if (s.buckets > 0) {
      const uint32_t tag = TagOf(h);
      PrefetchLine(s.Bucket(First(tag, s.buckets)), false);
      PrefetchLine(s.Bucket(Second(tag, s.buckets)), false);
    }
  }
  // Appends to *slots the slots that may hold key's record (exact: at most one, its own).
  void Candidates(int64_t key, std::vector<uint32_t>* slots) const;
  // Whether the index maps key to slot (exact: key's entry; compact: an entry of key's identity).
  bool Holds(int64_t key, uint32_t slot) const;
  // Stores key -> slot (slot != kEmpty). The key must not be stored.
  void Insert(int64_t key, uint32_t slot);
  // Removes key, stored at slot; false (nothing changes) if the index does not map it there.
  bool Erase(int64_t key, uint32_t slot);
  // Moves key from slot `from` to slot `to`; false (nothing changes) if it is not at `from`.
  bool Relocate(int64_t key, uint32_t from, uint32_t to);
  void Clear();  // back to an empty exact index
  int64_t AllocatedBytes() const;
  // For tests: every entry reachable from its home in its own shard, sizes and load limits hold.
  bool Consistent() const;

 private:
  struct AlignedFree {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{kBucketBytes}); }
  };
  // One compact shard: `buckets` buckets of kBucketEntries entries, `size` keys (the stash's
  // included). An entry: slot in the low 32 bits, tag in the next 24. A bucket's last byte
  // counts its entries in use, which come first.
  struct Shard {
    std::unique_ptr<uint8_t[], AlignedFree> bytes;
    uint32_t buckets = 0;
    uint32_t size = 0;
    const char* Bucket(uint32_t b) const {
      return reinterpret_cast<const char*>(bytes.get()) + int64_t{b} * kBucketBytes;
    }
    uint64_t Get(uint32_t b, int i) const {
      uint64_t e;  // the 9th entry's 8 bytes end with the count, masked off
      std::memcpy(&e, Bucket(b) + i * kEntryBytes, sizeof(e));
      return e & ((uint64_t{1} << 56) - 1);
    }
    void Set(uint32_t b, int i, uint64_t e) {
      std::memcpy(bytes.get() + int64_t{b} * kBucketBytes + i * kEntryBytes, &e, 7);
    }
    int Used(uint32_t b) const { return bytes[int64_t{b} * kBucketBytes + kBucketBytes - 1]; }
    void SetUsed(uint32_t b, int n) {
      bytes[int64_t{b} * kBucketBytes + kBucketBytes - 1] = static_cast<uint8_t>(n);
    }
    void Append(uint32_t b, uint64_t e) {
      const int n = Used(b);
      Set(b, n, e);
      SetUsed(b, n + 1);
    }
  };
  // An entry no bucket could take, with its shard.
  struct Stashed {
    uint64_t shard;
    uint64_t entry;
  };
  // Where a probe stopped: bucket and entry, or kInStash and the stash index, or kNowhere.
  struct Where {
    int64_t bucket;
    int64_t i;
  };
  static constexpr int64_t kNowhere = -1;
  static constexpr int64_t kInStash = -2;
  static uint32_t Slot(uint64_t e) { return static_cast<uint32_t>(e); }
  static uint32_t Tag(uint64_t e) { return static_cast<uint32_t>(e >> 32); }

  static uint64_t Hash(int64_t key) { return SlotIndex::Hash(key); }
  static uint32_t TagOf(uint64_t hash) {
    return static_cast<uint32_t>(hash >> (64 - kIdentityBits)) & ((1u << kTagBits) - 1);
  }
  uint64_t ShardOf(uint64_t hash) const { return hash >> (64 - shard_bits_); }
  // The tag bits a shard's keys do not share, and a tag's two buckets in a shard of `buckets`.
  int FreeBits() const { return kIdentityBits - shard_bits_; }
  uint32_t FreeTag(uint32_t tag) const { return tag & ((uint32_t{1} << FreeBits()) - 1); }
  uint32_t First(uint32_t tag, uint32_t buckets) const {
    return static_cast<uint32_t>((uint64_t{FreeTag(tag)} * buckets) >> FreeBits());
  }
  uint32_t Second(uint32_t tag, uint32_t buckets) const {
    const uint32_t mixed = FreeTag(tag) * 0x9E3779B1u;  // golden-ratio multiply, mod 2^32
    return static_cast<uint32_t>((uint64_t{mixed} * buckets) >> 32);
  }
  // The bucket of entry e other than b (b itself when both are b).
  uint32_t Other(uint64_t e, uint32_t b, uint32_t buckets) const {
    const uint32_t first = First(Tag(e), buckets);
    return first == b ? Second(Tag(e), buckets) : first;
  }
  // Calls fn(entry) for each entry of `tag` in shard k (its two buckets, then the stash) until
  // fn returns true; returns where, or kNowhere.
  template <typename F>
  Where Probe(uint64_t k, uint32_t tag, F fn) const;
  void MakeCompact();
  void Split();  // every shard in two, by the next tag bit
  // Puts e into one of its buckets in s, moving others to their other bucket as needed; false,
  // with the entry left over in *homeless, if a walk of kicks found no room.
  bool Place(Shard* s, uint64_t e, uint64_t* homeless);
  void Add(uint64_t k, uint64_t e);           // e into shard k (or the stash), size + 1
  void Resize(uint64_t k, uint32_t buckets);  // shard k re-laid out at `buckets`
  // Lays `entries` out in s, emptied, at `buckets` (0 only for no entries); those left over go to
  // the stash as shard k's.
  void LayOut(const std::vector<uint64_t>& entries, uint32_t buckets, uint64_t k, Shard* s);
  std::vector<uint64_t> BucketEntries(const Shard& s) const;  // s's entries in its buckets
  std::vector<uint64_t> TakeEntries(uint64_t k);  // shard k's entries, its stash's removed
  void RemoveAt(Shard* s, Where at);

  SlotIndex exact_;
  std::vector<Shard> shards_;
  std::vector<Stashed> stash_;
  int shard_bits_ = kFirstShardBits;
  int64_t size_ = 0;
  uint64_t walk_ = 0x2545F4914F6CDD1Dull;  // xorshift state: the kicks' choices
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_DISK_INDEX_H_
