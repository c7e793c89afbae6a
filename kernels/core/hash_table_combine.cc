// HashTable::LookupCombine: the find-or-create step of a hash table fused with lookup_sparse's
// per-sample combine. Each id's row is read where it is stored and combined straight into the
// output: no deduplication of the ids and no [unique, dim] copy of the rows in between.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/core/hash_table.h"
#include "kernels/core/lookup_combine_sample.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/row_init.h"
#include "kernels/core/stream_store.h"

namespace sok_lite {
namespace {

// CombineSample (same arithmetic, same order) over the records of a 16-bit table: each value is
// widened as it is added, with no float32 copy of the row in between. record_of(k) is called
// once for every k, in order, and gives the record of id k or null.
template <typename RecordOf>
bool CombineHalfSample(const RecordLayout& layout, int64_t k0, int64_t k1, int64_t dim,
                       const float* weights, float scale, bool stream_out, RecordOf record_of,
                       float* acc, float* dst) {
  bool complete = true;
  for (int64_t k = k0; k < k1; ++k) {
    const float* record = record_of(k);  // called even after a miss: it advances a pipeline
    complete = complete && record;
    if (complete) layout.AccumulateValue(record, weights ? weights[k] : 1.0f, k == k0, acc);
  }
  if (!complete) return false;
  if (k0 == k1) std::fill(acc, acc + dim, 0.0f);
  if (scale != 1.0f) {
    for (int64_t d = 0; d < dim; ++d) acc[d] *= scale;
  }
  if (stream_out) {
    StreamRow(acc, dim, dst);
  } else {
    std::memcpy(dst, acc, dim * sizeof(float));
  }
  return true;
}

}  // namespace

std::string HashTable::LookupCombine(const int64_t* keys, const int64_t* row_splits, int64_t batch,
                                     const float* weights, const float* scale, float* out,
                                     bool stream_out, const Runner& run) {
  ++step_;
  const int64_t ids = row_splits[batch] - row_splits[0];
  const int64_t dim = config_.dim;
  std::mutex mu;
  ScratchVector<int64_t> missing;  // positions of ids not stored
  std::vector<int64_t> marked;     // rows first seen in this step, some more than once
  // Three stages per id, in flight over a window of ids: hash the key and prefetch its index
  // entry (kSlotAhead ids ahead), probe the index and prefetch the row and its record (kRowAhead
  // ahead), combine the row. Probing is read-only, so samples are combined in parallel.
  constexpr uint64_t kSlotAhead = 16, kRowAhead = 8;
  const RowIndex::View index = index_.view();
  const RowChunk* const chunks = chunks_.data();
  const RecordLayout layout = this->layout();
  const uint64_t stride = layout.stride();
  const auto row_ptr = [=](uint64_t r) {
    return chunks[r / kChunkRows].get() + (r % kChunkRows) * stride;
  };
  // Only LFU eviction and spills read the per-step counts; without them a first sighting just
  // stores the step.
  const bool count = (config_.capacity > 0 || tier_) && config_.policy == EvictPolicy::kLfu;
  // A 16-bit table's records are combined by CombineHalfSample, which widens as it adds.
  const bool half = layout.half;
  // Sample b of `out` from the records row_of(k) gives for its ids k.
  const auto combine_sample = [&](int64_t b, const auto& row_of, float* acc) {
    const float s = scale ? scale[b] : 1.0f;
    if (half) {
      CombineHalfSample(layout, row_splits[b], row_splits[b + 1], dim, weights, s, stream_out,
                        row_of, acc, out + b * dim);
    } else {
      CombineSample(row_splits[b], row_splits[b + 1], dim, weights, s, stream_out, row_of, acc,
                    out + b * dim);
    }
  };
  const uint64_t value_bytes = layout.value_words() * sizeof(float);
  const int64_t step = step_;
  run(batch, [&](int64_t b0, int64_t b1) {
    const uint64_t first = row_splits[b0], end = row_splits[b1];
    uint64_t hashes[kSlotAhead];
    int64_t rows[kRowAhead];
    const auto hash_ahead = [&](uint64_t k) {
      const uint64_t h = RowIndex::Hash(keys[k]);
      hashes[k % kSlotAhead] = h;
      index.Prefetch(h);
    };
    const auto probe_ahead = [&](uint64_t k) {
      const int64_t r = index.Get(keys[k], hashes[k % kSlotAhead]);
      rows[k % kRowAhead] = r;
      if (r >= 0) {
        PrefetchBytes<0>(row_ptr(r), value_bytes);
        __builtin_prefetch(&meta_[r], 0, 3);
      }
    };
    for (uint64_t k = first; k < std::min(end, first + kSlotAhead); ++k) hash_ahead(k);
    for (uint64_t k = first; k < std::min(end, first + kRowAhead); ++k) probe_ahead(k);
    std::vector<int64_t> local_missing, local_marked;
    std::vector<float> acc(dim);
    const auto row_of = [&](uint64_t k) -> const float* {
      const int64_t r = rows[k % kRowAhead];  // read before probe_ahead reuses the entry
      if (k + kSlotAhead < end) hash_ahead(k + kSlotAhead);
      if (k + kRowAhead < end) probe_ahead(k + kRowAhead);
      if (r < 0) {
        local_missing.push_back(k);
        return nullptr;
      }
      // Plain stores, no locked instruction: one here would also wait for the streaming
      // stores. A row first seen in this step gets last_seen = -step and is counted after the
      // pass, once, however many threads marked it.
      int64_t* last_seen = &meta_[r].last_seen;
      const int64_t seen = __atomic_load_n(last_seen, __ATOMIC_RELAXED);
      if (seen != step && seen != -step) {
        __atomic_store_n(last_seen, count ? -step : step, __ATOMIC_RELAXED);
        if (count) local_marked.push_back(r);
      }
      return row_ptr(r);
    };
    for (int64_t b = b0; b < b1; ++b) combine_sample(b, row_of, acc.data());
    if (stream_out) StreamFence();
    std::lock_guard<std::mutex> lock(mu);
    missing.insert(missing.end(), local_missing.begin(), local_missing.end());
    marked.insert(marked.end(), local_marked.begin(), local_marked.end());
  });
  for (int64_t r : marked) {
    if (meta_[r].last_seen == -step_) {
      meta_[r].last_seen = step_;
      ++meta_[r].count;
    }
  }
  if (missing.empty()) {
    CountLookup(ids, 0);
    return "";
  }
  const int64_t missed = missing.size();  // counted once the lookup succeeds
  // Samples holding a missing id, found before AdmitMissing sorts the positions by key.
  std::sort(missing.begin(), missing.end());
  ScratchVector<int64_t> redo;
  for (int64_t k : missing) {
    const int64_t b = std::upper_bound(row_splits, row_splits + batch + 1, k) - row_splits - 1;
    if (redo.empty() || redo.back() != b) redo.push_back(b);
  }
  // With a disk tier the rows on disk come back first (the ids found in RAM are marked seen, so
  // no spill takes them), then the keys stored nowhere are admitted.
  std::string problem = tier_ ? FetchMissing(keys, ids, &missing, run) : "";
  if (!problem.empty()) return problem;
  problem = AdmitMissing(keys, &missing, run);
  if (!problem.empty()) return problem;
  run(redo.size(), [&](int64_t j0, int64_t j1) {
    // A ring of scratch records: CombineSample holds up to kCombineGroup rows at once.
    std::vector<float> acc(dim), init(kCombineGroup * stride);
    const auto row_of = [&](int64_t k) -> const float* {
      const int64_t r = FindRow(keys[k]);
      if (r >= 0) return RowPtr(r);
      // Not admitted: nothing stored; the record it would get (a float32 table: its value).
      float* record = init.data() + (k % kCombineGroup) * stride;
      InitRecord(keys[k], record);
      return record;
    };
    for (int64_t j = j0; j < j1; ++j) combine_sample(redo[j], row_of, acc.data());
    if (stream_out) StreamFence();
  });
  CountLookup(ids, missed);
  return "";
}

}  // namespace sok_lite
