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
#include <string>

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

// The float arithmetic of the float_unary and numeric_unary families, one specialization per
// primitive (on scalars and batches alike); float_unary below dispatches to it from the table, so
// a unary primitive without its math does not compile.
template <class V> inline constexpr bool dependent_false = false;
template <Primitive P> struct UnaryMath {
  template <class V> V operator()(const V&) const { static_assert(dependent_false<V>, "UnaryMath<P>: no float math"); }
};
template <> struct UnaryMath<Primitive::neg> { template <class V> V operator()(const V& v) const { return -v; } };
template <> struct UnaryMath<Primitive::exp> { template <class V> V operator()(const V& v) const { return xsimd::exp(v); } };
template <> struct UnaryMath<Primitive::log> { template <class V> V operator()(const V& v) const { return xsimd::log(v); } };
template <> struct UnaryMath<Primitive::log1p> { template <class V> V operator()(const V& v) const { return xsimd::log1p(v); } };
template <> struct UnaryMath<Primitive::expm1> { template <class V> V operator()(const V& v) const { return xsimd::expm1(v); } };
template <> struct UnaryMath<Primitive::sin> { template <class V> V operator()(const V& v) const { return xsimd::sin(v); } };
template <> struct UnaryMath<Primitive::cos> { template <class V> V operator()(const V& v) const { return xsimd::cos(v); } };
template <> struct UnaryMath<Primitive::tan> { template <class V> V operator()(const V& v) const { return xsimd::tan(v); } };
template <> struct UnaryMath<Primitive::tanh> { template <class V> V operator()(const V& v) const { return xsimd::tanh(v); } };
template <> struct UnaryMath<Primitive::logistic> {
  template <class V> V operator()(const V& v) const { return V(1) / (V(1) + xsimd::exp(-v)); }
};
template <> struct UnaryMath<Primitive::sqrt> { template <class V> V operator()(const V& v) const { return xsimd::sqrt(v); } };
template <> struct UnaryMath<Primitive::rsqrt> {
  template <class V> V operator()(const V& v) const { return V(1) / xsimd::sqrt(v); }
};
template <> struct UnaryMath<Primitive::asin> { template <class V> V operator()(const V& v) const { return xsimd::asin(v); } };
template <> struct UnaryMath<Primitive::acos> { template <class V> V operator()(const V& v) const { return xsimd::acos(v); } };
template <> struct UnaryMath<Primitive::atan> { template <class V> V operator()(const V& v) const { return xsimd::atan(v); } };
template <> struct UnaryMath<Primitive::sinh> { template <class V> V operator()(const V& v) const { return xsimd::sinh(v); } };
template <> struct UnaryMath<Primitive::cosh> { template <class V> V operator()(const V& v) const { return xsimd::cosh(v); } };
template <> struct UnaryMath<Primitive::asinh> { template <class V> V operator()(const V& v) const { return xsimd::asinh(v); } };
template <> struct UnaryMath<Primitive::acosh> { template <class V> V operator()(const V& v) const { return xsimd::acosh(v); } };
template <> struct UnaryMath<Primitive::atanh> { template <class V> V operator()(const V& v) const { return xsimd::atanh(v); } };
template <> struct UnaryMath<Primitive::erf> { template <class V> V operator()(const V& v) const { return xsimd::erf(v); } };
template <> struct UnaryMath<Primitive::erfc> { template <class V> V operator()(const V& v) const { return xsimd::erfc(v); } };
template <> struct UnaryMath<Primitive::cbrt> { template <class V> V operator()(const V& v) const { return xsimd::cbrt(v); } };
template <> struct UnaryMath<Primitive::exp2> { template <class V> V operator()(const V& v) const { return xsimd::exp2(v); } };
template <> struct UnaryMath<Primitive::log2> { template <class V> V operator()(const V& v) const { return xsimd::log2(v); } };
template <> struct UnaryMath<Primitive::floor> { template <class V> V operator()(const V& v) const { return xsimd::floor(v); } };
template <> struct UnaryMath<Primitive::ceil> { template <class V> V operator()(const V& v) const { return xsimd::ceil(v); } };
template <> struct UnaryMath<Primitive::abs> { template <class V> V operator()(const V& v) const { return xsimd::abs(v); } };
template <> struct UnaryMath<Primitive::sign> {  // -1, +1, and x itself for ±0 and NaN
  template <class V> V operator()(const V& v) const {
    return xsimd::select(v > V(0), V(1), xsimd::select(v < V(0), V(-1), v));
  }
};

/// Whether p's float kernel is UnaryMath<p> (the float_unary and numeric_unary families).
constexpr bool has_unary_math(Primitive p) {
  return family_of(p) == Family::float_unary || family_of(p) == Family::numeric_unary;
}

template <class T> inline void float_unary(Primitive p, const T* x, T* o, std::size_t n) {
  using B = Batch<T>;
  switch (p) {
#define XJAX_FLOAT_UNARY_CASE(name, stem, S, family, kinds)                                    \
  case Primitive::name:                                                                       \
    if constexpr (has_unary_math(Primitive::name)) return map1(x, o, n, [](B v) { return UnaryMath<Primitive::name>{}(v); }); \
    break;
    XJAX_PRIMITIVES(XJAX_FLOAT_UNARY_CASE)
#undef XJAX_FLOAT_UNARY_CASE
  }
  unsupported_dtype(p, dtype_of_v<T>);
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

// The comparison family: a bool on scalars, a mask on batches. ne is not (a == b): true for NaN
// operands, as in C++ (xsimd's != is an ordered comparison).
template <Primitive P> struct Compare {
  template <class V> auto operator()(const V&, const V&) const { static_assert(dependent_false<V>, "Compare<P>: not a comparison"); }
};
template <> struct Compare<Primitive::eq> { template <class V> auto operator()(const V& a, const V& b) const { return a == b; } };
template <> struct Compare<Primitive::ne> { template <class V> auto operator()(const V& a, const V& b) const { return !(a == b); } };
template <> struct Compare<Primitive::lt> { template <class V> auto operator()(const V& a, const V& b) const { return a < b; } };
template <> struct Compare<Primitive::le> { template <class V> auto operator()(const V& a, const V& b) const { return a <= b; } };
template <> struct Compare<Primitive::gt> { template <class V> auto operator()(const V& a, const V& b) const { return a > b; } };
template <> struct Compare<Primitive::ge> { template <class V> auto operator()(const V& a, const V& b) const { return a >= b; } };

/// Calls f(Compare<p>{}) for a comparison p; otherwise throws naming `who`.
template <class F> void with_comparison(Primitive p, const char* who, F f) {
  switch (p) {
#define XJAX_COMPARE_CASE(name, stem, S, family, kinds)                                                        \
  case Primitive::name:                                                                                       \
    if constexpr (family_of(Primitive::name) == Family::comparison) return f(Compare<Primitive::name>{});      \
    break;
    XJAX_PRIMITIVES(XJAX_COMPARE_CASE)
#undef XJAX_COMPARE_CASE
  }
  throw Error(std::string(who) + ": not a comparison: " + std::string(primitive_name(p)));
}

// The float arithmetic of the binary family, one specialization per primitive.
template <Primitive P> struct BinaryMath {
  template <class V> V operator()(const V&, const V&) const { static_assert(dependent_false<V>, "BinaryMath<P>: no float math"); }
};
template <> struct BinaryMath<Primitive::add> { template <class V> V operator()(const V& a, const V& b) const { return a + b; } };
template <> struct BinaryMath<Primitive::sub> { template <class V> V operator()(const V& a, const V& b) const { return a - b; } };
template <> struct BinaryMath<Primitive::mul> { template <class V> V operator()(const V& a, const V& b) const { return a * b; } };
template <> struct BinaryMath<Primitive::div> { template <class V> V operator()(const V& a, const V& b) const { return a / b; } };
template <> struct BinaryMath<Primitive::max> { template <class V> V operator()(const V& a, const V& b) const { return nan_max(a, b); } };
template <> struct BinaryMath<Primitive::min> { template <class V> V operator()(const V& a, const V& b) const { return nan_min(a, b); } };
template <> struct BinaryMath<Primitive::pow> { template <class V> V operator()(const V& a, const V& b) const { return xsimd::pow(a, b); } };
template <> struct BinaryMath<Primitive::atan2> { template <class V> V operator()(const V& a, const V& b) const { return xsimd::atan2(a, b); } };
// C's fmod, exact (the remainder of the truncated quotient, with a's sign, as XLA's rem); xsimd's
// fmod is x - trunc(x / y) y, which loses the remainder once x / y rounds, so lane by lane.
template <> struct BinaryMath<Primitive::rem> {
  template <class V> V operator()(const V& a, const V& b) const {
    if constexpr (std::is_floating_point_v<V>) {
      return std::fmod(a, b);
    } else {
      using T = typename V::value_type;
      alignas(V::arch_type::alignment()) T x[V::size], y[V::size];
      a.store_aligned(x);
      b.store_aligned(y);
      for (std::size_t i = 0; i < V::size; ++i) x[i] = std::fmod(x[i], y[i]);
      return V::load_aligned(x);
    }
  }
};

template <class T> void float_binary(Primitive p, const T* x, const T* y, T* o, std::size_t n) {
  using B = Batch<T>;
  switch (p) {
#define XJAX_FLOAT_BINARY_CASE(name, stem, S, family, kinds)                                                 \
  case Primitive::name:                                                                                     \
    if constexpr (family_of(Primitive::name) == Family::binary)                                            \
      return map2(x, y, o, n, [](B a, B b) { return BinaryMath<Primitive::name>{}(a, b); });                \
    break;
    XJAX_PRIMITIVES(XJAX_FLOAT_BINARY_CASE)
#undef XJAX_FLOAT_BINARY_CASE
  }
  unsupported_dtype(p, dtype_of_v<T>);
}

}  // namespace xjax::detail::kernels::simd
