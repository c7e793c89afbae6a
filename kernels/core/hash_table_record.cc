// The record <-> float32 row conversions of RecordLayout (kernels/core/hash_table_record.h).
#include "kernels/core/hash_table_record.h"

#include <cstring>

#include "kernels/core/half_rows.h"

namespace sok_lite {

void RecordLayout::ReadValue(const float* record, float* out) const {
  if (half) {
    WidenRow(format, half_value(record), dim, out);
  } else {
    std::memcpy(out, record, dim * sizeof(float));
  }
}

void RecordLayout::AccumulateValue(const float* record, float w, bool first, float* acc) const {
  if (!half) {
    if (first) {
      for (int64_t d = 0; d < dim; ++d) acc[d] = w * record[d];
    } else {
      for (int64_t d = 0; d < dim; ++d) acc[d] += w * record[d];
    }
    return;
  }
  const uint16_t* value = half_value(record);
  // One loop per format and per first/rest, so that each vectorizes.
  if (format == HalfFormat::kBfloat16) {
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

void RecordLayout::ReadRow(const float* record, bool with_slots, float* out) const {
  ReadValue(record, out);
  if (with_slots) {
    std::memcpy(out + dim, record + value_words(), dim * num_slots * sizeof(float));
  }
}

void RecordLayout::WriteRow(const float* row, bool with_slots, float* record) const {
  if (half) {
    // Values written without a step (initial rows, restores) round to nearest even.
    uint16_t* value = half_value(record);
    if (format == HalfFormat::kBfloat16) {
      for (int64_t d = 0; d < dim; ++d) value[d] = FloatToBfloat16Nearest(row[d]);
    } else {
      for (int64_t d = 0; d < dim; ++d) value[d] = FloatToFloat16Nearest(row[d]);
    }
    if (dim % 2) value[dim] = 0;  // the padding half of the last word
  } else {
    std::memcpy(record, row, dim * sizeof(float));
  }
  if (with_slots) {
    std::memcpy(record + value_words(), row + dim, dim * num_slots * sizeof(float));
  }
}

void RecordLayout::WriteUpdatedRow(const float* row, uint64_t seed, int64_t key, int64_t step,
                                   float* record) const {
  if (!half) {
    std::memcpy(record, row, row_width() * sizeof(float));
    return;
  }
  // The key stands in for the global row of a static table: the draw follows the key, not
  // the rank or the position it is stored at.
  HalfRounding rounding;
  rounding.format = format;
  rounding.seed = seed;
  rounding.step = step;
  NarrowRow(rounding, key, row, dim, half_value(record));
  std::memcpy(record + value_words(), row + dim, dim * num_slots * sizeof(float));
}

void RecordLayout::RoundAsStored(float* value) const {
  if (!half) return;
  const bool bf16 = format == HalfFormat::kBfloat16;
  for (int64_t d = 0; d < dim; ++d) {
    value[d] = bf16 ? Bfloat16ToFloat(FloatToBfloat16Nearest(value[d]))
                    : Float16ToFloat(FloatToFloat16Nearest(value[d]));
  }
}

}  // namespace sok_lite
