// cumulative.cpp: kernels of cumsum, cumprod, cummax, cummin and cumlogsumexp: one pass along the
// axis, y[k] = combine(y[k - 1], x[k]) (from the end when reversed), O(n) per line. The input is
// viewed as [outer, n, inner]: for inner > 1 each step combines a whole contiguous row of `inner`
// elements with the previous row (the compiler vectorizes these loops); for the last axis
// (inner = 1) each line is a plain running loop.
#include <cmath>
#include <limits>

#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {
namespace {

// The running combine of each primitive, fixed at compile time (JAX's: max and min propagate
// NaN; logaddexp is exact for infinities: -inf with -inf stays -inf).
template <class T, Primitive P> T step(T acc, T x) {
  if constexpr (P == Primitive::cumsum) {
    return add_values(acc, x);
  } else if constexpr (P == Primitive::cumprod) {
    if constexpr (std::is_integral_v<T>) return wrap_mul(acc, x);
    else return acc * x;
  } else if constexpr (P == Primitive::cummax || P == Primitive::cummin) {
    if constexpr (std::is_floating_point_v<T>)
      if (acc != acc || x != x) return std::numeric_limits<T>::quiet_NaN();
    if constexpr (P == Primitive::cummax) return x > acc ? x : acc;
    else return x < acc ? x : acc;
  } else {
    static_assert(P == Primitive::cumlogsumexp && std::is_floating_point_v<T>);
    const T m = acc > x ? acc : x;
    const T d = acc - x;
    if (d != d) return acc + x;  // both infinite of one sign (or a NaN): their sum
    return m + std::log1p(std::exp(-std::abs(d)));
  }
}

template <class T, Primitive P>
void run_lines(const T* x, T* y, std::int64_t outer, std::int64_t n, std::int64_t inner, bool reverse) {
  if (n == 0) return;
  const std::int64_t first = reverse ? n - 1 : 0, stride = reverse ? -1 : 1;
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* xb = x + o * n * inner;
    T* yb = y + o * n * inner;
    if (inner == 1) {
      T acc = xb[first];
      yb[first] = acc;
      for (std::int64_t k = first + stride, i = 1; i < n; ++i, k += stride) yb[k] = acc = step<T, P>(acc, xb[k]);
      continue;
    }
    for (std::int64_t j = 0; j < inner; ++j) yb[first * inner + j] = xb[first * inner + j];
    for (std::int64_t k = first + stride, i = 1; i < n; ++i, k += stride) {
      const T* prev = yb + (k - stride) * inner;
      const T* xr = xb + k * inner;
      T* yr = yb + k * inner;
      for (std::int64_t j = 0; j < inner; ++j) yr[j] = step<T, P>(prev[j], xr[j]);
    }
  }
}

template <class T>
void dispatch(Primitive p, DType dtype, const T* x, T* y, std::int64_t outer, std::int64_t n, std::int64_t inner, bool reverse) {
  if constexpr (std::is_same_v<T, std::uint8_t>) unsupported_dtype(p, dtype);  // bool: the shape rule refuses it
  if (p == Primitive::cumsum) return run_lines<T, Primitive::cumsum>(x, y, outer, n, inner, reverse);
  if (p == Primitive::cumprod) return run_lines<T, Primitive::cumprod>(x, y, outer, n, inner, reverse);
  if (p == Primitive::cummax) return run_lines<T, Primitive::cummax>(x, y, outer, n, inner, reverse);
  if (p == Primitive::cummin) return run_lines<T, Primitive::cummin>(x, y, outer, n, inner, reverse);
  if constexpr (std::is_floating_point_v<T>)
    if (p == Primitive::cumlogsumexp) return run_lines<T, Primitive::cumlogsumexp>(x, y, outer, n, inner, reverse);
  unsupported_dtype(p, dtype);
}

}  // namespace

Array cumulative_kernel(Primitive p, const Array& x, std::int64_t axis, bool reverse, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (result.size() == 0) return result;
  const Shape& s = x.shape();
  const auto a = static_cast<std::size_t>(axis);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < a; ++i) outer *= s[i];
  for (std::size_t i = a + 1; i < s.size(); ++i) inner *= s[i];
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch<T>(p, x.dtype(), in_ptr<T>(x), out_ptr<T>(result), outer, s[a], inner, reverse);
  });
  return result;
}

}  // namespace xjax::detail::kernels
