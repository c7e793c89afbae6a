// Packing and unpacking of the two all-to-all messages of the distributed lookup.
//
// Message 1 (ids, int64), one segment per destination rank r:
//   [count(r, 0), ..., count(r, T-1), ids of table 0 owned by r, ..., ids of table T-1 owned by r]
// where the ids are rows LOCAL to the owner. Message 2 (vectors) answers it: the rows of those
// ids, flattened, in the same (table, id) order. Tables may differ in dim.
#ifndef SOK_LITE_KERNELS_CORE_EXCHANGE_H_
#define SOK_LITE_KERNELS_CORE_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

// Who owns a global row (or key) and where it sits there.
struct Owner {
  // The rules and codes are those of cpu_gpu_rules.h, shared with the CUDA kernels.
  static constexpr int64_t kDistributed = SOK_LITE_OWNER_DISTRIBUTED;
  static constexpr int64_t kHashed = SOK_LITE_OWNER_HASHED;
  int64_t localized_rank;  // >= 0: the whole table on that rank
  int64_t Rank(int64_t id, int64_t num_ranks) const {
    return OwnerRank(localized_rank, id, num_ranks);
  }
  int64_t LocalRow(int64_t id, int64_t num_ranks) const {
    return OwnerLocalRow(localized_rank, id, num_ranks);
  }
};

// Builds message 1 from the unique ids of each table. Outputs:
//   counts[r * T + t]: ids of table t sent to rank r;
//   message: the id message (size T * num_ranks + total ids), splits[r]: its segment sizes;
//   send_pos[j]: for the j-th id of the message (headers skipped), its index in its table's
//   unique list, so that returned vectors can be put back in unique order.
void PartitionByOwner(const std::vector<const int64_t*>& unique,
                      const std::vector<int64_t>& num_unique, const std::vector<Owner>& owners,
                      int64_t num_ranks, int64_t* counts, int64_t* message, int64_t* splits,
                      int32_t* send_pos);

// A received id message, parsed: per (source rank r, table t) the position of its ids in the
// message and their number.
struct ParsedIds {
  std::vector<int64_t> begin;  // [N * T]: index into the message of the first id of (r, t)
  std::vector<int64_t> count;  // [N * T]
};

// Parses a received id message with segment sizes splits[0, num_ranks). Returns "" or a problem.
[[nodiscard]] std::string ParseIdMessage(const int64_t* message, int64_t size,
                                         const int64_t* splits, int64_t num_ranks,
                                         int64_t num_tables, ParsedIds* parsed);

// Element offsets of the vector message for (rank, table) segments in rank-major order, with
// dims[t] elements per row: offsets has N * T + 1 entries.
void VectorOffsets(const std::vector<int64_t>& count, const std::vector<int64_t>& dims,
                   int64_t num_ranks, std::vector<int64_t>* offsets);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_EXCHANGE_H_
