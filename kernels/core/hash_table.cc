#include "kernels/core/hash_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "kernels/core/prefetch.h"

namespace sok_lite {

void RowChunkUnmap::operator()(float* p) const { munmap(p, bytes); }

RowChunk NewRowChunk(size_t floats) {
  const size_t bytes = floats * sizeof(float);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return RowChunk(static_cast<float*>(p), RowChunkUnmap{bytes});
}

HashTable::HashTable(const TableConfig& config) : config_(config) {}

float* HashTable::Find(int64_t key) {
  const int64_t r = FindRow(key);
  return r < 0 ? nullptr : RowPtr(r);
}

int64_t HashTable::AllocateRow() {
  if (!free_rows_.empty()) {
    const int64_t r = free_rows_.back();
    free_rows_.pop_back();
    return r;
  }
  const int64_t r = meta_.size();
  if (r % kChunkRows == 0) chunks_.push_back(NewRowChunk(kChunkRows * stride()));
  meta_.push_back(RowMeta{0, 0, 0, -1});
  row_used_.push_back(false);
  return r;
}

int64_t HashTable::IndexNewRow(int64_t key) {
  index_.Reserve(index_.size() + 1);  // grown before the row is taken
  const int64_t r = AllocateRow();
  index_.Insert(key, r);
  row_used_[r] = true;
  return r;
}

int64_t HashTable::Place(int64_t key) {
  const int64_t r = IndexNewRow(key);  // marks the row used
  meta_[r] = RowMeta{key, step_, 0, -1};
  return r;
}

void HashTable::Erase(int64_t key) {
  const int64_t r = index_.Erase(key);
  if (r < 0) return;
  row_used_[r] = false;
  Unpin(r);
  free_rows_.push_back(r);
}

void HashTable::InitValue(int64_t key, float* out) const {
  InitRows(config_.init, &key, config_.dim, 0, 1, out);
  // As stored: a key not admitted yet reads what its row will hold once admitted.
  layout().RoundAsStored(out);
}

void HashTable::InitRecord(int64_t key, float* record) const {
  const RecordLayout layout = this->layout();
  if (layout.half) {
    thread_local std::vector<float> value;
    value.resize(config_.dim);
    InitRows(config_.init, &key, config_.dim, 0, 1, value.data());
    layout.WriteRow(value.data(), false, record);
  } else {
    InitRows(config_.init, &key, config_.dim, 0, 1, record);
  }
  FillSlots(record);
}

void HashTable::FillSlots(float* record) const {
  const RecordLayout layout = this->layout();
  for (int s = 0; s < layout.num_slots; ++s) {
    std::fill(layout.slot(record, s), layout.slot(record, s) + config_.dim, slot_init_[s]);
  }
}

std::string HashTable::MakeRoom(int64_t needed, const Runner& run, const std::vector<int64_t>& keep,
                                bool spare_seen) {
  if (tier_) return Spill(needed, keep, spare_seen, run);
  const int64_t size = index_.size();
  if (config_.capacity <= 0 || size + needed <= config_.capacity) return "";
  const int64_t excess = size + needed - config_.capacity;
  // Candidates: rows not seen in the current step (the batch being looked up must stay).
  std::vector<std::pair<int64_t, int64_t>> candidates;  // (score, row)
  for (int64_t r = 0; r < static_cast<int64_t>(meta_.size()); ++r) {
    if (!row_used_[r] || meta_[r].last_seen == step_) continue;
    const int64_t score = config_.policy == EvictPolicy::kLru ? meta_[r].last_seen : meta_[r].count;
    candidates.emplace_back(score, r);
  }
  if (static_cast<int64_t>(candidates.size()) < excess) {
    return "capacity " + std::to_string(config_.capacity) + " is too small for the " +
           std::to_string(size - static_cast<int64_t>(candidates.size()) + needed) +
           " distinct keys of one lookup";
  }
  std::nth_element(candidates.begin(), candidates.begin() + (excess - 1), candidates.end());
  std::vector<int64_t> victims;
  for (int64_t i = 0; i < excess; ++i) victims.push_back(meta_[candidates[i].second].key);
  for (int64_t key : victims) Erase(key);
  counters_.evictions += victims.size();
  return "";
}

std::string HashTable::Lookup(const int64_t* keys, int64_t n, float* out, const Runner& run) {
  ++step_;
  const int64_t dim = config_.dim;
  // Probe in parallel (a key may repeat: see MarkSeen).
  ScratchVector<int64_t> rows(n);
  ForEachRow(keys, n, run, [&](int64_t i, int64_t r) {
    rows[i] = r;
    if (r >= 0) MarkSeen(r);
  });
  ScratchVector<int64_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0) missing.push_back(i);
  }
  const int64_t missed = missing.size();  // counted once the lookup succeeds
  std::string problem = tier_ ? FetchMissing(keys, n, &missing, run) : "";
  if (!problem.empty()) return problem;
  problem = AdmitMissing(keys, &missing, run);
  if (!problem.empty()) return problem;
  // With a disk tier, making room may have compacted the rows: every key is probed again.
  if (tier_) {
    for (int64_t i = 0; i < n; ++i) missing.push_back(i);
  }
  for (int64_t i : missing) rows[i] = FindRow(keys[i]);
  const RecordLayout layout = this->layout();
  run(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (i + kPrefetchDistance < i1 && rows[i + kPrefetchDistance] >= 0) {
        PrefetchBytes<0>(RowPtr(rows[i + kPrefetchDistance]), layout.value_words() * sizeof(float));
      }
      if (rows[i] >= 0) {
        layout.ReadValue(RowPtr(rows[i]), out + i * dim);
      } else {  // not admitted yet: the initializer's value, nothing stored
        InitValue(keys[i], out + i * dim);
      }
    }
  });
  CountLookup(n, missed);
  return "";
}

std::string HashTable::AdmitMissing(const int64_t* keys, ScratchVector<int64_t>* missing,
                                    const Runner& run) {
  // Admission and inserts are serial (they change the index). Missing positions sorted by
  // (key, position) put a repeated key's occurrences together, first one first, so each key is
  // counted and admitted once; admitted keys are then inserted in order of first occurrence. (A
  // per-call hash map would do the same, but its nodes linger in the allocator of whichever
  // thread ran the call.)
  std::sort(missing->begin(), missing->end(), [keys](int64_t a, int64_t b) {
    return keys[a] < keys[b] || (keys[a] == keys[b] && a < b);
  });
  ScratchVector<int64_t> admit;  // first positions of the keys to store
  for (size_t j = 0; j < missing->size(); ++j) {
    const int64_t key = keys[(*missing)[j]];
    if (j > 0 && keys[(*missing)[j - 1]] == key) continue;
    if (config_.min_count > 1) {
      int64_t& seen = pending_[key];
      if (++seen < config_.min_count) continue;
      pending_.erase(key);
    }
    admit.push_back((*missing)[j]);
  }
  std::sort(admit.begin(), admit.end());
  const std::string problem = MakeRoom(admit.size(), run);
  if (!problem.empty()) return problem;
  // The index takes the keys one by one; their initial values (a pure function of the key, some
  // 40 ns a value from the normal's log and cos) are then written on all threads.
  ScratchVector<int64_t> rows(admit.size());
  for (size_t j = 0; j < admit.size(); ++j) {
    rows[j] = Place(keys[admit[j]]);
    meta_[rows[j]].count = 1;
  }
  run(admit.size(), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) InitRecord(keys[admit[j]], RowPtr(rows[j]));
  });
  return "";
}

std::string HashTable::RecordsForUpdate(const int64_t* keys, int64_t n, int64_t step,
                                        float** records, const Runner& run) {
  if (tier_) {
    // Rows spilled since their lookup come back before any pointer is taken; room is made from
    // any rows but these (the rows of the last lookup need not stay for an update).
    const std::string problem = FetchFromTier(keys, n, false, run);
    if (!problem.empty()) return problem;
  }
  ForEachRow(keys, n, run, [&](int64_t i, int64_t r) {
    if (r < 0) {
      records[i] = nullptr;
      return;
    }
    records[i] = RowPtr(r);
    meta_[r].updated = step;  // keys are distinct: no two calls write one row
  });
  return "";
}

std::string HashTable::Assign(const int64_t* keys, int64_t n, const float* rows, bool with_slots,
                              int64_t step) {
  const int64_t width = with_slots ? row_width() : config_.dim;
  if (!tier_) return AssignPiece(keys, n, rows, with_slots, step);
  // The disk index grows with every new key: refused before the first piece changes anything.
  std::string problem = CheckAssignFits(keys, n);
  if (!problem.empty()) return problem;
  // Pieces of at most 3/4 of the rows the budget holds (the disk index grows with new keys):
  // each piece is all or nothing, and a restore larger than the budget goes through.
  for (int64_t i = 0; i < n;) {
    const int64_t piece = std::min(n - i, std::max<int64_t>(RamRowLimit() * 3 / 4, 1));
    problem = AssignPiece(keys + i, piece, rows + i * width, with_slots, step);
    if (!problem.empty()) return problem;
    i += piece;
  }
  return "";
}

std::string HashTable::AssignPiece(const int64_t* keys, int64_t n, const float* rows,
                                   bool with_slots, int64_t step) {
  if (tier_) {
    // Rows on disk come back (their slots stay when only the value is assigned) and room for the
    // new keys is made, before any value changes. Rows assigned in this lookup step may go to
    // disk (a restore larger than the budget).
    std::string problem = FetchFromTier(keys, n, false, RunSerially);
    if (!problem.empty()) return problem;
    std::vector<int64_t> keep, fresh;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = FindRow(keys[i]);
      if (r >= 0) {
        keep.push_back(r);
      } else {
        fresh.push_back(keys[i]);
      }
    }
    std::sort(fresh.begin(), fresh.end());
    fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
    problem = MakeRoom(fresh.size(), RunSerially, keep, false);
    if (!problem.empty()) return problem;
  }
  const RecordLayout layout = this->layout();
  const int64_t width = with_slots ? layout.row_width() : config_.dim;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = FindRow(keys[i]);
    if (r < 0) {  // a new key: no initial value (written over next), its slots' fills
      r = Place(keys[i]);
      if (!with_slots) FillSlots(RowPtr(r));
    }
    layout.WriteRow(rows + i * width, with_slots, RowPtr(r));
    meta_[r].updated = step;
  }
  return "";
}

std::string HashTable::CountSince(int64_t since_step, int64_t* n) const {
  const auto changed = [since_step](const RowMeta& m) {
    return since_step == INT64_MIN || m.updated > since_step;
  };
  int64_t count = 0;
  for (int64_t r = 0; r < static_cast<int64_t>(meta_.size()); ++r) {
    count += row_used_[r] && changed(meta_[r]);
  }
  if (tier_) {
    const std::string problem =
        tier_->ForEachMeta([&](const RowMeta& m, int64_t) { count += changed(m); });
    if (!problem.empty()) return problem;
  }
  *n = count;
  return "";
}

std::string HashTable::AddSlots(const std::vector<float>& initial_values) {
  if (tier_) {  // the file first: if it cannot be rewritten, nothing changes
    const std::string problem = tier_->Widen(config_.dim, initial_values);
    if (!problem.empty()) return problem;
  }
  const int64_t old_stride = stride();
  const int old_slots = num_slots();
  slot_init_.insert(slot_init_.end(), initial_values.begin(), initial_values.end());
  const RecordLayout layout = this->layout();
  const int64_t new_stride = layout.stride();
  std::vector<RowChunk> chunks;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    chunks.push_back(NewRowChunk(kChunkRows * new_stride));
    for (int64_t i = 0; i < kChunkRows; ++i) {
      float* dst = chunks.back().get() + i * new_stride;
      std::memcpy(dst, chunks_[c].get() + i * old_stride, old_stride * sizeof(float));
      for (int s = old_slots; s < layout.num_slots; ++s) {
        std::fill(layout.slot(dst, s), layout.slot(dst, s) + config_.dim, slot_init_[s]);
      }
    }
  }
  chunks_ = std::move(chunks);
  if (tier_) {
    // Wider rows: fewer fit the budget. Spill the excess now rather than at the next read-back
    // (best effort: on an error the rows stay in RAM, as they would have until then).
    if (!Spill(0, {}, true, RunSerially).empty()) {
      // Left to the next lookup, which makes room as usual.
    }
  }
  return "";
}

void HashTable::Clear() {
  index_.Clear();
  chunks_.clear();
  meta_.clear();
  row_used_.clear();
  free_rows_.clear();
  for (std::vector<bool>& pins : pins_) pins.clear();
  pending_.clear();
  if (tier_) tier_->Clear();
}

std::string HashTable::EvictUnseen(int64_t steps_unseen, int64_t* evicted) {
  std::vector<std::pair<int64_t, int64_t>> on_disk;  // (key, slot); read first: if the file
                                                     // fails, nothing is removed
  if (tier_) {
    const std::string problem = tier_->ForEachMeta([&](const RowMeta& m, int64_t slot) {
      if (step_ - m.last_seen >= steps_unseen) on_disk.emplace_back(m.key, slot);
    });
    if (!problem.empty()) return problem;
  }
  std::vector<int64_t> victims;
  for (int64_t r = 0; r < static_cast<int64_t>(meta_.size()); ++r) {
    if (row_used_[r] && step_ - meta_[r].last_seen >= steps_unseen) victims.push_back(meta_[r].key);
  }
  for (int64_t key : victims) Erase(key);
  for (const auto& [key, slot] : on_disk) tier_->Erase(key, slot);
  *evicted = victims.size() + on_disk.size();
  counters_.evictions += *evicted;
  return "";
}

}  // namespace sok_lite
