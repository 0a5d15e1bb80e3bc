// jvp.cpp: forward-mode differentiation.
// jvp : (a -> b) -> ((a, T a) -> (b, T b))
// The pass re-traces the jaxpr, running each equation's jvp rule on primal and tangent values
// (tracers of the new jaxpr). An equation whose input tangents are all symbolic zeros is copied
// as is and its output tangents are zeros: no rule runs, nothing is materialized.
// Read: the tangent helpers, the rule helpers (deflinear, zero), the rules in the order of
// XJAX_FOR_EACH_PRIMITIVE, the rule table, then the pass.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <unordered_map>

#include "ad.hpp"
#include "higher_order.hpp"
#include "scatter_rules.hpp"
#include "xjax/linalg.hpp"
#include "windows.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {

// ---- tangents --------------------------------------------------------------------------------

Array Tangent::instantiate() const {
  return is_zero() ? broadcast_to(scalar(0.0, aval_.dtype), aval_.shape) : value_;
}

Tangent tadd(const Tangent& a, const Tangent& b) {
  if (a.is_zero()) return b;
  if (b.is_zero()) return a;
  return bind1(Primitive::add, {a.value(), b.value()});
}

Tangent tneg(const Tangent& a) { return a.is_zero() ? a : Tangent(neg(a.value())); }

Tangent tmap(const Tangent& t, const ShapedArray& out, const std::function<Array(const Array&)>& f) {
  return t.is_zero() ? Tangent::zero(out) : Tangent(f(t.value()));
}

namespace {

using P = Primitive;
using Ints = std::vector<std::int64_t>;

Array primal1(const JvpArgs& a) { return bind1(a.prim, a.x, a.params, a.loc); }

// Unary rule: y = f(x), dy = t * f'(x, y).
template <class D> JvpOut unary(const JvpArgs& a, D deriv) {
  Array y = primal1(a);
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& t) { return mul(t, deriv(a.x[0], y)); })}};
}

// Non-differentiable outputs: tangents are zero.
JvpOut zero_jvp(const JvpArgs& a) {
  auto ys = bind(a.prim, a.x, a.params, a.loc);
  JvpOut out{ys, {}};
  for (const auto& y : ys) out.tangents.push_back(Tangent::zero(y.aval()));
  return out;
}

// Linear in the operands at positions `lin` (the others, e.g. indices, are taken as they are):
// d f(x) = f(dx), with zero tangents materialized only when some linear operand has a tangent.
JvpOut linear_in(const JvpArgs& a, std::initializer_list<std::size_t> lin_positions) {
  std::vector<bool> lin(a.x.size(), false);
  for (auto i : lin_positions) lin[i] = true;
  Array y = primal1(a);
  bool any = false;
  for (std::size_t i = 0; i < a.x.size(); ++i) any = any || (lin[i] && !a.t[i].is_zero());
  if (!any) return {{y}, {Tangent::zero(y.aval())}};
  std::vector<Array> ts;
  for (std::size_t i = 0; i < a.x.size(); ++i) ts.push_back(lin[i] ? a.t[i].instantiate() : a.x[i]);
  return {{y}, {Tangent(bind1(a.prim, ts, a.params, a.loc))}};
}

JvpOut linear_all(const JvpArgs& a) {
  Array y = primal1(a);
  std::vector<Array> ts;
  for (const auto& t : a.t) ts.push_back(t.instantiate());
  return {{y}, {Tangent(bind1(a.prim, ts, a.params, a.loc))}};
}

Array c(double v, const Array& like) { return scalar_like(v, like); }

// d(a op b) for bilinear op (mul, dot_general): op(da, b) + op(a, db)
JvpOut bilinear(const JvpArgs& a) {
  Array y = primal1(a);
  Tangent l = tmap(a.t[0], y.aval(), [&](const Array& t) { return bind1(a.prim, {t, a.x[1]}, a.params, a.loc); });
  Tangent r = tmap(a.t[1], y.aval(), [&](const Array& t) { return bind1(a.prim, {a.x[0], t}, a.params, a.loc); });
  return {{y}, {tadd(l, r)}};
}

// ---- rules -----------------------------------------------------------------------------------

// d(-x) = -dx
JvpOut neg_jvp(const JvpArgs& a) { return linear_all(a); }
// d exp x = exp x dx
JvpOut exp_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return y; }); }
// d log x = dx / x
JvpOut log_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return reciprocal(x); }); }
// d log1p x = dx / (1 + x)
JvpOut log1p_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array&) { return reciprocal(add(x, c(1, x))); });
}
// d expm1 x = (expm1 x + 1) dx
JvpOut expm1_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return add(y, c(1, y)); }); }
// d sin x = cos x dx
JvpOut sin_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return cos(x); }); }
// d cos x = -sin x dx
JvpOut cos_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return neg(sin(x)); }); }
// d tan x = (1 + tan^2 x) dx
JvpOut tan_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return add(c(1, y), square(y)); }); }
// d tanh x = (1 - tanh^2 x) dx
JvpOut tanh_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return sub(c(1, y), square(y)); }); }
// d logistic x = y (1 - y) dx
JvpOut logistic_jvp(const JvpArgs& a) {
  return unary(a, [](const Array&, const Array& y) { return mul(y, sub(c(1, y), y)); });
}
// d sqrt x = dx / (2 sqrt x)
JvpOut sqrt_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return div(c(0.5, y), y); }); }
// d x^(-1/2) = -1/2 x^(-3/2) dx = -0.5 y / x dx
JvpOut rsqrt_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array& y) { return mul(c(-0.5, y), div(y, x)); });
}
// d asin x = dx / sqrt(1 - x^2)
JvpOut asin_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return rsqrt(sub(c(1, x), square(x))); }); }
// d acos x = -dx / sqrt(1 - x^2)
JvpOut acos_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return neg(rsqrt(sub(c(1, x), square(x)))); }); }
// d atan x = dx / (1 + x^2)
JvpOut atan_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return reciprocal(add(c(1, x), square(x))); }); }
// d sinh x = cosh x dx
JvpOut sinh_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return cosh(x); }); }
// d cosh x = sinh x dx
JvpOut cosh_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return sinh(x); }); }
// d asinh x = dx / sqrt(x^2 + 1)
JvpOut asinh_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return rsqrt(add(square(x), c(1, x))); }); }
// d acosh x = dx / sqrt((x - 1)(x + 1))   (the factored form is exact near 1, as JAX's; x^2 - 1 is not)
JvpOut acosh_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array&) { return rsqrt(mul(sub(x, c(1, x)), add(x, c(1, x)))); });
}
// d atanh x = dx / ((1 - x)(1 + x))
JvpOut atanh_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array&) { return reciprocal(mul(sub(c(1, x), x), add(c(1, x), x))); });
}
// d erf x = 2 / sqrt(pi) exp(-x^2) dx
JvpOut erf_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array&) { return mul(c(2 / std::sqrt(std::numbers::pi), x), exp(neg(square(x)))); });
}
// d erfc x = -2 / sqrt(pi) exp(-x^2) dx
JvpOut erfc_jvp(const JvpArgs& a) {
  return unary(a, [](const Array& x, const Array&) { return mul(c(-2 / std::sqrt(std::numbers::pi), x), exp(neg(square(x)))); });
}
// d cbrt x = dx / (3 cbrt(x)^2)
JvpOut cbrt_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return mul(c(1.0 / 3, y), integer_pow(y, -2)); }); }
// d 2^x = 2^x ln 2 dx
JvpOut exp2_jvp(const JvpArgs& a) { return unary(a, [](const Array&, const Array& y) { return mul(y, c(std::log(2.0), y)); }); }
// d log2 x = dx / (x ln 2)
JvpOut log2_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return reciprocal(mul(x, c(std::log(2.0), x))); }); }
// trigamma psi'(x) as a composition (so that it differentiates again): for x < 0 the reflection
// psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x); for x > 0, psi'(x) = psi'(x + 10) + sum 1 / (x + k)^2
// (k < 10, each only while x + k < 10), then the asymptotic series at x >= 10:
// 1/x + 1/2x^2 + sum B_2k / x^(2k+1) (its error there below 1e-15).
Array trigamma(const Array& x0) {
  const Array negative = lt(x0, c(0, x0));
  Array x = where(negative, sub(c(1, x0), x0), x0);
  // (1/x)^2, not 1/x^2, and a zero shift, not x * 0: finite at x = inf with finite derivatives,
  // so trigamma(inf) and its derivative are 0, not NaN)
  Array shift = zeros_like(x);
  for (int k = 0; k < 10; ++k) {
    const Array small = lt(x, c(10, x));
    shift = where(small, add(shift, square(reciprocal(x))), shift);
    x = where(small, add(x, c(1, x)), x);
  }
  const Array r = square(reciprocal(x));
  // B_2, B_4, ..., B_14: 1/6, -1/30, 1/42, -1/30, 5/66, -691/2730, 7/6.
  const double bernoulli[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6};
  Array series = c(bernoulli[6], x);
  for (int k = 5; k >= 0; --k) series = add(c(bernoulli[k], x), mul(r, series));
  const Array inv = reciprocal(x);
  const Array positive = add(shift, add(inv, add(mul(c(0.5, x), r), mul(mul(r, inv), series))));
  // sin(pi x) = +-sin(pi (x - round x)): x's distance to the nearest integer is exact, pi x
  // rounded is not (the kernels reduce the same way; trigamma(-100000.3) was 3% off). The
  // reflection reads 1/2 where x >= 0: at positive integers its sine is exactly 0, and the
  // unused branch's inf times a zero cotangent made NaN in third derivatives of lgamma.
  // Past |offset| = 1/4 the sine is sign(offset) cos(pi (1/2 - |offset|)): its slope is then
  // exactly 0 at the half-integers, where cos(fl(pi) offset)'s was not (lgamma's third derivative
  // at -50.5 was 7e-3 off in f32).
  const Array xr = where(negative, x0, c(0.5, x0));
  const Array offset = sub(xr, round(xr)), distance = abs(offset);
  const Array sin_pi = where(gt(distance, c(0.25, x0)), mul(sign(offset), cos(mul(c(std::numbers::pi, x0), sub(c(0.5, x0), distance)))),
                             sin(mul(c(std::numbers::pi, x0), offset)));
  const Array reflected = sub(div(c(std::numbers::pi * std::numbers::pi, x0), square(sin_pi)), positive);
  return where(negative, reflected, positive);
}
// d lgamma x = digamma(x) dx
JvpOut lgamma_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return digamma(x); }); }
// d digamma x = trigamma(x) dx
JvpOut digamma_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return trigamma(x); }); }
// y = erf_inv x:  dy = sqrt(pi) / 2 exp(y^2) dx
JvpOut erf_inv_jvp(const JvpArgs& a) {
  return unary(a, [](const Array&, const Array& y) { return mul(c(std::sqrt(std::numbers::pi) / 2, y), exp(square(y))); });
}
// floor and ceil are piecewise constant: zero tangent (as JAX)
JvpOut floor_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut ceil_jvp(const JvpArgs& a) { return zero_jvp(a); }
// d |x| = sign(x) dx (0 at x = 0, where JAX's rule gives 1: softplus' and logaddexp's
// compositions, max(a, b) + log1p(e^-|a - b|), then differentiate at their kink as the smooth
// function does, since max's tie split 1/2 and sign(0) = 0 add up to the slope; docs/status.md)
JvpOut abs_jvp(const JvpArgs& a) { return unary(a, [](const Array& x, const Array&) { return sign(x); }); }
// d sign x = 0
JvpOut sign_jvp(const JvpArgs& a) { return zero_jvp(a); }
// d x^n = n x^(n-1) dx
JvpOut integer_pow_jvp(const JvpArgs& a) {
  std::int64_t n = a.params.get<params::IntegerPow>().y;
  if (n == 0) return zero_jvp(a);
  return unary(a, [n](const Array& x, const Array&) {
    return n == 1 ? broadcast_to(c(1, x), x.shape()) : mul(c(static_cast<double>(n), x), n == 2 ? x : integer_pow(x, n - 1));
  });
}
// d(a + b) = da + db
JvpOut add_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  return {{y}, {tadd(a.t[0], a.t[1])}};
}
// d(a - b) = da - db
JvpOut sub_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  return {{y}, {tadd(a.t[0], tneg(a.t[1]))}};
}
// d(a b) = da b + a db
JvpOut mul_jvp(const JvpArgs& a) { return bilinear(a); }
// d(a / b) = da / b - db a / b^2 = (da - db y) / b
// Both tangents: one division of the difference (with a tiny b, da / b and db y / b overflow
// to inf - inf where they cancel). db alone: db (y / b), whose transpose ct (y / b) stays finite
// where ct / b would overflow.
JvpOut div_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  const Array& b = a.x[1];
  if (a.t[0].is_zero())
    return {{y}, {tmap(a.t[1], y.aval(), [&](const Array& t) { return neg(mul(t, div(y, b))); })}};
  Tangent numerator = tadd(a.t[0], tmap(a.t[1], y.aval(), [&](const Array& t) { return neg(mul(t, y)); }));
  return {{y}, {tmap(numerator, y.aval(), [&](const Array& t) { return div(t, b); })}};
}
// d max(a, b) = da [a > b] + db [b > a], ties split half and half, and a NaN operand (neither
// wins nor ties) passes neither tangent (JAX's _balanced_eq; 1 - w0 sent all of it to b)
JvpOut minmax_jvp(const JvpArgs& a, bool is_max) {
  Array y = primal1(a);
  const Array &x0 = a.x[0], &x1 = a.x[1];
  Array wins0 = is_max ? gt(x0, x1) : lt(x0, x1);
  Array wins1 = is_max ? gt(x1, x0) : lt(x1, x0);
  Array half = where(eq(x0, x1), c(0.5, y), c(0, y));
  Array w0 = where(wins0, c(1, y), half);
  Array w1 = where(wins1, c(1, y), half);
  Tangent l = tmap(a.t[0], y.aval(), [&](const Array& t) { return mul(t, w0); });
  Tangent r = tmap(a.t[1], y.aval(), [&](const Array& t) { return mul(t, w1); });
  return {{y}, {tadd(l, r)}};
}
JvpOut max_jvp(const JvpArgs& a) { return minmax_jvp(a, true); }
JvpOut min_jvp(const JvpArgs& a) { return minmax_jvp(a, false); }
// d a^b = b a^(b-1) da + log(a) a^b db   (log taken as 0 where a = 0)
JvpOut pow_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  const Array &x0 = a.x[0], &x1 = a.x[1];
  // At a = b = 0 the base is taken as 1, so the slope is 0 there (not 0 * 0^-1 = NaN) while its
  // derivative in b elsewhere stays a^-1 (a select of the whole slope lost d2/da db at b = 0).
  Tangent l = tmap(a.t[0], y.aval(), [&](const Array& t) {
    const Array base = where(logical_and(eq(x0, c(0, x0)), eq(x1, c(0, x1))), broadcast_to(c(1, x0), x0.shape()), x0);
    return mul(t, mul(x1, pow(base, sub(x1, c(1, x1)))));
  });
  Tangent r = tmap(a.t[1], y.aval(), [&](const Array& t) {
    Array safe_log = log(where(eq(x0, c(0, x0)), c(1, x0), x0));
    return mul(t, mul(y, safe_log));
  });
  return {{y}, {tadd(l, r)}};
}
// d atan2(x, y) = (y dx - x dy) / (x^2 + y^2)
JvpOut atan2_jvp(const JvpArgs& a) {
  Array out = primal1(a);
  const Array &x = a.x[0], &y = a.x[1];
  const Array r2 = add(mul(x, x), mul(y, y));
  Tangent l = tmap(a.t[0], out.aval(), [&](const Array& t) { return mul(t, div(y, r2)); });
  Tangent r = tmap(a.t[1], out.aval(), [&](const Array& t) { return mul(t, div(neg(x), r2)); });
  return {{out}, {tadd(l, r)}};
}
// nextafter(x, y) moves x by one ulp toward y, a step that is constant almost everywhere:
// d nextafter(x, y) = dx (JAX defines no derivative; this one is exact almost everywhere)
JvpOut nextafter_jvp(const JvpArgs& a) {
  Array out = primal1(a);
  return {{out}, {tmap(a.t[0], out.aval(), [](const Array& t) { return t; })}};
}
// rem(x, y) = x - trunc(x / y) y:  d = dx - trunc(x / y) dy   (trunc is piecewise constant)
JvpOut rem_jvp(const JvpArgs& a) {
  Array out = primal1(a);
  if (!is_floating(out.dtype())) return zero_jvp(a);
  const Array q = div(a.x[0], a.x[1]);
  Tangent l = tmap(a.t[0], out.aval(), [&](const Array& t) { return t; });
  Tangent r = tmap(a.t[1], out.aval(), [&](const Array& t) { return mul(neg(t), mul(sign(q), floor(abs(q)))); });
  return {{out}, {tadd(l, r)}};
}
// the bitwise ops take and give integers: no tangent
JvpOut bitwise_and_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut bitwise_or_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut bitwise_xor_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut shift_left_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut shift_right_logical_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut shift_right_arithmetic_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut bitwise_not_jvp(const JvpArgs& a) { return zero_jvp(a); }
// round is piecewise constant: zero tangent (as JAX)
JvpOut round_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut population_count_jvp(const JvpArgs& a) { return zero_jvp(a); }
// comparisons are piecewise constant: zero tangent
JvpOut eq_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut ne_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut lt_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut le_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut gt_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut ge_jvp(const JvpArgs& a) { return zero_jvp(a); }
// d select(p, a, b) = select(p, da, db)
JvpOut select_n_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  bool any = false;
  for (std::size_t i = 1; i < a.t.size(); ++i) any = any || !a.t[i].is_zero();
  if (!any) return {{y}, {Tangent::zero(y.aval())}};
  std::vector<Array> ins{a.x[0]};
  for (std::size_t i = 1; i < a.t.size(); ++i) ins.push_back(a.t[i].instantiate());
  return {{y}, {Tangent(bind1(P::select_n, ins, {}, a.loc))}};
}
// d convert(x) = convert(dx) between float types; zero when either side is not float
JvpOut convert_element_type_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  if (!differentiable(y.aval()) || !differentiable(a.x[0].aval())) return {{y}, {Tangent::zero(y.aval())}};
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& t) { return bind1(a.prim, {t}, a.params, a.loc); })}};
}
// d stop_gradient(x) = 0
JvpOut stop_gradient_jvp(const JvpArgs& a) { return zero_jvp(a); }
// d copy(x) = copy(dx)
JvpOut copy_jvp(const JvpArgs& a) { return linear_all(a); }
// d (A . B) = dA . B + A . dB
JvpOut dot_general_jvp(const JvpArgs& a) { return bilinear(a); }
// d conv(l, r) = conv(dl, r) + conv(l, dr)
JvpOut conv_general_dilated_jvp(const JvpArgs& a) { return bilinear(a); }
// d sum x = sum dx
JvpOut reduce_sum_jvp(const JvpArgs& a) { return linear_all(a); }
// A reduction's result y broadcast back over the reduced axes of its operand x.
Array unreduce(const Array& y, const Array& x, const Ints& axes) {
  Ints kept;
  for (std::int64_t i = 0; i < x.ndim(); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) kept.push_back(i);
  return broadcast_in_dim(y, x.shape(), kept);
}

// d max x = mean of dx over the positions attaining the max
JvpOut reduce_chooser_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  const Array& x = a.x[0];
  const Ints& axes = a.params.get<params::Reduce>().axes;
  Array at_max = astype(eq(x, unreduce(y, x, axes)), x.dtype());
  Array count = bind1(P::reduce_sum, {at_max}, params::Reduce{.axes = axes});
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& t) {
            return div(bind1(P::reduce_sum, {mul(t, at_max)}, params::Reduce{.axes = axes}), count);
          })}};
}
JvpOut reduce_max_jvp(const JvpArgs& a) { return reduce_chooser_jvp(a); }
JvpOut reduce_min_jvp(const JvpArgs& a) { return reduce_chooser_jvp(a); }
// Rows of x (n, m) moved by k toward the end (toward_end) or the start, ones filling the gap.
Array shift_rows(const Array& x, std::int64_t k, bool toward_end) {
  std::int64_t n = x.dim(0), m = x.dim(1);
  Array fill = broadcast_to(scalar_like(1.0, x), {k, m});
  if (toward_end) return concatenate({fill, slice(x, {0, 0}, {n - k, m})}, 0);
  return concatenate({slice(x, {k, 0}, {n, m}), fill}, 0);
}

// Exclusive running products down the rows of x (n, m): out[i] = prod_{j<i} x[j] (toward_end)
// or prod_{j>i} x[j], by doubling (log2 n multiplications, no division).
Array exclusive_cumprod(const Array& x, bool toward_end) {
  std::int64_t n = x.dim(0);
  Array acc = shift_rows(x, 1, toward_end);
  for (std::int64_t k = 1; k < n; k *= 2) acc = mul(acc, shift_rows(acc, k, toward_end));
  return acc;
}

// The product of all the other reduced elements at each position of x: prod_{j != i} x_j,
// computed as (products before i) * (products after i), exact where x has zeros.
Array products_of_others(const Array& x, const Ints& axes) {
  Ints perm(axes.begin(), axes.end()), inverse(static_cast<std::size_t>(x.ndim()));
  std::int64_t n = 1;
  for (auto ax : axes) n *= x.dim(ax);
  for (std::int64_t i = 0; i < x.ndim(); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) perm.push_back(i);
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  Array moved = transpose(x, perm);
  if (n <= 1) return broadcast_to(scalar_like(1.0, x), x.shape());
  Array rows = reshape(moved, {n, x.size() / n});
  Array others = mul(exclusive_cumprod(rows, true), exclusive_cumprod(rows, false));
  return transpose(reshape(others, moved.shape()), inverse);
}

// d prod x = sum(dx_i * prod_{j != i} x_j)
JvpOut reduce_prod_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  const Array& x = a.x[0];
  const Ints& axes = a.params.get<params::Reduce>().axes;
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& t) {
            Array others = products_of_others(x, axes);
            return bind1(P::reduce_sum, {mul(t, others)}, params::Reduce{.axes = axes});
          })}};
}
JvpOut argmax_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut argmin_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut reduce_and_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut reduce_or_jvp(const JvpArgs& a) { return zero_jvp(a); }
JvpOut is_finite_jvp(const JvpArgs& a) { return zero_jvp(a); }
// clamp(lo, x, hi) = min(max(x, lo), hi): d = dhi where max(x, lo) >= hi, else dlo where x <= lo,
// else dx (a tie goes to the bound it equals; lax's clamp gives 0 to every operand there)
JvpOut clamp_jvp(const JvpArgs& a) {
  const Array y = primal1(a);
  const Array &lo = a.x[0], &x = a.x[1], &hi = a.x[2];
  const Array above = logical_or(ge(x, hi, a.loc), ge(lo, hi, a.loc), a.loc);
  const Array below = logical_and(logical_not(above, a.loc), le(x, lo, a.loc), a.loc);
  auto bound_part = [&](std::size_t i, const Array& where_bound) {
    return tmap(a.t[i], y.aval(), [&](const Array& t) { return where(where_bound, broadcast_to(t, y.shape(), a.loc), 0.0, a.loc); });
  };
  // strictly inside (lo < x < hi): a NaN x passes no tangent, as JAX's rule
  const Array inside_mask = logical_and(gt(x, lo, a.loc), lt(x, hi, a.loc), a.loc);
  const Tangent inside = tmap(a.t[1], y.aval(), [&](const Array& t) { return where(inside_mask, t, 0.0, a.loc); });
  return {{y}, {tadd(tadd(inside, bound_part(0, below)), bound_part(2, above))}};
}
// cumsum is linear; the other cumulative primitives take JAX's derivative, that of
// associative_scan with the same combine (so a tie of cummax splits its tangent as max's does),
// evaluated on the tangent alone: d cumop(x) = jvp(associative_scan(op))(x; dx).
JvpOut cumsum_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut cumulative_jvp(const JvpArgs& a, Array (*combine)(const Array&, const Array&, std::source_location)) {
  if (!is_floating(a.x[0].dtype())) return zero_jvp(a);
  const auto& c = a.params.get<params::Cumulative>();
  Array y = primal1(a);
  const auto fn = [combine](const Array& l, const Array& r) { return combine(l, r, std::source_location::current()); };
  const ClosedJaxpr scan = trace_flat(
      [&](std::span<const Array> x) { return std::vector<Array>{associative_scan(fn, x[0], c.reverse, c.axis)}; },
      std::vector<ShapedArray>{a.x[0].aval()});
  return {{y}, {jvp_eval(scan, a.x, a.t).tangents.at(0)}};
}
JvpOut cumprod_jvp(const JvpArgs& a) { return cumulative_jvp(a, &mul); }
JvpOut cummax_jvp(const JvpArgs& a) { return cumulative_jvp(a, &maximum); }
JvpOut cummin_jvp(const JvpArgs& a) { return cumulative_jvp(a, &minimum); }
JvpOut cumlogsumexp_jvp(const JvpArgs& a) { return cumulative_jvp(a, &logaddexp); }
// d reduce_window_sum(x) = reduce_window_sum(dx)
JvpOut reduce_window_sum_jvp(const JvpArgs& a) { return linear_all(a); }
// d reduce_window_max(x) = dx at each window's selected (first maximal) element, JAX's rule:
// select_and_gather_add(dx, x). The same for min with the first minimum.
JvpOut window_chooser_jvp(const JvpArgs& a, bool select_max) {
  if (!is_floating(a.x[0].dtype())) return zero_jvp(a);
  Array y = primal1(a);
  const params::SelectWindow s = select_window(a.params.get<params::ReduceWindow>(), select_max);
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& dx) {
            return bind1(P::select_and_gather_add, {dx, a.x[0]}, s, a.loc);
          })}};
}
JvpOut reduce_window_max_jvp(const JvpArgs& a) { return window_chooser_jvp(a, true); }
JvpOut reduce_window_min_jvp(const JvpArgs& a) { return window_chooser_jvp(a, false); }
// Both select ops are linear in their first operand and piecewise constant in x (which only
// selects): d f(v, x) = f(dv, x).
JvpOut select_and_gather_add_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
JvpOut select_and_scatter_add_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
// shape operations are linear in the operand
JvpOut broadcast_in_dim_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut reshape_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut transpose_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut rev_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut squeeze_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut expand_dims_jvp(const JvpArgs& a) { return linear_all(a); }
JvpOut slice_jvp(const JvpArgs& a) { return linear_all(a); }
// d pad(x, v) = pad(dx, dv)
JvpOut pad_jvp(const JvpArgs& a) { return linear_in(a, {0, 1}); }
// d x[i:i+n] = dx[i:i+n]   (indices carry no tangent)
JvpOut dynamic_slice_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
// d update(x, u, i) = update(dx, du, i)
JvpOut dynamic_update_slice_jvp(const JvpArgs& a) { return linear_in(a, {0, 1}); }
JvpOut concatenate_jvp(const JvpArgs& a) { return linear_all(a); }
// d take(x, i) = take(dx, i)
JvpOut gather_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
// d scatter_add(x, i, u) = scatter_add(dx, i, du)
JvpOut scatter_add_jvp(const JvpArgs& a) { return linear_in(a, {0, 2}); }
// d scatter(x, i, u) = scatter(dx, i, du): each element is x's or one update's, the same one for
// the tangents (the kernel applies updates in order). scatter_mul / _min / _max: scatter_rules.cpp.
JvpOut scatter_jvp(const JvpArgs& a) { return linear_in(a, {0, 2}); }
JvpOut iota_jvp(const JvpArgs& a) { return zero_jvp(a); }
// d name(x) = dx: only the primal carries the name (policies save primals, never tangents)
JvpOut name_jvp(const JvpArgs& a) { return {{primal1(a)}, {a.t[0]}}; }
// random bits are piecewise constant in the key: zero tangent
JvpOut threefry2x32_jvp(const JvpArgs& a) { return zero_jvp(a); }
// The symmetric matrix whose `lower` (else upper) triangle is m's (what eigh and cholesky read).
Array symmetric_of_triangle(const Array& m, bool lower, std::source_location loc) {
  return lower ? add(tril(m, 0, loc), matrix_transpose(tril(m, -1, loc), loc), loc)
               : add(triu(m, 0, loc), matrix_transpose(triu(m, 1, loc), loc), loc);
}

// L = chol(A), A read from its lower triangle: dL = L Φ(L^-1 dA L^-T), Φ(X) = X's lower
// triangle with its diagonal halved, dA = tril(dA) + tril(dA, -1)^T (the symmetric matrix the
// kernel reads; JAX uses dA as given, which differs when it is not symmetric)
JvpOut cholesky_jvp(const JvpArgs& a) {
  Array l = primal1(a);
  return {{l}, {tmap(a.t[0], l.aval(), [&](const Array& t) {
            const Array da = symmetric_of_triangle(t, true, a.loc);
            const Array da_lt = linalg::triangular_solve(l, da, {.lower = true, .transpose_a = true}, a.loc);  // dA L^-T
            const Array x = linalg::triangular_solve(l, da_lt, {.left_side = true, .lower = true}, a.loc);   // L^-1 dA L^-T
            const Array phi = mul(add(tril(x, 0, a.loc), tril(x, -1, a.loc), a.loc), c(0.5, x), a.loc);
            return matmul(l, phi, a.loc);
          })}};
}
// x = op(a)^-1 b (left side) or b op(a)^-1: dx = op(a)^-1 (db - op(da) x) or (db - x op(da)) op(a)^-1,
// da restricted to the triangle the solve reads (its diagonal too unless unit_diagonal)
JvpOut triangular_solve_jvp(const JvpArgs& a) {
  const auto& ps = a.params.get<params::TriangularSolve>();
  Array x = primal1(a);
  Tangent rhs = a.t[1];
  if (!a.t[0].is_zero()) {
    Array da = ps.lower ? tril(a.t[0].value(), ps.unit_diagonal ? -1 : 0, a.loc) : triu(a.t[0].value(), ps.unit_diagonal ? 1 : 0, a.loc);
    if (ps.transpose_a) da = matrix_transpose(da, a.loc);
    rhs = tadd(rhs, Tangent(neg(ps.left_side ? matmul(da, x, a.loc) : matmul(x, da, a.loc), a.loc)));
  }
  return {{x}, {tmap(rhs, x.aval(), [&](const Array& r) { return bind1(a.prim, {a.x[0], r}, a.params, a.loc); })}};
}
// pivots are integers: zero tangent
JvpOut lu_pivots_to_permutation_jvp(const JvpArgs& a) { return zero_jvp(a); }

// A matrix of `shape` (batch..., r, c) that is zero but for ones at (i, i), i >= from.
Array identity_from(const Shape& shape, std::int64_t from, DType dtype, std::source_location loc) {
  const std::int64_t rank = static_cast<std::int64_t>(shape.size());
  const Array rows = iota(DType::i32, shape, rank - 2, loc), cols = iota(DType::i32, shape, rank - 1, loc);
  return where(rows >= from, astype(eq(rows, cols, loc), dtype, loc), 0.0, loc);
}

// P A = L U (P the permutation): with L, U extended to m x m and n x n by an identity block and
// X = L^-1 P dA U^-1, dL = L tril(X, -1) and dU = triu(X) U, packed as d lu = dL + dU (De Hoog,
// Anderssen and Lukas); the pivots and the permutation have zero tangents.
JvpOut lu_jvp(const JvpArgs& a) {
  std::vector<Array> outs = bind(a.prim, a.x, a.params, a.loc);
  const Array &lu = outs[0], &permutation = outs[2];
  const std::int64_t m = lu.dim(-2), n = lu.dim(-1), k = std::min(m, n);
  Tangent dlu = tmap(a.t[0], lu.aval(), [&](const Array& t) {
    const Shape batch(lu.shape().begin(), lu.shape().end() - 2);
    auto with_batch = [&](std::int64_t r, std::int64_t c) {
      Shape s = batch;
      s.push_back(r);
      s.push_back(c);
      return s;
    };
    Array l = tril(slice_in_dim(lu, 0, k, 1, -1, a.loc), -1, a.loc);
    if (m > k) l = concatenate({l, zeros(with_batch(m, m - k), lu.dtype())}, -1, a.loc);
    l = add(l, identity_from(with_batch(m, m), 0, lu.dtype(), a.loc), a.loc);
    Array u = triu(slice_in_dim(lu, 0, k, 1, -2, a.loc), 0, a.loc);
    if (n > k) u = add(concatenate({u, zeros(with_batch(n - k, n), lu.dtype())}, -2, a.loc), identity_from(with_batch(n, n), k, lu.dtype(), a.loc), a.loc);
    const Array pda = take_along_axis(t, expand_dims(permutation, permutation.ndim(), a.loc), -2, a.loc);  // P dA
    const Array la = linalg::triangular_solve(l, pda, {.left_side = true, .lower = true, .unit_diagonal = true}, a.loc);
    const Array x = linalg::triangular_solve(u, la, {.left_side = false, .lower = false}, a.loc);
    return add(matmul(l, tril(x, -1, a.loc), a.loc), matmul(triu(x, 0, a.loc), u, a.loc), a.loc);
  });
  return {outs, {dlu, Tangent::zero(outs[1].aval()), Tangent::zero(outs[2].aval())}};
}
// The factorizations' tangents for a zero input tangent: zeros of every output.
JvpOut zero_tangents(std::vector<Array> outs) {
  JvpOut r{std::move(outs), {}};
  for (const auto& y : r.primals) r.tangents.push_back(Tangent::zero(y.aval()));
  return r;
}

// A = Q R (m >= n, reduced or square): with X = Q^T dA R^-1 and Ω = tril(X, -1) - tril(X, -1)^T,
// dQ = Q (Ω - X) + dA R^-1 and dR = (X - Ω) R (Townsend's QR derivative, as JAX).
// sort moves elements: the tangents move with them. The permutation comes from sorting an iota
// along with the operands (JAX's rule): d out_i = take_along_axis(dx_i, perm, dimension). The
// iota is i64 where i32 cannot number the dimension (its positions past 2^31 wrapped; a review).
JvpOut sort_jvp(const JvpArgs& a) {
  const auto& ps = a.params.get<params::Sort>();
  std::vector<Array> in(a.x.begin(), a.x.end());
  in.push_back(iota(numbers_positions(i32, a.x[0].shape(), ps.dimension) ? i32 : i64, a.x[0].shape(), ps.dimension));
  std::vector<Array> out = bind(a.prim, in, a.params, a.loc);
  const Array perm = out.back();
  out.pop_back();
  JvpOut r{out, {}};
  for (std::size_t i = 0; i < a.t.size(); ++i)
    r.tangents.push_back(tmap(a.t[i], out[i].aval(), [&](const Array& t) { return take_along_axis(t, perm, ps.dimension); }));
  return r;
}
// top_k's values move with their indices: d values = take_along_axis(dx, indices) (JAX's rule);
// the indices have no tangent.
JvpOut top_k_jvp(const JvpArgs& a) {
  std::vector<Array> out = bind(a.prim, a.x, a.params, a.loc);
  const std::int64_t last = a.x[0].ndim() - 1;
  JvpOut r{out, {}};
  r.tangents.push_back(tmap(a.t[0], out[0].aval(), [&](const Array& t) { return take_along_axis(t, out[1], last, a.loc); }));
  r.tangents.push_back(Tangent::zero(out[1].aval()));
  return r;
}
JvpOut qr_jvp(const JvpArgs& a) {
  std::vector<Array> outs = bind(a.prim, a.x, a.params, a.loc);
  if (a.t[0].is_zero()) return zero_tangents(std::move(outs));
  const Array &q = outs[0], &r = outs[1];
  const std::int64_t m = a.x[0].dim(-2), n = a.x[0].dim(-1);
  if (m < n || (a.params.get<params::Qr>().full_matrices && m != n))
    throw TransformError("jvp of qr(" + a.x[0].aval().str() + "): defined for m >= n, and with full_matrices only for square " +
                         "matrices (as JAX) (at " + format_location(a.loc) + ")");
  const Array da_rinv = linalg::triangular_solve(r, a.t[0].value(), {.lower = false}, a.loc);  // dA R^-1
  const Array x = matmul(matrix_transpose(q, a.loc), da_rinv, a.loc);
  const Array below = tril(x, -1, a.loc);
  const Array omega = sub(below, matrix_transpose(below, a.loc), a.loc);
  return {outs, {Tangent(add(matmul(q, sub(omega, x, a.loc), a.loc), da_rinv, a.loc)), Tangent(matmul(sub(x, omega, a.loc), r, a.loc))}};
}

// A = V diag(w) V^T: with S = V^T dA V (dA the symmetric tangent of the triangle read), dw =
// diag(S) and dV = V (F ∘ S), F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it (infinite for a
// repeated eigenvalue: its eigenvectors are not differentiable, as in JAX)
JvpOut eigh_jvp(const JvpArgs& a) {
  std::vector<Array> outs = bind(a.prim, a.x, a.params, a.loc);
  if (a.t[0].is_zero()) return zero_tangents(std::move(outs));
  const Array &v = outs[0], &w = outs[1];
  const Array da = symmetric_of_triangle(a.t[0].value(), a.params.get<params::Eigh>().lower, a.loc);
  const Array s = matmul(matmul(matrix_transpose(v, a.loc), da, a.loc), v, a.loc);
  const Array eye = identity_from(s.shape(), 0, s.dtype(), a.loc);
  const Array gaps = sub(expand_dims(w, w.ndim() - 1, a.loc), expand_dims(w, w.ndim(), a.loc), a.loc);  // w_j - w_i
  const Array f = sub(div(c(1.0, gaps), add(gaps, eye, a.loc), a.loc), eye, a.loc);
  return {outs, {Tangent(matmul(v, mul(f, s, a.loc), a.loc)), Tangent(diagonal(s, 0, -2, -1, a.loc))}};
}

// A = U diag(s) V^T (reduced): with S = U^T dA V, ds = diag(S) and, F_ij = 1 / (s_j^2 - s_i^2) off
// the diagonal (0 on it), dU = U (F ∘ (S diag(s) + diag(s) S^T)) and
// dV = V (F ∘ (diag(s) S + S^T diag(s))), plus the parts outside the span: (I - U U^T) dA V / s
// (m > n) and (I - V V^T) dA^T U / s (n > m); as JAX for real matrices (its diag(1/s) (S - S^T) / 2
// term is zero for them). Infinite for repeated singular values; not defined for complete U, V of
// a matrix that is not square (for a square one they are the reduced ones, as JAX's rule says).
JvpOut svd_jvp(const JvpArgs& a) {
  const auto& ps = a.params.get<params::Svd>();
  if (ps.compute_uv && ps.full_matrices && a.x[0].dim(-1) != a.x[0].dim(-2) && !a.t[0].is_zero())
    throw TransformError("jvp of svd(" + a.x[0].aval().str() + ") with full_matrices of a matrix that is not square: not defined (as JAX); use full_matrices = false (at " +
                         format_location(a.loc) + ")");
  if (a.t[0].is_zero()) return zero_tangents(bind(a.prim, a.x, a.params, a.loc));
  // The reduced factors, also when only s is wanted (its derivative needs U and V): one
  // factorization, whose s is the primal.
  const std::vector<Array> f = bind(a.prim, a.x, params::Svd{.full_matrices = false, .compute_uv = true}, a.loc);
  const std::vector<Array> outs = ps.compute_uv ? f : std::vector<Array>{f[0]};
  const Array &s = f[0], &u = f[1], &vt = f[2];
  const Array v = matrix_transpose(vt, a.loc), ut = matrix_transpose(u, a.loc), da = a.t[0].value();
  const Array ss = matmul(matmul(ut, da, a.loc), v, a.loc);  // S
  const Array ds = diagonal(ss, 0, -2, -1, a.loc);
  if (!ps.compute_uv) return {outs, {Tangent(ds)}};
  const Array row = expand_dims(s, s.ndim() - 1, a.loc), col = expand_dims(s, s.ndim(), a.loc);  // s_j, s_i
  const Array eye = identity_from(ss.shape(), 0, ss.dtype(), a.loc);
  const Array gaps = mul(add(row, col, a.loc), sub(row, col, a.loc), a.loc);  // s_j^2 - s_i^2
  const Array fm = sub(div(c(1.0, gaps), add(gaps, eye, a.loc), a.loc), eye, a.loc);
  const Array s_ds = mul(row, ss, a.loc), ds_s = mul(col, ss, a.loc);  // S diag(s), diag(s) S
  Array du = matmul(u, mul(fm, add(s_ds, matrix_transpose(s_ds, a.loc), a.loc), a.loc), a.loc);
  Array dv = matmul(v, mul(fm, add(ds_s, matrix_transpose(ds_s, a.loc), a.loc), a.loc), a.loc);
  const std::int64_t m = a.x[0].dim(-2), n = a.x[0].dim(-1);
  if (m > n) {
    const Array dav = matmul(da, v, a.loc);
    du = add(du, div(sub(dav, matmul(u, matmul(ut, dav, a.loc), a.loc), a.loc), row, a.loc), a.loc);
  }
  if (n > m) {
    const Array datu = matmul(matrix_transpose(da, a.loc), u, a.loc);
    dv = add(dv, div(sub(datu, matmul(v, matmul(vt, datu, a.loc), a.loc), a.loc), row, a.loc), a.loc);
  }
  return {outs, {Tangent(ds), Tangent(du), Tangent(matrix_transpose(dv, a.loc))}};
}

// The collectives are linear in their operand: d psum(x) = psum(dx), and so on.
JvpOut psum_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
// d pmax(x) = psum(dx where x attains the max) / (number of processes attaining it)
JvpOut pmax_jvp(const JvpArgs& a) {
  Array y = primal1(a);
  const Array& x = a.x[0];
  Array at_max = astype(eq(x, y), x.dtype());
  Array count = bind1(P::psum, {at_max}, {}, a.loc);
  return {{y}, {tmap(a.t[0], y.aval(), [&](const Array& t) {
            return div(bind1(P::psum, {mul(t, at_max)}, {}, a.loc), count);
          })}};
}
JvpOut all_gather_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
JvpOut psum_scatter_jvp(const JvpArgs& a) { return linear_in(a, {0}); }
JvpOut ppermute_jvp(const JvpArgs& a) { return linear_in(a, {0}); }

}  // namespace

// Every primitive has its own jvp rule, stem##_jvp (no family default: each derivative is
// particular to its primitive).
JvpRule jvp_rule(Primitive p) {
  switch (p) {
#define XJAX_JVP_CASE(name, stem, S, family, kinds) \
  case P::name: return stem##_jvp;
    XJAX_PRIMITIVES(XJAX_JVP_CASE)
#undef XJAX_JVP_CASE
  }
  return nullptr;
}

// ---- the pass --------------------------------------------------------------------------------

JvpOut jvp_eval(const ClosedJaxpr& cj, std::span<const Array> primals, std::span<const Tangent> tangents) {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_map<std::uint64_t, Array> pv;
  std::unordered_map<std::uint64_t, Tangent> tv;
  for (std::size_t i = 0; i < j.constvars.size(); ++i) {
    pv[j.constvars[i].id()] = cj.consts[i];
    tv[j.constvars[i].id()] = Tangent::zero(j.constvars[i].aval());
  }
  for (std::size_t i = 0; i < j.invars.size(); ++i) {
    pv[j.invars[i].id()] = primals[i];
    tv[j.invars[i].id()] = differentiable(j.invars[i].aval()) ? tangents[i] : Tangent::zero(j.invars[i].aval());
  }
  auto primal = [&](const Atom& a) -> Array {
    if (auto* l = std::get_if<Literal>(&a)) return l->value;
    return pv.at(std::get<Var>(a).id());
  };
  auto tangent = [&](const Atom& a) -> Tangent {
    if (auto* l = std::get_if<Literal>(&a)) return Tangent::zero(l->value.aval());
    return tv.at(std::get<Var>(a).id());
  };
  std::vector<Array> xs;
  std::vector<Tangent> ts;
  for (const Eqn& e : j.eqns) {
    xs.clear();
    ts.clear();
    bool any = false;
    for (const auto& in : e.inputs) {
      xs.push_back(primal(in));
      ts.push_back(tangent(in));
      any = any || !ts.back().is_zero();
    }
    JvpOut out;
    LocationScope at(&e.loc);  // an enclosing rule's scope (a checkpoint's) would rename it
    if (!any) {
      out.primals = bind(e.prim, xs, e.params, e.loc);
      for (const auto& y : out.primals) out.tangents.push_back(Tangent::zero(y.aval()));
    } else {
      out = jvp_rule(e.prim)(JvpArgs{e.prim, xs, ts, e.params, e.loc});
    }
    for (std::size_t k = 0; k < e.outputs.size(); ++k) {
      pv[e.outputs[k].id()] = out.primals[k];
      Tangent t = out.tangents[k];
      if (!differentiable(e.outputs[k].aval())) t = Tangent::zero(e.outputs[k].aval());
      tv[e.outputs[k].id()] = t;
    }
  }
  JvpOut result;
  for (const auto& o : j.outvars) {
    result.primals.push_back(primal(o));
    result.tangents.push_back(tangent(o));
  }
  return result;
}

ClosedJaxpr jvp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& nonzero_in, bool instantiate_out,
                      std::vector<bool>* nonzero_out) {
  return jvp_jaxpr(j, nonzero_in, std::vector<bool>(j->outvars.size(), instantiate_out), nonzero_out);
}

ClosedJaxpr jvp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& nonzero_in, const std::vector<bool>& instantiate,
                      std::vector<bool>* nonzero_out) try {
  std::vector<ShapedArray> avals = j.in_avals();
  std::size_t n = avals.size();
  for (std::size_t i = 0; i < n; ++i)
    if (nonzero_in[i]) avals.push_back(avals[i]);
  std::vector<bool> present;
  auto body = [&](std::span<const Array> args) {
    std::vector<Tangent> ts;
    std::size_t k = n;
    for (std::size_t i = 0; i < n; ++i)
      ts.push_back(nonzero_in[i] ? Tangent(args[k++]) : Tangent::zero(args[i].aval()));
    JvpOut out = jvp_eval(j, args.subspan(0, n), ts);
    std::vector<Array> res = out.primals;
    present.clear();
    for (std::size_t o = 0; o < out.tangents.size(); ++o) {
      const Tangent& t = out.tangents[o];
      present.push_back(instantiate[o] || !t.is_zero());
      if (present.back()) res.push_back(t.instantiate());
    }
    return res;
  };
  ClosedJaxpr out = trace_flat(body, avals);
  if (nonzero_out) *nonzero_out = present;
  return out;
} catch (...) {
  rethrow_internal("jvp");
}

}  // namespace xjax::detail
