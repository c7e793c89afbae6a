// Timing helpers of the native benchmarks under benchmarks/native.
#ifndef SOK_LITE_BENCHMARKS_NATIVE_BENCH_TIMING_H_
#define SOK_LITE_BENCHMARKS_NATIVE_BENCH_TIMING_H_

#include <algorithm>
#include <chrono>
#include <vector>

// Milliseconds from a to b.
inline double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The median of v (the upper one of an even count).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#endif  // SOK_LITE_BENCHMARKS_NATIVE_BENCH_TIMING_H_
