// array.cpp: Array accessors and the creation functions (always concrete).
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>

#include "internal.hpp"
#include "small_blocks.hpp"
#include "xjax/detail/external.hpp"

namespace xjax {
namespace {

const detail::ArrayImpl& impl_of(const Array& a) {
  if (!a.valid()) throw Error("use of an empty xj::Array (default-constructed, no value)");
  return *a.impl();
}

// Calls f(T{}) with T the C++ element type of d (std::uint8_t for bool).
template <class F> decltype(auto) visit_element_type(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u32: return f(std::uint32_t{});
    case DType::bool_: return f(std::uint8_t{});
    case DType::bf16: return f(bfloat16_t{});
    case DType::f16: return f(float16_t{});
    case DType::i8: return f(std::int8_t{});
    case DType::u8: return f(std::uint8_t{});
    case DType::i16: return f(std::int16_t{});
    case DType::u16: return f(std::uint16_t{});
    case DType::u64: return f(std::uint64_t{});
  }
  throw Error("invalid dtype");
}

// v as an element of type T: floats rounded; integers as astype converts (truncated toward zero,
// saturated at T's range, NaN to 0: JAX's convert_element_type of a float fill value). C++
// numbers are doubles here, exact up to 2^53; INT64_MAX rounds to 2^63 and saturates back.
template <class T> T element_of(double v) {
  if constexpr (std::is_class_v<T> || std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    return detail::converted_from_double<T>(v);
  }
}

// A C++ integer as an element of type T, exactly: to an integer type modular (C++20's conversion,
// numpy's astype of a Python int: jnp.full(2, -1, uint32) holds 2^32 - 1), to a float rounded,
// to bool v != 0.
template <class T, class V> T element_of_integer(V v, DType d) {
  if (d == DType::bool_) return static_cast<T>(v != 0);
  if constexpr (std::is_class_v<T>) return static_cast<T>(static_cast<double>(v));
  else return static_cast<T>(v);
}

template <class V> void fill_integer(void* dst, DType d, std::int64_t n, V v) {
  visit_element_type(d, [&]<class T>(T) {
    T* p = static_cast<T*>(dst);
    const T e = element_of_integer<T>(v, d);
    for (std::int64_t i = 0; i < n; ++i) p[i] = e;
  });
}

void fill(void* dst, DType d, std::int64_t n, double v) {
  if (d == DType::bool_) v = v != 0.0 ? 1.0 : 0.0;
  visit_element_type(d, [&]<class T>(T) {
    T* p = static_cast<T*>(dst);
    const T e = element_of<T>(v);
    for (std::int64_t i = 0; i < n; ++i) p[i] = e;
  });
}

}  // namespace

const ShapedArray& Array::aval() const { return impl_of(*this).aval; }

std::int64_t Array::dim(std::int64_t axis) const {
  std::int64_t n = ndim();
  if (axis < -n || axis >= n)
    throw ShapeError("axis " + std::to_string(axis) + " out of range for " + aval().str());
  return shape()[static_cast<std::size_t>(axis < 0 ? axis + n : axis)];
}

bool Array::is_concrete() const { return valid() && impl_->buffer != nullptr; }
bool Array::is_tracer() const { return valid() && impl_->tracer != nullptr; }

const void* Array::raw_data() const {
  const auto& im = impl_of(*this);
  detail::check_not_donated(*this, "read");
  if (im.tracer && !detail::tracer_in_active_trace(*im.tracer)) detail::tracer_escaped(*this);
  if (im.tracer)
    throw TracerError("a concrete value was required of a traced " + im.aval.str() +
                      " (created at " + format_location(im.tracer->created_at) +
                      "); inside a transform, values are abstract: use xj::cond / xj::where "
                      "instead of C++ branching on array values");
  return im.buffer ? static_cast<char*>(im.buffer->data) + im.offset : nullptr;
}

const void* Array::typed_data(DType expected) const {
  if (dtype() != expected)
    throw TypeError(std::string("data<T>() with T of dtype ") + dtype_name(expected) +
                    " on an array of " + aval().str());
  return raw_data();
}

double Array::element_as_double(std::int64_t i) const {
  const void* p = raw_data();
  return visit_element_type(dtype(), [&]<class T>(T) { return static_cast<double>(static_cast<const T*>(p)[i]); });
}

std::int64_t Array::element_as_int(std::int64_t i) const {
  const void* p = raw_data();
  return visit_element_type(dtype(), [&]<class T>(T) {
    if constexpr (std::is_class_v<T>)  // bfloat16_t, float16_t
      return static_cast<std::int64_t>(static_cast<float>(static_cast<const T*>(p)[i]));
    else
      return static_cast<std::int64_t>(static_cast<const T*>(p)[i]);
  });
}

namespace detail {

Array alloc_array(const ShapedArray& aval) {
  // 2^60 elements of at most 8 bytes: nbytes() (a size_t product) cannot wrap below it.
  if (aval.size() > (std::int64_t{1} << 60))
    throw Error("cannot allocate " + aval.str() + ": " + std::to_string(aval.size()) + " elements exceed any memory");
  // Both from the per-thread small-block cache: a plan makes one per step output.
  auto impl = std::allocate_shared<ArrayImpl>(SmallBlockAllocator<ArrayImpl>{});
  impl->aval = aval;
  impl->buffer = std::allocate_shared<Buffer>(SmallBlockAllocator<Buffer>{}, aval.nbytes());
  return Array(std::move(impl));
}

Array weakly_typed(const Array& x) { return with_weak_type(x, true); }

Array with_weak_type(const Array& x, bool weak) {
  if (!x.valid() || is_weak(x) == weak) return x;
  auto impl = std::make_shared<ArrayImpl>(*x.impl());
  impl->weak = weak;
  return Array(std::move(impl));
}

void check_not_donated(const Array& x, const char* use) {
  if (x.valid() && x.impl()->donated)
    throw Error("an xj::Array " + x.aval().str() + " was " + use + " after it was donated to a jit call (" +
                *x.impl()->donated + "): its buffer went to that call, so it has no value now; use the "
                "call's outputs, or leave the argument out of donate_argnums");
}

Array take_donated(const Array& x, const std::string& what) {
  check_not_donated(x, "donated again");
  if (!x.is_concrete()) return x;
  auto taken = std::make_shared<ArrayImpl>(*x.impl());
  const ArrayImpl& given = *x.impl();
  given.donated = std::make_shared<const std::string>(what);
  given.buffer.reset();
  return Array(std::move(taken));
}

std::shared_ptr<const void> buffer_keeper(const Array& a) { return a.impl()->buffer; }

Array fresh_handle(const Array& x) {
  if (!x.is_concrete()) return x;
  return Array(std::make_shared<ArrayImpl>(*x.impl()));
}

void* mutable_data(const Array& a) { return static_cast<char*>(a.impl()->buffer->data) + a.impl()->offset; }

Array buffer_view(const Array& x, std::size_t byte_offset, const ShapedArray& aval) {
  (void)x.raw_data();  // rejects tracers
  const ArrayImpl& im = *x.impl();
  if (im.offset + byte_offset + aval.nbytes() > im.buffer->nbytes)
    throw Error("buffer_view: " + aval.str() + " at byte " + std::to_string(byte_offset) +
                " does not fit in " + im.aval.str());
  return Array(std::allocate_shared<const ArrayImpl>(SmallBlockAllocator<ArrayImpl>{},
                                                     ArrayImpl{aval, im.buffer, nullptr, im.offset + byte_offset, false, nullptr}));
}

Array external_array(const void* data, const ShapedArray& aval, std::shared_ptr<const void> keep_alive) {
  for (auto d : aval.shape)
    if (d < 0) throw ShapeError("external_array: negative dimension in shape " + shape_str(aval.shape));
  if (!data && aval.nbytes())
    throw Error("external_array: null data for " + aval.str());
  if (reinterpret_cast<std::uintptr_t>(data) % itemsize(aval.dtype) != 0)
    throw Error("external_array: data at " + std::to_string(reinterpret_cast<std::uintptr_t>(data)) +
                " is not aligned for " + dtype_name(aval.dtype) + " elements");
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = aval;
  impl->buffer = std::make_shared<Buffer>(data, aval.nbytes(), std::move(keep_alive));
  return Array(std::move(impl));
}

Array array_from_bytes(const void* data, const ShapedArray& aval) {
  for (auto d : aval.shape)  // (-2) x (-3) = 6 values were accepted as f32[-2,-3]
    if (d < 0) throw ShapeError("xj::array: negative dimension in shape " + shape_str(aval.shape));
  Array out = alloc_array(aval);
  if (aval.nbytes()) std::memcpy(mutable_data(out), data, aval.nbytes());
  return out;
}

}  // namespace detail

namespace {
Array uninitialized_full(const Shape& shape, DType dtype) {
  for (auto d : shape)
    if (d < 0) throw ShapeError("xj::full: negative dimension in shape " + shape_str(shape));
  return detail::alloc_array({shape, dtype});
}
}  // namespace

Array full(const Shape& shape, double value, DType dtype) {
  Array out = uninitialized_full(shape, dtype);
  fill(detail::mutable_data(out), dtype, out.size(), value);
  return out;
}

namespace {
template <class V> Array full_of(const Shape& shape, V value, DType dtype) {
  Array out = uninitialized_full(shape, dtype);
  fill_integer(detail::mutable_data(out), dtype, out.size(), value);
  return out;
}
}  // namespace

namespace detail {
Array full_of_integer(const Shape& shape, std::int64_t value, DType dtype) { return full_of(shape, value, dtype); }
Array full_of_integer(const Shape& shape, std::uint64_t value, DType dtype) { return full_of(shape, value, dtype); }
}  // namespace detail

Array scalar(double v, DType dtype) { return full({}, v, dtype); }
Array zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Array ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
namespace {
// A fill of x's shape and dtype, weak when x is (jnp.zeros_like: full_like with dtype None keeps
// the weak type).
Array fill_like(const Array& x, double value) {
  const Array out = full(x.shape(), value, x.dtype());
  return detail::is_weak(x) ? detail::weakly_typed(out) : out;
}
}  // namespace
Array zeros_like(const Array& x) { return fill_like(x, 0.0); }
Array ones_like(const Array& x) { return fill_like(x, 1.0); }

Array arange(std::int64_t n, DType dtype) {
  n = std::max<std::int64_t>(n, 0);  // jnp.arange(-2): empty, as numpy's
  Array out = detail::alloc_array({{n}, dtype});
  void* p = detail::mutable_data(out);
  for (std::int64_t i = 0; i < n; ++i)
    fill_integer(static_cast<char*>(p) + i * static_cast<std::int64_t>(itemsize(dtype)), dtype, 1, i);  // wraps, as iota
  return out;
}

Array eye(std::int64_t n, DType dtype) {
  if (n < 0) throw ShapeError("xj::eye: negative size " + std::to_string(n));
  Array out = zeros({n, n}, dtype);
  char* p = static_cast<char*>(detail::mutable_data(out));
  auto sz = static_cast<std::int64_t>(itemsize(dtype));
  for (std::int64_t i = 0; i < n; ++i) fill(p + (i * n + i) * sz, dtype, 1, 1.0);
  return out;
}

}  // namespace xjax
