// A growable hash table of embedding rows for DynamicVariable: rows are created the first time a
// key is seen, so memory follows the keys that occur, not the key space. TF-free; the caller
// serializes access (the TF resource holds a mutex).
#ifndef SOK_LITE_KERNELS_CORE_HASH_TABLE_H_
#define SOK_LITE_KERNELS_CORE_HASH_TABLE_H_

#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/half_rows.h"
#include "kernels/core/hash_table_record.h"
#include "kernels/core/hash_table_tier_file.h"
#include "kernels/core/huge_pages.h"
#include "kernels/core/mapped_memory.h"
#include "kernels/core/open_index.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/row_init.h"

namespace sok_lite {

enum class EvictPolicy { kLru, kLfu };

// A chunk of row records, mapped from the system rather than taken from malloc's heap: chunks
// freed by a spill, a compaction or a re-layout go back to the system at once, so the process's
// RSS follows the rows held (malloc keeps freed heap memory, and raises its mmap threshold after
// the first such frees).
struct RowChunkUnmap {
  size_t bytes = 0;
  void operator()(float* p) const;
};
using RowChunk = std::unique_ptr<float[], RowChunkUnmap>;
RowChunk NewRowChunk(size_t floats);  // throws std::bad_alloc when the system has no memory

struct TableConfig {
  int64_t dim = 0;
  RowInit init;
  int64_t capacity = 0;  // rows this table may hold; 0: unbounded
  EvictPolicy policy = EvictPolicy::kLru;
  int64_t min_count = 1;  // a key is stored from its min_count-th occurrence on
  // Values stored in 16 bits (half_format) instead of float32; slots stay float32.
  bool half_values = false;
  HalfFormat half_format = HalfFormat::kBfloat16;
  uint64_t rounding_seed = 0;  // bfloat16's stochastic rounding of updated rows
  // Disk tier (AttachTier): the directory of its file, and the bytes of RAM the rows may hold
  // (records, bookkeeping and both indexes); rows beyond it go to the file.
  std::string tier_dir;
  int64_t ram_budget = 0;
  int64_t tier_segment_bytes = RowTierFile::kDefaultSegmentBytes;  // see hash_table_tier_file.h
  std::string label;  // names the table in errors (empty: the caller does)
  // Takes the table's one-off warnings (the TF kernels log them); empty: they are dropped.
  std::function<void(const std::string&)> warn;
};

// Counters of MemoryStats, cumulative since creation. hits and misses count the ids of the
// lookups that succeed (Lookup, LookupCombine; a repeated id counts each time), the same way with
// or without a disk tier: hits + misses = ids looked up. A failed lookup counts nothing;
// optimizer steps and assigns count nothing.
struct TableCounters {
  int64_t hits = 0;       // looked-up ids whose key was in RAM when the lookup began
  int64_t misses = 0;     // the others: keys read back from disk, created, or not admitted yet
  int64_t spills = 0;     // rows moved from RAM to disk
  int64_t evictions = 0;  // rows deleted by capacity or EvictUnseen
};

class HashTable {
 public:
  explicit HashTable(const TableConfig& config);

  const TableConfig& config() const { return config_; }
  // Rows stored, in RAM and on disk.
  int64_t size() const { return index_.size() + (tier_ ? tier_->size() : 0); }
  bool tiered() const { return tier_ != nullptr; }

  // Opens the disk tier of config().tier_dir; from then on rows beyond config().ram_budget
  // spill to it (coldest first) and come back when looked up. Returns "" or an error.
  [[nodiscard]] std::string AttachTier();

  // rows_ram, rows_disk, bytes_ram, bytes_disk, ram_budget (-1: unbounded), hits, misses,
  // spills, evictions.
  std::vector<int64_t> MemoryStats() const;
  int num_slots() const { return static_cast<int>(slot_init_.size()); }
  int64_t step() const { return step_; }
  // Where things are in this table's records (kernels/core/hash_table_record.h): the value,
  // dim floats or dim 16-bit values packed two to a float, then each slot (dim floats). Only its
  // conversions know the value's layout; everything else moves records as blocks of stride()
  // floats.
  RecordLayout layout() const {
    RecordLayout layout;
    layout.dim = config_.dim;
    layout.num_slots = num_slots();
    layout.half = config_.half_values;
    layout.format = config_.half_format;
    return layout;
  }
  // Floats per stored record.
  int64_t stride() const { return layout().stride(); }
  // Floats per row as the conversions read and write it: the value, then each slot.
  int64_t row_width() const { return layout().row_width(); }

  // The record <-> float32 row conversions of layout(), see RecordLayout. WriteUpdatedRow's
  // bfloat16 rounding draws from the table's rounding_seed.
  void ReadRow(const float* record, bool with_slots, float* out) const {
    layout().ReadRow(record, with_slots, out);
  }
  void WriteUpdatedRow(const float* row, int64_t key, int64_t step, float* record) const {
    layout().WriteUpdatedRow(row, config_.rounding_seed, key, step, record);
  }

  // Runs fn over disjoint ranges covering [0, n), possibly in parallel.
  using Runner = ParallelRunner;

  // One lookup step: stored keys are marked seen; unseen keys are counted and stored once
  // admitted (evicting under the capacity policy if needed). A key counts once per step however
  // often it repeats in `keys`. out[i, :dim] gets keys[i]'s value (the initializer's value for a
  // key not admitted yet). Probing, copying and new rows' initial values run through `run`;
  // index inserts are serial. Returns "" or an error.
  [[nodiscard]] std::string Lookup(const int64_t* keys, int64_t n, float* out, const Runner& run);

  // Disk tier: reads the rows of keys[0, n) that are on disk back into RAM ahead of the lookup
  // that will need them (a coming batch's keys), and marks that batch's rows in RAM as wanted:
  // spills take them only when no other row can go, until two more Prefetch calls have passed.
  // Moves rows only, so values never change; counts no lookup. Reads back no more rows than
  // fit beside the rows that may go (rows seen in this lookup step stay), so a prefetch never
  // takes the room a lookup needs. *read gets the rows read back. Without a disk tier does
  // nothing. Returns "" or an error of the disk tier (then nothing moved).
  [[nodiscard]] std::string Prefetch(const int64_t* keys, int64_t n, const Runner& run,
                                     int64_t* read);
  // Prefetch in three calls, so that the file is read without the caller's lock: BeginPrefetch
  // and FinishPrefetch under it, ReadPrefetch without it (it touches nothing of the table, so a
  // lookup or an optimizer step may run meanwhile). Rows that the table read back, moved or
  // removed in between are not taken: their lookup fetches them. Prefetch is the three in turn.
  struct PrefetchPlan {
    std::vector<int64_t> on_disk;  // the batch's distinct keys not in RAM at the plan, to read
    std::vector<int64_t> in_ram;   // its distinct keys in RAM at the plan
    RowTierFile::PlannedRead read;
  };
  [[nodiscard]] std::string BeginPrefetch(const int64_t* keys, int64_t n, const Runner& run,
                                          PrefetchPlan* plan) const;
  static void ReadPrefetch(PrefetchPlan* plan, const Runner& run) {
    RowTierFile::ReadPlanned(&plan->read, run);
  }
  [[nodiscard]] std::string FinishPrefetch(PrefetchPlan* plan, const Runner& run, int64_t* read);

  // One lookup step fused with lookup_sparse's combine, on ids that are not deduplicated:
  // sample b's keys are keys[row_splits[b], row_splits[b + 1]), and out[b, :dim] gets their
  // values (times weights[k] when weights is not null) summed, times scale[b] (null: 1); an
  // empty sample gets zeros. Bookkeeping, admission and eviction are those of Lookup. Samples
  // are combined through `run` (over sample ranges) while the keys are probed; keys not stored
  // yet are admitted serially afterwards and their samples combined again. stream_out writes
  // `out` with streaming stores. Returns "" or an error.
  [[nodiscard]] std::string LookupCombine(const int64_t* keys, const int64_t* row_splits,
                                          int64_t batch, const float* weights, const float* scale,
                                          float* out, bool stream_out, const Runner& run);

  // Pointer to the stored record of key (see stride()), or null if the key is not stored.
  float* Find(int64_t key);

  // For an optimizer step: records[i] = the stored record of keys[i] (see stride()) or null,
  // probed through `run`; the found rows count as updated at optimizer step `step`. Keys must
  // be distinct.
  // With a disk tier, rows on disk are read back first. Returns "" or an error.
  [[nodiscard]] std::string RecordsForUpdate(const int64_t* keys, int64_t n, int64_t step,
                                             float** records, const Runner& run);

  // Stores keys[i] with rows[i] ([row_width()] floats each, or [dim] with slots at their initial
  // values), replacing any existing row; the rows count as updated at optimizer step `step`; a
  // key that repeats takes its last row. With a disk tier, the batch goes in pieces that fit the
  // RAM budget, and room for a whole piece is made before any of its rows changes: on an error
  // of the disk tier no value of that piece or later ones changes (a batch that fits 3/4 of the
  // budget's rows is one piece: all or nothing; a batch whose keys the budget cannot index is
  // refused before any piece). Returns "" or an error.
  [[nodiscard]] std::string Assign(const int64_t* keys, int64_t n, const float* rows,
                                   bool with_slots, int64_t step);

  // Adds slots (re-laying out every stored row); existing slots keep their values. Returns ""
  // or an error (of the disk tier, which is rewritten).
  [[nodiscard]] std::string AddSlots(const std::vector<float>& initial_values);

  // Sets the values new rows' slots start from (one per slot; the count must match).
  void SetSlotInit(const std::vector<float>& initial_values) { slot_init_ = initial_values; }

  // Removes every row (the slot layout and the step counter stay).
  void Clear();

  // Exchanges this table's rows with `staged`'s: both tiers, the slot layout, the lookup step
  // and the keys awaiting admission; each table keeps its configuration and counters (the
  // staged table's spills are added to this table's, undone by swapping back). A
  // checkpoint load fills a staged table and swaps it in whole, so that a failed load changes
  // nothing. With disk tiers, each file moves into the directory of the table that now holds
  // it. Returns "" or an error (then nothing is exchanged).
  [[nodiscard]] std::string SwapRows(HashTable* staged);

  // Removes rows not seen during the last `steps_unseen` lookup steps; *evicted gets how many.
  // Returns "" or an error (of the disk tier, whose bookkeeping is read from the file; then
  // nothing is removed).
  [[nodiscard]] std::string EvictUnseen(int64_t steps_unseen, int64_t* evicted);

  // Calls fn(key, record pointer) for every stored row changed by an optimizer step or an assign
  // after step `since_step` (INT64_MIN: every row; rows only ever looked up have never changed
  // and come back identical from the initializer): rows in RAM, then rows on disk, read in
  // batches. Returns "" or an error (of the disk tier).
  template <typename F>
  [[nodiscard]] std::string ForEach(int64_t since_step, F fn) {
    int64_t cursor = 0;
    std::vector<int64_t> keys;
    std::vector<float> rows;
    while (cursor >= 0) {
      const std::string problem =
          ExportRange(since_step, cursor, kChunkRows * 4, &keys, &rows, &cursor);
      if (!problem.empty()) return problem;
      for (size_t i = 0; i < keys.size(); ++i) fn(keys[i], rows.data() + i * stride());
    }
    return "";
  }

  // One piece of ForEach(since_step): at most `limit` rows (keys, and rows of stride() floats)
  // from position `cursor` (0 first), *next the position to continue from (-1: done). Positions
  // stay valid while the table does not change.
  [[nodiscard]] std::string ExportRange(int64_t since_step, int64_t cursor, int64_t limit,
                                        std::vector<int64_t>* keys, std::vector<float>* rows,
                                        int64_t* next);

  // *n = the number of rows ForEach(since_step, ...) visits. Returns "" or an error (of the
  // disk tier, whose bookkeeping is read from the file).
  [[nodiscard]] std::string CountSince(int64_t since_step, int64_t* n) const;

 private:
  static constexpr int64_t kChunkRows = 1024;
  // Spill's histogram of scores (ColdestUnpinned): a bucket a count or an age in steps below it.
  static constexpr int64_t kSpillBuckets = 4096;

  // An entry of the RAM index: key and row, read together by a probe (four to a cache line).
  static constexpr int64_t kIndexEntryBytes = sizeof(RowIndex::Entry);
  // RowMeta (kernels/core/hash_table_tier_file.h): per stored row, together so that a lookup
  // touches one line for them.
  // Marks row r as seen in this step. A key may repeat across threads, so the marks are
  // atomic: whoever moves last_seen to this step counts the step, once. Read first: a hot key
  // repeats many times, and only its first sighting writes.
  void MarkSeen(int64_t r) {
    RowMeta& meta = meta_[r];
    if (__atomic_load_n(&meta.last_seen, __ATOMIC_RELAXED) != step_ &&
        __atomic_exchange_n(&meta.last_seen, step_, __ATOMIC_RELAXED) != step_) {
      __atomic_fetch_add(&meta.count, 1, __ATOMIC_RELAXED);
    }
  }
  // Calls on_row(i, row of keys[i] in RAM or -1) for i in [0, n) through `run`, each key
  // hashed once and its index entry prefetched a few keys ahead.
  template <typename F>
  void ForEachRow(const int64_t* keys, int64_t n, const Runner& run, F on_row) const;
  int64_t FindRow(int64_t key) const { return index_.Get(key); }  // row in RAM, or -1
  // Stores a new row of key (bookkeeping, index), its record unset: InitRecord, or a value
  // written over it, fills it.
  int64_t Place(int64_t key);
  int64_t IndexNewRow(int64_t key);  // indexes a new row of key, contents unset
  // Disk tier: the distinct RAM rows of keys[0, n) into *in_ram (in order of first use) and
  // the distinct keys not in RAM into *on_disk (sorted; on disk or not: a read of them finds
  // out); RAM is probed through `run`.
  void SplitByTier(const int64_t* keys, int64_t n, const Runner& run, std::vector<int64_t>* in_ram,
                   std::vector<int64_t>* on_disk) const;
  // Disk tier: moves the rows of keys[0, n) that are on disk back to RAM (spilling others to
  // make room, never rows of these keys; spare_seen: see Spill), for an optimizer step or an
  // assign. RAM is probed through `run`.
  [[nodiscard]] std::string FetchFromTier(const int64_t* keys, int64_t n, bool spare_seen,
                                          const Runner& run);
  // Disk tier, in a lookup of keys[0, n) whose ids at positions *missing (sorted) were not in
  // RAM (the others are marked seen): reads the rows of those on disk back to RAM, marked seen,
  // and leaves in *missing the positions of keys stored nowhere.
  [[nodiscard]] std::string FetchMissing(const int64_t* keys, int64_t n,
                                         ScratchVector<int64_t>* missing, const Runner& run);
  // Adds a successful lookup of n ids, `missed` of them not in RAM, to the counters.
  void CountLookup(int64_t n, int64_t missed) {
    counters_.hits += n - missed;
    counters_.misses += missed;
  }
  // Reads the rows of on_disk (distinct keys not in RAM, on disk or not) back into RAM, making
  // room first (keep, spare_seen: see Spill); mark_seen: they count as seen in this lookup step.
  // The keys not on disk after all are appended to *absent (if not null), in on_disk's order.
  [[nodiscard]] std::string ReadBack(const int64_t* on_disk, int64_t m,
                                     const std::vector<int64_t>& keep, bool mark_seen,
                                     bool spare_seen, const Runner& run,
                                     std::vector<int64_t>* absent);
  // The unpinned rows Spill may take, by their scores' bucket (a bucket per score below the
  // edges: kSpillBuckets), for a choice without a sort.
  struct SpillScan {
    static constexpr uint16_t kNone = UINT16_MAX;  // not a candidate
    ScratchVector<uint16_t> bucket_of;             // per RAM row
    std::vector<int64_t> histogram;                // rows per bucket
    int64_t candidates = 0;
  };
  // Moves the rows read from disk (keys[j], from record slots[j], j < m; -1: not on disk,
  // skipped; records[j]: the record read) into RAM, making room for `found` rows first (keep,
  // spare_seen, scanned: see Spill); mark_seen: they count as seen in this lookup step.
  [[nodiscard]] std::string PlaceReadBack(const int64_t* keys, const int64_t* slots,
                                          const char* const* records, int64_t m, int64_t found,
                                          const std::vector<int64_t>& keep, bool mark_seen,
                                          bool spare_seen, const Runner& run,
                                          const SpillScan* scanned);
  // The RAM rows the budget allows now (the disk index takes its share).
  int64_t RamRowLimit() const;
  // Calls fn(row, pinned) for each RAM row Spill may take (keep, spare_seen: see Spill);
  // pinned: a Prefetch marked it as wanted.
  template <typename F>
  void ForEachSpillable(const std::vector<int64_t>& keep, bool spare_seen, F fn) const;
  // The RAM rows Spill may take as (score by config().policy, row): those a Prefetch marked as
  // wanted into *pinned, the others into *candidates.
  void SpillCandidates(const std::vector<int64_t>& keep, bool spare_seen,
                       ScratchVector<std::pair<int64_t, int64_t>>* candidates,
                       ScratchVector<std::pair<int64_t, int64_t>>* pinned) const;
  // The scan of the rows Spill may take (keep, spare_seen: see Spill) that its choice reads.
  void ScanSpillable(const std::vector<int64_t>& keep, bool spare_seen, SpillScan* scan) const;
  // Spill's choice when no pinned row has to go: the min(candidates, want) unpinned rows of the
  // lowest (score, row), ascending, into *victims. False (nothing chosen) when fewer than
  // `excess` rows are candidates, or where the buckets cannot tell the rows apart (the caller
  // sorts).
  bool ColdestUnpinned(const SpillScan& scan, int64_t excess, int64_t want,
                       ScratchVector<int64_t>* victims) const;
  // Moves the coldest RAM rows (by config().policy) to disk until `needed` more fit the budget;
  // spares the rows in `keep` (any order, repeats allowed) and, with spare_seen, the rows seen in
  // this lookup step. scanned: ScanSpillable's result for these keep and spare_seen on the
  // table as it is now, or null (Spill scans).
  [[nodiscard]] std::string Spill(int64_t needed, const std::vector<int64_t>& keep, bool spare_seen,
                                  const Runner& run, const SpillScan* scanned = nullptr);
  // Moves the RAM rows into the fewest chunks and frees the rest, so that the chunks a table
  // once needed (before spills, or before its slots widened the rows) do not outlast the
  // budget. Row numbers change: callers probe again afterwards.
  void CompactRows();
  // Counts the keys at positions `missing` (not stored; a key may repeat) as seen in this step
  // and stores those now admitted, in order of first occurrence, evicting if the table is full.
  // Sorts `missing`. Returns "" or an error.
  [[nodiscard]] std::string AdmitMissing(const int64_t* keys, ScratchVector<int64_t>* missing,
                                         const Runner& run);
  // Disk tier: "" if the budget can index every key stored after assigning keys[0, n) and
  // still hold a row in RAM, else the error (before anything changes).
  [[nodiscard]] std::string CheckAssignFits(const int64_t* keys, int64_t n) const;
  // Assign of one piece that fits the RAM budget.
  [[nodiscard]] std::string AssignPiece(const int64_t* keys, int64_t n, const float* rows,
                                        bool with_slots, int64_t step);
  void Erase(int64_t key);
  // Prefetch's marks (pins_): whether row r is wanted by a coming lookup; clearing one.
  bool Pinned(int64_t r) const {
    const size_t i = r;
    return (i < pins_[0].size() && pins_[0][i]) || (i < pins_[1].size() && pins_[1][i]);
  }
  void Unpin(int64_t r) {
    for (std::vector<bool>& pins : pins_) {
      if (static_cast<size_t>(r) < pins.size()) pins[r] = false;
    }
  }
  void InitRecord(int64_t key, float* record) const;  // initializer's value, slots' fills
  void FillSlots(float* record) const;                // the slots' fills alone
  void InitValue(int64_t key, float* out) const;      // [dim]: the value InitRecord stores
  float* RowPtr(int64_t r) { return chunks_[r / kChunkRows].get() + (r % kChunkRows) * stride(); }
  int64_t AllocateRow();
  // Makes room for `needed` more rows (capacity evictions, or disk-tier spills written through
  // `run`); keep and spare_seen: see Spill.
  [[nodiscard]] std::string MakeRoom(int64_t needed, const Runner& run,
                                     const std::vector<int64_t>& keep = {}, bool spare_seen = true);
  [[nodiscard]] std::string Named(const std::string& problem) const {
    return config_.label.empty() ? problem : config_.label + ": " + problem;
  }

  TableConfig config_;
  std::vector<float> slot_init_;
  // Key -> row of the rows in RAM (kernels/core/open_index.h); its size is their number.
  RowIndex index_;
  // Row storage in fixed-size chunks (no doubling of the whole payload on growth).
  std::vector<RowChunk> chunks_;
  std::vector<RowMeta, HugePageAllocator<RowMeta>> meta_;  // reached per key: huge pages
  std::vector<bool> row_used_;
  std::vector<int64_t> free_rows_;
  // Occurrence counts of keys not admitted yet (min_count > 1).
  std::unordered_map<int64_t, int64_t> pending_;
  int64_t step_ = 0;
  std::unique_ptr<RowTierFile> tier_;
  TableCounters counters_;
  // The RAM rows the last two Prefetch calls wanted, a bit per row each (rows past a vector's
  // end are not marked); pin_gen_: the vector the last call filled.
  std::vector<bool> pins_[2];
  int pin_gen_ = 0;
  bool index_warned_ = false;  // config_.warn heard that the disk index passed half the budget
};

template <typename F>
inline void HashTable::ForEachRow(const int64_t* keys, int64_t n, const Runner& run,
                                  F on_row) const {
  const RowIndex::View index = index_.view();
  run(n, [&](int64_t i0, int64_t i1) {
    // Each key is hashed once: the hash of key i + kPrefetchDistance prefetches its entry and
    // waits in `ahead` until that key is probed.
    uint64_t ahead[kPrefetchDistance];
    for (int64_t i = i0; i < std::min(i1, i0 + kPrefetchDistance); ++i) {
      ahead[i % kPrefetchDistance] = RowIndex::Hash(keys[i]);
      index.Prefetch(ahead[i % kPrefetchDistance]);
    }
    for (int64_t i = i0; i < i1; ++i) {
      const uint64_t hash = ahead[i % kPrefetchDistance];
      if (i + kPrefetchDistance < i1) {
        const uint64_t next = RowIndex::Hash(keys[i + kPrefetchDistance]);
        ahead[i % kPrefetchDistance] = next;
        index.Prefetch(next);
      }
      on_row(i, index.Get(keys[i], hash));
    }
  });
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HASH_TABLE_H_
