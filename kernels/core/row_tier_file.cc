#include "kernels/core/row_tier_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {
namespace {

// Record: key and bookkeeping (RowMeta), a checksum, then the row's floats, padded to 8 bytes.
constexpr int64_t kHeaderBytes = sizeof(RowMeta) + sizeof(uint64_t);
// Adjacent records are read or written by one call of at most this many bytes.
constexpr int64_t kMaxRunBytes = int64_t{4} << 20;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// mkdir -p: every missing component of dir.
std::string MakeDirs(const std::string& dir) {
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

RowTierFile::RowTierFile(std::string path, int fd, int64_t stride, std::string label)
    : path_(std::move(path)),
      fd_(fd),
      stride_(stride),
      record_bytes_((kHeaderBytes + stride * sizeof(float) + 7) / 8 * 8),
      label_(std::move(label)) {
  index_.assign(16, Entry{0, -1});
}

RowTierFile::~RowTierFile() {
  if (fd_ >= 0) close(fd_);
}

std::string RowTierFile::Open(const std::string& dir, int64_t stride, const std::string& label,
                              std::unique_ptr<RowTierFile>* out) {
  std::string problem = MakeDirs(dir);
  if (!problem.empty()) return (label.empty() ? "" : label + ": ") + "disk tier: " + problem;
  const std::string path = dir + "/rows.bin";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return (label.empty() ? "" : label + ": ") +
           "disk tier: " + Errno("cannot open '" + path + "'");
  out->reset(new RowTierFile(path, fd, stride, label));
  return "";
}

int64_t RowTierFile::IndexBytes() const {
  return index_.size() * sizeof(Entry) + slot_meta_.capacity() * sizeof(RowMeta) +
         slot_used_.capacity() / 8 + free_slots_.capacity() * sizeof(int64_t);
}

int64_t RowTierFile::FindIndex(int64_t key) const {
  const uint64_t mask = index_.size() - 1;
  for (uint64_t pos = SplitMix64Finalizer(key) & mask;; pos = (pos + 1) & mask) {
    if (index_[pos].slot < 0) return -1;
    if (index_[pos].key == key) return pos;
  }
}

const RowMeta* RowTierFile::Find(int64_t key) const {
  const int64_t pos = FindIndex(key);
  return pos < 0 ? nullptr : &slot_meta_[index_[pos].slot];
}

void RowTierFile::IndexGrow() {
  std::vector<Entry> old = std::move(index_);
  index_.assign(old.size() * 2, Entry{0, -1});
  for (const Entry& e : old) {
    if (e.slot >= 0) IndexInsert(e.key, e.slot);
  }
}

void RowTierFile::IndexInsert(int64_t key, int64_t slot) {
  const uint64_t mask = index_.size() - 1;
  uint64_t pos = SplitMix64Finalizer(key) & mask;
  while (index_[pos].slot >= 0) pos = (pos + 1) & mask;
  index_[pos] = Entry{key, slot};
}

uint64_t RowTierFile::Checksum(const char* record) const {
  // 64-bit words of the record but the checksum itself, mixed in order: catches changed bytes
  // and records swapped between slots of other keys.
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t off = 0; off < record_bytes_; off += 8) {
    if (off == static_cast<int64_t>(sizeof(RowMeta))) continue;
    uint64_t word;
    std::memcpy(&word, record + off, 8);
    h = SplitMix64Finalizer(h ^ word) + off;
  }
  return h;
}

std::string RowTierFile::WriteRecords(const std::vector<std::pair<int64_t, const char*>>& at) {
  // at: (slot, record) sorted by slot; runs of adjacent slots go out in one pwrite.
  std::vector<char> run;
  for (size_t i = 0; i < at.size();) {
    size_t j = i + 1;
    while (j < at.size() && at[j].first == at[j - 1].first + 1 &&
           static_cast<int64_t>(j - i) * record_bytes_ < kMaxRunBytes) {
      ++j;
    }
    run.resize((j - i) * record_bytes_);
    for (size_t k = i; k < j; ++k) {
      std::memcpy(run.data() + (k - i) * record_bytes_, at[k].second, record_bytes_);
    }
    const char* p = run.data();
    int64_t left = run.size();
    off_t offset = at[i].first * record_bytes_;
    while (left > 0) {
      const ssize_t w = pwrite(fd_, p, left, offset);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = ENOSPC;
        return Prefix() + "disk tier: " + Errno("cannot write '" + path_ + "'");
      }
      p += w;
      left -= w;
      offset += w;
    }
    i = j;
  }
  return "";
}

std::string RowTierFile::Write(int64_t n, const RowMeta* metas, const float* const* rows) {
  if (n == 0) return "";
  std::vector<char> records(n * record_bytes_, 0);
  std::vector<std::pair<int64_t, const char*>> at(n);
  const size_t reused = std::min<size_t>(free_slots_.size(), n);
  const int64_t old_slots = num_slots_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = i < static_cast<int64_t>(reused) ? free_slots_[free_slots_.size() - 1 - i]
                                                          : old_slots + (i - reused);
    char* rec = records.data() + i * record_bytes_;
    std::memcpy(rec, &metas[i], sizeof(RowMeta));
    std::memcpy(rec + kHeaderBytes, rows[i], stride_ * sizeof(float));
    const uint64_t sum = Checksum(rec);
    std::memcpy(rec + sizeof(RowMeta), &sum, sizeof(sum));
    at[i] = {slot, rec};
  }
  std::vector<std::pair<int64_t, const char*>> sorted = at;
  std::sort(sorted.begin(), sorted.end());
  const std::string problem = WriteRecords(sorted);
  if (!problem.empty()) {
    // Nothing was added: the caller keeps the rows. Cut back what the file grew by, if any.
    if (ftruncate(fd_, old_slots * record_bytes_) != 0) {
      // The file keeps unused bytes past its last slot: harmless, they are overwritten later.
    }
    return problem;
  }
  free_slots_.resize(free_slots_.size() - reused);
  num_slots_ = old_slots + (n - reused);
  slot_meta_.resize(num_slots_);
  slot_used_.resize(num_slots_, false);
  for (int64_t i = 0; i < n; ++i) {
    if ((size_ + 1) * 4 > static_cast<int64_t>(index_.size()) * 3) IndexGrow();
    IndexInsert(metas[i].key, at[i].first);
    slot_meta_[at[i].first] = metas[i];
    slot_used_[at[i].first] = true;
    ++size_;
  }
  return "";
}

std::string RowTierFile::Read(int64_t n, const int64_t* keys, RowMeta* metas, float* rows) const {
  std::vector<std::pair<int64_t, int64_t>> order(n);  // (slot, i)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = FindIndex(keys[i]);
    if (pos < 0) return Prefix() + "disk tier: key " + std::to_string(keys[i]) + " is not on disk";
    order[i] = {index_[pos].slot, i};
  }
  std::sort(order.begin(), order.end());
  std::vector<char> run;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j].first == order[j - 1].first + 1 &&
           static_cast<int64_t>(j - i) * record_bytes_ < kMaxRunBytes) {
      ++j;
    }
    run.resize((j - i) * record_bytes_);
    char* p = run.data();
    int64_t left = run.size();
    off_t offset = order[i].first * record_bytes_;
    while (left > 0) {
      const ssize_t r = pread(fd_, p, left, offset);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Prefix() + "disk tier: " + Errno("cannot read '" + path_ + "'");
      if (r == 0) {
        return Prefix() + "disk tier file '" + path_ +
               "' is shorter than its index: it was changed under the table";
      }
      p += r;
      left -= r;
      offset += r;
    }
    for (size_t k = i; k < j; ++k) {
      const char* rec = run.data() + (k - i) * record_bytes_;
      const int64_t idx = order[k].second;
      uint64_t sum;
      std::memcpy(&sum, rec + sizeof(RowMeta), sizeof(sum));
      RowMeta meta;
      std::memcpy(&meta, rec, sizeof(meta));
      if (sum != Checksum(rec) || meta.key != keys[idx]) {
        return Prefix() + "disk tier file '" + path_ + "' is corrupted (record of key " +
               std::to_string(keys[idx]) + " fails its checksum): it was changed under the table";
      }
      metas[idx] = meta;
      std::memcpy(rows + idx * stride_, rec + kHeaderBytes, stride_ * sizeof(float));
    }
    i = j;
  }
  return "";
}

void RowTierFile::Erase(int64_t key) {
  const int64_t s = FindIndex(key);
  if (s < 0) return;
  const int64_t slot = index_[s].slot;
  slot_used_[slot] = false;
  free_slots_.push_back(slot);
  --size_;
  // Backward-shift deletion keeps probe chains intact without tombstones.
  const uint64_t mask = index_.size() - 1;
  uint64_t hole = s;
  for (uint64_t pos = (hole + 1) & mask; index_[pos].slot >= 0; pos = (pos + 1) & mask) {
    const uint64_t home = SplitMix64Finalizer(index_[pos].key) & mask;
    const bool stays = hole <= pos ? (home > hole && home <= pos) : (home > hole || home <= pos);
    if (!stays) {
      index_[hole] = index_[pos];
      hole = pos;
    }
  }
  index_[hole].slot = -1;
}

void RowTierFile::Clear() {
  index_.assign(16, Entry{0, -1});
  size_ = 0;
  num_slots_ = 0;
  slot_meta_.clear();
  slot_used_.clear();
  free_slots_.clear();
  if (ftruncate(fd_, 0) != 0) {
    // Stale bytes past slot 0 are never read: slots are written before they are indexed.
  }
}

std::string RowTierFile::Widen(int64_t group, const std::vector<float>& fill) {
  const int64_t new_stride = stride_ + group * static_cast<int64_t>(fill.size());
  const std::string tmp = path_ + ".widen";
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Prefix() + "disk tier: " + Errno("cannot open '" + tmp + "'");
  RowTierFile wide(tmp, fd, new_stride, label_);
  // Batches of used slots: read at the old width, written at the same slots at the new one.
  constexpr int64_t kBatch = 4096;
  std::vector<int64_t> keys;
  std::vector<RowMeta> metas;
  std::vector<float> rows, widened;
  for (int64_t s0 = 0; s0 < num_slots_; s0 += kBatch) {
    keys.clear();
    std::vector<int64_t> slots;
    for (int64_t s = s0; s < std::min(num_slots_, s0 + kBatch); ++s) {
      if (slot_used_[s]) {
        keys.push_back(slot_meta_[s].key);
        slots.push_back(s);
      }
    }
    const int64_t m = keys.size();
    metas.resize(m);
    rows.resize(m * stride_);
    std::string problem = Read(m, keys.data(), metas.data(), rows.data());
    if (!problem.empty()) {
      unlink(tmp.c_str());
      return problem;
    }
    widened.resize(m * new_stride);
    std::vector<std::vector<char>> recs(m, std::vector<char>(wide.record_bytes_, 0));
    std::vector<std::pair<int64_t, const char*>> at(m);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = widened.data() + i * new_stride;
      std::memcpy(dst, rows.data() + i * stride_, stride_ * sizeof(float));
      for (size_t j = 0; j < fill.size(); ++j) {
        std::fill(dst + stride_ + j * group, dst + stride_ + (j + 1) * group, fill[j]);
      }
      char* rec = recs[i].data();
      std::memcpy(rec, &metas[i], sizeof(RowMeta));
      std::memcpy(rec + kHeaderBytes, dst, new_stride * sizeof(float));
      const uint64_t sum = wide.Checksum(rec);
      std::memcpy(rec + sizeof(RowMeta), &sum, sizeof(sum));
      at[i] = {slots[i], rec};
    }
    problem = wide.WriteRecords(at);
    if (!problem.empty()) {
      unlink(tmp.c_str());
      return problem;
    }
  }
  if (rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string problem = Prefix() + "disk tier: " + Errno("cannot replace '" + path_ + "'");
    unlink(tmp.c_str());
    return problem;
  }
  std::swap(fd_, wide.fd_);  // wide closes the old file
  stride_ = new_stride;
  record_bytes_ = wide.record_bytes_;
  return "";
}

}  // namespace sok_lite
