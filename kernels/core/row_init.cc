#include "kernels/core/row_init.h"

#include <cmath>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

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
          v = init.a + init.b * InitNormal(init.seed, id, d, 0);
          break;
        case InitKind::kTruncatedNormal: {
          // Redraw beyond two standard deviations, as Keras' TruncatedNormal does.
          double z = InitNormal(init.seed, id, d, 0);
          for (uint64_t draw = 1; std::fabs(z) > 2.0; ++draw)
            z = InitNormal(init.seed, id, d, draw);
          v = init.a + init.b * z;
          break;
        }
        case InitKind::kUniform:
          v = init.a + (init.b - init.a) * InitUniform(init.seed, id, d, 0);
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
