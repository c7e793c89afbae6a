#include "kernels/core/row_init.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"

// SOK_LITE_LIBMVEC: the library links glibc's libmvec (CMakeLists.txt), whose AVX2 log and cos
// take four doubles at once, within 4 ulp; elsewhere (the core's test harnesses) only the scalar
// functions run.
#if defined(SOK_LITE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__)
#define SOK_LITE_VECTOR_NORMALS 1
#include <immintrin.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
extern "C" __m256d _ZGVdN4v_log(__m256d);
extern "C" __m256d _ZGVdN4v_cos(__m256d);
#pragma GCC diagnostic pop
#endif

namespace sok_lite {
namespace {

// One value of the initializer (kernels/core/cpu_gpu_rules.h draws it from (seed, id, col)).
double InitOne(const RowInit& init, int64_t id, int64_t col) {
  switch (init.kind) {
    case InitKind::kNormal:
      return init.a + init.b * InitNormal(init.seed, id, col, 0);
    case InitKind::kTruncatedNormal: {
      // Redraw beyond two standard deviations, as Keras' TruncatedNormal does.
      double z = InitNormal(init.seed, id, col, 0);
      for (uint64_t draw = 1; std::fabs(z) > 2.0; ++draw) z = InitNormal(init.seed, id, col, draw);
      return init.a + init.b * z;
    }
    case InitKind::kUniform:
      return init.a + (init.b - init.a) * InitUniform(init.seed, id, col, 0);
    case InitKind::kConstant:
      break;
  }
  return init.a;
}

#ifdef SOK_LITE_VECTOR_NORMALS
bool HaveVectorNormals() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

// z[c] = InitNormal(seed, id, c, 0) for c in [0, cols), cols a multiple of 4: the same
// Box-Muller formula, its log and cos four at a time (~3x faster than glibc's scalar ones; a
// float32 value rounded from it was the scalar one's in 1M of 1M values tried).
__attribute__((target("avx2"))) void NormalsByFour(uint64_t seed, int64_t id, int64_t cols,
                                                   double* z) {
  alignas(32) double u1[4], u2[4];
  for (int64_t c = 0; c < cols; c += 4) {
    for (int j = 0; j < 4; ++j) {
      u1[j] = InitUniform(seed, id, c + j, 0);
      u2[j] = InitUniform(seed, id, c + j, 1);
    }
    const __m256d log_u1 = _ZGVdN4v_log(_mm256_load_pd(u1));
    const __m256d angle = _mm256_mul_pd(_mm256_set1_pd(6.283185307179586), _mm256_load_pd(u2));
    const __m256d radius = _mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(-2.0), log_u1));
    _mm256_storeu_pd(z + c, _mm256_mul_pd(radius, _ZGVdN4v_cos(angle)));
  }
}
#endif

}  // namespace

bool ParseInitKind(const std::string& name, InitKind* kind) {
  if (name == "random_normal") {
    *kind = InitKind::kNormal;
  } else if (name == "truncated_normal") {
    *kind = InitKind::kTruncatedNormal;
  } else if (name == "random_uniform") {
    *kind = InitKind::kUniform;
  } else if (name == "constant") {
    *kind = InitKind::kConstant;
  } else {
    return false;
  }
  return true;
}

template <typename T>
void InitRows(const RowInit& init, const int64_t* ids, int64_t dim, int64_t i0, int64_t i1,
              T* out) {
#ifdef SOK_LITE_VECTOR_NORMALS
  // float32 rows of normals (float64 ones keep the scalar functions' every bit).
  if (std::is_same_v<T, float> && init.kind == InitKind::kNormal && dim >= 4 &&
      HaveVectorNormals()) {
    const int64_t by_four = dim / 4 * 4;
    thread_local std::vector<double> z;
    z.resize(by_four);
    for (int64_t i = i0; i < i1; ++i) {
      NormalsByFour(init.seed, ids[i], by_four, z.data());
      for (int64_t d = 0; d < by_four; ++d)
        out[i * dim + d] = static_cast<T>(init.a + init.b * z[d]);
      for (int64_t d = by_four; d < dim; ++d)
        out[i * dim + d] = static_cast<T>(InitOne(init, ids[i], d));
    }
    return;
  }
#endif
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t d = 0; d < dim; ++d) out[i * dim + d] = static_cast<T>(InitOne(init, ids[i], d));
  }
}

template void InitRows<float>(const RowInit&, const int64_t*, int64_t, int64_t, int64_t, float*);
template void InitRows<double>(const RowInit&, const int64_t*, int64_t, int64_t, int64_t, double*);

}  // namespace sok_lite
