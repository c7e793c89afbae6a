// An optional trace of the hash tables' locks: with SOK_LITE_LOCK_TRACE=1 in the environment,
// each op that takes a table's lock (lookup, update, the prefetch's plan and placing) and the
// prefetch's read (which runs without it) writes one line to stderr when it is done:
//
//   sok_lite lock: <table> <what> <thread> <asked_us> <held_us> <done_us>
//
// (the table: its resource's address, the same for every op on it; steady-clock microseconds:
// when it asked for the lock, got it and let it go). In a pipeline of ops beside each other,
// the lines lay out which op waits for which; benchmarks/lock_trace.py sums them. Off, a trace
// costs one test of a cached flag.
#ifndef SOK_LITE_KERNELS_TF_LOCK_TRACE_H_
#define SOK_LITE_KERNELS_TF_LOCK_TRACE_H_

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sok_lite {

class LockTrace {
 public:
  // Starts the wait for the lock of `table` (its resource); `what` names the holder and must
  // outlive the trace (a literal).
  LockTrace(const void* table, const char* what)
      : table_(table), what_(what), asked_(Enabled() ? Now() : 0) {}
  LockTrace(const LockTrace&) = delete;
  LockTrace& operator=(const LockTrace&) = delete;
  // The lock is taken. A trace never told so counts as held from its start.
  void Held() {
    if (Enabled()) held_ = Now();
  }
  // Declared before the lock it traces, it ends after the lock's release.
  ~LockTrace() {
    if (!Enabled()) return;
    const long long done = Now();
    std::fprintf(stderr, "sok_lite lock: %p %s %ld %lld %lld %lld\n", table_, what_,
                 static_cast<long>(syscall(SYS_gettid)), asked_, held_ ? held_ : asked_, done);
  }

 private:
  static bool Enabled() {
    static const bool on = [] {
      const char* v = std::getenv("SOK_LITE_LOCK_TRACE");
      return v != nullptr && std::strcmp(v, "1") == 0;
    }();
    return on;
  }
  static long long Now() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  const void* table_;
  const char* what_;
  long long asked_, held_ = 0;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_LOCK_TRACE_H_
