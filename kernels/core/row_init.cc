#include "kernels/core/row_init.h"

#include <cmath>

namespace sok_lite {
namespace {

inline uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) from (seed, id, column, draw): a counter-based generator.
inline double Uniform(uint64_t seed, int64_t id, int64_t col, uint64_t draw) {
  const uint64_t h =
      Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(id)) ^ (col * 0x100000001b3ULL) ^ (draw << 40));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller from two uniforms of the same cell.
inline double Normal(uint64_t seed, int64_t id, int64_t col, uint64_t draw) {
  const double u1 = Uniform(seed, id, col, 2 * draw), u2 = Uniform(seed, id, col, 2 * draw + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

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
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t id = ids[i];
    for (int64_t d = 0; d < dim; ++d) {
      double v = init.a;
      switch (init.kind) {
        case InitKind::kNormal:
          v = init.a + init.b * Normal(init.seed, id, d, 0);
          break;
        case InitKind::kTruncatedNormal: {
          // Redraw beyond two standard deviations, as Keras' TruncatedNormal does.
          double z = Normal(init.seed, id, d, 0);
          for (uint64_t draw = 1; std::fabs(z) > 2.0; ++draw) z = Normal(init.seed, id, d, draw);
          v = init.a + init.b * z;
          break;
        }
        case InitKind::kUniform:
          v = init.a + (init.b - init.a) * Uniform(init.seed, id, d, 0);
          break;
        case InitKind::kConstant:
          break;
      }
      out[i * dim + d] = static_cast<T>(v);
    }
  }
}

template void InitRows<float>(const RowInit&, const int64_t*, int64_t, int64_t, int64_t, float*);
template void InitRows<double>(const RowInit&, const int64_t*, int64_t, int64_t, int64_t, double*);

}  // namespace sok_lite
