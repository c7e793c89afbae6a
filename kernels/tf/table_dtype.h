// Tables stored in 16 bits (bfloat16, float16) are read and updated through float32 rows: a
// kernel whose rows are float32 finds the storage type of each table from its variable and
// instantiates its functor for that type. The conversions themselves are in
// kernels/core/half_rows.h.
#ifndef SOK_LITE_KERNELS_TF_TABLE_DTYPE_H_
#define SOK_LITE_KERNELS_TF_TABLE_DTYPE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/core/half_rows.h"
#include "kernels/tf/device.h"
#include "tensorflow/core/framework/numeric_types.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"

namespace sok_lite {

// The core format of a 16-bit storage type; its values are handled as uint16_t bit patterns.
template <typename Stored>
struct HalfStorage;
template <>
struct HalfStorage<Eigen::bfloat16> {
  static constexpr HalfFormat kFormat = HalfFormat::kBfloat16;
};
template <>
struct HalfStorage<Eigen::half> {
  static constexpr HalfFormat kFormat = HalfFormat::kFloat16;
};

template <typename Stored>
const uint16_t* HalfBits(const Stored* p) {
  static_assert(sizeof(Stored) == sizeof(uint16_t), "a 16-bit storage type");
  return reinterpret_cast<const uint16_t*>(p);
}
template <typename Stored>
uint16_t* HalfBits(Stored* p) {
  static_assert(sizeof(Stored) == sizeof(uint16_t), "a 16-bit storage type");
  return reinterpret_cast<uint16_t*>(p);
}

template <typename S>
struct TypeTag {
  using type = S;
};

// Calls fn(TypeTag<Stored>{}) for a table of `dtype` that a kernel with rows of T reads: Stored
// is T for a table of T, or Eigen::bfloat16 / Eigen::half for a 16-bit table when T is float.
// Any other dtype is an error naming `label`. Device: the kernel's (both have 16-bit functors).
template <typename Device, typename T, typename Fn>
absl::Status ForTableType(tensorflow::DataType dtype, const std::string& label, Fn&& fn) {
  if (dtype == tensorflow::DataTypeToEnum<T>::v()) return fn(TypeTag<T>{});
  if constexpr (std::is_same_v<T, float>) {
    if (dtype == tensorflow::DT_BFLOAT16) return fn(TypeTag<Eigen::bfloat16>{});
    if (dtype == tensorflow::DT_HALF) return fn(TypeTag<Eigen::half>{});
  }
  return tensorflow::errors::InvalidArgument(
      label, ": variable dtype ", tensorflow::DataTypeString(dtype), " does not match the ",
      tensorflow::DataTypeString(tensorflow::DataTypeToEnum<T>::v()), " rows of the op");
}

// dst[0, dim) = the row at src as T: a copy, or a 16-bit row widened (CPU).
template <typename Stored, typename T>
inline void ReadRow(const Stored* src, int64_t dim, T* dst) {
  if constexpr (std::is_same_v<Stored, T>) {
    std::copy(src, src + dim, dst);
  } else {
    static_assert(std::is_same_v<T, float>, "16-bit rows are read as float32");
    WidenRow(HalfStorage<Stored>::kFormat, HalfBits(src), dim, dst);
  }
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_TABLE_DTYPE_H_
