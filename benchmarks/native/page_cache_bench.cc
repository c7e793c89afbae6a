// What a disk tier's miss costs the CPU at the least, whatever the table does around it: the ways
// to move fixed-size records between a process and a file that sits in the page cache. Each
// measure moves `batch` records at random slots of the file (sorted by offset, as the tier reads
// and writes them); per record: wall and CPU (user + system) microseconds, medians of `reps`.
//   pread         one pread a record
//   pread_cached  the same reads, every one of the first record (its page stays in the CPU's
//                 caches): what a read costs beside finding its page among the file's
//   io_uring      the same reads submitted 256 at a time through io_uring (raw system calls)
//   mmap          memcpy from a mapping of the file, its pages mapped by the copies' faults and
//                 unmapped after (MADV_DONTNEED), as RSS requires between steps
//   pwrite_random one pwrite a record, in place
//   pwrite_append the same bytes appended as 1 MiB writes (the tier's log-structured spill)
// Every record of the file starts with its slot number: the reads count the records that do not
// (must be 0). One JSON object a measure on stdout.
//
// Usage: page_cache_bench FILE RECORDS RECORD_BYTES BATCH REPS
#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/native/bench_timing.h"

namespace {

double CpuMs() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

[[noreturn]] void Fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

// Records whose first 8 bytes are not their slot.
int64_t Mismatches(const std::vector<char>& out, const std::vector<int64_t>& slots,
                   int64_t record_bytes) {
  int64_t bad = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t stored;
    std::memcpy(&stored, out.data() + i * record_bytes, sizeof(stored));
    bad += stored != slots[i];
  }
  return bad;
}

// A minimal io_uring of `entries` submission slots: reads only.
class Ring {
 public:
  explicit Ring(unsigned entries) {
    io_uring_params p{};
    fd_ = static_cast<int>(syscall(__NR_io_uring_setup, entries, &p));
    if (fd_ < 0) return;
    entries_ = p.sq_entries;
    sq_bytes_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_bytes_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    sqe_bytes_ = p.sq_entries * sizeof(io_uring_sqe);
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED | MAP_POPULATE;
    sq_ = static_cast<char*>(mmap(nullptr, sq_bytes_, prot, flags, fd_, IORING_OFF_SQ_RING));
    cq_ = static_cast<char*>(mmap(nullptr, cq_bytes_, prot, flags, fd_, IORING_OFF_CQ_RING));
    sqes_ =
        static_cast<io_uring_sqe*>(mmap(nullptr, sqe_bytes_, prot, flags, fd_, IORING_OFF_SQES));
    if (sq_ == MAP_FAILED || cq_ == MAP_FAILED || sqes_ == MAP_FAILED) Fail("mmap io_uring");
    sq_off_ = p.sq_off;
    cq_off_ = p.cq_off;
  }
  ~Ring() {
    if (fd_ < 0) return;
    munmap(sq_, sq_bytes_);
    munmap(cq_, cq_bytes_);
    munmap(sqes_, sqe_bytes_);
    close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  // Reads `bytes` at offsets[i] of fd into dst + i * bytes, entries_ at a time.
  void ReadAll(int fd, const std::vector<int64_t>& offsets, int64_t bytes, char* dst) {
    auto* tail = reinterpret_cast<unsigned*>(sq_ + sq_off_.tail);
    const unsigned sq_mask = *reinterpret_cast<unsigned*>(sq_ + sq_off_.ring_mask);
    auto* array = reinterpret_cast<unsigned*>(sq_ + sq_off_.array);
    auto* head = reinterpret_cast<unsigned*>(cq_ + cq_off_.head);
    auto* cq_tail = reinterpret_cast<unsigned*>(cq_ + cq_off_.tail);
    const unsigned cq_mask = *reinterpret_cast<unsigned*>(cq_ + cq_off_.ring_mask);
    auto* cqes = reinterpret_cast<io_uring_cqe*>(cq_ + cq_off_.cqes);
    for (size_t i = 0; i < offsets.size();) {
      const unsigned batch = std::min<size_t>(entries_, offsets.size() - i);
      const unsigned t = *tail;
      for (unsigned k = 0; k < batch; ++k) {
        const unsigned at = (t + k) & sq_mask;
        io_uring_sqe* e = &sqes_[at];
        std::memset(e, 0, sizeof(*e));
        e->opcode = IORING_OP_READ;
        e->fd = fd;
        e->addr = reinterpret_cast<uint64_t>(dst + (i + k) * bytes);
        e->len = static_cast<unsigned>(bytes);
        e->off = offsets[i + k];
        array[at] = at;
      }
      __atomic_store_n(tail, t + batch, __ATOMIC_RELEASE);
      if (syscall(__NR_io_uring_enter, fd_, batch, batch, IORING_ENTER_GETEVENTS, nullptr, 0) < 0) {
        Fail("io_uring_enter");
      }
      unsigned h = *head;
      for (unsigned got = 0; got < batch; ++got, ++h) {
        while (h == __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE)) {
        }
        if (cqes[h & cq_mask].res != bytes) Fail("io_uring read");
      }
      __atomic_store_n(head, h, __ATOMIC_RELEASE);
      i += batch;
    }
  }

 private:
  int fd_ = -1;
  unsigned entries_ = 0;
  size_t sq_bytes_ = 0, cq_bytes_ = 0, sqe_bytes_ = 0;
  char* sq_ = nullptr;
  char* cq_ = nullptr;
  io_uring_sqe* sqes_ = nullptr;
  io_sqring_offsets sq_off_{};
  io_cqring_offsets cq_off_{};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s FILE RECORDS RECORD_BYTES BATCH REPS\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  const int64_t records = std::atoll(argv[2]), rb = std::atoll(argv[3]);
  const int64_t batch = std::atoll(argv[4]), reps = std::atoll(argv[5]);
  const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) Fail("open");
  // The file, each record starting with its slot, written in 1 MiB pieces: in the page cache.
  const int64_t per_write = std::max<int64_t>(1, (int64_t{1} << 20) / rb);
  std::vector<char> chunk(per_write * rb, 0x5a);
  for (int64_t s = 0; s < records; s += per_write) {
    const int64_t k = std::min(per_write, records - s);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = s + j;
      std::memcpy(chunk.data() + j * rb, &slot, sizeof(slot));
    }
    if (pwrite(fd, chunk.data(), k * rb, s * rb) != k * rb) Fail("pwrite");
  }
  std::mt19937_64 rng(7);
  std::vector<int64_t> slots(batch), offsets(batch);
  std::vector<char> out(batch * rb), in(batch * rb);
  for (int64_t i = 0; i < batch; ++i) std::memcpy(in.data() + i * rb, &i, sizeof(i));
  Ring ring(256);
  char* map = static_cast<char*>(mmap(nullptr, records * rb, PROT_READ, MAP_SHARED, fd, 0));
  if (map == MAP_FAILED) Fail("mmap");
  madvise(map, records * rb, MADV_RANDOM);

  struct Measure {
    const char* name;
    bool reads;  // fills `out` with the records at `slots`
    std::function<void()> run;
    bool first_slot_only = false;  // every slot is 0
  };
  int64_t appended = 0;
  const auto pread_each = [&] {
    for (int64_t i = 0; i < batch; ++i) {
      if (pread(fd, out.data() + i * rb, rb, offsets[i]) != rb) Fail("pread");
    }
  };
  const std::vector<Measure> measures = {
      {"pread", true, pread_each},
      {"pread_cached", true, pread_each, true},
      {"io_uring", true, [&] { ring.ReadAll(fd, offsets, rb, out.data()); }},
      {"mmap", true,
       [&] {
         for (int64_t i = 0; i < batch; ++i) std::memcpy(out.data() + i * rb, map + offsets[i], rb);
         madvise(map, records * rb, MADV_DONTNEED);
       }},
      {"pwrite_random", false,
       [&] {
         for (int64_t i = 0; i < batch; ++i) {
           std::memcpy(in.data() + i * rb, &slots[i], sizeof(int64_t));  // the file stays valid
           if (pwrite(fd, in.data() + i * rb, rb, offsets[i]) != rb) Fail("pwrite");
         }
       }},
      {"pwrite_append", false,
       [&] {
         // Over the file's records from a moving start, each keeping its slot number.
         for (int64_t i = 0; i < batch; i += per_write) {
           const int64_t k = std::min(per_write, batch - i);
           for (int64_t j = 0; j < k; ++j) {
             const int64_t slot = (appended + i + j) % records;
             std::memcpy(in.data() + (i + j) * rb, &slot, sizeof(slot));
           }
           const int64_t at = (appended + i) % records;
           const int64_t fit = std::min(k, records - at);  // wraps: two writes
           if (pwrite(fd, in.data() + i * rb, fit * rb, at * rb) != fit * rb) Fail("pwrite");
           if (fit < k &&
               pwrite(fd, in.data() + (i + fit) * rb, (k - fit) * rb, 0) != (k - fit) * rb) {
             Fail("pwrite");
           }
         }
         appended = (appended + batch) % records;
       }},
  };
  for (const Measure& m : measures) {
    if (std::strcmp(m.name, "io_uring") == 0 && !ring.ok()) {
      std::printf("{\"what\": \"io_uring\", \"available\": false}\n");
      continue;
    }
    std::vector<double> wall, cpu;
    int64_t bad = 0;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first repetition warms up, untimed
      for (int64_t& s : slots) s = m.first_slot_only ? 0 : static_cast<int64_t>(rng() % records);
      std::sort(slots.begin(), slots.end());
      for (int64_t i = 0; i < batch; ++i) offsets[i] = slots[i] * rb;
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = CpuMs();
      m.run();
      const double c1 = CpuMs();
      const auto t1 = std::chrono::steady_clock::now();
      if (m.reads) bad += Mismatches(out, slots, rb);
      if (r > 0) {
        wall.push_back(Ms(t0, t1) * 1e3 / batch);
        cpu.push_back((c1 - c0) * 1e3 / batch);
      }
    }
    std::printf(
        "{\"what\": \"%s\", \"available\": true, \"us_per_record\": %.4f, "
        "\"cpu_us_per_record\": %.4f, \"mismatches\": %lld}\n",
        m.name, Median(wall), Median(cpu), static_cast<long long>(bad));
  }
  munmap(map, records * rb);
  close(fd);
  unlink(path);
  return 0;
}
