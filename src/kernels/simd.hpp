// simd.hpp: the vectorized float loops shared by the kernel families and the fused elementwise
// executor (not installed; include it only from kernel .cpp files: xsimd is heavy to compile).
//
// map1/map2/map3 run an xsimd op over full batches and over one zero-padded batch for the tail, so
// every element goes through the same code; float_unary, float_binary and float_integer_pow are
// the float arithmetic of the elementwise primitives on raw pointers.
#pragma once
// GCC 12's AVX-512 intrinsics (inlined from xsimd) trip a false -W(maybe-)uninitialized on
// _mm512_undefined_*() (GCC bug 105593); silence it for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>

#include "kernels/kernels.hpp"

namespace xjax::detail::kernels::simd {

template <class T> using Batch = xsimd::batch<T>;

// out[i] = op(x[i]) with op on Batch<T>. The tail (n % batch size) is copied into a zero-padded
// batch, so it gets exactly the same arithmetic as the body.
template <class T, class Op> void map1(const T* x, T* out, std::size_t n, Op op) {
  constexpr std::size_t width = Batch<T>::size;
  std::size_t i = 0;
  for (; i + width <= n; i += width) op(Batch<T>::load_unaligned(x + i)).store_unaligned(out + i);
  if (i == n) return;
  alignas(64) T buf[width] = {};
  std::copy(x + i, x + n, buf);
  op(Batch<T>::load_aligned(buf)).store_aligned(buf);
  std::copy(buf, buf + (n - i), out + i);
}

// out[i] = op(x[i], y[i]) with op on Batch<T>; tail as in map1.
template <class T, class Op> void map2(const T* x, const T* y, T* out, std::size_t n, Op op) {
  constexpr std::size_t width = Batch<T>::size;
  std::size_t i = 0;
  for (; i + width <= n; i += width)
    op(Batch<T>::load_unaligned(x + i), Batch<T>::load_unaligned(y + i)).store_unaligned(out + i);
  if (i == n) return;
  alignas(64) T xbuf[width] = {};
  alignas(64) T ybuf[width] = {};
  std::copy(x + i, x + n, xbuf);
  std::copy(y + i, y + n, ybuf);
  op(Batch<T>::load_aligned(xbuf), Batch<T>::load_aligned(ybuf)).store_aligned(xbuf);
  std::copy(xbuf, xbuf + (n - i), out + i);
}

// out[i] = op(x[i], y[i], z[i]) with op on Batch<T>; tail as in map1.
template <class T, class Op> void map3(const T* x, const T* y, const T* z, T* out, std::size_t n, Op op) {
  constexpr std::size_t width = Batch<T>::size;
  std::size_t i = 0;
  for (; i + width <= n; i += width)
    op(Batch<T>::load_unaligned(x + i), Batch<T>::load_unaligned(y + i), Batch<T>::load_unaligned(z + i))
        .store_unaligned(out + i);
  if (i == n) return;
  alignas(64) T xbuf[width] = {};
  alignas(64) T ybuf[width] = {};
  alignas(64) T zbuf[width] = {};
  std::copy(x + i, x + n, xbuf);
  std::copy(y + i, y + n, ybuf);
  std::copy(z + i, z + n, zbuf);
  op(Batch<T>::load_aligned(xbuf), Batch<T>::load_aligned(ybuf), Batch<T>::load_aligned(zbuf)).store_aligned(xbuf);
  std::copy(xbuf, xbuf + (n - i), out + i);
}

// max/min that propagate NaN from either operand (as XLA does); work on scalars and batches.
template <class V> V nan_max(const V& a, const V& b) {
  if constexpr (std::is_floating_point_v<V>) return (a > b || a != a) ? a : b;
  else return xsimd::select((a > b) || xsimd::isnan(a), a, b);
}
template <class V> V nan_min(const V& a, const V& b) {
  if constexpr (std::is_floating_point_v<V>) return (a < b || a != a) ? a : b;
  else return xsimd::select((a < b) || xsimd::isnan(a), a, b);
}

template <class T> inline void float_unary(Primitive p, const T* x, T* o, std::size_t n) {
  using B = Batch<T>;
  const B one(T{1});
  switch (p) {
    case Primitive::neg: return map1(x, o, n, [](B v) { return -v; });
    case Primitive::exp: return map1(x, o, n, [](B v) { return xsimd::exp(v); });
    case Primitive::log: return map1(x, o, n, [](B v) { return xsimd::log(v); });
    case Primitive::log1p: return map1(x, o, n, [](B v) { return xsimd::log1p(v); });
    case Primitive::expm1: return map1(x, o, n, [](B v) { return xsimd::expm1(v); });
    case Primitive::sin: return map1(x, o, n, [](B v) { return xsimd::sin(v); });
    case Primitive::cos: return map1(x, o, n, [](B v) { return xsimd::cos(v); });
    case Primitive::tan: return map1(x, o, n, [](B v) { return xsimd::tan(v); });
    case Primitive::tanh: return map1(x, o, n, [](B v) { return xsimd::tanh(v); });
    case Primitive::logistic:
      return map1(x, o, n, [one](B v) { return one / (one + xsimd::exp(-v)); });
    case Primitive::sqrt: return map1(x, o, n, [](B v) { return xsimd::sqrt(v); });
    case Primitive::rsqrt: return map1(x, o, n, [one](B v) { return one / xsimd::sqrt(v); });
    case Primitive::abs: return map1(x, o, n, [](B v) { return xsimd::abs(v); });
    case Primitive::sign:  // -1, +1, and x itself for ±0 and NaN
      return map1(x, o, n, [one](B v) {
        return xsimd::select(v > B(T{0}), one, xsimd::select(v < B(T{0}), -one, v));
      });
    default: unsupported_dtype(p, dtype_of_v<T>);
  }
}

// base^e by repeated squaring; `mul` multiplies two values (scalars or batches).
template <class V, class Mul> V pow_by_squaring(V base, std::uint64_t e, V one, Mul mul) {
  V result = one;
  while (e != 0) {
    if (e & 1) result = mul(result, base);
    e >>= 1;
    if (e != 0) base = mul(base, base);
  }
  return result;
}

template <class T> void float_integer_pow(const T* x, T* o, std::size_t n, std::int64_t y) {
  using B = Batch<T>;
  const B one(T{1});
  const std::uint64_t e = y < 0 ? 0 - static_cast<std::uint64_t>(y) : static_cast<std::uint64_t>(y);
  auto times = [](const B& a, const B& b) { return a * b; };
  map1(x, o, n, [=](B v) {
    B r = pow_by_squaring(v, e, one, times);
    return y < 0 ? one / r : r;
  });
}

template <class T> void float_binary(Primitive p, const T* x, const T* y, T* o, std::size_t n) {
  using B = Batch<T>;
  switch (p) {
    case Primitive::add: return map2(x, y, o, n, [](B a, B b) { return a + b; });
    case Primitive::sub: return map2(x, y, o, n, [](B a, B b) { return a - b; });
    case Primitive::mul: return map2(x, y, o, n, [](B a, B b) { return a * b; });
    case Primitive::div: return map2(x, y, o, n, [](B a, B b) { return a / b; });
    case Primitive::max: return map2(x, y, o, n, [](B a, B b) { return nan_max(a, b); });
    case Primitive::min: return map2(x, y, o, n, [](B a, B b) { return nan_min(a, b); });
    case Primitive::pow: return map2(x, y, o, n, [](B a, B b) { return xsimd::pow(a, b); });
    default: unsupported_dtype(p, dtype_of_v<T>);
  }
}

}  // namespace xjax::detail::kernels::simd
