// HashTable's record layout and its conversions to and from float32 rows. A record is the value
// then each optimizer slot; a 16-bit table packs its value two to a float (its slots stay
// float32), so the rest of HashTable moves records as opaque blocks of stride() floats.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/core/half_rows.h"
#include "kernels/core/hash_table.h"
#include "kernels/core/row_init.h"

namespace sok_lite {
namespace {

const uint16_t* HalfValue(const float* record) { return reinterpret_cast<const uint16_t*>(record); }
uint16_t* HalfValue(float* record) { return reinterpret_cast<uint16_t*>(record); }

}  // namespace

void HashTable::ReadValue(const float* record, float* out) const {
  if (config_.half_values) {
    WidenRow(config_.half_format, HalfValue(record), config_.dim, out);
  } else {
    std::memcpy(out, record, config_.dim * sizeof(float));
  }
}

void HashTable::AccumulateValue(const float* record, float w, bool first, float* acc) const {
  const int64_t dim = config_.dim;
  if (!config_.half_values) {
    if (first) {
      for (int64_t d = 0; d < dim; ++d) acc[d] = w * record[d];
    } else {
      for (int64_t d = 0; d < dim; ++d) acc[d] += w * record[d];
    }
    return;
  }
  const uint16_t* value = HalfValue(record);
  // One loop per format and per first/rest, so that each vectorizes.
  if (config_.half_format == HalfFormat::kBfloat16) {
    if (first) {
      for (int64_t d = 0; d < dim; ++d) acc[d] = w * Bfloat16ToFloat(value[d]);
    } else {
      for (int64_t d = 0; d < dim; ++d) acc[d] += w * Bfloat16ToFloat(value[d]);
    }
  } else if (first) {
    for (int64_t d = 0; d < dim; ++d) acc[d] = w * Float16ToFloat(value[d]);
  } else {
    for (int64_t d = 0; d < dim; ++d) acc[d] += w * Float16ToFloat(value[d]);
  }
}

void HashTable::ReadRow(const float* record, bool with_slots, float* out) const {
  ReadValue(record, out);
  if (with_slots) {
    std::memcpy(out + config_.dim, record + value_words(),
                config_.dim * num_slots() * sizeof(float));
  }
}

void HashTable::WriteRow(const float* row, bool with_slots, float* record) const {
  if (config_.half_values) {
    // Values written without a step (initial rows, restores) round to nearest even.
    uint16_t* value = HalfValue(record);
    if (config_.half_format == HalfFormat::kBfloat16) {
      for (int64_t d = 0; d < config_.dim; ++d) value[d] = FloatToBfloat16Nearest(row[d]);
    } else {
      for (int64_t d = 0; d < config_.dim; ++d) value[d] = FloatToFloat16Nearest(row[d]);
    }
    if (config_.dim % 2) value[config_.dim] = 0;  // the padding half of the last word
  } else {
    std::memcpy(record, row, config_.dim * sizeof(float));
  }
  if (with_slots) {
    std::memcpy(record + value_words(), row + config_.dim,
                config_.dim * num_slots() * sizeof(float));
  }
}

void HashTable::WriteUpdatedRow(const float* row, int64_t key, int64_t step, float* record) const {
  if (!config_.half_values) {
    std::memcpy(record, row, row_width() * sizeof(float));
    return;
  }
  // The key stands in for the global row of a static table: the draw follows the key, not
  // the rank or the position it is stored at.
  HalfRounding rounding;
  rounding.format = config_.half_format;
  rounding.seed = config_.rounding_seed;
  rounding.step = step;
  NarrowRow(rounding, key, row, config_.dim, HalfValue(record));
  std::memcpy(record + value_words(), row + config_.dim, config_.dim * num_slots() * sizeof(float));
}

void HashTable::InitValue(int64_t key, float* out) const {
  InitRows(config_.init, &key, config_.dim, 0, 1, out);
  if (!config_.half_values) return;
  // As stored: a key not admitted yet reads what its row will hold once admitted.
  const bool bf16 = config_.half_format == HalfFormat::kBfloat16;
  for (int64_t d = 0; d < config_.dim; ++d) {
    out[d] = bf16 ? Bfloat16ToFloat(FloatToBfloat16Nearest(out[d]))
                  : Float16ToFloat(FloatToFloat16Nearest(out[d]));
  }
}

void HashTable::InitRecord(int64_t key, float* record) const {
  if (config_.half_values) {
    thread_local std::vector<float> value;
    value.resize(config_.dim);
    InitRows(config_.init, &key, config_.dim, 0, 1, value.data());
    WriteRow(value.data(), false, record);
  } else {
    InitRows(config_.init, &key, config_.dim, 0, 1, record);
  }
  for (int s = 0; s < num_slots(); ++s) {
    std::fill(SlotPtr(record, s), SlotPtr(record, s) + config_.dim, slot_init_[s]);
  }
}

}  // namespace sok_lite
