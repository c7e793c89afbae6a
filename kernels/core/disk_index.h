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
// average 1,024 keys), each a Robin Hood table of 7-byte entries: a 32-bit slot and a 24-bit tag,
// the hash's bits 12-35 from the top (a shard's own bits among them from the 13th shard bit on, so
// that a split needs no key). A key's home entry is derived from the tag bits below the shard's,
// so a shard re-lays itself out at any capacity, too. A shard grows by ~3% at a time, from 95%
// full to 92% (like OpenIndex, never shrinking by itself): with the shards' own bytes, at most
// ~7.7 bytes a key at its peak, instead of the 16-32 of a doubling index.
//
// TF-free. Readers may probe in parallel; the caller serializes changes.
#ifndef SOK_LITE_KERNELS_CORE_DISK_INDEX_H_
#define SOK_LITE_KERNELS_CORE_DISK_INDEX_H_

#include <cstdint>
#include <cstring>
#include <memory>
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

  // The most bytes AllocatedBytes() may reach while the index holds at most `keys` keys from now
  // on (for a RAM budget): exact up to kCompactFrom, compact past it or once compact.
  int64_t BytesFor(int64_t keys) const;

  int64_t size() const { return size_; }
  bool compact() const { return !shards_.empty(); }
  // Whether key may be stored: always when it is; when it is not, false but for the rare key
  // that shares a stored key's identity (compact only).
  bool MayContain(int64_t key) const;
  // Brings the entry where a probe of key starts into the cache: loops over many keys call it
  // a few keys ahead, so that the probes' cache misses overlap (compact only; a shard's header
  // is read, the shards' headers being few enough to stay cached).
  void Prefetch(int64_t key) const {
    if (!compact()) return;
    const uint64_t h = Hash(key);
    const Shard& s = shards_[ShardOf(h)];
    if (s.cap > 0) {
      PrefetchLine(
          reinterpret_cast<const char*>(s.bytes.get()) + Home(TagOf(h), s.cap) * kEntryBytes,
          false);
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
  // One compact shard: cap entries of kEntryBytes (plus 1 byte so that an entry is read as a
  // uint64), `size` of them used. An entry: slot in the low 32 bits, tag in the next 24.
  struct Shard {
    std::unique_ptr<uint8_t[]> bytes;
    uint32_t cap = 0;
    uint32_t size = 0;
    uint64_t Get(uint32_t i) const {
      uint64_t e;
      std::memcpy(&e, bytes.get() + i * kEntryBytes, sizeof(e));
      return e & ((uint64_t{1} << 56) - 1);
    }
    void Set(uint32_t i, uint64_t e) { std::memcpy(bytes.get() + i * kEntryBytes, &e, 7); }
  };
  static constexpr uint64_t kEmptyEntry = kEmpty;  // slot kEmpty, tag 0
  static uint32_t Slot(uint64_t e) { return static_cast<uint32_t>(e); }
  static uint32_t Tag(uint64_t e) { return static_cast<uint32_t>(e >> 32); }

  static uint64_t Hash(int64_t key) { return SlotIndex::Hash(key); }
  static uint32_t TagOf(uint64_t hash) {
    return static_cast<uint32_t>(hash >> (64 - kIdentityBits)) & ((1u << kTagBits) - 1);
  }
  uint64_t ShardOf(uint64_t hash) const { return hash >> (64 - shard_bits_); }
  // The tag bits a shard's keys do not share, and a tag's home entry in a shard of cap entries.
  int FreeBits() const { return kIdentityBits - shard_bits_; }
  uint32_t Home(uint32_t tag, uint32_t cap) const {
    const uint64_t free = tag & ((uint32_t{1} << FreeBits()) - 1);
    return static_cast<uint32_t>((free * cap) >> FreeBits());
  }
  // How far entry e, at position i of shard s, sits from its home (cyclically).
  uint32_t Distance(const Shard& s, uint32_t i, uint64_t e) const {
    const uint32_t home = Home(Tag(e), s.cap);
    return i >= home ? i - home : i + s.cap - home;
  }
  // Calls fn(position, entry) for each entry of `tag` in shard s until fn returns true; returns
  // the position where fn returned true, or -1.
  template <typename F>
  int64_t Probe(const Shard& s, uint32_t tag, F fn) const;
  void MakeCompact();
  void Split();                         // every shard in two, by the next tag bit
  void Place(Shard* s, uint64_t e);     // Robin Hood insert; room is there
  void Resize(Shard* s, uint32_t cap);  // re-laid out at cap entries
  // s's entries, ordered by tag (hence by home at any capacity).
  std::vector<uint64_t> SortedEntries(const Shard& s) const;
  // Lays `sorted` (ordered by tag) out in s, emptied, at cap entries.
  void LayOut(const std::vector<uint64_t>& sorted, uint32_t cap, Shard* s) const;
  void RemoveAt(Shard* s, uint32_t pos);  // backward shift

  SlotIndex exact_;
  std::vector<Shard> shards_;
  int shard_bits_ = kFirstShardBits;
  int64_t size_ = 0;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_DISK_INDEX_H_
