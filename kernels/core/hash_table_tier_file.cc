#include "kernels/core/hash_table_tier_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/core/prefetch.h"

namespace sok_lite {
namespace {

// Adjacent records are read or written by one call of at most this many bytes.
constexpr int64_t kMaxRunBytes = int64_t{4} << 20;

// Cleaning reads at most this many segments at once.
constexpr int64_t kCleanSegments = 8;

[[nodiscard]] std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Values no file, contents or segment opening had before (RowTierFile::epoch_ and
// segment_generation_): a read planned against one can tell that it is gone.
uint64_t NextGeneration() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

// mkdir -p: every missing component of dir.
[[nodiscard]] std::string MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos < dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    struct stat st;
    if (stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return "'" + part + "' is not a directory";
      continue;
    }
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("cannot create directory '" + part + "'");
    }
  }
  return "";
}

}  // namespace

void RunSerially(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); }

RowTierFile::RowTierFile(std::string path, int fd, int64_t stride, int64_t segment_bytes,
                         std::string label)
    : path_(std::move(path)),
      fd_(fd),
      stride_(stride),
      record_bytes_((kHeaderBytes + stride * sizeof(float) + 7) / 8 * 8),
      segment_bytes_(segment_bytes),
      // At most 8,192 records: narrow rows need no longer writes, and the budget charges the
      // slots of a few segments whatever the table's size.
      segment_records_(std::clamp<int64_t>(segment_bytes / record_bytes_, 1, 8192)),
      label_(std::move(label)),
      epoch_(NextGeneration()) {}

RowTierFile::~RowTierFile() {
  if (fd_ >= 0) close(fd_);
}

std::string RowTierFile::MoveTo(const std::string& path) {
  if (rename(path_.c_str(), path.c_str()) != 0) {
    return Prefix() + "disk tier: " + Errno("cannot move '" + path_ + "' to '" + path + "'");
  }
  path_ = path;
  return "";
}

std::string RowTierFile::Open(const std::string& dir, int64_t stride, const std::string& label,
                              int64_t segment_bytes, std::unique_ptr<RowTierFile>* out) {
  std::string problem = MakeDirs(dir);
  if (!problem.empty()) return (label.empty() ? "" : label + ": ") + "disk tier: " + problem;
  const std::string path = dir + "/rows.bin";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return (label.empty() ? "" : label + ": ") +
           "disk tier: " + Errno("cannot open '" + path + "'");
  out->reset(new RowTierFile(path, fd, stride, segment_bytes, label));
  return "";
}

void RowTierFile::MoveFrom(RowTierFile* other) {
  std::swap(fd_, other->fd_);  // other closes our old file
  stride_ = other->stride_;
  record_bytes_ = other->record_bytes_;
  segment_records_ = other->segment_records_;
  index_ = std::move(other->index_);
  used_ = std::move(other->used_);
  segment_live_ = std::move(other->segment_live_);
  segment_generation_ = std::move(other->segment_generation_);
  epoch_ = NextGeneration();
  empty_segments_ = std::move(other->empty_segments_);
  num_segments_ = other->num_segments_;
  open_segment_ = other->open_segment_;
  open_fill_ = other->open_fill_;
  file_bytes_ = other->file_bytes_;
}

int64_t RowTierFile::IndexBytes() const {
  return index_.AllocatedBytes() + used_.capacity() * sizeof(uint64_t) +
         (segment_live_.capacity() + empty_segments_.capacity()) * sizeof(uint32_t) +
         segment_generation_.capacity() * sizeof(uint64_t);
}

int64_t RowTierFile::IndexBytesFor(int64_t rows) const {
  // At most twice the live records plus the open segment and one being cleaned (see Clean).
  const int64_t slots = 2 * rows + 3 * segment_records_;
  const int64_t segments = slots / segment_records_ + 1;
  const int64_t per_segment = 2 * sizeof(uint32_t) + sizeof(uint64_t);
  const int64_t bound = index_.BytesFor(rows) + slots / 8 + segments * per_segment;
  return std::max(bound, IndexBytes());
}

void RowTierFile::SetUsed(int64_t slot, bool on) {
  const uint64_t bit = uint64_t{1} << (slot & 63);
  if (on) {
    used_[slot >> 6] |= bit;
  } else {
    used_[slot >> 6] &= ~bit;
  }
}

uint64_t RowTierFile::Checksum(const char* record) const {
  // The record's 64-bit words but the checksum itself, each mixed with its position (records
  // swapped between slots of other keys, or words within one, differ) into four independent
  // multiply-xor lanes: a single serial chain would cost ~4x more per record.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  constexpr int64_t kSkip = sizeof(RowMeta) / 8;
  const int64_t words = record_bytes_ / 8;
  uint64_t h[4] = {1, 2, 3, 4};
  int64_t w = 0;
  for (; w + 4 <= words; w += 4) {
    for (int l = 0; l < 4; ++l) {
      uint64_t word;
      std::memcpy(&word, record + (w + l) * 8, 8);
      if (w + l == kSkip) word = 0;
      h[l] = (h[l] ^ (word + w + l)) * kMul;
    }
  }
  for (; w < words; ++w) {
    uint64_t word;
    std::memcpy(&word, record + w * 8, 8);
    if (w == kSkip) word = 0;  // records of up to 7 words end past the checksum
    h[0] = (h[0] ^ (word + w)) * kMul;
  }
  return SplitMix64Finalizer(h[0] ^ SplitMix64Finalizer(h[1] ^ SplitMix64Finalizer(h[2] ^ h[3])));
}

namespace {

// Spans [first, last) of `at` ((slot, anything) sorted by slot) whose slots are adjacent, each at
// most kMaxRunBytes.
template <typename Pairs>
ScratchVector<std::pair<size_t, size_t>> AdjacentSpans(const Pairs& at, int64_t record_bytes) {
  ScratchVector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < at.size();) {
    size_t j = i + 1;
    while (j < at.size() && at[j].first == at[j - 1].first + 1 &&
           static_cast<int64_t>(j - i) * record_bytes < kMaxRunBytes) {
      ++j;
    }
    spans.emplace_back(i, j);
    i = j;
  }
  return spans;
}

// The first error of spans run in parallel: the one of the lowest span, as a serial run gives.
class FirstError {
 public:
  void Set(size_t span, std::string problem) {
    std::lock_guard<std::mutex> lock(mu_);
    if (problem_.empty() || span < span_) {
      span_ = span;
      problem_ = std::move(problem);
    }
  }
  [[nodiscard]] std::string Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return problem_;
  }

 private:
  std::mutex mu_;
  size_t span_ = 0;
  std::string problem_;
};

}  // namespace

std::string RowTierFile::WriteRecords(const ScratchVector<std::pair<int64_t, const char*>>& at,
                                      const ParallelRunner& run) {
  const auto spans = AdjacentSpans(at, record_bytes_);
  FirstError error;
  run(spans.size(), [&](int64_t s0, int64_t s1) {
    ScratchVector<char> copy;
    for (int64_t s = s0; s < s1; ++s) {
      const auto [i, j] = spans[s];
      const char* p = at[i].second;
      bool contiguous = true;  // records already adjacent in memory go out without a copy
      for (size_t k = i + 1; k < j && contiguous; ++k) {
        contiguous = at[k].second == at[k - 1].second + record_bytes_;
      }
      if (!contiguous) {
        copy.resize((j - i) * record_bytes_);
        for (size_t k = i; k < j; ++k) {
          std::memcpy(copy.data() + (k - i) * record_bytes_, at[k].second, record_bytes_);
        }
        p = copy.data();
      }
      int64_t left = (j - i) * record_bytes_;
      off_t offset = at[i].first * record_bytes_;
      while (left > 0) {
        const ssize_t w = pwrite(fd_, p, left, offset);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          if (w == 0) errno = ENOSPC;
          error.Set(s, Prefix() + "disk tier: " + Errno("cannot write '" + path_ + "'"));
          return;
        }
        p += w;
        left -= w;
        offset += w;
      }
    }
  });
  const std::string problem = error.Get();
  if (problem.empty() && !at.empty()) {
    file_bytes_ = std::max<int64_t>(file_bytes_, (at.back().first + 1) * record_bytes_);
  }
  return problem;
}

std::string RowTierFile::ReadBytes(int fd, char* p, int64_t left, int64_t offset,
                                   const std::string& path, const std::string& prefix) {
  while (left > 0) {
    const ssize_t r = pread(fd, p, left, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return prefix + "disk tier: " + Errno("cannot read '" + path + "'");
    if (r == 0) {
      return prefix + "disk tier file '" + path +
             "' is shorter than its index: it was changed under the table";
    }
    p += r;
    left -= r;
    offset += r;
  }
  return "";
}

std::string RowTierFile::ReadSpan(int64_t first, int64_t last, ScratchVector<char>* buf) const {
  buf->resize((last - first + 1) * record_bytes_);
  return ReadBytes(fd_, buf->data(), buf->size(), first * record_bytes_, path_, Prefix());
}

std::string RowTierFile::Verify(const char* record, int64_t slot, const int64_t* key) const {
  uint64_t sum;
  std::memcpy(&sum, record + sizeof(RowMeta), sizeof(sum));
  int64_t stored_key;
  std::memcpy(&stored_key, record, sizeof(stored_key));
  // A record of the key looked up is where the index placed it; any other must be where the
  // index places its own key (a key that shares the looked-up key's identity).
  if (sum == Checksum(record) &&
      ((key && stored_key == *key) || index_.Holds(stored_key, static_cast<uint32_t>(slot)))) {
    return "";
  }
  return Prefix() + "disk tier file '" + path_ + "' is corrupted (record " +
         (key ? "of key " + std::to_string(*key) : "at slot " + std::to_string(slot)) +
         " fails its checksum or holds a key the index does not place there): it was changed "
         "under the table";
}

ScratchVector<int64_t> RowTierFile::NextSlots(int64_t n) const {
  ScratchVector<int64_t> slots;
  slots.reserve(n);
  int64_t seg = open_segment_, fill = open_fill_, fresh = num_segments_;
  size_t empties = empty_segments_.size();
  while (static_cast<int64_t>(slots.size()) < n) {
    if (seg < 0 || fill == segment_records_) {
      seg = empties > 0 ? empty_segments_[--empties] : fresh++;
      fill = 0;
    }
    slots.push_back(seg * segment_records_ + fill++);
  }
  return slots;
}

std::string RowTierFile::Append(int64_t n, const char* records, const int64_t* keys,
                                const int64_t* from, const ParallelRunner& run) {
  if (n == 0) return "";
  const ScratchVector<int64_t> slots = NextSlots(n);
  const int64_t top = *std::max_element(slots.begin(), slots.end());
  if (top >= static_cast<int64_t>(kEmpty)) {
    return Prefix() + "disk tier: a file holds at most " + std::to_string(kEmpty) +
           " records; use more ranks";
  }
  ScratchVector<std::pair<int64_t, const char*>> at(n);
  for (int64_t i = 0; i < n; ++i) at[i] = {slots[i], records + i * record_bytes_};
  std::sort(at.begin(), at.end());
  const int64_t old_bytes = file_bytes_;
  const std::string problem = WriteRecords(at, run);
  if (!problem.empty()) {
    // Nothing was added. Cut back what the file grew by, if anything.
    file_bytes_ = old_bytes;
    if (ftruncate(fd_, file_bytes_) != 0) {
      // The file keeps unused bytes past its last segment: harmless, they are overwritten later.
    }
    return problem;
  }
  std::vector<int64_t> closed;
  ForEachFetchedAhead(
      n, [&](int64_t i) { index_.Prefetch(keys[i]); },
      [&](int64_t i) {
        if (open_segment_ < 0 || open_fill_ == segment_records_) {
          if (open_segment_ >= 0) closed.push_back(open_segment_);
          if (!empty_segments_.empty()) {
            open_segment_ = empty_segments_.back();
            empty_segments_.pop_back();
          } else {
            open_segment_ = num_segments_++;
            segment_live_.push_back(0);
            segment_generation_.push_back(0);
            used_.resize((num_segments_ * segment_records_ + 63) / 64, 0);
          }
          segment_generation_[open_segment_] = NextGeneration();
          open_fill_ = 0;
        }
        const int64_t slot = open_segment_ * segment_records_ + open_fill_++;
        SetUsed(slot, true);
        ++segment_live_[open_segment_];
        if (from) {  // the key moves: its old record becomes dead
          index_.Relocate(keys[i], from[i], slot);
          if (tracking_moves_) moves_[keys[i]] = slot;
          SetUsed(from[i], false);
          --segment_live_[from[i] / segment_records_];
        } else {
          index_.Insert(keys[i], slot);
        }
      });
  for (int64_t seg : closed) {
    if (segment_live_[seg] == 0) empty_segments_.push_back(seg);
  }
  return "";
}

int64_t RowTierFile::DeadRecords() const {
  int64_t written =
      (num_segments_ - static_cast<int64_t>(empty_segments_.size())) * segment_records_;
  if (open_segment_ >= 0) written -= segment_records_ - open_fill_;
  return written - index_.size();
}

std::string RowTierFile::Clean(const ParallelRunner& run) {
  const int64_t allowed = std::max<int64_t>(index_.size(), 2 * segment_records_);
  int64_t dead = DeadRecords();
  if (dead <= allowed) return "";
  // The closed segments with the fewest live records (the lowest first among equals), as many
  // as bring the dead records down to `allowed`: emptying one drops its dead records.
  ScratchVector<std::pair<uint32_t, int64_t>> victims;  // (live records, segment)
  for (int64_t s = 0; s < num_segments_; ++s) {
    if (s != open_segment_ && segment_live_[s] > 0) victims.emplace_back(segment_live_[s], s);
  }
  std::sort(victims.begin(), victims.end());
  size_t take = 0;
  for (; take < victims.size() && dead > allowed; ++take) {
    dead -= segment_records_ - victims[take].first;
  }
  for (size_t v = 0; v < take; v += kCleanSegments) {
    const std::string problem =
        CleanSegments(victims.data() + v, std::min<size_t>(kCleanSegments, take - v), run);
    if (!problem.empty()) return problem;
  }
  return "";
}

std::string RowTierFile::CleanSegments(const std::pair<uint32_t, int64_t>* victims, int64_t k,
                                       const ParallelRunner& run) {
  // Each segment is read whole (one long read beats one a live record), its live records
  // verified and gathered in slot order, on all threads; then appended anew in one go.
  const int64_t per = segment_records_;
  ScratchVector<int64_t> to(k * per);  // where each slot's record goes in `live`; -1: dead
  int64_t n = 0;
  for (int64_t v = 0; v < k; ++v) {
    for (int64_t j = 0; j < per; ++j) {
      to[v * per + j] = Used(victims[v].second * per + j) ? n++ : -1;
    }
  }
  ScratchArray<char> live = NewScratchArray<char>(n * record_bytes_, true);  // written in full
  ScratchVector<int64_t> keys(n), from(n);
  FirstError error;
  run(k * per, [&](int64_t i0, int64_t i1) {
    // One segment's bytes at a time, into a buffer the thread reuses (fresh pages cost more
    // here than the reads).
    ScratchVector<char> read(std::min(i1 - i0, per) * record_bytes_);
    for (int64_t i = i0; i < i1;) {  // records [i, end) of one segment
      const int64_t v = i / per;
      const int64_t end = std::min(i1, (v + 1) * per);
      const int64_t slot0 = victims[v].second * per - v * per;  // slot of record i: slot0 + i
      std::string problem = ReadBytes(fd_, read.data(), (end - i) * record_bytes_,
                                      (slot0 + i) * record_bytes_, path_, Prefix());
      for (int64_t j = i; j < end && problem.empty(); ++j) {
        if (to[j] < 0) continue;
        const char* rec = read.data() + (j - i) * record_bytes_;
        problem = Verify(rec, slot0 + j, nullptr);
        if (!problem.empty()) break;
        std::memcpy(&keys[to[j]], rec, sizeof(int64_t));
        from[to[j]] = slot0 + j;
        std::memcpy(live.get() + to[j] * record_bytes_, rec, record_bytes_);
      }
      if (!problem.empty()) {
        error.Set(v, problem);
        return;
      }
      i = end;
    }
  });
  std::string problem = error.Get();
  if (problem.empty()) problem = Append(n, live.get(), keys.data(), from.data(), run);
  if (!problem.empty()) return problem;
  for (int64_t v = 0; v < k; ++v) {
    if (segment_live_[victims[v].second] == 0) empty_segments_.push_back(victims[v].second);
  }
  return "";
}

std::string RowTierFile::Write(int64_t n, const RowMeta* metas, const float* const* rows,
                               const ParallelRunner& run) {
  if (n == 0) return "";
  // Reclaim dead records first: if that fails, nothing is added.
  std::string problem = Clean(run);
  if (!problem.empty()) return problem;
  ScratchArray<char> records =
      NewScratchArray<char>(n * record_bytes_, true);  // written in full below
  ScratchVector<int64_t> keys(n);
  const int64_t row_bytes = stride_ * sizeof(float);
  run(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      char* rec = records.get() + i * record_bytes_;
      std::memcpy(rec, &metas[i], sizeof(RowMeta));
      std::memcpy(rec + kHeaderBytes, rows[i], row_bytes);
      std::memset(rec + kHeaderBytes + row_bytes, 0, record_bytes_ - kHeaderBytes - row_bytes);
      const uint64_t sum = Checksum(rec);
      std::memcpy(rec + sizeof(RowMeta), &sum, sizeof(sum));
      keys[i] = metas[i].key;
    }
  });
  return Append(n, records.get(), keys.data(), nullptr, run);
}

ScratchVector<std::pair<int64_t, int64_t>> RowTierFile::CandidateSlots(int64_t n,
                                                                       const int64_t* keys) const {
  ScratchVector<std::pair<int64_t, int64_t>> order;
  order.reserve(n);
  std::vector<uint32_t> candidates;
  ForEachFetchedAhead(
      n, [&](int64_t i) { index_.Prefetch(keys[i]); },
      [&](int64_t i) {
        candidates.clear();
        index_.Candidates(keys[i], &candidates);
        for (uint32_t slot : candidates) order.emplace_back(slot, i);
      });
  std::sort(order.begin(), order.end());
  return order;
}

std::string RowTierFile::CheckRecord(const char* rec, int64_t slot, int64_t key,
                                     bool* holds) const {
  int64_t stored_key;
  std::memcpy(&stored_key, rec, sizeof(stored_key));
  *holds = stored_key == key;  // else another key's record, one that shares key's identity
  return Verify(rec, slot, &key);
}

std::string RowTierFile::Read(int64_t n, const int64_t* keys, ScratchArray<char>* records,
                              const char** found, int64_t* slots, const ParallelRunner& run) const {
  std::fill(slots, slots + n, -1);
  const ScratchVector<std::pair<int64_t, int64_t>> order = CandidateSlots(n, keys);
  if (order.empty()) return "";
  // Each span straight into its place in *records: a record is copied once, by the kernel.
  *records = NewScratchArray<char>(order.size() * record_bytes_, false);
  const auto spans = AdjacentSpans(order, record_bytes_);
  FirstError error;
  run(spans.size(), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const auto [i, j] = spans[s];
      char* span = records->get() + i * record_bytes_;
      std::string problem = ReadBytes(fd_, span, (j - i) * record_bytes_,
                                      order[i].first * record_bytes_, path_, Prefix());
      for (size_t k = i; k < j && problem.empty(); ++k) {
        const char* rec = span + (k - i) * record_bytes_;
        const auto [slot, key] = order[k];
        bool holds = false;
        problem = CheckRecord(rec, slot, keys[key], &holds);
        if (problem.empty() && holds) {  // one record holds the key: one writer per key
          found[key] = rec;
          slots[key] = slot;
        }
      }
      if (!problem.empty()) {
        error.Set(s, problem);
        return;
      }
    }
  });
  return error.Get();
}

RowTierFile::PlannedRead::~PlannedRead() {
  if (fd >= 0) close(fd);
}

std::string RowTierFile::PlanRead(int64_t n, const int64_t* keys, PlannedRead* plan) const {
  plan->order = CandidateSlots(n, keys);
  plan->generations.resize(plan->order.size());
  for (size_t k = 0; k < plan->order.size(); ++k) {
    plan->generations[k] = segment_generation_[plan->order[k].first / segment_records_];
  }
  plan->epoch = epoch_;
  plan->record_bytes = record_bytes_;
  plan->path = path_;
  plan->prefix = Prefix();
  if (plan->fd >= 0) close(plan->fd);
  plan->fd = plan->order.empty() ? -1 : fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (!plan->order.empty() && plan->fd < 0) {
    return Prefix() + "disk tier: " + Errno("cannot duplicate the descriptor of '" + path_ + "'");
  }
  return "";
}

void RowTierFile::ReadPlanned(PlannedRead* plan, const ParallelRunner& run) {
  const int64_t bytes = plan->record_bytes;
  plan->records = NewScratchArray<char>(plan->order.size() * bytes, true);
  const auto spans = AdjacentSpans(plan->order, bytes);
  FirstError error;
  run(spans.size(), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const auto [i, j] = spans[s];
      const std::string problem =
          ReadBytes(plan->fd, plan->records.get() + i * bytes, (j - i) * bytes,
                    plan->order[i].first * bytes, plan->path, plan->prefix);
      if (!problem.empty()) {
        error.Set(s, problem);
        return;
      }
    }
  });
  plan->problem = error.Get();
}

std::string RowTierFile::TakePlanned(const PlannedRead& plan, int64_t n, const int64_t* keys,
                                     const char** records, int64_t* slots,
                                     const ParallelRunner& run) const {
  std::fill(slots, slots + n, -1);
  if (plan.epoch != epoch_) return "";  // cleared or replaced since: every record is gone
  if (!plan.problem.empty()) return plan.problem;
  // The records checked on all threads; one record holds a key, so one writer per key.
  FirstError error;
  run(plan.order.size(), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const auto [slot, i] = plan.order[k];
      // A record removed since (read back, moved by cleaning, evicted) may have been rewritten
      // since its segment was opened again; a live one in a segment not opened again is as
      // read.
      if (!Used(slot) || segment_generation_[slot / segment_records_] != plan.generations[k]) {
        continue;
      }
      const char* rec = plan.records.get() + k * record_bytes_;
      bool holds = false;
      std::string problem = CheckRecord(rec, slot, keys[i], &holds);
      if (!problem.empty()) {
        error.Set(k, std::move(problem));
        return;
      }
      if (holds) {
        records[i] = rec;
        slots[i] = slot;
      }
    }
  });
  std::string problem = error.Get();
  if (!problem.empty()) std::fill(slots, slots + n, -1);
  return problem;
}

std::string RowTierFile::Scan(int64_t start, const std::function<bool(int64_t, const char*)>& fn,
                              int64_t* next) const {
  const int64_t total = num_segments_ * segment_records_;
  ScratchVector<char> buf;
  int64_t s = std::max<int64_t>(start, 0);
  while (s < total) {
    const int64_t end = (s / segment_records_ + 1) * segment_records_;
    int64_t first = s, last = end - 1;
    while (first < end && !Used(first)) ++first;
    while (last >= first && !Used(last)) --last;
    if (first > last) {
      s = end;
      continue;
    }
    std::string problem = ReadSpan(first, last, &buf);
    if (!problem.empty()) return problem;
    for (int64_t slot = first; slot <= last; ++slot) {
      if (!Used(slot)) continue;
      const char* rec = buf.data() + (slot - first) * record_bytes_;
      problem = Verify(rec, slot, nullptr);
      if (!problem.empty()) return problem;
      if (!fn(slot, rec)) {
        *next = slot + 1 < total ? slot + 1 : -1;
        return "";
      }
    }
    s = end;
  }
  *next = -1;
  return "";
}

std::string RowTierFile::ReadWhere(int64_t start, int64_t limit,
                                   const std::function<bool(const RowMeta&)>& pred,
                                   std::vector<int64_t>* keys, std::vector<float>* rows,
                                   int64_t* next) const {
  int64_t taken = 0;
  if (limit <= 0) {
    *next = start < num_segments_ * segment_records_ ? start : -1;
    return "";
  }
  return Scan(
      start,
      [&](int64_t, const char* rec) {
        RowMeta meta;
        std::memcpy(&meta, rec, sizeof(meta));
        if (pred(meta)) {
          keys->push_back(meta.key);
          const float* row = reinterpret_cast<const float*>(rec + kHeaderBytes);
          rows->insert(rows->end(), row, row + stride_);
          ++taken;
        }
        return taken < limit;
      },
      next);
}

std::string RowTierFile::ForEachMeta(
    const std::function<void(const RowMeta&, int64_t slot)>& fn) const {
  int64_t next = 0;
  return Scan(
      0,
      [&](int64_t slot, const char* rec) {
        RowMeta meta;
        std::memcpy(&meta, rec, sizeof(meta));
        fn(meta, slot);
        return true;
      },
      &next);
}

void RowTierFile::TrackMoves(bool on) {
  tracking_moves_ = on;
  moves_.clear();
}

void RowTierFile::Erase(int64_t key, int64_t slot) {
  if (slot < 0) return;
  if (!index_.Erase(key, static_cast<uint32_t>(slot))) {
    const auto moved = moves_.find(key);  // cleaned since: at its new record
    if (moved == moves_.end() || !index_.Erase(key, moved->second)) return;
    slot = moved->second;
  }
  SetUsed(slot, false);
  const int64_t seg = slot / segment_records_;
  if (--segment_live_[seg] == 0 && seg != open_segment_) empty_segments_.push_back(seg);
}

void RowTierFile::Clear() {
  index_.Clear();
  used_.clear();
  segment_live_.clear();
  segment_generation_.clear();
  empty_segments_.clear();
  num_segments_ = 0;
  open_segment_ = -1;
  open_fill_ = 0;
  file_bytes_ = 0;
  epoch_ = NextGeneration();
  if (ftruncate(fd_, 0) != 0) {
    // Stale bytes past slot 0 are never read: slots are written before they are indexed.
  }
}

std::string RowTierFile::Widen(int64_t group, const std::vector<float>& fill) {
  const int64_t new_stride = stride_ + group * static_cast<int64_t>(fill.size());
  const std::string tmp = path_ + ".widen";
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Prefix() + "disk tier: " + Errno("cannot open '" + tmp + "'");
  RowTierFile wide(tmp, fd, new_stride, segment_bytes_, label_);
  // Batches of records, read at the old width and appended to the new file at the new one.
  constexpr int64_t kBatch = 4096;
  std::vector<RowMeta> metas;
  std::vector<float> widened;
  std::string problem;
  const auto flush = [&] {
    std::vector<const float*> rows(metas.size());
    for (size_t i = 0; i < metas.size(); ++i) rows[i] = widened.data() + i * new_stride;
    problem = wide.Write(metas.size(), metas.data(), rows.data(), RunSerially);
    metas.clear();
    widened.clear();
    return problem.empty();
  };
  int64_t next = 0;
  std::string scanned = Scan(
      0,
      [&](int64_t, const char* rec) {
        metas.emplace_back();
        std::memcpy(&metas.back(), rec, sizeof(RowMeta));
        const float* row = reinterpret_cast<const float*>(rec + kHeaderBytes);
        widened.insert(widened.end(), row, row + stride_);
        for (float v : fill) widened.insert(widened.end(), group, v);
        return static_cast<int64_t>(metas.size()) < kBatch || flush();
      },
      &next);
  if (scanned.empty() && problem.empty()) flush();
  if (!scanned.empty() || !problem.empty()) {
    unlink(tmp.c_str());
    return scanned.empty() ? problem : scanned;
  }
  if (rename(tmp.c_str(), path_.c_str()) != 0) {
    problem = Prefix() + "disk tier: " + Errno("cannot replace '" + path_ + "'");
    unlink(tmp.c_str());
    return problem;
  }
  MoveFrom(&wide);
  return "";
}

}  // namespace sok_lite
