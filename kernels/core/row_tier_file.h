// The disk tier of a hash table: rows that do not fit the table's RAM budget, as fixed-size
// records in one file (a free list reuses the slots of rows read back or deleted), found through
// a compact in-RAM index key -> file slot that also keeps each row's bookkeeping, so that
// eviction, incremental exports and counts never read the file. Reads and writes go in batches
// sorted by file offset. The file is a cache, not a checkpoint: it is truncated when opened.
// TF-free; the caller serializes access.
#ifndef SOK_LITE_KERNELS_CORE_ROW_TIER_FILE_H_
#define SOK_LITE_KERNELS_CORE_ROW_TIER_FILE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sok_lite {

// What a table keeps per row besides the floats (HashTable's bookkeeping).
struct RowMeta {
  int64_t key;
  int64_t last_seen;  // lookup step
  int64_t count;      // lookup steps that saw the key (LFU)
  int64_t updated;    // optimizer step of the last change; -1: never changed
};

class RowTierFile {
 public:
  // Opens (creating or truncating) <dir>/rows.bin, creating dir if needed, for records of
  // `stride` floats. `label` names the table in errors (empty: the caller does). Returns "" or an
  // error.
  static std::string Open(const std::string& dir, int64_t stride, const std::string& label,
                          std::unique_ptr<RowTierFile>* out);
  ~RowTierFile();

  int64_t size() const { return size_; }
  int64_t stride() const { return stride_; }
  const std::string& path() const { return path_; }
  // Bytes of RAM the index holds per stored row at the worst load factor, for budgeting.
  static constexpr int64_t kIndexBytesPerRow = 16 * 8 / 3 + sizeof(RowMeta) + 8;
  int64_t IndexBytes() const;  // RAM held now by the index
  int64_t FileBytes() const { return num_slots_ * record_bytes_; }

  // The bookkeeping of key, or null if it is not on disk.
  const RowMeta* Find(int64_t key) const;

  // Appends n rows (metas[i] with its key, rows[i] of stride floats) to the file. Keys must be
  // distinct and not on disk. On a write error (disk full, file size limit) nothing is added
  // and the error is returned.
  std::string Write(int64_t n, const RowMeta* metas, const float* const* rows);

  // Reads the rows of n distinct keys, all on disk, into rows[i * stride] and metas[i], the
  // file read in offset order. A record whose checksum or key does not match is an error (the
  // file was changed under the table). The rows stay on disk until Erase.
  std::string Read(int64_t n, const int64_t* keys, RowMeta* metas, float* rows) const;

  void Erase(int64_t key);
  void Clear();

  // Keys of the rows whose bookkeeping satisfies pred, in file slot order from slot `start`,
  // at most `limit` of them; *next gets the slot to continue from (-1: none left).
  template <typename P>
  std::vector<int64_t> KeysWhere(int64_t start, int64_t limit, P pred, int64_t* next) const {
    std::vector<int64_t> keys;
    int64_t s = std::max<int64_t>(start, 0);
    for (; s < num_slots_ && static_cast<int64_t>(keys.size()) < limit; ++s) {
      if (slot_used_[s] && pred(slot_meta_[s])) keys.push_back(slot_meta_[s].key);
    }
    *next = s < num_slots_ ? s : -1;
    return keys;
  }
  // Bookkeeping of every stored row (read-only), in slot order.
  template <typename F>
  void ForEachMeta(F fn) const {
    for (int64_t s = 0; s < num_slots_; ++s) {
      if (slot_used_[s]) fn(slot_meta_[s]);
    }
  }
  // Re-lays every record out with more floats per row: the extra ones get `fill[j]` per group
  // of `group` floats (a slot of dim floats each). Rewrites the file. Returns "" or an error.
  std::string Widen(int64_t group, const std::vector<float>& fill);

 private:
  RowTierFile(std::string path, int fd, int64_t stride, std::string label);
  int64_t FindIndex(int64_t key) const;  // index position holding key, or -1
  void IndexInsert(int64_t key, int64_t slot);
  void IndexGrow();
  uint64_t Checksum(const char* record) const;
  std::string Prefix() const { return label_.empty() ? "" : label_ + ": "; }
  std::string WriteRecords(const std::vector<std::pair<int64_t, const char*>>& at);

  std::string path_;
  int fd_;
  int64_t stride_;
  int64_t record_bytes_;
  std::string label_;
  struct Entry {
    int64_t key;
    int64_t slot;  // -1: empty
  };
  std::vector<Entry> index_;  // open addressing, linear probing
  int64_t size_ = 0;
  int64_t num_slots_ = 0;  // records in the file, used or free
  std::vector<RowMeta> slot_meta_;
  std::vector<bool> slot_used_;
  std::vector<int64_t> free_slots_;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_ROW_TIER_FILE_H_
