// Slot states and the layout check of the device hash table (SokLiteCudaTable), shared by the
// launchers in hash_table.cu and hash_table_rows.cu.
#ifndef SOK_LITE_KERNELS_CUDA_HASH_TABLE_STATE_CUH_
#define SOK_LITE_KERNELS_CUDA_HASH_TABLE_STATE_CUH_

#include <stdint.h>

#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {

constexpr int32_t kEmpty = 0, kWriting = 1, kPresent = 2;
// `updated` of a row no optimizer step or assign has changed (as the CPU table's RowMeta).
constexpr int64_t kNeverUpdated = -1;

// Host check of a table's arrays and sizes before any launch reads it.
inline bool Valid(const SokLiteCudaTable* t) {
  if (!t || !t->keys || !t->state || !t->last_seen || !t->values || !t->size) return false;
  if (t->dim <= 0 || t->capacity <= 0 || (t->capacity & (t->capacity - 1)) != 0) return false;
  if (t->max_size < 0 || t->max_size >= t->capacity) return false;
  if (t->num_slots < 0 || t->num_slots > 3) return false;
  for (int j = 0; j < t->num_slots; ++j) {
    if (!t->slots[j]) return false;
  }
  return true;
}

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_HASH_TABLE_STATE_CUH_
