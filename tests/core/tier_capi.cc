// A C ABI over HashTable with and without its disk tier, for tests/core/test_row_tier_file.py
// (built with the system compiler, no TF). Errors come back as text in a caller's buffer.
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/core/hash_table.h"

namespace {

const sok_lite::HashTable::Runner kSerial =
    [](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); };

int Report(const std::string& problem, char* err, int64_t err_len) {
  if (problem.empty()) return 0;
  std::snprintf(err, err_len, "%s", problem.c_str());
  return 1;
}

}  // namespace

extern "C" {

// ram_budget <= 0: a RAM-only table; segment_bytes <= 0: the default segments of the disk tier;
// lfu: spill the rows seen in the fewest steps (else the least recently seen). Returns null and
// err on failure.
void* sok_tier_create(int64_t dim, int64_t ram_budget, const char* dir, int64_t min_count,
                      int64_t segment_bytes, int lfu, char* err, int64_t err_len) {
  sok_lite::TableConfig config;
  config.dim = dim;
  config.init.kind = sok_lite::InitKind::kNormal;
  config.init.seed = 7;
  config.min_count = min_count;
  config.policy = lfu ? sok_lite::EvictPolicy::kLfu : sok_lite::EvictPolicy::kLru;
  config.label = "hash table 't'";
  auto* table = new sok_lite::HashTable(config);
  if (ram_budget > 0) {
    sok_lite::TableConfig tiered = config;
    tiered.tier_dir = dir;
    tiered.ram_budget = ram_budget;
    if (segment_bytes > 0) tiered.tier_segment_bytes = segment_bytes;
    delete table;
    table = new sok_lite::HashTable(tiered);
    if (Report(table->AttachTier(), err, err_len)) {
      delete table;
      return nullptr;
    }
  }
  return table;
}

void sok_tier_free(void* t) { delete static_cast<sok_lite::HashTable*>(t); }

int sok_tier_lookup(void* t, const int64_t* keys, int64_t n, float* out, char* err,
                    int64_t err_len) {
  return Report(static_cast<sok_lite::HashTable*>(t)->Lookup(keys, n, out, kSerial), err, err_len);
}

int sok_tier_lookup_combine(void* t, const int64_t* keys, const int64_t* splits, int64_t batch,
                            float* out, char* err, int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->LookupCombine(keys, splits, batch, nullptr, nullptr, out, false, kSerial),
                err, err_len);
}

// A plain row-wise step on distinct keys: value -= lr * grad, slot j += (j + 1) * grad.
int sok_tier_apply(void* t, const int64_t* keys, int64_t n, const float* grads, float lr,
                   int64_t step, char* err, int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  std::vector<float*> records(n);
  if (Report(table->RecordsForUpdate(keys, n, step, records.data(), kSerial), err, err_len)) {
    return 1;
  }
  const int64_t dim = table->config().dim;
  for (int64_t i = 0; i < n; ++i) {
    if (!records[i]) continue;
    for (int64_t d = 0; d < dim; ++d) {
      records[i][d] -= lr * grads[i * dim + d];
      for (int s = 0; s < table->num_slots(); ++s) {
        records[i][(s + 1) * dim + d] += (s + 1) * grads[i * dim + d];
      }
    }
  }
  return 0;
}

// Reads the rows of keys[0, n) on disk back ahead of their lookup (HashTable::Prefetch);
// *read gets how many.
int sok_tier_prefetch(void* t, const int64_t* keys, int64_t n, int64_t* read, char* err,
                      int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->Prefetch(keys, n, kSerial, read), err, err_len);
}

// The same in three calls (HashTable::BeginPrefetch, ReadPrefetch, FinishPrefetch), so that a
// test can change the table between them: begin returns a plan (null with err on failure),
// finish frees it.
void* sok_tier_prefetch_begin(void* t, const int64_t* keys, int64_t n, char* err, int64_t err_len) {
  auto* plan = new sok_lite::HashTable::PrefetchPlan;
  if (Report(static_cast<sok_lite::HashTable*>(t)->BeginPrefetch(keys, n, kSerial, plan), err,
             err_len)) {
    delete plan;
    return nullptr;
  }
  return plan;
}

void sok_tier_prefetch_read(void* plan) {
  sok_lite::HashTable::ReadPrefetch(static_cast<sok_lite::HashTable::PrefetchPlan*>(plan), kSerial);
}

int sok_tier_prefetch_finish(void* t, void* plan, int64_t* read, char* err, int64_t err_len) {
  auto* p = static_cast<sok_lite::HashTable::PrefetchPlan*>(plan);
  const int rc =
      Report(static_cast<sok_lite::HashTable*>(t)->FinishPrefetch(p, kSerial, read), err, err_len);
  delete p;
  return rc;
}

int sok_tier_add_slots(void* t, const float* init, int64_t n, char* err, int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->AddSlots(std::vector<float>(init, init + n)), err, err_len);
}

int sok_tier_assign(void* t, const int64_t* keys, int64_t n, const float* rows, int with_slots,
                    int64_t step, char* err, int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->Assign(keys, n, rows, with_slots, step), err, err_len);
}

int64_t sok_tier_stride(void* t) { return static_cast<sok_lite::HashTable*>(t)->stride(); }
int64_t sok_tier_size(void* t) { return static_cast<sok_lite::HashTable*>(t)->size(); }
// The rows changed since `since`, or -1 with err.
int64_t sok_tier_count_since(void* t, int64_t since, char* err, int64_t err_len) {
  int64_t n = 0;
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->CountSince(since, &n), err, err_len) ? -1 : n;
}
// Evicts the rows unseen for `steps` lookup steps; returns how many, or -1 with err.
int64_t sok_tier_evict(void* t, int64_t steps, char* err, int64_t err_len) {
  int64_t evicted = 0;
  auto* table = static_cast<sok_lite::HashTable*>(t);
  return Report(table->EvictUnseen(steps, &evicted), err, err_len) ? -1 : evicted;
}
void sok_tier_clear(void* t) { static_cast<sok_lite::HashTable*>(t)->Clear(); }

void sok_tier_stats(void* t, int64_t* out) {
  const std::vector<int64_t> stats = static_cast<sok_lite::HashTable*>(t)->MemoryStats();
  std::copy(stats.begin(), stats.end(), out);
}

// Every row (since `since`, chunk rows at a time) into keys/rows, which hold `cap` rows;
// returns the count or -1 with err.
int64_t sok_tier_export(void* t, int64_t since, int64_t chunk, int64_t cap, int64_t* keys,
                        float* rows, char* err, int64_t err_len) {
  auto* table = static_cast<sok_lite::HashTable*>(t);
  int64_t n = 0, cursor = 0;
  std::vector<int64_t> k;
  std::vector<float> r;
  while (cursor >= 0) {
    if (Report(table->ExportRange(since, cursor, chunk, &k, &r, &cursor), err, err_len)) return -1;
    if (n + static_cast<int64_t>(k.size()) > cap) return -1;
    std::copy(k.begin(), k.end(), keys + n);
    std::copy(r.begin(), r.end(), rows + n * table->stride());
    n += k.size();
  }
  return n;
}

// kernels/core/mapped_memory.h: a scratch vector of `bytes` bytes, its data, and its end.
void* sok_scratch_new(int64_t bytes) { return new sok_lite::ScratchVector<char>(bytes); }
void* sok_scratch_data(void* v) { return static_cast<sok_lite::ScratchVector<char>*>(v)->data(); }
void sok_scratch_free(void* v) { delete static_cast<sok_lite::ScratchVector<char>*>(v); }

}  // extern "C"
