// HashTable's side of the disk tier (kernels/core/hash_table_tier_file.h): the RAM budget, spilling
// the coldest rows, reading rows back for a lookup or an optimizer step, exports over both tiers
// and the memory counters.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/hash_table.h"
#include "kernels/core/prefetch.h"

namespace sok_lite {
namespace {

// RAM per RAM row besides its floats and its hash slot: bookkeeping, a row_used_ bit rounded up
// and a free-list entry.
constexpr int64_t kRamRowOverhead = sizeof(RowMeta) + 1 + sizeof(int64_t);

}  // namespace

std::string HashTable::AttachTier() {
  if (config_.capacity > 0) {
    return Named(
        "capacity (which drops rows) and a disk tier (which keeps them) exclude each "
        "other");
  }
  if (config_.ram_budget <= 0) return Named("ram_budget must be positive");
  return RowTierFile::Open(config_.tier_dir, stride(), config_.label, config_.tier_segment_bytes,
                           &tier_);
}

std::string HashTable::CheckAssignFits(const int64_t* keys, int64_t n) const {
  std::vector<int64_t> fresh, maybe;  // maybe: not in RAM, perhaps on disk
  for (int64_t i = 0; i < n; ++i) {
    if (FindRow(keys[i]) >= 0) continue;
    (tier_->MayContain(keys[i]) ? maybe : fresh).push_back(keys[i]);
  }
  for (std::vector<int64_t>* v : {&fresh, &maybe}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  // A key the compact disk index only seems to hold (it shares a stored key's identity, about
  // one in 2^36 / keys on disk) is new: counted as such at the most that rate allows.
  const int64_t seeming = static_cast<int64_t>(static_cast<double>(maybe.size()) * tier_->size() /
                                                   static_cast<double>(int64_t{1} << 36) +
                                               1);
  const int64_t stored =
      size() + static_cast<int64_t>(fresh.size()) + std::min<int64_t>(seeming, maybe.size());
  const int64_t index = tier_->IndexBytesFor(stored);
  const int64_t one_row = stride() * static_cast<int64_t>(sizeof(float)) + kRamRowOverhead +
                          RowIndex::kMinCapacity * kIndexEntryBytes;
  if (config_.ram_budget >= index + one_row) return "";
  return Named("ram_budget " + std::to_string(config_.ram_budget) + " bytes cannot hold the " +
               std::to_string(stored) + " keys this assign would leave stored: their disk index " +
               "alone takes " + std::to_string(index) + " bytes; a ram_budget of " +
               std::to_string(index + one_row) +
               " bytes holds them and one row; nothing was assigned, raise ram_budget");
}

int64_t HashTable::RamRowLimit() const {
  const int64_t per_row = stride() * static_cast<int64_t>(sizeof(float)) + kRamRowOverhead;
  // The disk index is charged as if every row were on disk: it only grows, and rows move to
  // disk at any time. The RAM hash index is charged at its size, doubled as many
  // times as the rows allowed would make it grow (it grows when 3/4 full).
  const int64_t left = config_.ram_budget - tier_->IndexBytesFor(size());
  int64_t index = index_.capacity() * kIndexEntryBytes;
  while (true) {
    const int64_t holds = index / kIndexEntryBytes * 3 / 4;
    const int64_t fits = std::max<int64_t>(left - index, 0) / per_row;
    if (fits <= holds) return fits;
    if (std::max<int64_t>(left - 2 * index, 0) / per_row <= holds) return holds;
    index *= 2;
  }
}

std::vector<int64_t> HashTable::MemoryStats() const {
  const int64_t bytes_ram =
      static_cast<int64_t>(chunks_.size()) * kChunkRows * stride() * sizeof(float) +
      meta_.capacity() * sizeof(RowMeta) + index_.capacity() * kIndexEntryBytes +
      row_used_.capacity() / 8 + (pins_[0].capacity() + pins_[1].capacity()) / 8 +
      free_rows_.capacity() * sizeof(int64_t) + (tier_ ? tier_->IndexBytes() : 0);
  return {index_.size(),
          tier_ ? tier_->size() : 0,
          bytes_ram,
          tier_ ? tier_->FileBytes() : 0,
          tier_ ? config_.ram_budget : -1,
          counters_.hits,
          counters_.misses,
          counters_.spills,
          counters_.evictions};
}

template <typename F>
void HashTable::ForEachSpillable(const std::vector<int64_t>& keep, bool spare_seen, F fn) const {
  std::vector<bool> kept(keep.empty() ? 0 : meta_.size());  // a bit a row: no search per row
  for (int64_t r : keep) kept[r] = true;
  for (int64_t r = 0; r < static_cast<int64_t>(meta_.size()); ++r) {
    if (!row_used_[r] || (spare_seen && meta_[r].last_seen == step_)) continue;
    if (!keep.empty() && kept[r]) continue;
    fn(r, Pinned(r));
  }
}

void HashTable::SpillCandidates(const std::vector<int64_t>& keep, bool spare_seen,
                                ScratchVector<std::pair<int64_t, int64_t>>* candidates,
                                ScratchVector<std::pair<int64_t, int64_t>>* pinned) const {
  // The coldest rows go: least recently seen (lru), or seen in the fewest lookup steps (lfu,
  // which keeps a skewed distribution's frequent keys in RAM through bursts of rare ones).
  const bool lfu = config_.policy == EvictPolicy::kLfu;
  ForEachSpillable(keep, spare_seen, [&](int64_t r, bool is_pinned) {
    (is_pinned ? pinned : candidates)->emplace_back(lfu ? meta_[r].count : meta_[r].last_seen, r);
  });
}

void HashTable::ScanSpillable(const std::vector<int64_t>& keep, bool spare_seen,
                              SpillScan* scan) const {
  // A bucket a score: lru by age, the oldest first, lfu by count. Ages past the last bucket's,
  // and counts past it, share the edge buckets.
  constexpr int64_t kTop = kSpillBuckets - 1;
  const bool lfu = config_.policy == EvictPolicy::kLfu;
  scan->bucket_of.assign(meta_.size(), SpillScan::kNone);
  scan->histogram.assign(kSpillBuckets, 0);
  scan->candidates = 0;
  ForEachSpillable(keep, spare_seen, [&](int64_t r, bool is_pinned) {
    if (is_pinned) return;
    const RowMeta& m = meta_[r];
    const int64_t b = lfu ? std::clamp<int64_t>(m.count, 0, kTop)
                          : kTop - std::clamp<int64_t>(step_ - m.last_seen, 0, kTop);
    scan->bucket_of[r] = static_cast<uint16_t>(b);
    ++scan->histogram[b];
    ++scan->candidates;
  });
}

bool HashTable::ColdestUnpinned(const SpillScan& scan, int64_t excess, int64_t want,
                                ScratchVector<int64_t>* victims) const {
  // Without a sort: the histogram finds the bucket where the `want` coldest end, and a pass in
  // row order takes the rows below it and the lowest rows of it: the rows a sort of (score,
  // row) pairs takes, but where the take ends inside an edge bucket (scores shared).
  if (scan.candidates < excess) return false;  // pinned rows must go too, or too few rows may
  constexpr int64_t kTop = kSpillBuckets - 1;
  const bool lfu = config_.policy == EvictPolicy::kLfu;
  const int64_t count = std::min(scan.candidates, want);
  int64_t below = 0, edge = 0;  // rows in the buckets below `edge`
  while (below + scan.histogram[edge] < count) below += scan.histogram[edge++];
  const bool shared = edge == kTop || (!lfu && edge == 0);
  if (shared && below + scan.histogram[edge] > count) return false;
  victims->reserve(count);
  int64_t at_edge = count - below;
  for (int64_t r = 0; r < static_cast<int64_t>(scan.bucket_of.size()); ++r) {
    const uint16_t b = scan.bucket_of[r];
    if (b < edge || (b == edge && at_edge-- > 0)) victims->push_back(r);
  }
  return true;
}

std::string HashTable::Spill(int64_t needed, const std::vector<int64_t>& keep, bool spare_seen,
                             const Runner& run, const SpillScan* scanned) {
  // The disk index (charged for every row stored) only grows: once it takes half the budget, or
  // will after the next eighth more keys (or, small, its next doubling), the rows in RAM are
  // heading for too few to serve a batch. Warned once, ahead of the growth.
  const int64_t index_bytes = tier_->IndexBytesFor(size());
  const int64_t grows_past = std::max(IndexCapacityFor(size()) * 3 / 4, size() + size() / 8);
  const int64_t grown_bytes = tier_->IndexBytesFor(grows_past + 1);
  if (!index_warned_ && config_.warn && grown_bytes * 2 > config_.ram_budget) {
    index_warned_ = true;
    config_.warn(Named(
        "the index of the rows on disk takes " + std::to_string(index_bytes) +
        " bytes of ram_budget " + std::to_string(config_.ram_budget) + " bytes and " +
        std::to_string(grown_bytes) + ", past half of it, once more than " +
        std::to_string(grows_past) + " keys are stored (now " + std::to_string(size()) + "; " +
        std::to_string(index_bytes / std::max<int64_t>(size(), 1)) +
        " bytes a key, charged for every key stored): the rows in RAM get the rest, and lookups "
        "fail once one batch's rows no longer fit; raise ram_budget (sok.plan_memory predicts the "
        "rows a budget keeps in RAM)"));
  }
  const int64_t limit = RamRowLimit();
  const int64_t excess = index_.size() + needed - limit;
  if (excess <= 0) return "";
  // Spill a sixteenth of the RAM rows at once (at least the excess): fewer, larger writes.
  const int64_t want = std::max<int64_t>(excess, limit / 16);
  ScratchVector<int64_t> victims;  // rows, ascending: adjacent rows of a chunk are read once
  SpillScan scan;
  if (!scanned) ScanSpillable(keep, spare_seen, &scan);
  if (!ColdestUnpinned(scanned ? *scanned : scan, excess, want, &victims)) {
    ScratchVector<std::pair<int64_t, int64_t>> candidates, pinned;  // (score, row)
    SpillCandidates(keep, spare_seen, &candidates, &pinned);
    // Rows prefetched for a coming lookup go last, and only as many as the excess needs.
    if (static_cast<int64_t>(candidates.size()) < excess && !pinned.empty()) {
      const int64_t take =
          std::min<int64_t>(pinned.size(), excess - static_cast<int64_t>(candidates.size()));
      std::nth_element(pinned.begin(), pinned.begin() + (take - 1), pinned.end());
      candidates.insert(candidates.end(), pinned.begin(), pinned.begin() + take);
    }
    if (static_cast<int64_t>(candidates.size()) < excess) {
      // A budget that holds the disk index at the rows stored after this batch, beside this
      // batch's rows and a RAM hash index for them (RamRowLimit gives it at least as many rows).
      const int64_t rows = index_.size() - static_cast<int64_t>(candidates.size()) + needed;
      const int64_t per_row = stride() * static_cast<int64_t>(sizeof(float)) + kRamRowOverhead;
      const int64_t hash_index =
          std::max<int64_t>(index_.capacity(), IndexCapacityFor(rows)) * kIndexEntryBytes;
      const int64_t enough = tier_->IndexBytesFor(size() + needed) + hash_index + rows * per_row;
      return Named("ram_budget " + std::to_string(config_.ram_budget) + " bytes holds " +
                   std::to_string(limit) + " rows of " + std::to_string(stride() * sizeof(float)) +
                   " bytes now, too few for the " + std::to_string(rows) +
                   " rows one batch needs in RAM: the index of the " +
                   std::to_string(tier_->size()) + " keys on disk takes " +
                   std::to_string(index_bytes) + " bytes of it (charged for each of the " +
                   std::to_string(size()) + " keys stored, " +
                   std::to_string(index_bytes / std::max<int64_t>(size(), 1)) +
                   " bytes a key); a ram_budget of " + std::to_string(enough) +
                   " bytes holds them and this batch; raise ram_budget or shrink the batch");
    }
    const int64_t count = std::min<int64_t>(candidates.size(), want);
    std::nth_element(candidates.begin(), candidates.begin() + (count - 1), candidates.end());
    for (int64_t i = 0; i < count; ++i) victims.push_back(candidates[i].second);
    std::sort(victims.begin(), victims.end());
  }
  const int64_t count = victims.size();
  ScratchVector<RowMeta> metas(count);
  ScratchVector<const float*> rows(count);
  for (int64_t i = 0; i < count; ++i) {
    metas[i] = meta_[victims[i]];
    rows[i] = RowPtr(victims[i]);
  }
  const std::string problem = tier_->Write(count, metas.data(), rows.data(), run);
  if (!problem.empty()) return problem;  // the rows stay in RAM
  for (const RowMeta& m : metas) Erase(m.key);
  counters_.spills += count;
  // The rows freed here are refilled by the next read-backs: compact only when the chunks
  // outgrow what the budget allows (after the rows widened, or the disk index grew).
  const int64_t chunks_allowed = (limit + kChunkRows - 1) / kChunkRows + 1;
  if (static_cast<int64_t>(chunks_.size()) > chunks_allowed) CompactRows();
  // A hash index sized for the rows RAM held before the disk index grew takes budget from rows:
  // shrink it to what the rows the budget allows need (RamRowLimit never lets it grow back
  // unless the budget holds the grown index).
  const int64_t capacity = IndexCapacityFor(std::max(limit, index_.size()));
  if (capacity < index_.capacity()) index_.Rehash(capacity);
  return "";
}

void HashTable::CompactRows() {
  const int64_t keep_rows = (index_.size() + kChunkRows - 1) / kChunkRows * kChunkRows;
  // Rows past keep_rows move into the free rows below it, their index slots following them.
  ScratchVector<int64_t> holes;
  for (int64_t r = 0; r < keep_rows && r < static_cast<int64_t>(meta_.size()); ++r) {
    if (!row_used_[r]) holes.push_back(r);
  }
  size_t next = 0;
  for (int64_t r = keep_rows; r < static_cast<int64_t>(meta_.size()); ++r) {
    if (!row_used_[r]) continue;
    const int64_t to = holes[next++];
    std::memcpy(RowPtr(to), RowPtr(r), stride() * sizeof(float));
    meta_[to] = meta_[r];
    row_used_[to] = true;
    for (std::vector<bool>& pins : pins_) {  // the marks move with the row
      if (static_cast<size_t>(r) < pins.size() && pins[r]) {
        pins[to] = true;  // to < r
        pins[r] = false;
      }
    }
    *index_.Find(meta_[r].key) = to;
  }
  chunks_.resize(keep_rows / kChunkRows);
  meta_.resize(std::min<int64_t>(keep_rows, meta_.size()));
  meta_.shrink_to_fit();
  row_used_.resize(meta_.size());
  row_used_.shrink_to_fit();
  for (std::vector<bool>& pins : pins_) {
    if (pins.size() > meta_.size()) pins.resize(meta_.size());
    pins.shrink_to_fit();
  }
  free_rows_.clear();
  for (int64_t r = meta_.size() - 1; r >= 0; --r) {
    if (!row_used_[r]) free_rows_.push_back(r);
  }
  free_rows_.shrink_to_fit();
}

void HashTable::SplitByTier(const int64_t* keys, int64_t n, const Runner& run,
                            std::vector<int64_t>* in_ram, std::vector<int64_t>* on_disk) const {
  // Probe RAM in parallel, prefetched. A batch repeats its hot rows many times: they are told
  // apart by a bit a row, not a sort. The disk index is not probed here: the read that follows
  // probes it for the keys' record slots, and finds the keys that are on disk then.
  ScratchVector<int64_t> rows(n);
  ForEachRow(keys, n, run, [&](int64_t i, int64_t r) { rows[i] = r; });
  std::vector<bool> listed(meta_.size());
  ScratchVector<int64_t> absent;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0) {
      absent.push_back(keys[i]);
    } else if (!listed[r]) {
      listed[r] = true;
      in_ram->push_back(r);
    }
  }
  std::sort(absent.begin(), absent.end());
  on_disk->assign(absent.begin(), std::unique(absent.begin(), absent.end()));
}

std::string HashTable::FetchFromTier(const int64_t* keys, int64_t n, bool spare_seen,
                                     const Runner& run) {
  std::vector<int64_t> keep, on_disk;
  SplitByTier(keys, n, run, &keep, &on_disk);
  return ReadBack(on_disk.data(), on_disk.size(), keep, false, spare_seen, run, nullptr);
}

std::string HashTable::PlaceReadBack(const int64_t* keys, const int64_t* slots,
                                     const char* const* records, int64_t m, int64_t found,
                                     const std::vector<int64_t>& keep, bool mark_seen,
                                     bool spare_seen, const Runner& run, const SpillScan* scanned) {
  tier_->TrackMoves(true);  // making room may clean segments, moving records that were read
  const std::string problem = Spill(found, keep, spare_seen, run, scanned);
  if (!problem.empty()) {
    tier_->TrackMoves(false);
    return problem;
  }
  // The indexes change one key at a time; the rows are then copied in on all threads (the
  // rows and the index stay put until the next call that makes room).
  ScratchVector<int64_t> rows(m, -1);
  ForEachFetchedAhead(
      m,
      [&](int64_t j) {
        if (slots[j] >= 0) tier_->PrefetchIndex(keys[j]);
      },
      [&](int64_t j) {
        if (slots[j] < 0) return;
        rows[j] = IndexNewRow(keys[j]);
        tier_->Erase(keys[j], slots[j]);
      });
  tier_->TrackMoves(false);
  const int64_t row_bytes = stride() * sizeof(float);
  run(m, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t r = rows[j];
      if (r < 0) continue;
      std::memcpy(&meta_[r], records[j], sizeof(RowMeta));
      std::memcpy(RowPtr(r), records[j] + RowTierFile::kHeaderBytes, row_bytes);
      if (mark_seen) MarkSeen(r);
    }
  });
  return "";
}

std::string HashTable::Prefetch(const int64_t* keys, int64_t n, const Runner& run, int64_t* read) {
  *read = 0;
  PrefetchPlan plan;
  const std::string problem = BeginPrefetch(keys, n, run, &plan);
  if (!problem.empty()) return problem;
  ReadPrefetch(&plan, run);
  return FinishPrefetch(&plan, run, read);
}

std::string HashTable::BeginPrefetch(const int64_t* keys, int64_t n, const Runner& run,
                                     PrefetchPlan* plan) const {
  if (!tier_) return "";
  // The batch's rows in RAM stay, the rows of its keys on disk come back: no more than could
  // fit beside the rows that stay (FinishPrefetch counts the room exactly; this bound spares
  // a scan of every RAM row while the table is locked). The bound counts every key not in RAM,
  // on disk or not: the read tells them apart.
  std::vector<int64_t> keep;
  SplitByTier(keys, n, run, &keep, &plan->on_disk);
  const int64_t fits = std::max<int64_t>(RamRowLimit() - static_cast<int64_t>(keep.size()), 0);
  if (static_cast<int64_t>(plan->on_disk.size()) > fits) plan->on_disk.resize(fits);
  plan->in_ram.reserve(keep.size());
  for (int64_t r : keep) plan->in_ram.push_back(meta_[r].key);
  return tier_->PlanRead(plan->on_disk.size(), plan->on_disk.data(), &plan->read);
}

std::string HashTable::FinishPrefetch(PrefetchPlan* plan, const Runner& run, int64_t* read) {
  *read = 0;
  if (!tier_) return "";
  // What the plan read and is still on disk as read; the rest stays where it is now.
  const int64_t m = plan->on_disk.size();
  ScratchVector<const char*> records(m);
  ScratchVector<int64_t> slots(m);
  std::string problem =
      tier_->TakePlanned(plan->read, m, plan->on_disk.data(), records.data(), slots.data(), run);
  if (!problem.empty()) return problem;
  // The batch's rows in RAM now (rows may have moved or gone to disk since the plan).
  std::vector<int64_t> keep;
  ScratchVector<int64_t> now(plan->in_ram.size());
  ForEachRow(plan->in_ram.data(), plan->in_ram.size(), run,
             [&](int64_t i, int64_t r) { now[i] = r; });
  for (int64_t r : now) {
    if (r >= 0) keep.push_back(r);
  }
  // As many as fit beside the rows that may go before any wanted row (not seen in this step,
  // not wanted by the last prefetch, not in keep); the spill that makes room for them reuses
  // this scan of the RAM rows.
  SpillScan scan;
  ScanSpillable(keep, true, &scan);
  const int64_t stay = index_.size() - scan.candidates;
  const int64_t fits = std::max<int64_t>(RamRowLimit() - stay, 0);
  int64_t found = 0;
  ScratchVector<int64_t> taken;  // keys moved to RAM
  for (int64_t j = 0; j < m; ++j) {
    if (slots[j] >= 0 && found == fits) slots[j] = -1;
    if (slots[j] < 0) continue;
    ++found;
    taken.push_back(plan->on_disk[j]);
  }
  if (found > 0) {
    problem = PlaceReadBack(plan->on_disk.data(), slots.data(), records.data(), m, found, keep,
                            false, true, run, &scan);
    if (!problem.empty()) return problem;
  }
  // A new generation of marks replaces the one before last: that batch has been looked up.
  pin_gen_ ^= 1;
  std::vector<bool>& pins = pins_[pin_gen_];
  pins.assign(meta_.size(), false);
  ScratchVector<int64_t> wanted = std::move(taken);
  const int64_t moved = wanted.size();
  wanted.insert(wanted.end(), plan->in_ram.begin(), plan->in_ram.end());
  now.resize(wanted.size());  // rows may have moved (making room compacts)
  ForEachRow(wanted.data(), wanted.size(), run, [&](int64_t i, int64_t r) { now[i] = r; });
  for (int64_t r : now) {
    if (r >= 0) pins[r] = true;
  }
  *read = moved;
  return "";
}

std::string HashTable::FetchMissing(const int64_t* keys, int64_t n, ScratchVector<int64_t>* missing,
                                    const Runner& run) {
  // Positions sorted by key: a key's repeats together. Every distinct key goes to the read,
  // whose one probe of the disk index finds the records to read; the keys it does not find on
  // disk (new ones, or min_count's pending ones) are left missing with all their positions.
  ScratchVector<int64_t> by_key = *missing;
  std::sort(by_key.begin(), by_key.end(), [keys](int64_t a, int64_t b) {
    return keys[a] < keys[b] || (keys[a] == keys[b] && a < b);
  });
  ScratchVector<int64_t> distinct;
  ScratchVector<std::pair<size_t, size_t>> runs;  // by_key[j, k): the positions of distinct[i]
  for (size_t j = 0; j < by_key.size();) {
    size_t k = j + 1;
    while (k < by_key.size() && keys[by_key[k]] == keys[by_key[j]]) ++k;
    distinct.push_back(keys[by_key[j]]);
    runs.emplace_back(j, k);
    j = k;
  }
  std::vector<int64_t> absent;  // in the order of distinct
  const std::string problem =
      ReadBack(distinct.data(), distinct.size(), {}, true, true, run, &absent);
  if (!problem.empty()) return problem;
  ScratchVector<int64_t> rest;
  for (size_t i = 0, a = 0; i < distinct.size() && a < absent.size(); ++i) {
    if (distinct[i] != absent[a]) continue;
    rest.insert(rest.end(), by_key.begin() + runs[i].first, by_key.begin() + runs[i].second);
    ++a;
  }
  std::sort(rest.begin(), rest.end());
  *missing = std::move(rest);
  return "";
}

std::string HashTable::ReadBack(const int64_t* on_disk, int64_t m, const std::vector<int64_t>& keep,
                                bool mark_seen, bool spare_seen, const Runner& run,
                                std::vector<int64_t>* absent) {
  if (m == 0) return "";
  if (tier_->size() == 0) {  // nothing on disk: every key is absent, no read
    if (absent) absent->insert(absent->end(), on_disk, on_disk + m);
    return "";
  }
  // Read first: a bad record is reported before anything moves.
  ScratchArray<char> buffer;
  ScratchVector<const char*> records(m);
  ScratchVector<int64_t> slots(m);
  std::string problem = tier_->Read(m, on_disk, &buffer, records.data(), slots.data(), run);
  if (!problem.empty()) return problem;
  int64_t found = 0;
  for (int64_t j = 0; j < m; ++j) {
    if (slots[j] >= 0) {
      ++found;
    } else if (absent) {
      absent->push_back(on_disk[j]);
    }
  }
  problem = PlaceReadBack(on_disk, slots.data(), records.data(), m, found, keep, mark_seen,
                          spare_seen, run, nullptr);
  if (!problem.empty() && absent) absent->clear();
  return problem;
}

std::string HashTable::ExportRange(int64_t since_step, int64_t cursor, int64_t limit,
                                   std::vector<int64_t>* keys, std::vector<float>* rows,
                                   int64_t* next) {
  keys->clear();
  rows->clear();
  const int64_t width = stride();
  const int64_t ram_end = meta_.size();
  const auto changed = [since_step](const RowMeta& m) {
    return since_step == INT64_MIN || m.updated > since_step;
  };
  int64_t pos = std::max<int64_t>(cursor, 0);
  for (; pos < ram_end && static_cast<int64_t>(keys->size()) < limit; ++pos) {
    if (row_used_[pos] && changed(meta_[pos])) {
      keys->push_back(meta_[pos].key);
      rows->insert(rows->end(), RowPtr(pos), RowPtr(pos) + width);
    }
  }
  if (pos < ram_end || !tier_) {
    *next = pos < ram_end ? pos : -1;
    return "";
  }
  int64_t disk_next = 0;
  const size_t in_ram = keys->size();
  const std::string problem =
      tier_->ReadWhere(pos - ram_end, limit - in_ram, changed, keys, rows, &disk_next);
  if (!problem.empty()) {
    keys->resize(in_ram);
    rows->resize(in_ram * width);
    return problem;
  }
  *next = disk_next < 0 ? -1 : ram_end + disk_next;
  return "";
}

}  // namespace sok_lite
