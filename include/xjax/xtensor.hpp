// xtensor.hpp: moving data between xtensor and xjax (header-only; the only public xjax header
// that includes xtensor, so only code that includes it needs xtensor's headers).
//
//   xt -> xj   from_xtensor(expr)             copy of any xtensor expression (views, lazy a + 2 * b)
//              adapt(const xarray / xtensor &) no copy when row-major: the Array borrows the buffer
//              adapt(xarray / xtensor &&)      no copy when row-major: the Array owns the container
//   xj -> xt   as_xtensor<T>(a)               read-only xtensor view of a concrete array, no copy
//              to_xarray<T>(a)                an xt::xarray<T> copy
//
// dtypes: f32 <-> float, f64 <-> double, i32 <-> std::int32_t, i64 <-> std::int64_t,
// u32 <-> std::uint32_t, bool_ <-> bool (both one byte holding 0 or 1). Other value types do not
// compile; convert first (xt::cast<float>(e)).
//
// All of these work on concrete arrays: use them at the edges of transformed functions (prepare
// inputs, read results). Inside a traced function as_xtensor / to_xarray throw TracerError, and
// from_xtensor / adapt give concrete arrays (captured by the trace as constants).
//
// Compile every translation unit that includes this header with XTENSOR_USE_XSIMD, as xjax's
// pkg-config / CMake flags do: it selects xtensor's allocator type, so mixing flags breaks the ODR.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// GCC 12 reports -Warray-bounds false positives inside xtensor's small-vector storage
// (xstorage.hpp, reached from xt::argmax(e, axis) and others) even though the code is in a system
// header: silenced for xtensor's headers only, so code with -Werror can use xtensor's functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "xjax/array.hpp"
#include "xjax/detail/external.hpp"

namespace xjax {

namespace detail {

template <class T> struct xtensor_dtype {
  static_assert(sizeof(T) == 0,
                "xjax: no dtype for this xtensor value type; supported are float, double, "
                "std::int32_t, std::int64_t, std::uint32_t and bool (convert with xt::cast<T>)");
};
template <> struct xtensor_dtype<float> { static constexpr DType value = f32; };
template <> struct xtensor_dtype<double> { static constexpr DType value = f64; };
template <> struct xtensor_dtype<std::int32_t> { static constexpr DType value = i32; };
template <> struct xtensor_dtype<std::int64_t> { static constexpr DType value = i64; };
template <> struct xtensor_dtype<std::uint32_t> { static constexpr DType value = u32; };
template <> struct xtensor_dtype<bool> { static constexpr DType value = bool_; };
static_assert(sizeof(bool) == 1, "xjax stores bool_ as one byte; this platform's bool differs");

/// The xjax dtype of an xtensor value type (a compile error for unsupported types).
template <class T> inline constexpr DType xtensor_dtype_v = xtensor_dtype<std::remove_cv_t<T>>::value;

template <class S> Shape to_xjax_shape(const S& shape) {
  Shape out;
  out.reserve(shape.size());
  for (auto d : shape) out.push_back(static_cast<std::int64_t>(d));
  return out;
}

inline std::vector<std::size_t> to_xt_shape(const Shape& shape) {
  return std::vector<std::size_t>(shape.begin(), shape.end());
}

/// Checks that `a` is concrete with dtype xtensor_dtype_v<T>; `fn` names the caller in errors.
template <class T> const T* checked_data(const Array& a, const char* fn) {
  if (!a.valid()) throw Error(std::string(fn) + ": empty xj::Array (default-constructed, no value)");
  if (a.dtype() != xtensor_dtype_v<T>)
    throw TypeError(std::string(fn) + ": T has dtype " + dtype_name(xtensor_dtype_v<T>) +
                    " but the array is " + a.aval().str() + "; pass the matching T or convert with " +
                    "xj::astype(a, " + dtype_name(xtensor_dtype_v<T>) + ") first");
  try {
    return a.data<T>();
  } catch (const TracerError& e) {
    throw TracerError(std::string(fn) + " needs a concrete array: " + e.what());
  }
}

/// What keeps concrete array a's elements alive: its buffer itself (not the array's handle, which
/// donating the array empties while the buffer goes on to the call's outputs).
std::shared_ptr<const void> buffer_keeper(const Array& a);

/// True when the container's elements are contiguous in row-major order (always so for the
/// default xt::xarray<T> and xt::xtensor<T, N>; not for column-major ones).
template <class C> bool is_row_major_contiguous(const C& c) {
  if (c.size() <= 1) return true;
  if (c.layout() == xt::layout_type::row_major) return true;
  // Dynamic-layout containers may be column-major, yet row-major when at most one dim exceeds 1.
  std::size_t big = 0;
  for (auto d : c.shape()) big += d > 1 ? 1 : 0;
  return big <= 1;
}

}  // namespace detail

/// A concrete array holding a copy of any xtensor expression's elements in row-major order:
/// containers, views (xt::view, strided, transposed), broadcasts and lazy expressions such as
/// `a + 2 * b` (evaluated straight into the array's buffer). The dtype comes from the expression's
/// value type (see the table at the top); a rank-0 expression gives a rank-0 array.
template <class E> Array from_xtensor(const xt::xexpression<E>& expr) {
  const E& e = expr.derived_cast();
  using T = std::decay_t<typename E::value_type>;
  const ShapedArray aval{detail::to_xjax_shape(e.shape()), detail::xtensor_dtype_v<T>};
  Array out = detail::alloc_array(aval);
  if (aval.size() == 0) return out;
  auto target = xt::adapt(static_cast<T*>(detail::mutable_data(out)), static_cast<std::size_t>(aval.size()),
                          xt::no_ownership(), detail::to_xt_shape(aval.shape));
  xt::noalias(target) = e;
  return out;
}

/// An array sharing `c`'s buffer, no copy, when `c` is row-major (the default xt::xarray<T> and
/// xt::xtensor<T, N> always are): `a.raw_data() == c.data()`. A column-major container is copied
/// into row-major order instead (same values, no aliasing).
/// The array borrows: `c` must outlive every use of the array (including jitted functions and
/// trace caches that captured it) and must not be modified or resized meanwhile, since xjax
/// arrays are immutable. Prefer `adapt(std::move(c))`, which makes the array own the container.
/// The shared memory is the caller's: memory_stats() does not count it.
template <class EC, xt::layout_type L, class SC, class Tag>
Array adapt(const xt::xarray_container<EC, L, SC, Tag>& c) {
  using T = typename xt::xarray_container<EC, L, SC, Tag>::value_type;
  if (!detail::is_row_major_contiguous(c)) return from_xtensor(c);
  return detail::external_array(c.data(), {detail::to_xjax_shape(c.shape()), detail::xtensor_dtype_v<T>}, nullptr);
}
template <class EC, std::size_t N, xt::layout_type L, class Tag>
Array adapt(const xt::xtensor_container<EC, N, L, Tag>& c) {
  using T = typename xt::xtensor_container<EC, N, L, Tag>::value_type;
  if (!detail::is_row_major_contiguous(c)) return from_xtensor(c);
  return detail::external_array(c.data(), {detail::to_xjax_shape(c.shape()), detail::xtensor_dtype_v<T>}, nullptr);
}

namespace detail {
/// adapt's owning form for any row-major container type C (copied when not row-major).
template <class C> Array adopt_container(C&& c) {
  if (!is_row_major_contiguous(c)) return from_xtensor(c);
  auto owned = std::make_shared<const C>(std::move(c));
  return external_array(owned->data(), {to_xjax_shape(owned->shape()), xtensor_dtype_v<typename C::value_type>},
                        owned);
}
}  // namespace detail

/// The recommended form: the array takes ownership of the container (moved, so its buffer and
/// data pointer are kept: no copy when row-major) and frees it when the last array using the
/// buffer is gone. Nothing else can modify it, so there is no aliasing to worry about.
template <class EC, xt::layout_type L, class SC, class Tag>
Array adapt(xt::xarray_container<EC, L, SC, Tag>&& c) {
  return detail::adopt_container(std::move(c));
}
template <class EC, std::size_t N, xt::layout_type L, class Tag>
Array adapt(xt::xtensor_container<EC, N, L, Tag>&& c) {
  return detail::adopt_container(std::move(c));
}

/// A read-only, row-major xtensor view of concrete array `a`'s elements, no copy:
/// `as_xtensor<float>(a).data() == a.raw_data()`. Usable in any xtensor expression (xt::mean,
/// xt::argmax, views, ...). The view holds a reference to the array's buffer, so it stays valid
/// after `a` is gone, and after `a` is donated to a jit call (the call then writes elsewhere). T must be the C++ type of a's dtype (TypeError otherwise); a tracer throws
/// TracerError (use it on results, outside transformed functions).
template <class T> auto as_xtensor(const Array& a) {
  const T* data = detail::checked_data<T>(a, "xj::as_xtensor");
  return xt::adapt_smart_ptr(data, detail::to_xt_shape(a.shape()), detail::buffer_keeper(a));
}

/// An xt::xarray<T> copy of concrete array `a` (row-major). T must be the C++ type of a's dtype
/// (TypeError otherwise); a tracer throws TracerError.
template <class T> xt::xarray<T> to_xarray(const Array& a) {
  const T* data = detail::checked_data<T>(a, "xj::to_xarray");
  const auto shape = detail::to_xt_shape(a.shape());
  xt::xarray<T> out = xt::xarray<T>::from_shape(shape);
  std::copy(data, data + a.size(), out.data());
  return out;
}

}  // namespace xjax
