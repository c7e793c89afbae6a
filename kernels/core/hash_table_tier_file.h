// The disk tier of a hash table: rows that do not fit the table's RAM budget, as fixed-size
// records (bookkeeping, checksum, floats) in one file, found through a compact in-RAM index
// key -> record slot (kernels/core/disk_index.h: under 8 bytes a key at scale; the bookkeeping
// and the key itself stay in the records).
//
// The file is log-structured: it is cut into segments of ~1 MiB (at most 8,192 records), and new
// records are appended to the open segment, so a spill goes out as long sequential writes
// (writing records into scattered free slots costs the page cache ~10x more per record). A row
// read back leaves a dead record; segments with no live record are reused whole, and when dead
// records outnumber live ones the segments with the fewest live records are cleaned (their live
// records appended anew). The file therefore stays under twice its live records plus a few
// segments.
//
// Reads and writes go in batches sorted by file offset. The file is a cache, not a checkpoint: it
// is truncated when opened. TF-free; the caller serializes access.
#ifndef SOK_LITE_KERNELS_CORE_HASH_TABLE_TIER_FILE_H_
#define SOK_LITE_KERNELS_CORE_HASH_TABLE_TIER_FILE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/core/disk_index.h"
#include "kernels/core/mapped_memory.h"

namespace sok_lite {

// Runs fn over disjoint ranges covering [0, n), possibly in parallel.
using ParallelRunner =
    std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;
// Runs fn(0, n) on the calling thread.
void RunSerially(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

// What a table keeps per row besides the floats (HashTable's bookkeeping).
struct RowMeta {
  int64_t key;
  int64_t last_seen;  // lookup step
  int64_t count;      // lookup steps that saw the key (LFU)
  int64_t updated;    // optimizer step of the last change; -1: never changed
};

class RowTierFile {
 public:
  static constexpr int64_t kDefaultSegmentBytes = int64_t{1} << 20;
  // A record: key and bookkeeping (RowMeta), a checksum, then the row's floats, padded to 8
  // bytes.
  static constexpr int64_t kHeaderBytes = sizeof(RowMeta) + sizeof(uint64_t);
  // Opens (creating or truncating) <dir>/rows.bin, creating dir if needed, for records of
  // `stride` floats in segments of about segment_bytes. `label` names the table in errors
  // (empty: the caller does). Returns "" or an error.
  [[nodiscard]] static std::string Open(const std::string& dir, int64_t stride,
                                        const std::string& label, int64_t segment_bytes,
                                        std::unique_ptr<RowTierFile>* out);
  ~RowTierFile();

  int64_t size() const { return index_.size(); }
  int64_t stride() const { return stride_; }
  const std::string& path() const { return path_; }
  // Renames the file to `path` (same file system); the open file stays in use. Returns "" or an
  // error (then nothing changed).
  [[nodiscard]] std::string MoveTo(const std::string& path);
  // RAM held now by the index and the segment tables.
  int64_t IndexBytes() const;
  // The most RAM IndexBytes() may reach while the file holds at most `rows` rows (the index
  // grows by doubling): what a RAM budget must set aside for it.
  int64_t IndexBytesFor(int64_t rows) const;
  int64_t FileBytes() const { return file_bytes_; }

  // Whether key may be on disk: true when it is; when it is not, false but for about one key
  // in 2^36 / size() (its record read finds another key: Read reports it absent).
  bool MayContain(int64_t key) const { return index_.MayContain(key); }

  // Appends n rows (metas[i] with its key, rows[i] of stride floats), records built and written
  // through `run`. Keys must be distinct and not on disk. On a write error (disk full, file size
  // limit) nothing is added and the error is returned. May clean segments first (an error there
  // loses nothing either).
  [[nodiscard]] std::string Write(int64_t n, const RowMeta* metas, const float* const* rows,
                                  const ParallelRunner& run);

  // Reads the records of n distinct keys into *records (a new buffer): found[i] points at key
  // i's record (its RowMeta, then its row from kHeaderBytes on) and slots[i] gets its slot (-1:
  // key i is not on disk, found[i] untouched). The file is read in offset order (spans of
  // adjacent records through `run`). A record that fails its checksum, or whose key the index
  // does not place there, is an error (the file was changed under the table). The rows stay on
  // disk until Erase.
  [[nodiscard]] std::string Read(int64_t n, const int64_t* keys, ScratchArray<char>* records,
                                 const char** found, int64_t* slots,
                                 const ParallelRunner& run) const;

  // A read of records planned under the caller's lock and done without it (HashTable's
  // prefetch), so that the file's reads do not hold the table while a step runs beside them.
  // The plan owns a duplicate of the file's descriptor: the read stays safe whatever the table
  // does to its file meanwhile, and TakePlanned keeps only records nothing rewrote or removed
  // since the plan.
  struct PlannedRead {
    PlannedRead() = default;
    PlannedRead(const PlannedRead&) = delete;
    PlannedRead& operator=(const PlannedRead&) = delete;
    ~PlannedRead();
    int fd = -1;
    uint64_t epoch = 0;  // the file's contents at the plan (see epoch_)
    int64_t record_bytes = 0;
    std::string path, prefix;                          // for ReadPlanned's errors
    ScratchVector<std::pair<int64_t, int64_t>> order;  // (slot, i) sorted: every candidate of key i
    ScratchVector<uint64_t> generations;               // per order entry: its segment's at the plan
    ScratchArray<char> records;                        // order.size() records, by ReadPlanned
    std::string problem;                               // ReadPlanned's error, if any
  };
  // Plans the read of the records of n distinct keys (as Read would find them). Returns "" or
  // an error (no descriptor left to duplicate).
  [[nodiscard]] std::string PlanRead(int64_t n, const int64_t* keys, PlannedRead* plan) const;
  // Reads a plan's records, spans through `run`; touches nothing of the file object, so it needs
  // no lock. An error goes to plan->problem.
  static void ReadPlanned(PlannedRead* plan, const ParallelRunner& run);
  // Read's result for a plan's n keys, left in the plan's records: records[i] = key i's record
  // (its RowMeta, then its row from kHeaderBytes on) and slots[i] its slot, for the keys whose
  // record is still live in a segment not rewritten since the plan (slots[i] = -1 for the
  // others, and for every key when the file was cleared or replaced since). A kept record that
  // fails its checksum is an error, as in Read (then every slots[i] = -1); so is
  // plan->problem, unless the file changed since. Records are checked through `run`.
  [[nodiscard]] std::string TakePlanned(const PlannedRead& plan, int64_t n, const int64_t* keys,
                                        const char** records, int64_t* slots,
                                        const ParallelRunner& run) const;

  // Brings the disk index's entry for key into the cache ahead of an Erase of it.
  void PrefetchIndex(int64_t key) const { index_.Prefetch(key); }
  // Removes key, whose record is at slot (as Read or ForEachMeta gave it), or where cleaning
  // moved it since while TrackMoves is on.
  void Erase(int64_t key, int64_t slot);
  // While on, Erase follows the records that writes (cleaning segments) move: slots that a Read
  // gave stay good across the writes that make room for its rows. Turning it off or on again
  // forgets the moves.
  void TrackMoves(bool on);
  void Clear();

  // The rows whose bookkeeping satisfies pred, in slot order from slot `start`, at most `limit`
  // of them: keys appended to *keys, records' floats (stride each) to *rows. *next gets the
  // slot to continue from (-1: none left). Reads the file.
  [[nodiscard]] std::string ReadWhere(int64_t start, int64_t limit,
                                      const std::function<bool(const RowMeta&)>& pred,
                                      std::vector<int64_t>* keys, std::vector<float>* rows,
                                      int64_t* next) const;
  // Calls fn with the bookkeeping and record slot of every stored row, reading the file a
  // segment at a time.
  [[nodiscard]] std::string ForEachMeta(
      const std::function<void(const RowMeta&, int64_t slot)>& fn) const;

  // Re-lays every record out with more floats per row: the extra ones get `fill[j]` per group
  // of `group` floats (a slot of dim floats each). Rewrites the file. Returns "" or an error.
  [[nodiscard]] std::string Widen(int64_t group, const std::vector<float>& fill);

 private:
  // Record slots are uint32 (kernels/core/disk_index.h).
  static constexpr uint32_t kEmpty = DiskIndex::kEmpty;

  RowTierFile(std::string path, int fd, int64_t stride, int64_t segment_bytes, std::string label);
  void MoveFrom(RowTierFile* other);  // takes other's records, index and file
  uint64_t Checksum(const char* record) const;
  [[nodiscard]] std::string Prefix() const { return label_.empty() ? "" : label_ + ": "; }
  bool Used(int64_t slot) const { return (used_[slot >> 6] >> (slot & 63)) & 1; }
  void SetUsed(int64_t slot, bool on);
  // Writes records (slot, bytes) sorted by slot: adjacent slots go out in one pwrite, spans
  // through `run`.
  [[nodiscard]] std::string WriteRecords(const ScratchVector<std::pair<int64_t, const char*>>& at,
                                         const ParallelRunner& run);
  // Reads `left` bytes at `offset` of fd into p (an error names path, after prefix).
  [[nodiscard]] static std::string ReadBytes(int fd, char* p, int64_t left, int64_t offset,
                                             const std::string& path, const std::string& prefix);
  // Reads the bytes of slots [first, last] in one pread into *buf.
  [[nodiscard]] std::string ReadSpan(int64_t first, int64_t last, ScratchVector<char>* buf) const;
  // (slot, i) for every record slot that may hold keys[i], i in [0, n), sorted.
  ScratchVector<std::pair<int64_t, int64_t>> CandidateSlots(int64_t n, const int64_t* keys) const;
  // Verify of a record read from `slot` for `key`: "" or the corruption error; *holds: it is
  // key's record (not that of another key sharing its identity).
  [[nodiscard]] std::string CheckRecord(const char* rec, int64_t slot, int64_t key,
                                        bool* holds) const;
  // Checks the record read from `slot`: its checksum, and that it holds *key (the key looked up,
  // if not null) or a key the index places there. "" or the corruption error.
  [[nodiscard]] std::string Verify(const char* record, int64_t slot, const int64_t* key) const;
  // Calls fn(slot, record) for every live record from slot `start` on, in slot order, a segment
  // read at a time, each record verified; stops early when fn returns false (*next: the slot
  // after the last one given; -1: none left).
  [[nodiscard]] std::string Scan(int64_t start, const std::function<bool(int64_t, const char*)>& fn,
                                 int64_t* next) const;
  // The slots the next n appended records take (the open segment, then empty segments, then
  // new ones), without taking them.
  ScratchVector<int64_t> NextSlots(int64_t n) const;
  // Appends n records (bytes of record_bytes_ each, keys given) and indexes them (from: null, or
  // the slots of the keys' records now, which become dead); an error leaves everything as it was.
  [[nodiscard]] std::string Append(int64_t n, const char* records, const int64_t* keys,
                                   const int64_t* from, const ParallelRunner& run);
  // Cleans the segments with the fewest live records while dead records outnumber live ones,
  // reading them through `run`.
  [[nodiscard]] std::string Clean(const ParallelRunner& run);
  // Cleans k segments (victims[i].second; their live records are appended anew and they become
  // empty); an error leaves everything as it was.
  [[nodiscard]] std::string CleanSegments(const std::pair<uint32_t, int64_t>* victims, int64_t k,
                                          const ParallelRunner& run);
  int64_t DeadRecords() const;

  std::string path_;
  int fd_;
  int64_t stride_;
  int64_t record_bytes_;
  int64_t segment_bytes_;
  int64_t segment_records_;
  std::string label_;
  DiskIndex index_;                       // key -> record slot; its size is the rows on disk
  std::vector<uint64_t> used_;            // a bit per slot: holds a live record
  std::vector<uint32_t> segment_live_;    // live records per segment
  std::vector<uint32_t> empty_segments_;  // segments with no live record, not open
  int64_t num_segments_ = 0;
  int64_t open_segment_ = -1;  // where appends go; -1: none yet
  int64_t open_fill_ = 0;      // records appended to it
  int64_t file_bytes_ = 0;     // the file's length: the end of the furthest record written
  // A value no other file or contents had (from one process-wide counter): changes when the
  // file is cleared or replaced, so that a PlannedRead of the old contents keeps nothing.
  uint64_t epoch_;
  // Per segment, the counter's value when it was last opened for appends: a segment's records
  // are rewritten only after it is opened again.
  std::vector<uint64_t> segment_generation_;
  bool tracking_moves_ = false;
  std::unordered_map<int64_t, uint32_t> moves_;  // key -> slot cleaning moved it to (TrackMoves)
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HASH_TABLE_TIER_FILE_H_
