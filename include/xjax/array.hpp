// array.hpp: xj::Array, the one user-facing value type, and array creation.
//
// An Array is an immutable, cheaply copyable handle. Outside any transform it is concrete (it owns
// a reference to a buffer); inside a traced function it is a tracer standing for a value of the
// jaxpr being built. User code is written once on Array and works in both cases.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <source_location>
#include <span>
#include <type_traits>
#include <vector>

#include "xjax/dtype.hpp"
#include "xjax/errors.hpp"

namespace xjax {

namespace detail {
struct ArrayImpl;
}

class Array;

namespace detail {
/// A value with the source location of the expression that passed it, for operators and for
/// functions whose trailing parameter pack leaves no room for a defaulted std::source_location:
/// the implicit conversion at the call site records the caller's line. Never named by users.
template <class T> struct Located {
  T value;
  std::source_location loc;
  Located(const T& v, std::source_location l = std::source_location::current()) : value(v), loc(l) {}  // NOLINT
  /// From anything that converts to T (e.g. std::reference_wrapper<const Array>): the conversion
  /// happens inside, so the call still needs only one user-defined conversion.
  template <class U>
    requires(!std::is_same_v<std::remove_cvref_t<U>, T> && std::is_convertible_v<const U&, T>)
  Located(const U& v, std::source_location l = std::source_location::current())  // NOLINT
      : value(static_cast<T>(v)), loc(l) {}
};
}  // namespace detail

class Array {
 public:
  /// An empty handle (no value). Most operations reject it.
  Array() = default;
  explicit Array(std::shared_ptr<const detail::ArrayImpl> impl) : impl_(std::move(impl)) {}

  const ShapedArray& aval() const;
  const Shape& shape() const { return aval().shape; }
  DType dtype() const { return aval().dtype; }
  std::int64_t ndim() const { return aval().ndim(); }
  std::int64_t size() const { return aval().size(); }
  std::int64_t dim(std::int64_t axis) const;  // negative axes count from the end

  bool valid() const { return impl_ != nullptr; }
  bool is_concrete() const;
  bool is_tracer() const;

  /// The single element of a size-1 concrete array, converted to T.
  template <class T> T item() const;
  /// All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  /// Read-only pointer to the elements (concrete arrays only; TracerError otherwise).
  const void* raw_data() const;
  template <class T> const T* data() const { return static_cast<const T*>(typed_data(dtype_of_v<T>)); }

  const std::shared_ptr<const detail::ArrayImpl>& impl() const { return impl_; }

  /// x[i]: index the leading axis (negative i counts from the end).
  Array operator[](detail::Located<std::int64_t> i) const;
  /// x[i] with an integer Array: rank 0 (a traced index) a dynamic_slice, higher ranks gather
  /// rows as jnp's x[idx] (at(x, idx).get(): negative indices from the end, the rest clamped).
  Array operator[](detail::Located<Array> i) const;

 private:
  const void* typed_data(DType expected) const;
  double element_as_double(std::int64_t i) const;
  std::int64_t element_as_int(std::int64_t i) const;
  std::shared_ptr<const detail::ArrayImpl> impl_;
};

template <class T> T Array::item() const {
  if (size() != 1) throw ShapeError("item() needs an array of size 1, got " + aval().str());
  return to_vector<T>()[0];
}

namespace detail {
/// v as T, as astype converts (XLA's rule) where a C++ cast would be undefined: to an integer,
/// truncated toward zero, saturated at T's range, NaN to 0.
template <class T> T converted_from_double(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v != v) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}
}  // namespace detail

template <class T> std::vector<T> Array::to_vector() const {
  (void)raw_data();  // throws for tracers
  std::vector<T> out(static_cast<std::size_t>(size()));
  for (std::int64_t i = 0; i < size(); ++i) {
    if (is_floating(dtype()))
      out[static_cast<std::size_t>(i)] = detail::converted_from_double<T>(element_as_double(i));
    else if (dtype() == DType::u64)  // values above INT64_MAX: element_as_int keeps their bits
      out[static_cast<std::size_t>(i)] = static_cast<T>(static_cast<std::uint64_t>(element_as_int(i)));
    else
      out[static_cast<std::size_t>(i)] = static_cast<T>(element_as_int(i));
  }
  return out;
}

// ---- creation ---------------------------------------------------------------------------------

namespace detail {
/// A fresh concrete array whose buffer is not yet written (kernels fill it).
Array alloc_array(const ShapedArray& aval);
/// Writable pointer into a freshly allocated array (only before it is shared).
void* mutable_data(const Array& a);
Array array_from_bytes(const void* data, const ShapedArray& aval);
}  // namespace detail

/// An array of `shape` holding `values` (row-major); T's dtype (bool: bool_).
template <class T> Array array(const std::vector<T>& values, Shape shape) {
  ShapedArray aval{std::move(shape), dtype_of_v<T>};
  if (static_cast<std::size_t>(aval.size()) != values.size())
    throw ShapeError("xj::array: " + std::to_string(values.size()) + " values do not fill shape " +
                     shape_str(aval.shape));
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs its bits: one byte each here
    const std::vector<std::uint8_t> bytes(values.begin(), values.end());
    return detail::array_from_bytes(bytes.data(), aval);
  } else {
    return detail::array_from_bytes(values.data(), aval);
  }
}
/// A rank-1 array: `xj::array({1.f, 2.f})`.
template <class T> Array array(std::initializer_list<T> values) {
  std::vector<T> v(values);
  return array<T>(v, Shape{static_cast<std::int64_t>(v.size())});
}
/// A rank-0 array holding v converted to dtype. A floating-point v converts to an integer dtype as
/// astype does (truncated, saturated, NaN to 0: JAX's convert_element_type of a float); a C++
/// integer exactly, wrapping to an integer dtype's width as numpy's astype of a Python int
/// (jnp.full(2, -1, jnp.uint32) holds 2^32 - 1).
Array scalar(double v, DType dtype = f32);
Array full(const Shape& shape, double value, DType dtype = f32);
namespace detail {
Array full_of_integer(const Shape& shape, std::int64_t value, DType dtype);
Array full_of_integer(const Shape& shape, std::uint64_t value, DType dtype);
}  // namespace detail
template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
Array full(const Shape& shape, T value, DType dtype = f32) {
  if constexpr (std::is_signed_v<T>) return detail::full_of_integer(shape, static_cast<std::int64_t>(value), dtype);
  else return detail::full_of_integer(shape, static_cast<std::uint64_t>(value), dtype);
}
template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
Array scalar(T v, DType dtype = f32) {
  return full(Shape{}, v, dtype);
}
Array zeros(const Shape& shape, DType dtype = f32);
Array ones(const Shape& shape, DType dtype = f32);
Array arange(std::int64_t n, DType dtype = i32);
Array eye(std::int64_t n, DType dtype = f32);
Array zeros_like(const Array& x);
Array ones_like(const Array& x);

}  // namespace xjax
