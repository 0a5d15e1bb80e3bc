// simd.hpp: the vectorized float loops shared by the kernel families and the fused elementwise
// executor (not installed; include it only from kernel .cpp files: xsimd is heavy to compile).
//
// map1/map2/map3 run an xsimd op over full batches and over one zero-padded batch for the tail, so
// every element goes through the same code; float_unary, float_binary and float_integer_pow are
// the float arithmetic of the elementwise primitives on raw pointers.
#pragma once
// (GCC 12's AVX-512 intrinsics, inlined from xsimd, trip a false -W(maybe-)uninitialized: the
// kernel sets that may use AVX-512 are compiled without those two warnings, see meson.build.)
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/kernel_sets.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE::simd {

/// a / b, correctly rounded. xsimd 8 (Debian 12) divides float batches on AArch64 by a reciprocal
/// estimate refined by two Newton steps: not IEEE division (a last-bit error, and infinity for a
/// subnormal divisor: 1e-40f / 1e-39f gave -inf under qemu's aarch64); there the instruction.
template <class V> V divide(const V& a, const V& b) {
#if defined(__aarch64__)
  if constexpr (std::is_same_v<V, xsimd::batch<float, xsimd::neon64>>) return V(vdivq_f32(a, b));
#endif
  return a / b;
}

template <class T> using Batch = xsimd::batch<T>;
/// The vector registers this set's ISA has (register-blocked loops size their blocks by it).
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorRegisters = 16;
#endif

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
// -v; a float batch's sign bit flipped, since xsimd's AVX-512 neg is 0 - v (+0 for +0).
template <class V> V negated(const V& v) {
  if constexpr (requires { typename V::value_type; }) {
    using T = typename V::value_type;
    if constexpr (std::is_floating_point_v<T>) return xsimd::bitwise_xor(v, V(T(-0.0)));
  }
  return -v;
}
template <> struct UnaryMath<Primitive::neg> { template <class V> V operator()(const V& v) const { return negated(v); } };
// xsimd's exp and exp2 overflow to inf about 0.35 (exp2: 1) below the largest finite result (2^n
// is formed before the reduced argument's factor brings it back): past `top`, exp(x) =
// exp(x - 1) e and exp2(x) = exp2(x - 1) 2, x - 1 exact there.
template <class V> V exp_to_the_top(const V& v) {
  using T = typename V::value_type;
  const auto high = v > V(T(std::is_same_v<T, double> ? 709.0 : 88.0));
  if (!xsimd::any(high)) return xsimd::exp(v);
  return xsimd::select(high, xsimd::exp(v - V(T(1))) * V(T(2.71828182845904523536)), xsimd::exp(v));
}
template <class V> V exp2_to_the_top(const V& v) {
  using T = typename V::value_type;
  const auto high = v >= V(T(std::is_same_v<T, double> ? 1022.0 : 126.0));
  if (!xsimd::any(high)) return xsimd::exp2(v);
  return xsimd::select(high, xsimd::exp2(v - V(T(1))) * V(T(2)), xsimd::exp2(v));
}
// xsimd's double log, log2 and cbrt take a subnormal as if it were normal (log(1e-310) = -746.5,
// not -713.8): those are scaled by 2^54 first and the scale taken back out.
template <class V, class F, class Unscale> V with_subnormals_scaled(const V& v, F f, Unscale unscale) {
  using T = typename V::value_type;
  if constexpr (std::is_same_v<T, double>) {
    const auto tiny = (xsimd::abs(v) < V(std::numeric_limits<double>::min())) & (v != V(0));
    if (xsimd::any(tiny)) return xsimd::select(tiny, unscale(f(v * V(0x1p54))), f(v));
  }
  return f(v);
}
template <> struct UnaryMath<Primitive::exp> { template <class V> V operator()(const V& v) const { return exp_to_the_top(v); } };
template <> struct UnaryMath<Primitive::log> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    return with_subnormals_scaled(v, [](const V& x) { return xsimd::log(x); },
                                  [](const V& y) { return y - V(T(54) * T(0.69314718055994530942)); });
  }
};
template <> struct UnaryMath<Primitive::log1p> { template <class V> V operator()(const V& v) const { return xsimd::log1p(v); } };
// expm1(x) = exp(x) where the -1 is below exp(x)'s rounding (x past exp's cutoff)
template <> struct UnaryMath<Primitive::expm1> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    const auto high = v > V(T(std::is_same_v<T, double> ? 709.0 : 88.0));
    if (!xsimd::any(high)) return xsimd::expm1(v);
    return xsimd::select(high, exp_to_the_top(v), xsimd::expm1(v));
  }
};
template <> struct UnaryMath<Primitive::sin> { template <class V> V operator()(const V& v) const { return xsimd::sin(v); } };
template <> struct UnaryMath<Primitive::cos> { template <class V> V operator()(const V& v) const { return xsimd::cos(v); } };
template <> struct UnaryMath<Primitive::tan> { template <class V> V operator()(const V& v) const { return xsimd::tan(v); } };
template <> struct UnaryMath<Primitive::tanh> { template <class V> V operator()(const V& v) const { return xsimd::tanh(v); } };
template <> struct UnaryMath<Primitive::logistic> {
  template <class V> V operator()(const V& v) const { return divide(V(1), V(1) + xsimd::exp(-v)); }
};
template <> struct UnaryMath<Primitive::sqrt> { template <class V> V operator()(const V& v) const { return xsimd::sqrt(v); } };
template <> struct UnaryMath<Primitive::rsqrt> {
  template <class V> V operator()(const V& v) const { return divide(V(1), xsimd::sqrt(v)); }
};
template <> struct UnaryMath<Primitive::asin> { template <class V> V operator()(const V& v) const { return xsimd::asin(v); } };
template <> struct UnaryMath<Primitive::acos> { template <class V> V operator()(const V& v) const { return xsimd::acos(v); } };
template <> struct UnaryMath<Primitive::atan> { template <class V> V operator()(const V& v) const { return xsimd::atan(v); } };
template <> struct UnaryMath<Primitive::sinh> { template <class V> V operator()(const V& v) const { return xsimd::sinh(v); } };
template <> struct UnaryMath<Primitive::cosh> { template <class V> V operator()(const V& v) const { return xsimd::cosh(v); } };
template <> struct UnaryMath<Primitive::asinh> { template <class V> V operator()(const V& v) const { return xsimd::asinh(v); } };
// acosh, NaN below 1 (xsimd's log1p form rounds large negative inputs to -inf, 0 or inf).
template <> struct UnaryMath<Primitive::acosh> {
  template <class V> V operator()(const V& v) const {
    if constexpr (std::is_floating_point_v<V>) return std::acosh(v);
    else return xsimd::select(v < V(1), V(std::numeric_limits<typename V::value_type>::quiet_NaN()), xsimd::acosh(v));
  }
};
template <> struct UnaryMath<Primitive::atanh> { template <class V> V operator()(const V& v) const { return xsimd::atanh(v); } };
// erf / erfc: xsimd's in float (within a few ulp); in double the C library's, lane by lane:
// xsimd's double erf is off by up to about 70 ulp and its erfc by 6e-9 relative at x = 26
// (XLA's are within a few ulp).
template <class V, class Scalar> V lane_by_lane(const V& v, Scalar fn) {
  alignas(64) typename V::value_type lanes[V::size];
  v.store_aligned(lanes);
  for (auto& lane : lanes) lane = fn(lane);
  return V::load_aligned(lanes);
}
template <> struct UnaryMath<Primitive::erf> {
  template <class V> V operator()(const V& v) const {
    if constexpr (std::is_same_v<typename V::value_type, double>) return lane_by_lane(v, [](double x) { return std::erf(x); });
    else return xsimd::erf(v);
  }
};
template <class V, class F> V in_double(const V& v, F f);
// f32 erfc: xsimd's double erfc, rounded once (its float erfc was up to 76 ulp off on [4, 9.2],
// from its exp(-x^2); the double one is within about 1e-12 relative there).
template <> struct UnaryMath<Primitive::erfc> {
  template <class V> V operator()(const V& v) const {
    if constexpr (std::is_same_v<typename V::value_type, double>) return lane_by_lane(v, [](double x) { return std::erfc(x); });
    else return in_double(v, [](const auto& w) { return xsimd::abs(xsimd::erfc(w)); });  // erfc >= 0 (float: -0 from 1.7e7)
  }
};
template <> struct UnaryMath<Primitive::cbrt> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    return with_subnormals_scaled(v, [](const V& x) { return xsimd::cbrt(x); }, [](const V& y) { return y * V(T(0x1p-18)); });
  }
};
template <> struct UnaryMath<Primitive::exp2> { template <class V> V operator()(const V& v) const { return exp2_to_the_top(v); } };
template <> struct UnaryMath<Primitive::log2> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    return with_subnormals_scaled(v, [](const V& x) { return xsimd::log2(x); }, [](const V& y) { return y - V(T(54)); });
  }
};
// floor / ceil with v's sign: a zero result of a negative v is -0 (C's and XLA's); xsimd's
// emulation on SSE2 (the baseline set, without roundpd) gave +0 (ceil(-0.5), floor(-0)).
template <> struct UnaryMath<Primitive::floor> { template <class V> V operator()(const V& v) const { return xsimd::copysign(xsimd::floor(v), v); } };
template <> struct UnaryMath<Primitive::ceil> { template <class V> V operator()(const V& v) const { return xsimd::copysign(xsimd::ceil(v), v); } };
/// Horner's rule: c[0] + w (c[1] + w (c[2] + ...)), for a batch or a scalar.
template <class V, std::size_t N> V horner(const V& w, const double (&c)[N]) {
  using T = typename V::value_type;
  V p(static_cast<T>(c[N - 1]));
  for (std::size_t i = N - 1; i-- > 0;) p = xsimd::fma(p, w, V(static_cast<T>(c[i])));
  return p;
}

/// f(v) for a float batch computed in double and rounded once: f32 lgamma and digamma, whose
/// double forms are within a few double ulp (the float forms of the same steps were 6-76 float
/// ulp off: a shift's cancellation scaled by the float's own rounding).
template <class V, class F> V in_double(const V& v, F f) {
  using W = xsimd::batch<double, typename V::arch_type>;
  alignas(64) float lanes[V::size];
  alignas(64) double wide[V::size];
  v.store_aligned(lanes);
  for (std::size_t i = 0; i < V::size; ++i) wide[i] = lanes[i];
  for (std::size_t i = 0; i < V::size; i += W::size) f(W::load_aligned(wide + i)).store_aligned(wide + i);
  for (std::size_t i = 0; i < V::size; ++i) lanes[i] = static_cast<float>(wide[i]);
  return V::load_aligned(lanes);
}

/// log Gamma(x) for x > 0 in double, without cancellation: on [1, 3) as t (t + 1) S(t) with
/// t = x - 2 (lgamma's zeros at 1 and 2 factored out, so it is accurate relative to the value
/// there); S is the Chebyshev interpolant of lgamma(2 + t) / (t (1 + t)) at 28 points on [-1, 1],
/// computed in 60 digits (mpmath), within 5e-18 of S (0.7 ulp with the rounding of Horner's
/// rule). Below 1: lgamma(x + 1) - log x, x + 1 = 2 + (x - 1) with x - 1 exact. On [3, 10):
/// y = x - n in [2, 3) and lgamma(y) + log(y (y + 1) ... (x - 1)), both parts positive. From 10:
/// Stirling's series, (x - 1/2) ln x - x + ln(2 pi) / 2 + sum B_2k / (2k (2k - 1) x^(2k-1)).
template <class V> V lgamma_of_positive(const V& x) {
  static constexpr double s[] = {
      0.42278433509846713,    -0.10031730167435392,   0.03296500062115691,    -0.012384192193371805,
      0.004998641164627129,   -0.0021081308339216706, 0.0009153769240386907,  -0.0004057073983775151,
      0.0001825526153982638,  -8.309511477709561e-05, 3.816907658276081e-05,  -1.7661767658452517e-05,
      8.221234475942905e-06,  -3.846858091533014e-06, 1.8113906873056685e-06, -8.54560908975883e-07,
      3.958940459367468e-07,  -1.878442644643758e-07, 1.042041826608264e-07,  -4.9827532071170234e-08,
      5.910565853507869e-09,  -2.7296358592514825e-09, 1.6194359237484174e-08, -7.842557720538356e-09,
      -4.312495770350818e-09, 2.0986002157033107e-09, 1.5746606982777302e-09, -7.639292345836201e-10};
  const auto below_one = x < V(1);
  const auto shifted = (x >= V(3)) & (x < V(10));
  const V steps = xsimd::select(shifted, xsimd::floor(x) - V(2), V(0));
  const V y = x - steps;  // exact: [2, 3) where shifted
  V product(1);
  for (int k = 0; k < 7; ++k) product = xsimd::select(V(k) < steps, product * (y + V(k)), product);
  const V t = xsimd::select(below_one, x - V(1), y - V(2));
  const V t_plus_one = xsimd::select(below_one, x, y - V(1));
  const V near = t * t_plus_one * horner(t, s) + xsimd::log(product) - xsimd::select(below_one, xsimd::log(x), V(0));
  // B_2k / (2k (2k - 1)) for k = 1..7.
  static constexpr double c[] = {1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680, 1.0 / 1188, -691.0 / 360360, 1.0 / 156};
  const V r = V(1) / (x * x);
  // (x - 1/2) ln x - x, as (x - 1/2)(ln x - 1) - 1/2 where (x - 1/2) ln x alone would overflow
  // (without FMA, lgamma(4.05e36f) was inf; its value 3.3e38)
  const V lead = xsimd::select(x > V(1e300), (x - V(0.5)) * (xsimd::log(x) - V(1)) - V(0.5), (x - V(0.5)) * xsimd::log(x) - x);
  const V stirling = lead + V(0.91893853320467274178) + horner(r, c) / x;
  return xsimd::select(x >= V(10), stirling, near);
}

// lgamma (xsimd 11's lgamma gives wrong values on this build's batches, so our own): for x < 0,
// log(pi / |sin(pi x)|) - lgamma(1 - x); for x > 0, lgamma_of_positive. Poles: +inf. Float:
// computed in double, rounded once.
template <> struct UnaryMath<Primitive::lgamma> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    if constexpr (std::is_same_v<T, float>) {
      return in_double(v, *this);
    } else {
      const auto negative = v < V(0);
      const V positive = lgamma_of_positive(xsimd::select(negative, V(1) - v, v));
      const V pi(3.141592653589793238);
      // |sin(pi v)| = |sin(pi (v - round v))|: v's distance to the nearest integer is exact, pi v
      // rounded would lose it (lgamma(-6.99999332f) was 3.457, its value 3.392).
      // log(pi) - log|sin|, not log(pi / |sin|): the quotient overflows for tiny v (lgamma(-1e-39f) was inf)
      // (the log takes subnormal sines too: lgamma(-1e-310))
      const V reflected = V(1.14472988584940017414) - UnaryMath<Primitive::log>{}(xsimd::abs(xsimd::sin(pi * (v - xsimd::round(v))))) - positive;
      const auto pole = ((v <= V(0)) & (xsimd::floor(v) == v)) | xsimd::isinf(v);  // +-inf: +inf (XLA's)
      // |v| below 2^-54: lgamma(v) = -log|v| to the last bit (gamma v is below its rounding); pi v
      // rounded in the subnormal range moved the reflection (lgamma(-5e-324))
      const auto tiny = xsimd::abs(v) < V(0x1p-54);
      const V near_zero = negated(UnaryMath<Primitive::log>{}(xsimd::abs(v)));
      return xsimd::select(pole, V(std::numeric_limits<T>::infinity()),
                           xsimd::select(tiny, near_zero, xsimd::select(negative, reflected, positive)));
    }
  }
};


/// psi(x) for x > 0 in double, without cancellation: on [1, 3) as (x - x0) R(x - 2), with x0 the
/// zero of psi (1.4616..., in two doubles, so x - x0 is right to the last bit near it) and R the
/// Chebyshev interpolant of psi(x) / (x - x0) at 32 points on [1, 3], computed in 60 digits
/// (mpmath): within 7e-19 of R (1.3 ulp with Horner's rounding). Below 1: psi(x + 1) - 1 / x,
/// x + 1 - x0 as x - (x0 - 1). On [3, 10): y = x - n in [2, 3) and psi(y) + 1 / y + ... + 1 / (x - 1),
/// every term positive. From 10: the asymptotic series ln x - 1 / 2x - sum B_2k / (2k x^2k)
/// (below 1e-16 relative there).
template <class V> V digamma_of_positive(const V& x) {
  static constexpr double r_coeffs[] = {
      0.7853075386041053,     -0.2607389546830014,    0.10899991701762858,    -0.049551032917674064,
      0.023447309597550668,   -0.011338432553246743,  0.005552254176509414,   -0.002739572885748579,
      0.0013581421102962425,  -0.0006753133297619733, 0.00033643312402344133, -0.00016781556117044082,
      8.377511019652059e-05,  -4.1843951715424783e-05, 2.0910716029415635e-05, -1.0450569877155793e-05,
      5.212735215146639e-06,  -2.6058390310695028e-06, 1.3302501346450776e-06, -6.650665463841941e-07,
      2.818440149295972e-07,  -1.4091552030188092e-07, 1.3889269604977765e-07, -6.944562515770024e-08,
      -3.222676221329982e-08, 1.6113458557711186e-08, 3.808678582853474e-08,  -1.9043382370013445e-08,
      -1.1718989895311787e-08, 5.859495225237461e-09, 2.929749554433025e-09,  -1.4648744998182098e-09};
  const V zero_high(1.4616321449683622), zero_low(9.549995429965697e-17);  // x0 = high + low
  const auto below_one = x < V(1);
  const auto shifted = (x >= V(3)) & (x < V(10));
  const V steps = xsimd::select(shifted, xsimd::floor(x) - V(2), V(0));
  const V y = x - steps;  // exact: [2, 3) where shifted
  V reciprocals(0);
  for (int k = 0; k < 7; ++k) reciprocals = xsimd::select(V(k) < steps, reciprocals + V(1) / (y + V(k)), reciprocals);
  const V t = xsimd::select(below_one, x - V(1), y - V(2));
  const V from_zero = xsimd::select(below_one, x - (zero_high - V(1)), y - zero_high) - zero_low;
  const V near = from_zero * horner(t, r_coeffs) + reciprocals - xsimd::select(below_one, V(1) / x, V(0));
  // B_2k / 2k for k = 1..7: 1/12, -1/120, 1/252, -1/240, 1/132, -691/32760, 1/12.
  static constexpr double c[] = {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12};
  const V r = V(1) / (x * x);
  const V asymptotic = xsimd::log(x) - V(0.5) / x - r * horner(r, c);
  return xsimd::select(x >= V(10), asymptotic, near);
}

// digamma: psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0; for x > 0, digamma_of_positive.
// Poles (x = 0, -1, ...): NaN, as XLA. Float: computed in double, rounded once.
template <> struct UnaryMath<Primitive::digamma> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    if constexpr (std::is_same_v<T, float>) {
      return in_double(v, *this);
    } else {
      const auto negative = v < V(0);
      const V psi = digamma_of_positive(xsimd::select(negative, V(1) - v, v));
      const V pi(3.141592653589793238);
      const V reflected = psi - pi / xsimd::tan(pi * (v - xsimd::round(v)));  // tan's period is pi: v reduced exactly
      const auto pole = (v <= V(0)) & (xsimd::floor(v) == v);
      return xsimd::select(pole, V(std::numeric_limits<T>::quiet_NaN()), xsimd::select(negative, reflected, psi));
    }
  }
};

// erf_inv: Giles' single-precision approximation ("Approximating the erfinv function", GPU
// Computing Gems, 2011) as the start, then Newton steps (two for float, four for double): on
// erf(y) = |x| for |x| <= 1/2, and on log erfc(y) = log(1 - |x|) above (1 - |x| is exact there,
// and the logarithm keeps Newton quadratic deep in the tail, where Giles' float polynomial is
// far off). +-1 gives +-inf, |x| > 1 NaN, -0 stays -0.
template <> struct UnaryMath<Primitive::erf_inv> {
  template <class V> V operator()(const V& v) const {
    using T = typename V::value_type;
    const V a = xsimd::abs(v);
    const V w0 = -xsimd::log((V(1) - a) * (V(1) + a));
    static constexpr double central[] = {1.50140941,     0.246640727,    -0.00417768164, -0.00125372503, 0.00021858087,
                                         -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08};
    static constexpr double tail[] = {2.83297682,    1.00167406,   0.00943887047, -0.0076224613,   0.00573950773,
                                      -0.00367342844, 0.00134934322, 0.000100950558, -0.000200214257};
    V y = xsimd::select(w0 < V(5), horner(w0 - V(T(2.5)), central), horner(xsimd::sqrt(w0) - V(3), tail)) * a;
    const V two_over_sqrt_pi(T(1.1283791670955126));
    const auto upper = a > V(T(0.5));
    const V log_rest = xsimd::log(V(1) - a);
    constexpr int steps = std::is_same_v<T, double> ? 3 : 1;  // f32: one step takes Giles' ~4e-7 to rounding
    for (int step = 0; step < steps; ++step) {
      const V density = two_over_sqrt_pi * xsimd::exp(-y * y);  // erf'(y)
      const V rest = xsimd::erfc(y);
      // erf(y) - a over erf'(y); (log erfc(y) - log(1 - a)) over (log erfc)'(y) = -erf'(y) / erfc(y).
      const V central_step = (xsimd::erf(y) - a) / density;
      const V tail_step = -(xsimd::log(rest) - log_rest) * rest / density;
      y = y - xsimd::select(upper, tail_step, central_step);
    }
    if constexpr (std::is_same_v<T, double>) {
      // xsimd's double erfc is good to about 1e-12 in the tail; a last step with the C library's
      // erf / erfc, lane by lane, brings y to full precision.
      alignas(64) T ys[V::size], as[V::size];
      y.store_aligned(ys);
      a.store_aligned(as);
      for (std::size_t i = 0; i < V::size; ++i) {
        const T yi = ys[i], ai = as[i];
        if (!std::isfinite(yi) || ai >= 1) continue;
        const T density = T(1.1283791670955126) * std::exp(-yi * yi);
        ys[i] = ai > T(0.5) ? yi + (std::log(std::erfc(yi)) - std::log1p(-ai)) * std::erfc(yi) / density
                            : yi - (std::erf(yi) - ai) / density;
      }
      y = V::load_aligned(ys);
    }
    const V inf(std::numeric_limits<T>::infinity()), nan(std::numeric_limits<T>::quiet_NaN());
    y = xsimd::select(a == V(1), inf, xsimd::select(a > V(1), nan, y));
    y = xsimd::select(a == V(0), V(0), y);
    return xsimd::copysign(y, v);
  }
};
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
  unsupported_dtype(p, storage_dtype<T>());
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

// base^E for a compile-time E >= 1: pow_by_squaring's products in its order, unrolled, without
// its first one (1 times a power of base: exact in the default floating-point environment; under
// flush-to-zero alone it flushed a subnormal, which this does not, as JAX's integer_pow starting
// from x).
template <std::uint64_t E, class V> V unrolled_pow(V base) {
  static_assert(E >= 1);
  V result = base;
  bool started = false;
  for (std::uint64_t e = E; e != 0; e >>= 1) {
    if (e & 1) {
      result = started ? result * base : base;
      started = true;
    }
    if (e >> 1) base = base * base;
  }
  return result;
}

template <class T> void float_integer_pow(const T* x, T* o, std::size_t n, std::int64_t y) {
  using B = Batch<T>;
  const B one(T{1});
  // The common exponents (squares in norms, variances and optimizers) unrolled: a third of the
  // time the loop takes.
  switch (y) {
    case 2: return map1(x, o, n, [](B v) { return unrolled_pow<2>(v); });
    case 3: return map1(x, o, n, [](B v) { return unrolled_pow<3>(v); });
    case 4: return map1(x, o, n, [](B v) { return unrolled_pow<4>(v); });
    case -1: return map1(x, o, n, [=](B v) { return divide(one, v); });
    case -2: return map1(x, o, n, [=](B v) { return divide(one, unrolled_pow<2>(v)); });
    default: break;
  }
  const std::uint64_t e = y < 0 ? 0 - static_cast<std::uint64_t>(y) : static_cast<std::uint64_t>(y);
  auto times = [](const B& a, const B& b) { return a * b; };
  map1(x, o, n, [=](B v) {
    B r = pow_by_squaring(v, e, one, times);
    return y < 0 ? divide(one, r) : r;
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
template <> struct BinaryMath<Primitive::div> { template <class V> V operator()(const V& a, const V& b) const { return divide(a, b); } };
template <> struct BinaryMath<Primitive::max> { template <class V> V operator()(const V& a, const V& b) const { return nan_max(a, b); } };
template <> struct BinaryMath<Primitive::min> { template <class V> V operator()(const V& a, const V& b) const { return nan_min(a, b); } };
// a^b by C's pow, lane by lane (its special values are XLA's: x^0 = 1^y = 1, 0^b and inf^b by b's
// sign, a negative base needs an integer b, an odd b keeps the sign). xsimd's pow, exp(b log a)
// without extra precision, was 300 ulp off in f64 (2^1000 not a power of two) and 100 in f32, and
// overflowed below the largest finite result; glibc's is within an ulp.
template <> struct BinaryMath<Primitive::pow> {
  template <class V> V operator()(const V& a, const V& b) const {
    if constexpr (std::is_floating_point_v<V>) {
      return std::pow(a, b);
    } else {
      using T = typename V::value_type;
      alignas(64) T base[V::size], exponent[V::size];
      a.store_aligned(base);
      b.store_aligned(exponent);
      for (std::size_t i = 0; i < V::size; ++i) base[i] = std::pow(base[i], exponent[i]);
      return V::load_aligned(base);
    }
  }
};
// atan2(y, x), with C's values where xsimd's divides 0 / 0 or inf / inf into NaN: both zero gives
// +-0 (x +0) or +-pi (x -0), both infinite +-pi/4 (x +inf) or +-3pi/4 (x -inf), the sign y's.
template <> struct BinaryMath<Primitive::atan2> {
  template <class V> V operator()(const V& y, const V& x) const {
    using T = typename V::value_type;
    const V pi(static_cast<T>(3.141592653589793238));
    const auto x_negative = xsimd::copysign(V(1), x) < V(0);  // -0 included
    const V zeros = xsimd::copysign(xsimd::select(x_negative, pi, V(0)), y);
    const V infinities = xsimd::copysign(xsimd::select(x_negative, V(T(0.75)) * pi, V(T(0.25)) * pi), y);
    const V r = xsimd::atan2(y, x);
    return xsimd::select((y == V(0)) & (x == V(0)), zeros, xsimd::select(xsimd::isinf(y) & xsimd::isinf(x), infinities, r));
  }
};
// One ulp from a toward b, on the bits (xsimd 8's nextafter steps the wrong way for negative a):
// the pattern of a (sign and magnitude) moves by one, up when the step goes away from zero; from
// +-0 the smallest subnormal with b's sign; b when a == b; NaN when either is NaN (C's nextafter).
template <> struct BinaryMath<Primitive::nextafter> {
  template <class V> V operator()(const V& a, const V& b) const {
    if constexpr (std::is_floating_point_v<V>) {
      return std::nextafter(a, b);
    } else {
      using T = typename V::value_type;
      using Int = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
      using IB = xsimd::batch<Int, typename V::arch_type>;
      const IB bits = xsimd::bitwise_cast<IB>(a);
      const V up = xsimd::bitwise_cast<V>(bits + IB(Int{1})), down = xsimd::bitwise_cast<V>(bits - IB(Int{1}));
      const V zero(T{0});
      V r = xsimd::select((b > a) == (a > zero), up, down);
      r = xsimd::select(a == zero, xsimd::copysign(xsimd::bitwise_cast<V>(IB(Int{1})), b), r);
      r = xsimd::select(a == b, b, r);
      return xsimd::select(xsimd::isnan(a) || xsimd::isnan(b), a + b, r);
    }
  }
};
// C's fmod, exact (the remainder of the truncated quotient, with a's sign, as XLA's rem); xsimd's
// fmod is x - trunc(x / y) y, which loses the remainder once x / y rounds, so lane by lane.
template <> struct BinaryMath<Primitive::rem> {
  template <class V> V operator()(const V& a, const V& b) const {
    if constexpr (std::is_floating_point_v<V>) {
      return std::fmod(a, b);
    } else {
      using T = typename V::value_type;
      alignas(64) T x[V::size], y[V::size];
      a.store_aligned(x);
      b.store_aligned(y);
      for (std::size_t i = 0; i < V::size; ++i) x[i] = std::fmod(x[i], y[i]);
      return V::load_aligned(x);
    }
  }
};

// Whether a binary primitive's operand kinds include floats (the bitwise ops' do not).
#define XJAX_FLOAT_KINDS_floats true
#define XJAX_FLOAT_KINDS_numeric true
#define XJAX_FLOAT_KINDS_any true
#define XJAX_FLOAT_KINDS_integers false
#define XJAX_FLOAT_KINDS_ints false
#define XJAX_FLOAT_KINDS_none false
template <class T> void float_binary(Primitive p, const T* x, const T* y, T* o, std::size_t n) {
  using B = Batch<T>;
  switch (p) {
#define XJAX_FLOAT_BINARY_CASE(name, stem, S, family, kinds)                                                 \
  case Primitive::name:                                                                                     \
    if constexpr (family_of(Primitive::name) == Family::binary && XJAX_FLOAT_KINDS_##kinds)                 \
      return map2(x, y, o, n, [](B a, B b) { return BinaryMath<Primitive::name>{}(a, b); });                \
    break;
    XJAX_PRIMITIVES(XJAX_FLOAT_BINARY_CASE)
#undef XJAX_FLOAT_BINARY_CASE
  }
  unsupported_dtype(p, storage_dtype<T>());
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE::simd
