// test_cond.cpp: cond, switch_, while_loop and fori_loop from the user's side: evaluation against
// plain C++, jvp / grad against closed forms and central finite differences (check_grads, f64),
// cond inside scan and scan inside cond, the jaxprs the transforms build (one forward and one
// backward cond, DCE of unused branch outputs, fori_loop lowering), and every error message.
#include <algorithm>
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "../transforms/ad.hpp"
#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

/// Central finite differences of a scalar function of an f64 vector, evaluated concretely.
std::vector<double> fd_grad_of_array(const std::function<double(const xj::Array&)>& f, const std::vector<double>& x,
                            double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto hi = x, lo = x;
    hi[i] += eps;
    lo[i] -= eps;
    g[i] = (f(f64v(hi)) - f(f64v(lo))) / (2 * eps);
  }
  return g;
}

template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const xj::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The two branches of the test cond: different functions, so a gradient that took the wrong
// branch (or mixed them) would show.
xj::Array branch_true(const xj::Array& x) { return xj::sum(xj::sin(x) * x); }
xj::Array branch_false(const xj::Array& x) { return xj::sum(xj::exp(x) * xj::cos(x)); }

xj::Array cond_fn(const xj::Array& x) {
  return xj::cond(xj::sum(x) > 0.0, [](const xj::Array& a) { return branch_true(a); },
                  [](const xj::Array& a) { return branch_false(a); }, x);
}

}  // namespace

// ---- cond ------------------------------------------------------------------------------------

TEST_CASE("cond: evaluates the branch pred selects, with pytree operands and results") {
  auto x = f64v({0.5, -1.0, 2.0});
  CHECK(cond_fn(x).item<double>() == doctest::Approx(branch_true(x).item<double>()));
  auto y = f64v({-0.5, -1.0, 0.25});
  CHECK(cond_fn(y).item<double>() == doctest::Approx(branch_false(y).item<double>()));

  auto pair_fn = [](const xj::Array& p, const std::pair<xj::Array, xj::Array>& ab, const xj::Array& s) {
    return xj::cond(
        p, [](const std::pair<xj::Array, xj::Array>& v, const xj::Array& k) { return std::pair{v.first + k, v.second * k}; },
        [](const std::pair<xj::Array, xj::Array>& v, const xj::Array& k) { return std::pair{v.second - k, v.first}; }, ab,
        s);
  };
  auto a = f64v({1.0, 2.0}), b = f64v({3.0, 4.0});
  auto s = xj::scalar(10.0, xj::f64);
  auto [t0, t1] = pair_fn(xj::scalar(1.0, xj::bool_), std::pair{a, b}, s);
  check_values(t0, {11.0, 12.0});
  check_values(t1, {30.0, 40.0});
  auto [f0, f1] = pair_fn(xj::scalar(0.0, xj::bool_), std::pair{a, b}, s);
  check_values(f0, {-7.0, -6.0});
  check_values(f1, {1.0, 2.0});
  // A numeric pred is compared with zero, as lax.cond does.
  auto [n0, n1] = pair_fn(xj::scalar(-2.0, xj::f32), std::pair{a, b}, s);
  check_values(n0, {11.0, 12.0});
  (void)n1;
}

TEST_CASE("cond: the jaxpr stages one cond with both branches, false_fn first") {
  auto j = xj::make_jaxpr(cond_fn)(f64v({1.0, 2.0}));
  std::string s = str(j);
  INFO(s);
  CHECK(count(s, "cond[") == 1);
  auto sin_at = s.find("sin"), exp_at = s.find("exp");
  REQUIRE(sin_at != std::string::npos);
  REQUIRE(exp_at != std::string::npos);
  CHECK(exp_at < sin_at);  // branch 0 is false_fn
}

TEST_CASE("cond: grad through both branches matches finite differences") {
  auto g = xj::grad(cond_fn);
  for (std::vector<double> x : {std::vector<double>{0.5, -1.0, 2.0}, std::vector<double>{-0.5, -1.0, 0.25}}) {
    auto want = fd_grad_of_array([](const xj::Array& a) { return cond_fn(a).item<double>(); }, x);
    check_values(g(f64v(x)), want, 1e-6);
    CHECK_NOTHROW(xj::check_grads(cond_fn, std::tuple{f64v(x)}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  }
  // Closed forms: d/dx sum(sin x * x) = cos x * x + sin x; d/dx sum(exp x cos x) = exp x (cos x - sin x).
  auto gt = g(f64v({0.5, 1.0}));
  check_values(gt, {std::cos(0.5) * 0.5 + std::sin(0.5), std::cos(1.0) + std::sin(1.0)});
  auto gf = g(f64v({-0.5, -1.0}));
  check_values(gf, {std::exp(-0.5) * (std::cos(-0.5) - std::sin(-0.5)), std::exp(-1.0) * (std::cos(-1.0) - std::sin(-1.0))});
}

TEST_CASE("cond: grad w.r.t. values the branches close over, and through several operands") {
  // f(x, w) = pred ? sum(x * w) + w0 : sum(tanh(x) / (1 + w^2)), w closed over by both branches.
  auto f = [](const xj::Array& x, const xj::Array& w) {
    auto out = xj::cond(
        x[0] > 0.0, [&w](const xj::Array& a) { return xj::sum(a * w) + w[0]; },
        [&w](const xj::Array& a) { return xj::sum(xj::tanh(a) / (1.0 + w * w)); }, x);
    return out;
  };
  for (double x0 : {0.7, -0.7}) {
    auto x = f64v({x0, 0.3, -1.2});
    auto w = f64v({0.4, -0.9, 1.5});
    CHECK_NOTHROW(xj::check_grads(f, std::tuple{x, w}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
    auto [gx, gw] = xj::grad(f, xj::argnums<0, 1>)(x, w);
    auto want_w = fd_grad_of_array([&](const xj::Array& v) { return f(x, v).item<double>(); }, vec(w));
    check_values(gw, want_w, 1e-6);
    auto want_x = fd_grad_of_array([&](const xj::Array& v) { return f(v, w).item<double>(); }, vec(x));
    check_values(gx, want_x, 1e-6);
  }
}

TEST_CASE("cond: jvp and linearize agree with finite differences; output tangents zero in one branch") {
  // The true branch ignores x (zero tangent there), the false branch does not.
  auto f = [](const xj::Array& p, const xj::Array& x) {
    return xj::cond(p, [](const xj::Array& a) { return xj::zeros_like(a) + 2.0; }, [](const xj::Array& a) { return a * a; }, x);
  };
  auto x = f64v({1.5, -2.0});
  auto dx = f64v({1.0, 3.0});
  auto [y1, t1] = xj::jvp(f, std::tuple{xj::scalar(1.0, xj::bool_), x}, std::tuple{xj::zeros({}, xj::bool_), dx});
  check_values(y1, {2.0, 2.0});
  check_values(t1, {0.0, 0.0});
  auto [y0, t0] = xj::jvp(f, std::tuple{xj::scalar(0.0, xj::bool_), x}, std::tuple{xj::zeros({}, xj::bool_), dx});
  check_values(y0, {2.25, 4.0});
  check_values(t0, {3.0, -12.0});
  auto g = [&](const xj::Array& a) { return f(xj::scalar(0.0, xj::bool_), a); };
  auto [out, f_lin] = xj::linearize(g, x);
  check_values(out, {2.25, 4.0});
  check_values(f_lin(dx), {3.0, -12.0});
}

TEST_CASE("cond: grad's jaxpr has one forward cond and one backward cond, residuals merged by type") {
  auto j = xj::make_jaxpr(xj::grad(cond_fn))(f64v({1.0, 2.0}));
  std::string s = str(j);
  INFO(s);
  CHECK(count(s, "cond[") == 2);
  // Unused outputs of a cond are pruned in every branch.
  auto two = [](const xj::Array& x) {
    auto [a, b] = xj::cond(
        x[0] > 0.0, [](const xj::Array& v) { return std::pair{xj::sin(v), xj::exp(v)}; },
        [](const xj::Array& v) { return std::pair{xj::cos(v), xj::log(v)}; }, x);
    (void)b;
    return xj::sum(a);
  };
  auto g = xj::make_jaxpr(xj::grad(two))(f64v({1.0, 2.0}));
  std::string gs = str(g);
  INFO(gs);
  CHECK(count(gs, "exp") == 0);
  CHECK(count(gs, "log") == 0);
  CHECK(count(gs, "cond[") == 2);
}

TEST_CASE("cond: pred computed from the differentiated input (check_grads, jacrev, jacfwd, hessian)") {
  // The index is a primal value (known in partial evaluation), the operands carry tangents.
  auto f = [](const xj::Array& x) {
    return xj::cond(x[0] > x[1], [](const xj::Array& a) { return a * a * a; }, [](const xj::Array& a) { return -a; }, x);
  };
  auto x = f64v({2.0, 1.0});
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{x}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  check_values(xj::jacrev(f)(x), {12.0, 0.0, 0.0, 3.0});
  check_values(xj::jacfwd(f)(f64v({1.0, 2.0})), {-1.0, 0.0, 0.0, -1.0});
  check_values(xj::hessian([&](const xj::Array& a) { return xj::sum(f(a)); })(x), {12.0, 0.0, 0.0, 6.0});
}

TEST_CASE("cond: inside scan (grad matches a plain loop and finite differences)") {
  // c' = c > 0 ? sin(c * x) + c : cos(c) * x
  auto step = [](const xj::Array& c, const xj::Array& x) {
    return xj::cond(
        xj::sum(c) > 0.0, [](const xj::Array& cc, const xj::Array& xx) { return xj::sin(cc * xx) + cc; },
        [](const xj::Array& cc, const xj::Array& xx) { return xj::cos(cc) * xx; }, c, x);
  };
  auto f = [&](const xj::Array& c0, const xj::Array& xs) {
    auto [c, ys] = xj::scan([&](const xj::Array& c, const xj::Array& x) { auto n = step(c, x); return std::pair{n, xj::sum(n)}; },
                            c0, xs);
    return xj::sum(c) + xj::sum(ys * ys);
  };
  auto plain = [&](const xj::Array& c0, const xj::Array& xs) {
    xj::Array c = c0, acc = xj::scalar(0.0, xj::f64);
    for (std::int64_t i = 0; i < xs.shape()[0]; ++i) {
      c = vec(c)[0] + vec(c)[1] > 0 ? xj::sin(c * xs[i]) + c : xj::cos(c) * xs[i];
      acc = acc + xj::sum(c) * xj::sum(c);
    }
    return xj::sum(c) + acc;
  };
  auto c0 = f64v({0.3, -0.1});
  auto xs = xj::array<double>({0.5, -1.5, 2.0, 0.1, -0.4, 1.1, 0.9, -2.0}, {4, 2});
  CHECK(f(c0, xs).item<double>() == doctest::Approx(plain(c0, xs).item<double>()));
  auto g = xj::grad(f)(c0, xs);
  auto want = fd_grad_of_array([&](const xj::Array& c) { return plain(c, xs).item<double>(); }, vec(c0));
  check_values(g, want, 1e-6);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{c0, xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("cond: scan inside a branch (grad matches finite differences)") {
  auto f = [](const xj::Array& x, const xj::Array& xs) {
    return xj::cond(
        x[0] < 1.0,
        [](const xj::Array& a, const xj::Array& s) {
          auto [c, ys] = xj::scan([](const xj::Array& c, const xj::Array& v) { return std::pair{xj::sin(c * v), xj::None{}}; }, a, s);
          (void)ys;
          return xj::sum(c);
        },
        [](const xj::Array& a, const xj::Array& s) { return xj::sum(a * a) * xj::sum(s); }, x, xs);
  };
  auto xs = xj::array<double>({0.5, -1.5, 2.0, 0.1, -0.4, 1.1}, {3, 2});
  for (std::vector<double> x : {std::vector<double>{0.2, 0.7}, std::vector<double>{1.4, -0.3}}) {
    auto want = fd_grad_of_array([&](const xj::Array& a) { return f(a, xs).item<double>(); }, x);
    check_values(xj::grad(f)(f64v(x), xs), want, 1e-6);
    CHECK_NOTHROW(xj::check_grads(f, std::tuple{f64v(x), xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  }
  // grad's jaxpr: one forward scan inside the forward cond, one backward scan inside the other.
  std::string s = str(xj::make_jaxpr(xj::grad(f))(f64v({0.2, 0.7}), xs));
  INFO(s);
  CHECK(count(s, "cond[") == 2);
  CHECK(count(s, "scan[") == 2);
}

// ---- switch_ ---------------------------------------------------------------------------------

TEST_CASE("cond: switch_ with 3 branches (tuple and vector of std::function), index clamped") {
  auto b0 = [](const xj::Array& x) { return xj::sum(x * x); };
  auto b1 = [](const xj::Array& x) { return xj::sum(xj::sin(x)); };
  auto b2 = [](const xj::Array& x) { return xj::sum(xj::exp(x) * x); };
  std::vector<std::function<double(const std::vector<double>&)>> ref{
      [](const std::vector<double>& v) { double s = 0; for (double a : v) s += a * a; return s; },
      [](const std::vector<double>& v) { double s = 0; for (double a : v) s += std::sin(a); return s; },
      [](const std::vector<double>& v) { double s = 0; for (double a : v) s += std::exp(a) * a; return s; }};
  std::vector<std::function<xj::Array(const xj::Array&)>> fns{b0, b1, b2};
  std::vector<double> x{0.3, -1.2, 0.8};
  for (int i : {-3, 0, 1, 2, 7}) {
    INFO("index " << i);
    int k = std::clamp(i, 0, 2);
    auto idx = xj::scalar(i, xj::i32);
    CHECK(xj::switch_(idx, std::tuple{b0, b1, b2}, f64v(x)).item<double>() == doctest::Approx(ref[k](x)));
    CHECK(xj::switch_(idx, fns, f64v(x)).item<double>() == doctest::Approx(ref[k](x)));
    // A braced list of different lambdas, as lax.switch(i, [b0, b1, b2], x).
    CHECK(xj::switch_(idx, {b0, b1, b2}, f64v(x)).item<double>() == doctest::Approx(ref[k](x)));
    auto f = [&](const xj::Array& v) { return xj::switch_(idx, std::tuple{b0, b1, b2}, v); };
    auto want = fd_grad_of_array([&](const xj::Array& v) { return f(v).item<double>(); }, x);
    check_values(xj::grad(f)(f64v(x)), want, 1e-6);
    CHECK_NOTHROW(xj::check_grads(f, std::tuple{f64v(x)}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  }
  // A traced index (computed from the input) and an i64 index.
  auto g = [&](const xj::Array& v) { return xj::switch_(xj::astype(v[0] > 0.0, xj::i32) * 2, fns, v); };
  check_values(xj::grad(g)(f64v(x)), fd_grad_of_array([&](const xj::Array& v) { return g(v).item<double>(); }, x), 1e-6);
  CHECK(xj::switch_(xj::scalar(1, xj::i64), fns, f64v(x)).item<double>() == doctest::Approx(ref[1](x)));
  std::string s = str(xj::make_jaxpr(g)(f64v(x)));
  INFO(s);
  CHECK(count(s, "cond[") == 1);
  // One branch: called directly, nothing staged.
  std::vector<std::function<xj::Array(const xj::Array&)>> one{b1};
  CHECK(xj::switch_(xj::scalar(5, xj::i32), one, f64v(x)).item<double>() == doctest::Approx(ref[1](x)));
}

// ---- errors ----------------------------------------------------------------------------------

TEST_CASE("cond: branches returning different types are a TypeError naming the branch and both types") {
  auto x = xj::ones({3}, xj::f32);
  auto p = xj::scalar(1.0, xj::bool_);
  std::string shape_msg = error_of([&] {
    xj::cond(p, [](const xj::Array& a) { return a; }, [](const xj::Array& a) { return xj::concatenate({a, a}); }, x);
  });
  CHECK(shape_msg.find("cond: branch 1 (true_fn) returns f32[3] as output leaf 0 but branch 0 (false_fn) returns f32[6]") !=
        std::string::npos);
  CHECK(shape_msg.find("every branch must return the same structure, shapes and dtypes") != std::string::npos);
  CHECK(shape_msg.find("test_cond.cpp") != std::string::npos);
  CHECK_THROWS_AS(xj::cond(p, [](const xj::Array& a) { return a; }, [](const xj::Array& a) { return xj::concatenate({a, a}); }, x),
                  xj::TypeError);
  std::string dtype_msg = error_of([&] {
    xj::cond(p, [](const xj::Array& a) { return xj::astype(a, xj::f64); }, [](const xj::Array& a) { return a; }, x);
  });
  CHECK(dtype_msg.find("branch 1 (true_fn) returns f64[3] as output leaf 0 but branch 0 (false_fn) returns f32[3]") !=
        std::string::npos);
  std::string tree_msg = error_of([&] {
    std::vector<std::function<std::vector<xj::Array>(const xj::Array&)>> bs{
        [](const xj::Array& a) { return std::vector<xj::Array>{a}; },
        [](const xj::Array& a) { return std::vector<xj::Array>{a, a}; }};
    xj::switch_(xj::scalar(0, xj::i32), bs, x);
  });
  CHECK(tree_msg.find("switch_: branch 1 returns a tree of structure") != std::string::npos);
  CHECK(tree_msg.find("but branch 0 returns") != std::string::npos);
  std::string idx_msg = error_of([&] { xj::switch_(xj::scalar(1.0, xj::f32), std::tuple{[](const xj::Array& a) { return a; }}, x); });
  CHECK(idx_msg.find("switch_: the index must be an integer scalar, got f32[]") != std::string::npos);
  std::string pred_msg = error_of([&] {
    xj::cond(xj::ones({2}, xj::bool_), [](const xj::Array& a) { return a; }, [](const xj::Array& a) { return a; }, x);
  });
  CHECK(pred_msg.find("cond: pred must be a scalar (a boolean or a number), got bool[2]") != std::string::npos);
}

// ---- while_loop ------------------------------------------------------------------------------

namespace {
// Newton's iteration for sqrt(a): x' = (x + a / x) / 2 until |x^2 - a| < 1e-12 a.
xj::Array newton_sqrt(const xj::Array& a) {
  auto [x, it] = xj::while_loop(
      [a](const std::pair<xj::Array, xj::Array>& c) { return xj::abs(c.first * c.first - a) > a * 1e-12; },
      [a](const std::pair<xj::Array, xj::Array>& c) { return std::pair{(c.first + a / c.first) * 0.5, c.second + 1}; },
      std::pair{a, xj::scalar(0, xj::i32)});
  (void)it;
  return x;
}
}  // namespace

TEST_CASE("cond: while_loop evaluates a counting loop and Newton's iteration") {
  auto n = xj::while_loop([](const xj::Array& i) { return i < 10; }, [](const xj::Array& i) { return i + 3; },
                          xj::scalar(0, xj::i32));
  CHECK(n.item<int>() == 12);
  CHECK(n.dtype() == xj::i32);
  // Zero iterations.
  auto z = xj::while_loop([](const xj::Array& i) { return i < 0; }, [](const xj::Array& i) { return i + 1; },
                          xj::scalar(5, xj::i32));
  CHECK(z.item<int>() == 5);
  CHECK(newton_sqrt(xj::scalar(2.0, xj::f64)).item<double>() == doctest::Approx(std::sqrt(2.0)).epsilon(1e-12));
  CHECK(count(str(xj::make_jaxpr(newton_sqrt)(xj::scalar(2.0, xj::f64))), "while[") == 1);
}

TEST_CASE("cond: while_loop jvp (Newton's sqrt: d sqrt(a) = da / (2 sqrt a)), linearize and jacfwd") {
  auto a = xj::scalar(3.0, xj::f64);
  auto [y, t] = xj::jvp(newton_sqrt, std::tuple{a}, std::tuple{xj::scalar(1.0, xj::f64)});
  CHECK(y.item<double>() == doctest::Approx(std::sqrt(3.0)));
  CHECK(t.item<double>() == doctest::Approx(0.5 / std::sqrt(3.0)).epsilon(1e-8));
  auto [y2, f_lin] = xj::linearize(newton_sqrt, a);
  CHECK(f_lin(xj::scalar(2.0, xj::f64)).item<double>() == doctest::Approx(1.0 / std::sqrt(3.0)).epsilon(1e-8));
  (void)y2;
  // Tangents of a closed-over vector and of the carry: y = x * w^n after n steps while sum < 100.
  auto f = [](const xj::Array& x, const xj::Array& w) {
    return xj::while_loop([](const xj::Array& c) { return xj::sum(c) < 100.0; }, [w](const xj::Array& c) { return c * w; }, x);
  };
  auto x = f64v({1.0, 2.0}), w = f64v({2.0, 3.0});
  // sums: 3, 8, 22, 62, 178 -> 4 steps: x * w^4 = (16, 162)
  check_values(f(x, w), {16.0, 162.0});
  auto [fy, ft] = xj::jvp(f, std::tuple{x, w}, std::tuple{f64v({1.0, 0.0}), f64v({0.0, 1.0})});
  check_values(fy, {16.0, 162.0});
  check_values(ft, {16.0, 2.0 * 4.0 * 27.0});  // d(x0 w0^4)/dx0 = 16; d(x1 w1^4)/dw1 = 4 x1 w1^3
  CHECK_NOTHROW(xj::check_grads([&](const xj::Array& v) { return f(v, w); }, std::tuple{f64v({1.1, 2.1})},
                                {.order = 1, .modes = {xj::fwd}}));
  check_values(xj::jacfwd([&](const xj::Array& v) { return f(x, v); })(w), {32.0, 0.0, 0.0, 216.0});
}

namespace {
// sin applied 6 times: an outer while_loop of 3 steps around an inner while_loop of 2 steps.
xj::Array sin6_nested(const xj::Array& x0) {
  using Carry = std::pair<xj::Array, xj::Array>;  // (counter, x)
  auto inner = [](const xj::Array& x) {
    return xj::while_loop([](const Carry& c) { return c.first < 2; },
                          [](const Carry& c) { return Carry{c.first + 1, xj::sin(c.second)}; }, Carry{xj::scalar(0, xj::i32), x})
        .second;
  };
  return xj::while_loop([](const Carry& c) { return c.first < 3; },
                        [inner](const Carry& c) { return Carry{c.first + 1, inner(c.second)}; },
                        Carry{xj::scalar(0, xj::i32), x0})
      .second;
}

// d/dx sin^6(x) = prod_k cos(sin^k(x)), k = 0..5, as a plain loop.
double sin6_derivative(double x) {
  double d = 1.0;
  for (int k = 0; k < 6; ++k) {
    d *= std::cos(x);
    x = std::sin(x);
  }
  return d;
}
}  // namespace

// Issue 11, finding 3: linearize of a while_loop nested in a while_loop threw std::out_of_range
// (the known outer loop's body read the tangent the partial evaluation had pruned).
TEST_CASE("cond: jvp and linearize of a while_loop nested in a while_loop (sin applied 6 times)") {
  const double x = 0.7, want = 0.319758618178172;
  CHECK(sin6_derivative(x) == doctest::Approx(want).epsilon(1e-14));
  auto f64s = [](double v) { return xj::scalar(v, xj::f64); };
  double y = sin6_nested(f64s(x)).item<double>();
  double fx = x;
  for (int k = 0; k < 6; ++k) fx = std::sin(fx);
  CHECK(y == doctest::Approx(fx).epsilon(1e-15));
  const double h = 1e-6;
  double fd = (sin6_nested(f64s(x + h)).item<double>() - sin6_nested(f64s(x - h)).item<double>()) / (2 * h);
  CHECK(fd == doctest::Approx(want).epsilon(1e-8));

  auto [jy, jt] = xj::jvp(sin6_nested, std::tuple{f64s(x)}, std::tuple{f64s(1.0)});
  CHECK(jy.item<double>() == doctest::Approx(fx).epsilon(1e-15));
  CHECK(jt.item<double>() == doctest::Approx(want).epsilon(1e-13));
  auto [ly, f_lin] = xj::linearize(sin6_nested, f64s(x));
  CHECK(ly.item<double>() == doctest::Approx(fx).epsilon(1e-15));
  CHECK(f_lin(f64s(1.0)).item<double>() == doctest::Approx(want).epsilon(1e-13));
  CHECK(f_lin(f64s(-2.0)).item<double>() == doctest::Approx(-2.0 * want).epsilon(1e-13));
  CHECK(xj::jacfwd(sin6_nested)(f64s(x)).item<double>() == doctest::Approx(want).epsilon(1e-13));
  // Reverse mode stays the documented TransformError (not an internal error).
  CHECK_THROWS_AS(xj::grad(sin6_nested)(f64s(x)), xj::TransformError);
}

namespace {
// carry (i, a, b, d): i counts to 4 (the cond reads it), a *= 1.5, b += a (reads a), d *= 2.
std::vector<xj::Array> four_carries(const xj::Array& x) {
  using C = std::vector<xj::Array>;
  return xj::while_loop([](const C& c) { return c[0] < 4; },
                        [](const C& c) { return C{c[0] + 1, c[1] * 1.5, c[2] + c[1], c[3] * 2.0}; },
                        C{xj::scalar(0, xj::i32), x, x, x});
}
}  // namespace

TEST_CASE("cond: DCE of while_loop keeps the carries the used ones, and the cond, depend on") {
  xj::Array x = xj::scalar(0.5, xj::f64);
  xj::ClosedJaxpr j = xj::make_jaxpr(four_carries)(x);
  REQUIRE(j->outvars.size() == 4);
  std::vector<double> plain(4);  // the loop in plain C++
  {
    double a = 0.5, b = 0.5, d = 0.5;
    for (int i = 0; i < 4; ++i) {
      b += a;
      a *= 1.5;
      d *= 2.0;
    }
    plain = {4.0, a, b, d};
  }
  struct Case {
    int used;                    // the output kept
    std::size_t carries, reads;  // carries of the pruned loop; whether it still reads x as 1 or 2 carries
  };
  for (Case c : {Case{1, 2, 1}, Case{2, 3, 2}, Case{3, 2, 1}, Case{0, 1, 0}}) {
    CAPTURE(c.used);
    std::vector<bool> used(4, false);
    used[static_cast<std::size_t>(c.used)] = true;
    std::vector<bool> used_in;
    xj::ClosedJaxpr d = xj::detail::dce(j, used, &used_in);
    INFO(str(d));
    CHECK(used_in == std::vector<bool>{c.reads > 0});
    std::size_t loops = 0;
    for (const xj::Eqn& e : d->eqns)
      if (e.prim == xj::Primitive::while_) {
        ++loops;
        CHECK(e.outputs.size() == c.carries);
      }
    CHECK(loops == 1);
    xj::typecheck(*d.jaxpr);
    auto out = xj::eval_jaxpr(d, std::vector<xj::Array>{x});
    REQUIRE(out.size() == 1);
    CHECK(xj::astype(out[0], xj::f64).item<double>() == doctest::Approx(plain[static_cast<std::size_t>(c.used)]).epsilon(1e-15));
  }
}

TEST_CASE("cond: fori_loop with concrete Array bounds lowers to scan, so grad works (JAX: int(lower) succeeds)") {
  // x * 2 * 3 * 4 over i in [2, 5): d/dx = 24; with bounds traced by make_jaxpr it stays a while_loop
  auto f = [](const xj::Array& lo, const xj::Array& hi, const xj::Array& x) {
    return xj::fori_loop(lo, hi, [](const xj::Array& i, const xj::Array& c) { return c * xj::astype(i, xj::f64); }, x);
  };
  const xj::Array two = xj::scalar(2, xj::i32), five = xj::scalar(5, xj::i32);
  CHECK(xj::grad([&](const xj::Array& x) { return f(two, five, x); })(xj::scalar(1.5, xj::f64)).item<double>() == 24.0);
  CHECK(count(str(xj::make_jaxpr([&](const xj::Array& x) { return f(two, five, x); })(xj::scalar(1.5, xj::f64))), "scan[") == 1);
  CHECK(count(str(xj::make_jaxpr(f)(two, five, xj::scalar(1.5, xj::f64))), "while[") == 1);
  // an i64 pair of bounds counts in i64 in the scan too; an empty range returns the carry
  const auto last = [](const xj::Array& i, const xj::Array&) { return i; };
  CHECK(xj::fori_loop(xj::scalar(3e9, xj::i64), xj::scalar(3e9 + 2, xj::i64), last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 3000000001LL);
  CHECK(xj::fori_loop(five, two, last, xj::scalar(7, xj::i32)).item<std::int32_t>() == 7);
  // a C++ integer beside an i64 Array bound counts in i64 (JAX's weak int), past i32's range too
  const auto add_i = [](const xj::Array& i, const xj::Array& c) { return c + xj::astype(i, xj::f64); };
  CHECK(xj::fori_loop(xj::scalar(4999999998LL, xj::i64), 5000000000LL, add_i, xj::scalar(0.0, xj::f64)).item<double>() == 9999999997.0);
  CHECK(xj::fori_loop(4999999998LL, xj::scalar(5000000000LL, xj::i64), add_i, xj::scalar(0.0, xj::f64)).item<double>() == 9999999997.0);
  CHECK_THROWS_AS((void)xj::fori_loop(xj::scalar(0, xj::i32), 5000000000LL, add_i, xj::scalar(0.0, xj::f64)), xj::Error);
}

TEST_CASE("cond: reverse mode of while_loop is a TransformError pointing to fori_loop and scan") {
  auto msg = error_of([] { xj::grad(newton_sqrt)(xj::scalar(2.0, xj::f64)); });
  CHECK(msg.find("reverse-mode differentiation of while_loop is not supported") != std::string::npos);
  CHECK(msg.find("use xj::fori_loop with static integer bounds (it lowers to scan; with traced bounds it lowers to while_loop) or xj::scan instead") != std::string::npos);
  CHECK(msg.find("call xj::while_loop with {.checkpoints = xj::scan_checkpoints::online(s)}") != std::string::npos);  // xjax's way (hunt finding)
  CHECK_THROWS_AS(xj::grad(newton_sqrt)(xj::scalar(2.0, xj::f64)), xj::TransformError);
  auto v = [](const xj::Array& x) {
    return xj::while_loop([](const xj::Array& c) { return xj::sum(c) < 10.0; }, [](const xj::Array& c) { return c * 2.0; }, x);
  };
  CHECK_THROWS_AS(xj::vjp(v, f64v({1.0, 2.0})).second(f64v({1.0, 1.0})), xj::TransformError);
  CHECK_THROWS_AS(xj::jacrev(v)(f64v({1.0, 2.0})), xj::TransformError);
}

TEST_CASE("cond: while_loop errors name what the user did wrong") {
  auto x = xj::ones({3}, xj::f32);
  std::string pred = error_of([&] {
    xj::while_loop([](const xj::Array& c) { return c; }, [](const xj::Array& c) { return c; }, x);
  });
  CHECK(pred.find("while_loop: cond_fn must return a boolean scalar (bool[]), got f32[3]") != std::string::npos);
  std::string shape = error_of([&] {
    xj::while_loop([](const xj::Array& c) { return xj::sum(c) < 3.0; }, [](const xj::Array& c) { return xj::astype(c, xj::f64); },
                   x);
  });
  CHECK(shape.find("while_loop: carry leaf 0 enters body_fn as f32[3] but body_fn returns f64[3]") != std::string::npos);
  CHECK(shape.find("test_cond.cpp") != std::string::npos);
  std::string tree = error_of([&] {
    xj::while_loop([](const std::vector<xj::Array>& c) { return xj::sum(c[0]) < 3.0; },
                   [](const std::vector<xj::Array>& c) { return std::vector<xj::Array>{c[0], c[0]}; }, std::vector<xj::Array>{x});
  });
  CHECK(tree.find("while_loop: body_fn returns a carry of structure") != std::string::npos);
}

// ---- fori_loop -------------------------------------------------------------------------------

TEST_CASE("cond: fori_loop with static bounds lowers to scan; grad matches a plain loop") {
  // carry = (x, acc): x' = sin(x * w) + i * 0.1, acc' = acc + sum(x')
  auto body = [](const xj::Array& w) {
    return [w](const xj::Array& i, const std::pair<xj::Array, xj::Array>& c) {
      auto x = xj::sin(c.first * w) + xj::astype(i, xj::f64) * 0.1;
      return std::pair{x, c.second + xj::sum(x)};
    };
  };
  auto f = [&](const xj::Array& x0, const xj::Array& w) {
    auto [x, acc] = xj::fori_loop(2, 7, body(w), std::pair{x0, xj::scalar(0.0, xj::f64)});
    return xj::sum(x * x) + acc;
  };
  auto plain = [&](const xj::Array& x0, const xj::Array& w) {
    std::pair<xj::Array, xj::Array> c{x0, xj::scalar(0.0, xj::f64)};
    for (int i = 2; i < 7; ++i) c = body(w)(xj::scalar(i, xj::i32), c);
    return xj::sum(c.first * c.first) + c.second;
  };
  auto x0 = f64v({0.2, -0.6, 1.3}), w = f64v({0.9, 1.7, -0.4});
  CHECK(f(x0, w).item<double>() == doctest::Approx(plain(x0, w).item<double>()));
  auto [gx, gw] = xj::grad(f, xj::argnums<0, 1>)(x0, w);
  auto [px, pw] = xj::grad(plain, xj::argnums<0, 1>)(x0, w);
  check_values(gx, vec(px));
  check_values(gw, vec(pw));
  check_values(gw, fd_grad_of_array([&](const xj::Array& v) { return plain(x0, v).item<double>(); }, vec(w)), 1e-6);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{x0, w}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  std::string s = str(xj::make_jaxpr(f)(x0, w));
  INFO(s);
  CHECK(count(s, "scan[") == 1);
  CHECK(count(s, "while[") == 0);
  CHECK(s.find("length=5") != std::string::npos);
  // The index the body sees is an i32 scalar running lo..hi-1; empty ranges run no step.
  auto idx = xj::fori_loop(3, 6, [](const xj::Array& i, const xj::Array& acc) { return acc * 10 + i; }, xj::scalar(0, xj::i32));
  CHECK(idx.item<int>() == 345);
  CHECK(xj::fori_loop(4, 1, [](const xj::Array&, const xj::Array& c) { return c + 1.0; }, xj::scalar(1.0, xj::f64)).item<double>() ==
        1.0);
}

TEST_CASE("cond: fori_loop with Array bounds lowers to while_loop (evaluation and jvp)") {
  auto f = [](const xj::Array& n, const xj::Array& x) {
    return xj::fori_loop(xj::scalar(1, xj::i32), n, [](const xj::Array& i, const xj::Array& c) { return c * xj::astype(i, xj::f64); },
                         x);
  };
  auto x = f64v({1.0, 0.5});
  check_values(f(xj::scalar(5, xj::i32), x), {24.0, 12.0});  // 4!
  check_values(f(xj::scalar(1, xj::i32), x), {1.0, 0.5});
  std::string s = str(xj::make_jaxpr(f)(xj::scalar(5, xj::i32), x));
  INFO(s);
  CHECK(count(s, "while[") == 1);
  CHECK(count(s, "scan[") == 0);
  auto [y, t] = xj::jvp([&](const xj::Array& v) { return f(xj::scalar(4, xj::i32), v); }, std::tuple{x}, std::tuple{f64v({1.0, 2.0})});
  check_values(y, {6.0, 3.0});
  check_values(t, {6.0, 12.0});
  // An i64 bound Array and a mixed (integer, Array) pair of bounds: an i64 counter (the bounds'
  // result type, as lax.fori_loop's). Known bounds give JAX's weak counter (a Python int there), so
  // an i32 carry plus i stays i32; traced strong i64 bounds give a strong i64 counter, and then an
  // i32 carry plus i would change the carry's dtype (a TypeError, as JAX's).
  const auto add_i = [](const xj::Array& i, const xj::Array& c) { return c + i; };
  auto m = xj::fori_loop(0, xj::scalar(3, xj::i64), add_i, xj::scalar(0, xj::i64));
  CHECK(m.item<std::int64_t>() == 3);
  const xj::Array narrow = xj::fori_loop(0, xj::scalar(3, xj::i64), add_i, xj::scalar(0, xj::i32));
  CHECK(narrow.dtype() == xj::i32);
  CHECK(narrow.item<std::int32_t>() == 3);
  CHECK_THROWS_AS((void)xj::jit([&](const xj::Array& lo, const xj::Array& hi) { return xj::fori_loop(lo, hi, add_i, xj::scalar(0, xj::i32)); })(
                      xj::scalar(0, xj::i64), xj::scalar(3, xj::i64)),
                  xj::TypeError);
}

TEST_CASE("cond: branches see a weakly typed operand weak (a traced C++ number times an f32 array stays f32)") {
  const xj::Array a = xj::array<float>({1.5f, -2.0f}, {2});
  auto scaled = [](const xj::Array& p, const xj::Array& x, const xj::Array& s) {
    return xj::cond(
        p, [](const xj::Array& u, const xj::Array& k) { return u * k; },
        [](const xj::Array& u, const xj::Array& k) { return u - k; }, x, s);
  };
  // the branches computed in f64 (the number traced strong): JAX's branches see it weak
  const xj::Array t = xj::jit(scaled)(xj::scalar(true, xj::bool_), a, 0.5);
  CHECK(t.dtype() == xj::f32);
  CHECK(t.to_vector<float>() == std::vector<float>{0.75f, -1.0f});
  const xj::Array f = xj::jit(scaled)(xj::scalar(false, xj::bool_), a, 0.5);
  CHECK(f.dtype() == xj::f32);
  CHECK(f.to_vector<float>() == std::vector<float>{1.0f, -2.5f});
  const xj::Array half = xj::jit([](const xj::Array& k) { return k * 1.0; })(0.5);  // a weak f64, as jit traces 0.5
  const std::string text = xj::make_jaxpr(scaled)(xj::scalar(true, xj::bool_), a, half).str();
  CHECK(text.find("f64[2]") == std::string::npos);
  // switch_ too, and an f16 operand keeps its dtype beside the number
  const xj::Array h = xj::astype(a, xj::f16);
  const xj::Array sw = xj::jit([](const xj::Array& i, const xj::Array& x, const xj::Array& s) {
    return xj::switch_(i, std::tuple{[](const xj::Array& u, const xj::Array& k) { return u + k; },
                                     [](const xj::Array& u, const xj::Array& k) { return u * k; }},
                       x, s);
  })(xj::scalar(1, xj::i32), h, 2.0);
  CHECK(sw.dtype() == xj::f16);
  CHECK(xj::astype(sw, xj::f64).to_vector<double>() == std::vector<double>{3.0, -4.0});
}

TEST_CASE("cond: a capture whose tangent only an unused tangent output reads keeps no residual of its own derivative") {
  // Reverse mode's staged cond took every operand as needed (partial evaluation's liveness walk),
  // so the tangent of `scale` (read only by the second output, whose tangent stop_gradient
  // drops) and the residual its computation reads, exp(x), stayed (a review of the thirty-fifth
  // session). The cond's DCE rule prunes the operand now.
  const xj::Array x0 = xj::array<double>({0.4, -0.7, 0.9}, {3});
  auto f = [](const xj::Array& x) {
    const xj::Array scale = xj::exp(x);
    auto [value, metric] = xj::cond(
        x[0] > 0.0, [&](const xj::Array& a) { return std::pair{xj::sum(xj::sin(a)), xj::sum(a * scale)}; },
        [&](const xj::Array& a) { return std::pair{xj::sum(xj::cos(a)), xj::sum(a / scale)}; }, x);
    return value + xj::stop_gradient(metric);
  };
  const auto rs = xj::saved_residuals(f, x0);
  CHECK(std::none_of(rs.begin(), rs.end(), [](const xj::Residual& r) { return r.description.starts_with("output of exp from"); }));
  // d/dx of sum(sin x) (x0[0] > 0): cos x
  const std::vector<double> g = xj::grad(f)(x0).to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) CHECK(g[i] == doctest::Approx(std::cos(x0.to_vector<double>()[i])).epsilon(1e-14));
}

// vmap of a cond with a batched predicate evaluates every branch on every row and selects; a
// row's cotangent must not reach the operands through the branch the row did not take, or
// 0 * (an infinite derivative there) is NaN (the gradient of sum(vmap(cond(x > 0, sqrt, id)))
// at x = -1 was NaN; JAX's rule reads each operand as select(index == i, x, stop_gradient(x)) in
// branch i; a helper's hunt of the thirty-seventh session).
TEST_CASE("cond: the gradient of a vmapped cond with a batched predicate takes nothing from the branch a row did not take") {
  const xj::Array xs = xj::array<double>({4.0, -1.0, 0.0, 9.0}, {4});
  auto f = [](const xj::Array& x) {
    return xj::cond(x > 0.0, [](const xj::Array& a) { return xj::sqrt(a); }, [](const xj::Array& a) { return a * 3.0; }, x);
  };
  auto total = [&](const xj::Array& x) { return xj::sum(xj::vmap(f)(x)); };
  // d/dx: 1 / (2 sqrt(x)) where x > 0, else 3
  const std::vector<double> expected{0.25, 3.0, 3.0, 1.0 / 6.0};
  for (const xj::Array& g : {xj::grad(total)(xs), xj::jit(xj::grad(total))(xs), xj::vmap(xj::grad(f))(xs)})
    for (std::size_t i = 0; i < 4; ++i) CHECK(g.to_vector<double>()[i] == doctest::Approx(expected[i]).epsilon(1e-14));
  // an unbatched weight the branches read: d/dw sum_i [x_i > 0 ? sqrt(w x_i) : log(w) x_i], the
  // untaken sqrt(w x_i) of a negative row having an infinite derivative
  auto with_weight = [&](const xj::Array& w) {
    return xj::sum(xj::vmap([&](const xj::Array& x) {
      return xj::cond(x > 0.0, [&](const xj::Array& a) { return xj::sqrt(w * a); }, [&](const xj::Array& a) { return xj::log(w) * a; }, x);
    })(xs));
  };
  const double w0 = 2.0;
  double dw = 0;
  for (double x : xs.to_vector<double>()) dw += x > 0 ? x / (2.0 * std::sqrt(w0 * x)) : x / w0;
  CHECK(xj::grad(with_weight)(xj::scalar(w0, xj::f64)).item<double>() == doctest::Approx(dw).epsilon(1e-14));
  CHECK(xj::jit(xj::grad(with_weight))(xj::scalar(w0, xj::f64)).item<double>() == doctest::Approx(dw).epsilon(1e-14));
  // a weight times a value that is NaN in the rows that do not take its branch (log of x <= 0):
  // d/dw sum_i [x_i > 0 ? w log(x_i) : w x_i]
  auto scaled_log = [&](const xj::Array& w) {
    return xj::sum(xj::vmap([&](const xj::Array& x) {
      return xj::cond(x > 0.0, [&](const xj::Array& a) { return w * xj::log(a); }, [&](const xj::Array& a) { return w * a; }, x);
    })(xs));
  };
  double dlog = 0;
  for (double x : xs.to_vector<double>()) dlog += x > 0 ? std::log(x) : x;
  CHECK(xj::grad(scaled_log)(xj::scalar(w0, xj::f64)).item<double>() == doctest::Approx(dlog).epsilon(1e-14));
  CHECK(xj::jit(xj::grad(scaled_log))(xj::scalar(w0, xj::f64)).item<double>() == doctest::Approx(dlog).epsilon(1e-14));
  // Parameters shared by every row while only the index is batched (vmap of switch_ over
  // members), and a parameter vector wider than the one number per row: their B copies are no
  // larger than the branch's outputs, so they are guarded too (both were NaN: a third review).
  {
    const xj::Array p = xj::array<double>({-1.0, -2.0, -3.0}, {3});
    auto shared = [&](const xj::Array& w) {
      const xj::Array x = xj::scalar(-1.0, xj::f64);
      return xj::sum(xj::vmap([&](const xj::Array& q) {
        return xj::cond(q > 0.0, [&](const xj::Array& v) { return w * xj::log(v); }, [&](const xj::Array& v) { return w * v; }, x);
      })(p));
    };
    CHECK(xj::grad(shared)(xj::scalar(2.0, xj::f64)).item<double>() == -3.0);  // every row takes w x, x = -1
    const xj::Array wv = xj::array<double>({0.5, 1.5, -2.0}, {3});
    auto wide = [&](const xj::Array& w) {
      return xj::sum(xj::vmap([&](const xj::Array& x) {
        return xj::cond(x > 0.0, [&](const xj::Array& v) { return w * xj::log(v); }, [&](const xj::Array& v) { return w * v; }, x);
      })(xs));
    };
    double d = 0;
    for (double x : xs.to_vector<double>()) d += x > 0 ? std::log(x) : x;
    for (double g : xj::grad(wide)(wv).to_vector<double>()) CHECK(g == doctest::Approx(d).epsilon(1e-14));
  }
  // A weight matrix is not copied per row for the selects (B copies made the gradient keep 128x
  // the memory): the residuals of d/dW sum(vmap(cond(sum(x) > 0, tanh(W x), 2 W x))) hold no
  // [B, n, n] array, and the gradient agrees with a per-row loop in double.
  {
    const std::int64_t rows = 6, n = 5;
    const xj::Array xb = xj::reshape(xj::sin(xj::arange(rows * n, xj::f64)), {rows, n});
    const xj::Array W = xj::reshape(xj::cos(xj::arange(n * n, xj::f64) * 0.3), {n, n});
    auto net = [&](const xj::Array& w) {
      return xj::sum(xj::vmap([&](const xj::Array& x) {
        return xj::cond(xj::sum(x) > 0.0, [&](const xj::Array& v) { return xj::tanh(xj::matmul(w, v)); },
                        [&](const xj::Array& v) { return xj::matmul(w, v) * 2.0; }, x);
      })(xb));
    };
    for (const auto& r : xj::saved_residuals(net, W)) CHECK_MESSAGE(r.aval.size() < rows * n * n, r.aval.str(), " ", r.description);
    const std::vector<double> xv = xb.to_vector<double>(), wv = W.to_vector<double>();
    std::vector<double> want(static_cast<std::size_t>(n * n), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double total = 0;
      for (std::int64_t j = 0; j < n; ++j) total += xv[static_cast<std::size_t>(r * n + j)];
      for (std::int64_t i = 0; i < n; ++i) {
        double y = 0;
        for (std::int64_t j = 0; j < n; ++j) y += wv[static_cast<std::size_t>(i * n + j)] * xv[static_cast<std::size_t>(r * n + j)];
        const double dy = total > 0 ? 1.0 - std::tanh(y) * std::tanh(y) : 2.0;
        for (std::int64_t j = 0; j < n; ++j) want[static_cast<std::size_t>(i * n + j)] += dy * xv[static_cast<std::size_t>(r * n + j)];
      }
    }
    check_close(xj::grad(net)(W), xj::array<double>(want, {n, n}), 1e-13);
  }
  // switch_ with a batched index: member 1 takes a * 2, and log(0) of its untaken branch is unused
  auto sw = [](const xj::Array& i, const xj::Array& y) {
    return xj::switch_(i, std::tuple{[](const xj::Array& a) { return a * 2.0; }, [](const xj::Array& a) { return xj::log(a); }}, y);
  };
  const xj::Array index = xj::array<std::int32_t>(std::vector<std::int32_t>{1, 0}, {2}), ys = xj::array<double>({2.0, 0.0}, {2});
  const xj::Array g = xj::grad([&](const xj::Array& y) { return xj::sum(xj::vmap(sw)(index, y)); })(ys);
  CHECK(g.to_vector<double>() == std::vector<double>{0.5, 2.0});
  // forward values and a forward-mode derivative are unchanged by the selects
  CHECK(xj::vmap(f)(xs).to_vector<double>() == std::vector<double>{2.0, -3.0, 0.0, 3.0});
  const auto [v, t] = xj::jvp([&](const xj::Array& x) { return xj::vmap(f)(x); }, std::tuple{xs}, std::tuple{xj::ones_like(xs)});
  check_close(t, xj::array<double>(expected, {4}), 1e-14);
}
