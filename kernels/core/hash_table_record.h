// Where things are in a HashTable record, and the conversions between a record and a float32 row.
// A record is stride() floats: the value in value_words() floats, then each optimizer slot (dim
// float32 values each, slot s at slot_offset(s)). A float32 table stores its value as dim floats;
// a 16-bit table (bfloat16 or float16) packs dim 16-bit values two to a float, in memory order
// (the record's first floats read as uint16_t[dim]; for an odd dim the second half of the last
// value word is zero), and keeps its slots float32. The float32 row the conversions read and
// write is the value then each slot: row_width() floats. Everything but these conversions moves
// records as opaque blocks of stride() floats. TF-free.
#ifndef SOK_LITE_KERNELS_CORE_HASH_TABLE_RECORD_H_
#define SOK_LITE_KERNELS_CORE_HASH_TABLE_RECORD_H_

#include <cstdint>

#include "kernels/core/half_rows.h"

namespace sok_lite {

struct RecordLayout {
  int64_t dim = 0;
  int num_slots = 0;
  bool half = false;                          // the value is stored in 16 bits
  HalfFormat format = HalfFormat::kBfloat16;  // which 16 bits (when half)

  // Floats of the value: dim, or dim 16-bit values packed two to a float.
  int64_t value_words() const { return half ? (dim + 1) / 2 : dim; }
  // Where slot s starts in a record, in floats.
  int64_t slot_offset(int s) const { return value_words() + s * dim; }
  // Floats per record.
  int64_t stride() const { return value_words() + dim * num_slots; }
  // Floats per float32 row (value and slots).
  int64_t row_width() const { return dim * (1 + num_slots); }
  float* slot(float* record, int s) const { return record + slot_offset(s); }
  // The 16-bit values of a 16-bit table's record.
  static const uint16_t* half_value(const float* record) {
    return reinterpret_cast<const uint16_t*>(record);
  }
  static uint16_t* half_value(float* record) { return reinterpret_cast<uint16_t*>(record); }

  // out[0, dim) = the value of `record`, widened to float32.
  void ReadValue(const float* record, float* out) const;
  // out[0, dim) = the value; with_slots: out[0, row_width()) = the value, then the slots.
  void ReadRow(const float* record, bool with_slots, float* out) const;
  // acc[0, dim) = w * value (first) or acc += w * value: a combine's step, widening as it reads.
  void AccumulateValue(const float* record, float w, bool first, float* acc) const;
  // record = row (dim floats, or row_width() with_slots), 16-bit values rounded to nearest even.
  void WriteRow(const float* row, bool with_slots, float* record) const;
  // record = row (row_width() floats) after an optimizer step at `step`: bfloat16 values round
  // stochastically with bits drawn from (seed, step, key), so alike on any number of ranks;
  // float16 values to nearest even.
  void WriteUpdatedRow(const float* row, uint64_t seed, int64_t key, int64_t step,
                       float* record) const;
  // value[0, dim) = the values WriteRow would store, read back (a 16-bit table's rounding).
  void RoundAsStored(float* value) const;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HASH_TABLE_RECORD_H_
