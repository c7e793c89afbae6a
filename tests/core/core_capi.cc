// A C ABI over a few kernels/core functions and kernels/core/cpu_gpu_rules.h, so that
// test_core_without_tf.py and test_open_index.py can call them through ctypes without TensorFlow.
// Arrays are caller-owned; every function handles n elements.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/disk_index.h"
#include "kernels/core/exchange.h"
#include "kernels/core/half_rows.h"
#include "kernels/core/hash_table_record.h"
#include "kernels/core/huge_pages.h"
#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_unique.h"
#include "kernels/core/open_index.h"
#include "kernels/core/optimizer.h"

using sok_lite::Combiner;
using sok_lite::OptimizerKind;

namespace {

sok_lite::OptimizerHyper Hyper(double lr, double weight_decay, const double* p, int num_p) {
  sok_lite::OptimizerHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.p.assign(p, p + num_p);
  return h;
}

// ApplyHalfRows on a 16-bit var with slots of type S (float32, or bfloat16 bit patterns).
template <typename S>
void ApplyHalf(int kind, const sok_lite::OptimizerHyper& h, int64_t dim, const int64_t* rows,
               const float* grads, int64_t n, uint16_t* var, S* const* slots, int num_slots,
               int format, uint64_t seed, int64_t step, int64_t row_stride, int64_t row_offset) {
  sok_lite::HalfRounding rounding;
  rounding.format = static_cast<sok_lite::HalfFormat>(format);
  rounding.seed = seed;
  rounding.step = step;
  rounding.row_stride = row_stride;
  rounding.row_offset = row_offset;
  const std::vector<S*> slot_list(slots, slots + num_slots);
  sok_lite::ApplyHalfRows(static_cast<OptimizerKind>(kind), h, dim, rows, grads, 0, n, var,
                          slot_list, rounding);
}

// The open-addressing indexes (kernels/core/open_index.h) behind a void*: kind 0 is HashTable's
// RAM index (int64 values), 1 the disk tier's (uint32 values). Values cross as int64; an absent
// key reads -1 from either.
template <typename F>
auto WithIndex(void* index, int kind, F fn) {
  if (kind == 0) return fn(static_cast<sok_lite::RowIndex*>(index), int64_t{-1});
  return fn(static_cast<sok_lite::SlotIndex*>(index), int64_t{UINT32_MAX});
}

// The value an index stores for v, and the int64 the caller gets back for a value it returned.
template <typename V, V kEmpty>
V Stored(sok_lite::OpenIndex<V, kEmpty>*, int64_t v) {
  return static_cast<V>(v);
}
int64_t Returned(int64_t v, int64_t empty) { return v == empty ? -1 : v; }

// A RecordLayout from [dim, num_slots, half, format].
sok_lite::RecordLayout Layout(const int64_t* desc) {
  sok_lite::RecordLayout layout;
  layout.dim = desc[0];
  layout.num_slots = static_cast<int>(desc[1]);
  layout.half = desc[2] != 0;
  layout.format = static_cast<sok_lite::HalfFormat>(desc[3]);
  return layout;
}

}  // namespace

extern "C" {

void sok_core_splitmix64(const uint64_t* x, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::SplitMix64(x[i]);
}

void sok_core_splitmix64_finalizer(const uint64_t* x, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::SplitMix64Finalizer(x[i]);
}

void sok_core_key_hash(const int64_t* keys, int64_t n, uint64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::KeyHash(keys[i]);
}

void sok_core_hash_owner(const int64_t* keys, int64_t n, int64_t num_ranks, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::HashOwner(keys[i], num_ranks);
}

void sok_core_row_owner(const int64_t* ids, int64_t n, int64_t num_ranks, int64_t* rank,
                        int64_t* local) {
  for (int64_t i = 0; i < n; ++i) {
    rank[i] = sok_lite::RowOwner(ids[i], num_ranks);
    local[i] = sok_lite::LocalRow(ids[i], num_ranks);
  }
}

// Through the exchange's Owner, for a table with owner code `owner`.
void sok_core_owner(int64_t owner, const int64_t* ids, int64_t n, int64_t num_ranks, int64_t* rank,
                    int64_t* local) {
  const sok_lite::Owner o{owner};
  for (int64_t i = 0; i < n; ++i) {
    rank[i] = o.Rank(ids[i], num_ranks);
    local[i] = o.LocalRow(ids[i], num_ranks);
  }
}

void sok_core_init_uniform(uint64_t seed, const int64_t* ids, int64_t n, int64_t col, uint64_t draw,
                           double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::InitUniform(seed, ids[i], col, draw);
}

// The code of a combiner / optimizer name as the op attributes are parsed; -1 if unknown.
int sok_core_combiner_code(const char* name) {
  Combiner c;
  return sok_lite::ParseCombiner(name, &c) ? static_cast<int>(c) : -1;
}

int sok_core_optimizer_code(const char* name) {
  OptimizerKind k;
  return sok_lite::ParseOptimizerKind(name, &k) ? static_cast<int>(k) : -1;
}

int64_t sok_core_unique_ids(const int64_t* ids, int64_t n, int64_t* unique, int32_t* inverse) {
  return sok_lite::UniqueIds(ids, n, unique, inverse);
}

// out [batch, dim] = the combined rows of each sample; weights may be null.
void sok_core_combine(const float* rows, int64_t dim, const int32_t* inverse,
                      const int64_t* row_splits, int64_t batch, const float* weights, int combiner,
                      float* out) {
  std::vector<float> scale(batch);
  const auto c = static_cast<Combiner>(combiner);
  sok_lite::SampleScales(row_splits, weights, c, 0, batch, scale.data());
  sok_lite::CombineForward(rows, dim, inverse, row_splits, weights, scale.data(), 0, batch, out);
}

// One row-wise update of rows[0, n) of var and its num_slots slots.
void sok_core_apply_rows(int kind, double lr, double weight_decay, const double* p, int num_p,
                         int64_t dim, const int64_t* rows, const float* grads, int64_t n,
                         float* var, float* const* slots, int num_slots) {
  const std::vector<float*> slot_list(slots, slots + num_slots);
  sok_lite::ApplyRows(static_cast<OptimizerKind>(kind), Hyper(lr, weight_decay, p, num_p), dim,
                      rows, grads, 0, n, var, slot_list);
}

// Huge-page advice for [p, p + bytes): 1 if given by this call.
int sok_core_advise_huge_pages(void* p, int64_t bytes) {
  return sok_lite::AdviseHugePages(p, static_cast<size_t>(bytes)) ? 1 : 0;
}

// 16-bit storage (kernels/core/half_rows.h), element by element. format: 0 bfloat16, 1 float16.
void sok_core_half_to_float(int format, const uint16_t* bits, int64_t n, float* out) {
  const auto f = static_cast<sok_lite::HalfFormat>(format);
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::HalfToFloat(f, bits[i]);
}

void sok_core_float_to_bfloat16_nearest(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToBfloat16Nearest(x[i]);
}

void sok_core_float_to_bfloat16_stochastic(const float* x, const uint32_t* random16, int64_t n,
                                           uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToBfloat16Stochastic(x[i], random16[i]);
}

void sok_core_float_to_float16_nearest(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sok_lite::FloatToFloat16Nearest(x[i]);
}

// The rounding bits of columns [0, dim) of global row `row` at `step`.
void sok_core_rounding_bits(uint64_t seed, int64_t step, int64_t row, int64_t dim, uint32_t* out) {
  const uint64_t key = sok_lite::RoundingRowKey(seed, step, row);
  for (int64_t d = 0; d < dim; ++d) out[d] = sok_lite::RoundingBits(key, d);
}

// sok_core_apply_rows for a 16-bit var (bit patterns) with float32 slots.
void sok_core_apply_half_rows(int kind, double lr, double weight_decay, const double* p, int num_p,
                              int64_t dim, const int64_t* rows, const float* grads, int64_t n,
                              uint16_t* var, float* const* slots, int num_slots, int format,
                              uint64_t seed, int64_t step, int64_t row_stride, int64_t row_offset) {
  ApplyHalf(kind, Hyper(lr, weight_decay, p, num_p), dim, rows, grads, n, var, slots, num_slots,
            format, seed, step, row_stride, row_offset);
}

// The same with bfloat16 slots (bit patterns).
void sok_core_apply_half_rows_bf16_slots(int kind, double lr, double weight_decay, const double* p,
                                         int num_p, int64_t dim, const int64_t* rows,
                                         const float* grads, int64_t n, uint16_t* var,
                                         uint16_t* const* slots, int num_slots, int format,
                                         uint64_t seed, int64_t step, int64_t row_stride,
                                         int64_t row_offset) {
  ApplyHalf(kind, Hyper(lr, weight_decay, p, num_p), dim, rows, grads, n, var, slots, num_slots,
            format, seed, step, row_stride, row_offset);
}

// --- open-addressing indexes (kernels/core/open_index.h); kind: see WithIndex ------------------

void* sok_index_new(int kind) {
  if (kind == 0) return new sok_lite::RowIndex();
  return new sok_lite::SlotIndex();
}

void sok_index_free(void* index, int kind) {
  WithIndex(index, kind, [](auto* ix, int64_t) { delete ix; });
}

int64_t sok_index_capacity_for(int64_t keys) { return sok_lite::IndexCapacityFor(keys); }

int64_t sok_index_entry_bytes(int kind) {
  return WithIndex(nullptr, kind, [](auto* ix, int64_t) {
    return static_cast<int64_t>(sizeof(typename std::remove_pointer_t<decltype(ix)>::Entry));
  });
}

// Stores keys[i] -> values[i] (keys not stored yet, values >= 0).
void sok_index_insert(void* index, int kind, const int64_t* keys, const int64_t* values,
                      int64_t n) {
  WithIndex(index, kind, [&](auto* ix, int64_t) {
    for (int64_t i = 0; i < n; ++i) ix->Insert(keys[i], Stored(ix, values[i]));
  });
}

// out[i] = the value of keys[i] or -1, through Get(key) (use_view 0) or a View with the hash
// computed and prefetched first, as HashTable's probe loops do (use_view 1).
void sok_index_get(void* index, int kind, const int64_t* keys, int64_t n, int use_view,
                   int64_t* out) {
  WithIndex(index, kind, [&](auto* ix, int64_t empty) {
    const auto view = ix->view();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t hash = ix->Hash(keys[i]);
      if (use_view) view.Prefetch(hash);
      const int64_t v = use_view ? view.Get(keys[i], hash) : ix->Get(keys[i]);
      out[i] = Returned(v, empty);
    }
  });
}

// Sets the stored value of each key of keys[0, n) that is stored (through Find); returns how many
// were.
int64_t sok_index_update(void* index, int kind, const int64_t* keys, const int64_t* values,
                         int64_t n) {
  return WithIndex(index, kind, [&](auto* ix, int64_t) {
    int64_t found = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto* at = ix->Find(keys[i]);
      if (at) {
        *at = Stored(ix, values[i]);
        ++found;
      }
    }
    return found;
  });
}

// out[i] = the value keys[i] had before it was erased, or -1 if it was not stored.
void sok_index_erase(void* index, int kind, const int64_t* keys, int64_t n, int64_t* out) {
  WithIndex(index, kind, [&](auto* ix, int64_t empty) {
    for (int64_t i = 0; i < n; ++i) out[i] = Returned(ix->Erase(keys[i]), empty);
  });
}

// stats = [size, capacity, allocated bytes, consistent (1/0)].
void sok_index_stats(void* index, int kind, int64_t* stats) {
  WithIndex(index, kind, [&](auto* ix, int64_t) {
    stats[0] = ix->size();
    stats[1] = ix->capacity();
    stats[2] = ix->allocated_bytes();
    stats[3] = ix->Consistent() ? 1 : 0;
  });
}

void sok_index_rehash(void* index, int kind, int64_t capacity) {
  WithIndex(index, kind, [&](auto* ix, int64_t) { ix->Rehash(capacity); });
}

void sok_index_clear(void* index, int kind) {
  WithIndex(index, kind, [](auto* ix, int64_t) { ix->Clear(); });
}

// Every stored (key, value) in entry order into keys/values (room for size()); returns the count.
int64_t sok_index_items(void* index, int kind, int64_t* keys, int64_t* values) {
  return WithIndex(index, kind, [&](auto* ix, int64_t) {
    int64_t n = 0;
    ix->ForEach([&](int64_t key, auto value) {
      keys[n] = key;
      values[n++] = static_cast<int64_t>(value);
    });
    return n;
  });
}

// --- the disk tier's index (kernels/core/disk_index.h) ------------------------------------------

void* sok_disk_index_new() { return new sok_lite::DiskIndex(); }
void sok_disk_index_free(void* index) { delete static_cast<sok_lite::DiskIndex*>(index); }

// Stores keys[i] -> slots[i] (keys not stored yet).
void sok_disk_index_insert(void* index, const int64_t* keys, const int64_t* slots, int64_t n) {
  auto* ix = static_cast<sok_lite::DiskIndex*>(index);
  for (int64_t i = 0; i < n; ++i) ix->Insert(keys[i], static_cast<uint32_t>(slots[i]));
}

// For each key: out[i * width, (i + 1) * width) = its candidate slots (-1 past the last),
// counts[i] = how many there are, may[i] = MayContain.
void sok_disk_index_candidates(void* index, const int64_t* keys, int64_t n, int64_t width,
                               int64_t* out, int64_t* counts, int64_t* may) {
  const auto* ix = static_cast<const sok_lite::DiskIndex*>(index);
  std::vector<uint32_t> slots;
  for (int64_t i = 0; i < n; ++i) {
    slots.clear();
    ix->Candidates(keys[i], &slots);
    counts[i] = slots.size();
    may[i] = ix->MayContain(keys[i]) ? 1 : 0;
    for (int64_t j = 0; j < width; ++j) {
      out[i * width + j] = j < static_cast<int64_t>(slots.size()) ? slots[j] : -1;
    }
  }
}

// op 0: Erase(keys[i], slots[i]); 1: Relocate(keys[i], slots[i], to[i]); 2: Holds(keys[i],
// slots[i]). out[i] = 1 where it returned true.
void sok_disk_index_apply(void* index, int op, const int64_t* keys, const int64_t* slots,
                          const int64_t* to, int64_t n, int64_t* out) {
  auto* ix = static_cast<sok_lite::DiskIndex*>(index);
  for (int64_t i = 0; i < n; ++i) {
    const auto slot = static_cast<uint32_t>(slots[i]);
    bool done = false;
    if (op == 0) done = ix->Erase(keys[i], slot);
    if (op == 1) done = ix->Relocate(keys[i], slot, static_cast<uint32_t>(to[i]));
    if (op == 2) done = ix->Holds(keys[i], slot);
    out[i] = done ? 1 : 0;
  }
}

// stats = [size, compact (1/0), allocated bytes, consistent (1/0), BytesFor(keys)].
void sok_disk_index_stats(void* index, int64_t keys, int64_t* stats) {
  const auto* ix = static_cast<const sok_lite::DiskIndex*>(index);
  stats[0] = ix->size();
  stats[1] = ix->compact() ? 1 : 0;
  stats[2] = ix->AllocatedBytes();
  stats[3] = ix->Consistent() ? 1 : 0;
  stats[4] = ix->BytesFor(keys);
}

void sok_disk_index_clear(void* index) { static_cast<sok_lite::DiskIndex*>(index)->Clear(); }

// --- the record layout of HashTable (kernels/core/hash_table_record.h) -------------------------
// desc = [dim, num_slots, half (0/1), format (0 bfloat16, 1 float16)].

// out = [value_words, stride, row_width, slot_offset(0), ..., slot_offset(num_slots - 1)].
void sok_record_layout(const int64_t* desc, int64_t* out) {
  const sok_lite::RecordLayout layout = Layout(desc);
  out[0] = layout.value_words();
  out[1] = layout.stride();
  out[2] = layout.row_width();
  for (int s = 0; s < layout.num_slots; ++s) out[3 + s] = layout.slot_offset(s);
}

void sok_record_write_row(const int64_t* desc, const float* row, int with_slots, float* record) {
  Layout(desc).WriteRow(row, with_slots != 0, record);
}

void sok_record_read_row(const int64_t* desc, const float* record, int with_slots, float* out) {
  Layout(desc).ReadRow(record, with_slots != 0, out);
}

void sok_record_accumulate(const int64_t* desc, const float* record, float w, int first,
                           float* acc) {
  Layout(desc).AccumulateValue(record, w, first != 0, acc);
}

void sok_record_write_updated_row(const int64_t* desc, const float* row, uint64_t seed, int64_t key,
                                  int64_t step, float* record) {
  Layout(desc).WriteUpdatedRow(row, seed, key, step, record);
}

void sok_record_round_as_stored(const int64_t* desc, float* value) {
  Layout(desc).RoundAsStored(value);
}

}  // extern "C"
