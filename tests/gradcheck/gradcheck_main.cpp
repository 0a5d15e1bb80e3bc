// gradcheck_main.cpp: the `xjax-gradcheck` program. Runs the gradient-check table and prints one
// line per (op, dtype, order, mode) with the largest relative error, then exits non-zero if any
// line fails. Usage: xjax-gradcheck [SUBSTRING]  (only rows whose name contains SUBSTRING).
//
// The error is measured here with the same checks as xj::check_grads (central differences along a
// random direction; fwd: jvp vs the difference quotient, rev: <vjp(u), v> vs <u, jvp(v)>; order 2
// checks the order-1 derivative functions reached by a fwd and by a rev step). For each element,
// rel = |got - expected| / (atol/rtol + |expected|), so that rel <= rtol is exactly check_grads'
// test |got - expected| <= atol + rtol |expected|. Each (row, dtype) is also run through
// xj::check_grads itself; should it throw where the measured lines pass, a FAIL line says so.
// Rows of non-differentiable ops print a `zero` line: the largest |jvp| / |vjp| (must be 0).
// Every row prints two `vmap` lines: the batching oracle (gc::batching_check) at two seeds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "gradcheck_table.hpp"

namespace xj = xjax;
namespace gc = xjax::gradcheck;
using xj::Array;
using xj::detail::FlatFn;

namespace {

struct Tol {
  double atol, rtol, eps;
};

Tol tolerance(const xj::CheckGradsOptions& o, const std::vector<Array>& x) {
  double t = 1e-5;  // check_grads' defaults
  for (const auto& a : x)
    if (a.dtype() == xj::f32) t = 2e-3;
  return {o.atol.value_or(t), o.rtol.value_or(t), o.eps.value_or(1e-4)};
}

bool floating(const Array& a) { return xj::is_floating(a.dtype()); }

Array random_like(const Array& a, std::mt19937& rng) {
  if (!floating(a)) return xj::zeros(a.shape(), a.dtype());
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(a.size()));
  for (auto& e : v) e = normal(rng);
  return xj::astype(xj::array<double>(v, a.shape()), a.dtype());
}

xj::ClosedJaxpr trace_at(const FlatFn& f, std::span<const Array> x) {
  std::vector<xj::ShapedArray> avals;
  for (const auto& a : x) avals.push_back(a.aval());
  return xj::detail::trace_flat(f, avals);
}

std::vector<Array> numerical_jvp(const FlatFn& f, std::span<const Array> x, std::span<const Array> v, double eps) {
  std::vector<Array> plus, minus;
  for (std::size_t i = 0; i < x.size(); ++i) {
    bool d = floating(x[i]);
    plus.push_back(d ? x[i] + v[i] * eps : x[i]);
    minus.push_back(d ? x[i] - v[i] * eps : x[i]);
  }
  auto fp = f(plus), fm = f(minus);
  std::vector<Array> out;
  for (std::size_t k = 0; k < fp.size(); ++k)
    out.push_back(floating(fp[k]) ? (fp[k] - fm[k]) / (2 * eps) : xj::zeros(fp[k].shape(), fp[k].dtype()));
  return out;
}

double inner(std::span<const Array> a, std::span<const Array> b) {
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!floating(a[k])) continue;
    auto x = a[k].to_vector<double>(), y = b[k].to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  }
  return s;
}

double rel(double got, double expected, const Tol& t) {
  return std::abs(got - expected) / (t.atol / t.rtol + std::abs(expected));
}

struct Point {
  FlatFn f;
  std::vector<Array> x;
};

double fwd_error(const Point& p, const Tol& t, std::mt19937& rng) {
  std::vector<Array> v;
  for (const auto& a : p.x) v.push_back(random_like(a, rng));
  auto [outs, touts] = xj::detail::jvp_flat(trace_at(p.f, p.x), p.x, v);
  auto expected = numerical_jvp(p.f, p.x, v, t.eps);
  double worst = 0;
  for (std::size_t k = 0; k < touts.size(); ++k) {
    if (!floating(expected[k])) continue;
    auto g = touts[k].to_vector<double>(), e = expected[k].to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, rel(g[i], e[i], t));
  }
  return worst;
}

double rev_error(const Point& p, const Tol& t, std::mt19937& rng) {
  std::vector<Array> v, u, outs;
  for (const auto& a : p.x) v.push_back(random_like(a, rng));
  auto state = xj::detail::vjp_forward(trace_at(p.f, p.x), p.x, &outs);
  for (const auto& o : outs) u.push_back(random_like(o, rng));
  double got = inner(xj::detail::vjp_backward(*state, u), v);
  return rel(got, inner(u, numerical_jvp(p.f, p.x, v, t.eps)), t);
}

// The function of (x, v) returning (f(x), jvp(f)(x, v)), at x and a random v.
Point fwd_step(const Point& p, std::mt19937& rng) {
  std::size_t n = p.x.size();
  FlatFn f = p.f;
  FlatFn g = [f, n](std::span<const Array> xv) {
    auto [o, t] = xj::detail::jvp_flat(trace_at(f, xv.subspan(0, n)), xv.subspan(0, n), xv.subspan(n));
    o.insert(o.end(), t.begin(), t.end());
    return o;
  };
  std::vector<Array> xv = p.x;
  for (const auto& a : p.x) xv.push_back(random_like(a, rng));
  return {g, xv};
}

// The function x -> vjp(f)(x)(f(x)).
Point rev_step(const Point& p) {
  FlatFn f = p.f;
  FlatFn g = [f](std::span<const Array> x) {
    std::vector<Array> outs;
    auto state = xj::detail::vjp_forward(trace_at(f, x), x, &outs);
    return xj::detail::vjp_backward(*state, outs);
  };
  return {g, p.x};
}

// Largest relative error of the checks at exactly `order` ending in `mode`.
double measure(const gc::Row& r, xj::DType d, int order, xj::Mode mode, const Tol& t) {
  std::mt19937 rng(static_cast<unsigned>(order * 2 + (mode == xj::rev)));
  std::vector<Point> points{{gc::flat(r), r.inputs(d)}};
  for (int k = 1; k < order; ++k) {
    std::vector<Point> next;
    for (const auto& p : points)
      for (xj::Mode m : r.modes) next.push_back(m == xj::fwd ? fwd_step(p, rng) : rev_step(p));
    points = std::move(next);
  }
  double worst = 0;
  for (const auto& p : points) worst = std::max(worst, mode == xj::fwd ? fwd_error(p, t, rng) : rev_error(p, t, rng));
  return worst;
}

// bf16, order 1: the row's derivative computed in bf16 against the same derivative computed in f64
// at the same point and direction (both bf16 values, so exact in f64), element by element,
// rel = |got - want| / (1 + |want|). Finite differences mean nothing at bf16's resolution; the f64
// derivative they are compared with is itself checked against finite differences above. The
// tolerance is 4 bf16 epsilons (2^-7 each): the inputs, each intermediate result and the output
// are rounded to 2^-8 relative; the table's worst is 2.3 epsilons (digamma near its poles, where
// the derivative amplifies the rounding of x).
constexpr double kBf16Tol = 4 * 0x1p-7;

std::vector<Array> to_bf16(std::span<const Array> xs) {
  std::vector<Array> out;
  for (const auto& a : xs) out.push_back(floating(a) ? xj::astype(a, xj::bf16) : a);
  return out;
}
std::vector<Array> to_f64(std::span<const Array> xs) {
  std::vector<Array> out;
  for (const auto& a : xs) out.push_back(floating(a) ? xj::astype(a, xj::f64) : a);
  return out;
}

double elementwise_error(std::span<const Array> got, std::span<const Array> want) {
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (!floating(want[k])) continue;
    const auto g = got[k].to_vector<double>(), w = want[k].to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]) / (1 + std::abs(w[i])));
  }
  return worst;
}

double bf16_error(const gc::Row& r, xj::Mode mode) {
  const FlatFn f = gc::flat(r);
  const std::vector<Array> x16 = to_bf16(r.inputs(xj::f64)), x64 = to_f64(x16);
  std::mt19937 rng(mode == xj::fwd ? 11u : 12u);
  if (mode == xj::fwd) {
    std::vector<Array> v;
    for (const auto& a : x64) v.push_back(random_like(a, rng));
    const std::vector<Array> v16 = to_bf16(v), v64 = to_f64(v16);
    const auto t16 = xj::detail::jvp_flat(trace_at(f, x16), x16, v16).second;
    const auto t64 = xj::detail::jvp_flat(trace_at(f, x64), x64, v64).second;
    return elementwise_error(t16, t64);
  }
  std::vector<Array> outs16, outs64, u16, u64;
  auto s16 = xj::detail::vjp_forward(trace_at(f, x16), x16, &outs16);
  auto s64 = xj::detail::vjp_forward(trace_at(f, x64), x64, &outs64);
  for (std::size_t k = 0; k < outs16.size(); ++k) {
    u16.push_back(floating(outs16[k]) ? xj::astype(xj::astype(random_like(outs64[k], rng), xj::bf16), outs16[k].dtype())
                                      : xj::zeros(outs16[k].shape(), outs16[k].dtype()));
    u64.push_back(floating(outs64[k]) ? xj::astype(u16[k], outs64[k].dtype()) : xj::zeros(outs64[k].shape(), outs64[k].dtype()));
  }
  return elementwise_error(xj::detail::vjp_backward(*s16, u16), xj::detail::vjp_backward(*s64, u64));
}

void line(const std::string& op, xj::DType d, const char* order, const char* mode, double err, double tol, bool pass,
          const std::string& note = "") {
  std::printf("%-30s %-5s %-5s %-11s %-10.3e %-9.1e %s%s%s\n", op.c_str(), xj::dtype_name(d), order, mode, err, tol,
              pass ? "PASS" : "FAIL", note.empty() ? "" : "  ", note.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")))) {
    std::printf("usage: %s [SUBSTRING]\nRuns xjax's numeric gradient checks (rows whose name contains SUBSTRING).\n", argv[0]);
    return argc == 2 ? 0 : 2;
  }
  std::string filter = argc == 2 ? argv[1] : "";
  std::printf("%-30s %-5s %-5s %-11s %-10s %-9s %s\n", "op", "dtype", "order", "mode", "rel_err", "tol", "result");
  int rows = 0, failures = 0;
  for (const auto& r : gc::table()) {
    if (r.name.find(filter) == std::string::npos) continue;
    for (xj::DType d : gc::dtypes) {
      if (r.kind != gc::Kind::blocked) {
        bool all_pass = true;
        for (int order : gc::orders)
          for (xj::Mode m : r.modes) {
            if (order > r.max_order) continue;
            auto opts = gc::options(d, order, {m});
            Tol t = tolerance(opts, r.inputs(d));
            double err = 0;
            std::string note;
            bool pass;
            try {
              err = measure(r, d, order, m, t);
              pass = err <= t.rtol;
            } catch (const std::exception& e) {
              pass = false;
              note = e.what();
            }
            all_pass = all_pass && pass;
            failures += !pass;
            ++rows;
            line(r.name, d, std::to_string(order).c_str(), m == xj::fwd ? "fwd" : "rev", err, t.rtol, pass, note);
          }
        if (all_pass) {  // xj::check_grads itself must agree
          try {
            gc::Fn fn = r.fn;
            xj::check_grads([fn](const std::vector<Array>& xs) { return fn(xs); }, std::tuple{r.inputs(d)},
                            gc::options(d, r.max_order, r.modes));
          } catch (const std::exception& e) {
            ++failures;
            ++rows;
            line(r.name, d, "1-2", "check_grads", 0, 0, false, e.what());
          }
        }
      }
      if (r.kind != gc::Kind::differentiable) {
        double m = 0;
        std::string note;
        try {
          m = gc::max_abs_derivative(r, d);
        } catch (const std::exception& e) {
          m = NAN;
          note = e.what();
        }
        bool pass = m == 0.0;
        failures += !pass;
        ++rows;
        line(r.name, d, "1", "zero", m, 0, pass, note);
      }
      // bf16 (once per row, after f32): the derivative in bf16 against f64's at the same point.
      if (d == xj::f32 && r.kind == gc::Kind::differentiable) {
        const auto xs = r.inputs(xj::f64);
        if (std::any_of(xs.begin(), xs.end(), floating))
          for (xj::Mode m : r.modes) {
            double err = 0;
            std::string note;
            bool pass;
            try {
              err = bf16_error(r, m);
              pass = err <= kBf16Tol;
            } catch (const std::exception& e) {
              pass = false;
              note = e.what();
            }
            failures += !pass;
            ++rows;
            line(r.name, xj::bf16, "1", m == xj::fwd ? "fwd" : "rev", err, kBf16Tol, pass, note);
          }
      }
      // The batching oracle: vmap against a loop over members, with random in_axes.
      for (unsigned seed : {1u, 2u}) {
        gc::BatchingCheck b;
        std::string note;
        bool pass;
        try {
          b = gc::batching_check(r, d, seed);
          pass = b.value_error <= gc::batching_tolerance(d) && b.grad_error <= gc::batching_tolerance(d);
          note = "in_axes " + b.in_axes + (b.grad_checked ? " (values, vmap(grad))" : " (values)");
        } catch (const std::exception& e) {
          pass = false;
          note = e.what();
        }
        failures += !pass;
        ++rows;
        line(r.name, d, "-", "vmap", std::max(b.value_error, b.grad_error), gc::batching_tolerance(d), pass, note);
      }
    }
  }
  std::printf("%d lines, %d failed\n", rows, failures);
  if (rows == 0) {
    std::fprintf(stderr, "xjax-gradcheck: no row matches '%s'\n", filter.c_str());
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
