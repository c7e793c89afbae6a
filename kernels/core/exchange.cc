#include "kernels/core/exchange.h"

namespace sok_lite {

void PartitionByOwner(const std::vector<const int64_t*>& unique,
                      const std::vector<int64_t>& num_unique, const std::vector<Owner>& owners,
                      int64_t num_ranks, int64_t* counts, int64_t* message, int64_t* splits,
                      int32_t* send_pos) {
  const int64_t num_tables = unique.size();
  std::fill(counts, counts + num_ranks * num_tables, 0);
  for (int64_t t = 0; t < num_tables; ++t) {
    for (int64_t i = 0; i < num_unique[t]; ++i) {
      ++counts[owners[t].Rank(unique[t][i], num_ranks) * num_tables + t];
    }
  }
  // cursor[r * T + t]: next slot of (r, t) in the message; pos_cursor the same without headers.
  std::vector<int64_t> cursor(num_ranks * num_tables), pos_cursor(num_ranks * num_tables);
  int64_t at = 0, pos_at = 0;
  for (int64_t r = 0; r < num_ranks; ++r) {
    splits[r] = num_tables;
    for (int64_t t = 0; t < num_tables; ++t) message[at + t] = counts[r * num_tables + t];
    at += num_tables;
    for (int64_t t = 0; t < num_tables; ++t) {
      cursor[r * num_tables + t] = at;
      pos_cursor[r * num_tables + t] = pos_at;
      at += counts[r * num_tables + t];
      pos_at += counts[r * num_tables + t];
      splits[r] += counts[r * num_tables + t];
    }
  }
  for (int64_t t = 0; t < num_tables; ++t) {
    for (int64_t i = 0; i < num_unique[t]; ++i) {
      const int64_t id = unique[t][i];
      const int64_t seg = owners[t].Rank(id, num_ranks) * num_tables + t;
      message[cursor[seg]++] = owners[t].LocalRow(id, num_ranks);
      send_pos[pos_cursor[seg]++] = static_cast<int32_t>(i);
    }
  }
}

std::string ParseIdMessage(const int64_t* message, int64_t size, const int64_t* splits,
                           int64_t num_ranks, int64_t num_tables, ParsedIds* parsed) {
  parsed->begin.assign(num_ranks * num_tables, 0);
  parsed->count.assign(num_ranks * num_tables, 0);
  int64_t at = 0;
  for (int64_t r = 0; r < num_ranks; ++r) {
    const int64_t end = at + splits[r];
    if (splits[r] < num_tables || end > size) {
      return "id message segment of rank " + std::to_string(r) + " is malformed";
    }
    int64_t ids_at = at + num_tables;
    for (int64_t t = 0; t < num_tables; ++t) {
      const int64_t c = message[at + t];
      if (c < 0 || c > end - ids_at) {  // not ids_at + c: a huge count would wrap around
        return "id message from rank " + std::to_string(r) + " has a bad count for table " +
               std::to_string(t);
      }
      parsed->begin[r * num_tables + t] = ids_at;
      parsed->count[r * num_tables + t] = c;
      ids_at += c;
    }
    if (ids_at != end) {
      return "id message segment of rank " + std::to_string(r) + " has trailing entries";
    }
    at = end;
  }
  if (at != size) return "id message size does not match its splits";
  return "";
}

void VectorOffsets(const std::vector<int64_t>& count, const std::vector<int64_t>& dims,
                   int64_t num_ranks, std::vector<int64_t>* offsets) {
  const int64_t num_tables = dims.size();
  offsets->assign(num_ranks * num_tables + 1, 0);
  for (int64_t s = 0; s < num_ranks * num_tables; ++s) {
    (*offsets)[s + 1] = (*offsets)[s] + count[s] * dims[s % num_tables];
  }
}

}  // namespace sok_lite
