// check_grads.cpp: numerical gradient checking, as jax.test_util.check_grads.
// check_jvp: jvp(f)(x, v) against (f(x + eps v) - f(x - eps v)) / (2 eps).
// check_vjp: <vjp(f)(x)(u), v> against <u, numerical jvp along v>.
// Order n > 1 recurses: fwd on (x, v) -> jvp(f)(x, v), rev on x -> vjp(f)(x)(f(x)).
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>

#include "ad.hpp"
#include "xjax/ops.hpp"
#include "xjax/testing.hpp"

namespace xjax::detail {
namespace {

struct Tol {
  std::optional<double> atol, rtol;  // the user's; unset: JAX's default per dtype
  double eps;
  bool per_element;
};

// JAX's default_gradient_tolerance: f64 1e-5, f32 2e-3, f16 1e-2, bf16 1e-1.
double default_tolerance(DType d) { return d == bf16 ? 1e-1 : d == f16 ? 1e-2 : d == f32 ? 2e-3 : 1e-5; }

/// The bound |got - expected| <= atol + rtol |expected| that JAX's check_close applies to two
/// arrays of dtypes a and b and `size` elements: each tolerance the user's or the larger of the
/// two dtypes' defaults, times the size (JAX's _assert_numpy_close) unless per_element.
struct Bound {
  double atol, rtol;
};
Bound bound_for(const Tol& tol, DType a, DType b, std::int64_t size) {
  const double scale = tol.per_element ? 1.0 : static_cast<double>(std::max<std::int64_t>(size, 1));
  const double by_dtype = std::max(default_tolerance(a), default_tolerance(b));
  const double rtol = tol.rtol.value_or(by_dtype) * scale;
  // a zero rtol is numpy's default (JAX passes only a nonzero one to assert_allclose): 1e-7
  return {tol.atol.value_or(by_dtype) * scale, rtol == 0 ? 1e-7 : rtol};
}

Tol tolerance(const CheckGradsOptions& o) { return {o.atol, o.rtol, o.eps.value_or(1e-4), o.per_element}; }

Array random_like(const Array& x, std::mt19937& rng) {
  if (!differentiable(x.aval())) return zeros(x.shape(), x.dtype());
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(x.size()));
  for (auto& e : v) e = normal(rng);
  return astype(array<double>(v, x.shape()), x.dtype());
}

ClosedJaxpr trace_at(const FlatFn& f, std::span<const Array> args) {
  std::vector<ShapedArray> avals;
  for (const auto& a : args) avals.push_back(a.aval());
  return trace_flat(f, avals);
}

// (f(x + eps v) - f(x - eps v)) / (2 eps), leaf by leaf (integer outputs give zeros).
std::vector<Array> numerical_jvp(const FlatFn& f, std::span<const Array> x, std::span<const Array> v, double eps) {
  std::vector<Array> plus, minus;
  for (std::size_t i = 0; i < x.size(); ++i) {
    bool d = differentiable(x[i].aval());
    plus.push_back(d ? add(x[i], mul(v[i], scalar_like(eps, x[i]))) : x[i]);
    minus.push_back(d ? sub(x[i], mul(v[i], scalar_like(eps, x[i]))) : x[i]);
  }
  auto fp = f(plus), fm = f(minus);
  std::vector<Array> out;
  for (std::size_t k = 0; k < fp.size(); ++k) {
    if (!differentiable(fp[k].aval())) { out.push_back(zeros(fp[k].shape(), fp[k].dtype())); continue; }
    // JAX's _safe_subtract: equal values (the same infinity at both points) differ by 0, not NaN
    out.push_back(div(where(eq(fp[k], fm[k]), zeros_like(fp[k]), sub(fp[k], fm[k])), scalar_like(2 * eps, fp[k])));
  }
  return out;
}

double inner(std::span<const Array> a, std::span<const Array> b) {
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!differentiable(a[k].aval())) continue;
    auto x = a[k].to_vector<double>(), y = b[k].to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  }
  return s;
}

[[noreturn]] void fail(int order, const char* mode, const std::string& what, double expected, double got, double err) {
  std::ostringstream os;
  os.precision(8);
  os << "check_grads failed at order " << order << ", mode " << mode << ": " << what << ": expected " << expected
     << ", got " << got << " (error " << err << ")";
  throw GradCheckError(os.str());
}

// numpy's assert_allclose as JAX's check_close calls it: NaN matches NaN, an infinity itself.
bool close(double got, double expected, const Bound& b) {
  if (got == expected || (std::isnan(got) && std::isnan(expected))) return true;
  return std::abs(got - expected) <= b.atol + b.rtol * std::abs(expected);
}

// Fails with the element furthest past its bound (the largest discrepancy), if any.
void check_close(std::span<const Array> got, std::span<const Array> expected, const Tol& tol, int order, const char* mode) {
  double worst_ratio = 0;
  std::string worst_where;
  double worst_expected = 0, worst_got = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (!differentiable(expected[k].aval())) continue;
    const Bound b = bound_for(tol, got[k].dtype(), expected[k].dtype(), expected[k].size());
    auto g = got[k].to_vector<double>(), e = expected[k].to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (close(g[i], e[i], b)) continue;
      const double allowed = b.atol + b.rtol * std::abs(e[i]);
      const double ratio = std::isnan(g[i] - e[i]) ? INFINITY : std::abs(g[i] - e[i]) / allowed;
      if (worst_where.empty() || ratio > worst_ratio) {
        worst_ratio = ratio;
        worst_where = "output " + std::to_string(k) + " element " + std::to_string(i);
        worst_expected = e[i];
        worst_got = g[i];
      }
    }
  }
  if (!worst_where.empty())
    fail(order, mode, worst_where + " (the largest discrepancy)", worst_expected, worst_got, std::abs(worst_got - worst_expected));
}

// The dtype of an inner product over these leaves (numpy's np.add of their dots: the promoted
// float dtype), for its tolerance.
DType inner_dtype(std::span<const Array> leaves) {
  std::optional<DType> d;
  for (const auto& a : leaves)
    if (differentiable(a.aval())) d = d ? promote_types(*d, a.dtype()) : a.dtype();
  return d.value_or(f64);
}

std::vector<Array> random_cotangents(const std::vector<Array>& outs, std::mt19937& rng) {
  std::vector<Array> u;
  for (const auto& o : outs) u.push_back(random_like(o, rng));
  return u;
}

void check_jvp(const FlatFn& f, const std::vector<Array>& x, const Tol& tol, int order, std::mt19937& rng) {
  std::vector<Array> v;
  for (const auto& a : x) v.push_back(random_like(a, rng));
  auto [outs, touts] = jvp_flat(trace_at(f, x), x, v);
  check_close(outs, f(x), tol, order, "fwd (the primal output against f)");  // JAX's check_jvp: a custom rule's primal too
  auto expected = numerical_jvp(f, x, v, tol.eps);
  check_close(touts, expected, tol, order, "fwd");
}

void check_vjp(const FlatFn& f, const std::vector<Array>& x, const Tol& tol, int order, std::mt19937& rng) {
  std::vector<Array> v;
  for (const auto& a : x) v.push_back(random_like(a, rng));
  std::vector<Array> outs;
  auto state = vjp_forward(trace_at(f, x), x, &outs);
  check_close(outs, f(x), tol, order, "rev (the primal output against f)");  // JAX's check_vjp: a custom rule's primal too
  auto u = random_cotangents(outs, rng);
  auto ct = vjp_backward(*state, u);
  double got = inner(ct, v);
  double expected = inner(u, numerical_jvp(f, x, v, tol.eps));
  // <vjp(u), v> is in the arguments' dtype, <u, jvp(v)> in the outputs': JAX's tolerance is the larger
  if (!close(got, expected, bound_for(tol, inner_dtype(x), inner_dtype(outs), 1)))
    fail(order, "rev", "<vjp(u), v> vs <u, jvp(v)>", expected, got, std::abs(got - expected));
}

void check_order(const FlatFn& f, const std::vector<Array>& x, const CheckGradsOptions& opts, int order, std::mt19937& rng) {
  Tol tol = tolerance(opts);
  for (Mode m : opts.modes) {
    if (m == Mode::fwd) {
      check_jvp(f, x, tol, order, rng);
      if (order < opts.order) {
        // g(x, v) = jvp(f)(x, v): primal and tangent outputs.
        std::size_t n = x.size();
        FlatFn g = [f, n](std::span<const Array> xv) {
          auto [o, t] = jvp_flat(trace_at(f, xv.subspan(0, n)), xv.subspan(0, n), xv.subspan(n));
          o.insert(o.end(), t.begin(), t.end());
          return o;
        };
        std::vector<Array> xv = x;
        for (const auto& a : x) xv.push_back(random_like(a, rng));
        check_order(g, xv, opts, order + 1, rng);
      }
    } else {
      check_vjp(f, x, tol, order, rng);
      if (order < opts.order) {
        // g(x) = vjp(f)(x)(f(x))
        FlatFn g = [f](std::span<const Array> xs) {
          std::vector<Array> outs;
          auto state = vjp_forward(trace_at(f, xs), xs, &outs);
          return vjp_backward(*state, outs);
        };
        check_order(g, x, opts, order + 1, rng);
      }
    }
  }
}

}  // namespace

void check_grads_flat(const FlatFn& f, std::vector<Array> args, const CheckGradsOptions& opts) {
  std::mt19937 rng(0);
  check_order(f, args, opts, 1, rng);
}

}  // namespace xjax::detail
