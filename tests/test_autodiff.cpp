// test_autodiff.cpp: the autodiff transforms from the user's side: grad (argnums, has_aux),
// value_and_grad, vjp, jvp, linearize, jacfwd, jacrev, hessian, stop_gradient, on pytrees and
// composed to higher order; the trace cache; error messages; check_grads. Every derivative is
// compared with a closed form written as a plain loop or with central finite differences of the
// function evaluated concretely, never with another result of the same AD code path.
#include <algorithm>
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

struct Params {
  BOOST_HANA_DEFINE_STRUCT(Params, (xj::Array, w), (xj::Array, b));
};
/// Params' members in the other order (tree_unflatten must not read one as the other).
struct Swapped {
  BOOST_HANA_DEFINE_STRUCT(Swapped, (xj::Array, b), (xj::Array, w));
};


template <class Fn> std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}


/// Asserts that a transformed jaxpr holds no dead equation (every output of every equation is read
/// by a later equation or is an outvar) and materializes no zeros (no equation reads a 0 literal,
/// no all-zero constant). Zero literals are allowed where the function itself needs them.
void check_lean(const xj::ClosedJaxpr& j, bool zero_literals_ok = false) {
  INFO(str(j));
  const xj::Jaxpr& jp = *j;
  std::set<std::uint64_t> read;
  for (const auto& o : jp.outvars)
    if (auto* v = std::get_if<xj::Var>(&o)) read.insert(v->id());
  for (auto it = jp.eqns.rbegin(); it != jp.eqns.rend(); ++it) {
    for (const auto& out : it->outputs) {
      INFO("unused output of " << xj::primitive_name(it->prim));
      CHECK(read.count(out.id()) == 1);
    }
    for (const auto& in : it->inputs)
      if (auto* v = std::get_if<xj::Var>(&in)) read.insert(v->id());
  }
  for (const auto& e : jp.eqns)
    for (const auto& in : e.inputs)
      if (auto* lit = std::get_if<xj::Literal>(&in); lit && !zero_literals_ok) {
        INFO(xj::primitive_name(e.prim) << " reads the literal " << lit->value);
        CHECK(lit->value.item<double>() != 0.0);
      }
  for (const auto& c : j.consts) {
    bool all_zero = c.size() > 0;
    for (double v : vec(c)) all_zero = all_zero && v == 0.0;
    CHECK_FALSE(all_zero);
  }
}
}  // namespace

// ---- acceptance 2 -----------------------------------------------------------------------------

TEST_CASE("autodiff: grad of sum(tanh(x)) is 1 - tanh(x)^2") {
  std::vector<double> xs{-2.0, -0.7, 0.0, 0.3, 1.1, 2.5};
  auto f = [](const xj::Array& x) { return xj::sum(xj::tanh(x)); };
  std::vector<double> want;
  for (double x : xs) want.push_back(1 - std::tanh(x) * std::tanh(x));

  SUBCASE("f64") {
    xj::Array g = xj::grad(f)(f64v(xs));
    CHECK(g.aval() == xj::ShapedArray{{6}, xj::f64});
    check_values(g, want, 1e-12);
  }
  SUBCASE("f32") {
    xj::Array g = xj::grad(f)(xj::astype(f64v(xs), xj::f32));
    CHECK(g.aval() == xj::ShapedArray{{6}, xj::f32});
    check_values(g, want, 1e-5);
  }
  SUBCASE("rank 2") {
    xj::Array g = xj::grad(f)(f64v(xs, {2, 3}));
    CHECK(g.shape() == xj::Shape{2, 3});
    check_values(g, want, 1e-12);
  }
}

TEST_CASE("autodiff: hessian of x^T A x is A + A^T") {
  std::vector<double> a{1.0, 2.0, -3.0, 0.5, 4.0, 1.5, -2.0, 0.25, 3.0};  // not symmetric
  xj::Array A = f64v(a, {3, 3});
  auto f = [A](const xj::Array& x) { return xj::dot(x, xj::matmul(A, x)); };
  xj::Array x = f64v({0.3, -1.2, 2.0});
  std::vector<double> want(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want[static_cast<std::size_t>(i * 3 + j)] = a[static_cast<std::size_t>(i * 3 + j)] + a[static_cast<std::size_t>(j * 3 + i)];

  xj::Array H = xj::hessian(f)(x);
  CHECK(H.aval() == xj::ShapedArray{{3, 3}, xj::f64});
  check_values(H, want, 1e-12);
  // The gradient is (A + A^T) x.
  std::vector<double> gx(3, 0.0);
  auto xv = vec(x);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) gx[i] += want[i * 3 + j] * xv[j];
  check_values(xj::grad(f)(x), gx, 1e-12);
  // The same Hessian from the other three mode orders.
  check_values(xj::jacrev(xj::jacrev(f))(x), want, 1e-12);
  check_values(xj::jacrev(xj::jacfwd(f))(x), want, 1e-12);
  check_values(xj::jacfwd(xj::jacfwd(f))(x), want, 1e-12);
}

TEST_CASE("autodiff: third derivative of sin at 0.3 is -cos(0.3)") {
  auto f = [](const xj::Array& x) { return xj::sin(x); };
  xj::Array x = xj::scalar(0.3, xj::f64);
  auto d1 = xj::grad(f);
  auto d2 = xj::grad(d1);
  auto d3 = xj::grad(d2);
  xj::Array g3 = d3(x);
  CHECK(g3.aval() == xj::ShapedArray{{}, xj::f64});
  CHECK(g3.item<double>() == doctest::Approx(-std::cos(0.3)).epsilon(1e-14));
  CHECK(d2(x).item<double>() == doctest::Approx(-std::sin(0.3)).epsilon(1e-14));
  CHECK(d1(x).item<double>() == doctest::Approx(std::cos(0.3)).epsilon(1e-14));
  // Fourth order too.
  CHECK(xj::grad(d3)(x).item<double>() == doctest::Approx(std::sin(0.3)).epsilon(1e-14));
}

TEST_CASE("autodiff: jacfwd and jacrev agree on a function R^3 -> R^4 and match finite differences") {
  auto f = [](const xj::Array& x) {
    return xj::stack({x[0] * x[1], xj::sin(x[2]), x[0] * x[0] + x[2], xj::exp(x[1]) * x[0] - x[1] / x[2]});
  };
  std::vector<double> xv{0.7, -0.4, 1.3};
  xj::Array x = f64v(xv);
  xj::Array jf = xj::jacfwd(f)(x);
  xj::Array jr = xj::jacrev(f)(x);
  CHECK(jf.aval() == xj::ShapedArray{{4, 3}, xj::f64});
  CHECK(jr.aval() == xj::ShapedArray{{4, 3}, xj::f64});
  check_close(jf, jr, 1e-13);
  // closed form
  double x0 = xv[0], x1 = xv[1], x2 = xv[2];
  std::vector<double> want{x1, x0, 0,                                           //
                           0, 0, std::cos(x2),                                  //
                           2 * x0, 0, 1,                                        //
                           std::exp(x1), std::exp(x1) * x0 - 1 / x2, x1 / (x2 * x2)};
  check_values(jf, want, 1e-12);
  // finite differences of the concrete function
  check_values(jr, fd_jacobian(f, xv), 1e-7);
}

// ---- acceptance 3: the jaxpr of grad ----------------------------------------------------------

TEST_CASE("autodiff: make_jaxpr(grad(f)) for f(x) = sum(sin(x) * x) is lean (golden text)") {
  auto f = [](const xj::Array& x) { return xj::sum(xj::sin(x) * x); };
  xj::ClosedJaxpr j = xj::make_jaxpr(xj::grad(f))(xj::zeros({3}));
  std::string text = str(j);
  CHECK(text ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = sin a\n"
        "    c:f32[3] = cos a\n"
        "    d:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 1.0:f32[]\n"
        "    e:f32[3] = mul d b\n"
        "    f:f32[3] = mul d a\n"
        "    g:f32[3] = mul f c\n"
        "    h:f32[3] = add e g\n"
        "  in (h,) }");

  // Structural: no dead equation, no materialized zeros.
  check_lean(j);
  std::set<std::uint64_t> read;
  for (const auto& o : j->outvars)
    if (auto* v = std::get_if<xj::Var>(&o)) read.insert(v->id());
  for (auto it = j->eqns.rbegin(); it != j->eqns.rend(); ++it) {
    for (const auto& out : it->outputs) CHECK(read.count(out.id()) == 1);
    for (const auto& in : it->inputs)
      if (auto* v = std::get_if<xj::Var>(&in)) read.insert(v->id());
    if (it->prim == xj::Primitive::broadcast_in_dim)
      if (auto* lit = std::get_if<xj::Literal>(&it->inputs.at(0))) CHECK(lit->value.item<double>() == 1.0);
  }
  CHECK(j.consts.empty());
  // Input and output as JAX has them.
  REQUIRE(j->invars.size() == 1);
  REQUIRE(j->outvars.size() == 1);
  CHECK(xj::atom_aval(j->outvars[0]) == xj::ShapedArray{{3}, xj::f32});
  // And it computes cos(x) x + sin(x).
  std::vector<double> xs{0.1, -1.0, 2.0};
  auto out = xj::eval_jaxpr(j, std::vector<xj::Array>{xj::astype(f64v(xs), xj::f32)});
  std::vector<double> want;
  for (double x : xs) want.push_back(std::cos(x) * x + std::sin(x));
  check_values(out.at(0), want, 1e-6);
}

// ---- the trace cache: jit's (grad traces on every call, as JAX's) -----------------------------

TEST_CASE("autodiff: grad traces on every call; jit(grad) traces once per abstract signature") {
  std::atomic<int> traces{0};
  auto f = [&traces](const xj::Array& x) {
    ++traces;
    return xj::sum(x * x * x);
  };
  for (int i = 0; i < 3; ++i) check_values(xj::grad(f)(f64v({1.0})), {3.0});
  CHECK(traces == 3);
  traces = 0;
  auto g = xj::jit(xj::grad(f));
  xj::Array x = f64v({1.0, 2.0, -3.0});
  for (int i = 0; i < 100; ++i) {
    xj::Array r = g(x);
    if (i == 0 || i == 99) check_values(r, {3.0, 12.0, 27.0});
  }
  CHECK(traces == 1);
  // Different values, same signature: no retrace.
  check_values(g(f64v({0.5, 0.0, 1.0})), {0.75, 0.0, 3.0});
  CHECK(traces == 1);
  // A new shape retraces once.
  xj::Array y = f64v({1.0, 2.0});
  for (int i = 0; i < 10; ++i) check_values(g(y), {3.0, 12.0});
  CHECK(traces == 2);
  // A new dtype retraces once.
  for (int i = 0; i < 10; ++i) check_values(g(xj::astype(y, xj::f32)), {3.0, 12.0}, 1e-6);
  CHECK(traces == 3);
  // The old signatures are still cached.
  g(x);
  g(y);
  CHECK(traces == 3);
  // jit(value_and_grad) has its own cache, also traced once.
  auto vg = xj::jit(xj::value_and_grad(f));
  for (int i = 0; i < 20; ++i) vg(x);
  CHECK(traces == 4);
}

TEST_CASE("autodiff: jit(grad)'s cache is safe across threads") {
  std::atomic<int> traces{0};
  auto f = [&traces](const xj::Array& x, const xj::Array& y) {
    ++traces;
    return xj::sum(xj::sin(x) * y);
  };
  auto g = xj::jit(xj::grad(f, xj::argnums<0, 1>));
  constexpr int kThreads = 4, kCalls = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        double a = 0.1 * t + 0.01 * i;
        // two shapes, interleaved, so that threads hit both cache entries
        std::int64_t n = (i % 2) ? 3 : 2;
        std::vector<double> xv, yv;
        for (std::int64_t k = 0; k < n; ++k) {
          xv.push_back(a + 0.5 * static_cast<double>(k));
          yv.push_back(1.0 + a * static_cast<double>(k));
        }
        try {
          auto [gx, gy] = g(f64v(xv), f64v(yv));
          auto gxv = vec(gx), gyv = vec(gy);
          for (std::size_t k = 0; k < xv.size(); ++k)
            if (std::abs(gxv[k] - std::cos(xv[k]) * yv[k]) > 1e-12 || std::abs(gyv[k] - std::sin(xv[k])) > 1e-12)
              ++failures;
        } catch (...) {
          ++failures;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  // Concurrent first calls may each trace, but no more than once per thread and signature.
  CHECK(traces >= 2);
  CHECK(traces <= 2 * kThreads);
  int before = traces;
  g(f64v({1.0, 2.0}), f64v({1.0, 2.0}));
  g(f64v({1.0, 2.0, 3.0}), f64v({1.0, 2.0, 3.0}));
  CHECK(traces == before);
}

// ---- grad options -----------------------------------------------------------------------------

TEST_CASE("autodiff: grad with argnums<0, 2> returns a tuple") {
  auto f = [](const xj::Array& x, const xj::Array& y, const xj::Array& z) { return xj::sum(x * y * xj::exp(z)); };
  xj::Array x = f64v({1.0, 2.0}), y = f64v({3.0, -1.0}), z = f64v({0.5, -0.25});
  auto g = xj::grad(f, xj::argnums<0, 2>)(x, y, z);
  static_assert(std::is_same_v<decltype(g), std::tuple<xj::Array, xj::Array>>);
  auto& [gx, gz] = g;
  check_values(gx, {3.0 * std::exp(0.5), -1.0 * std::exp(-0.25)});
  check_values(gz, {1.0 * 3.0 * std::exp(0.5), 2.0 * -1.0 * std::exp(-0.25)});
  // A single index gives the bare gradient.
  auto gy = xj::grad(f, xj::argnums<1>)(x, y, z);
  static_assert(std::is_same_v<decltype(gy), xj::Array>);
  check_values(gy, {1.0 * std::exp(0.5), 2.0 * std::exp(-0.25)});
  // argnums_tuple<1> asks for a tuple of one, as JAX's argnums=(1,).
  auto gy_tuple = xj::grad(f, xj::argnums_tuple<1>)(x, y, z);
  static_assert(std::is_same_v<decltype(gy_tuple), std::tuple<xj::Array>>);
  check_values(std::get<0>(gy_tuple), {1.0 * std::exp(0.5), 2.0 * std::exp(-0.25)});
  auto [value, grads] = xj::value_and_grad(f, xj::argnums_tuple<0>)(x, y, z);
  static_assert(std::is_same_v<decltype(grads), std::tuple<xj::Array>>);
  CHECK(value.item<double>() == doctest::Approx(3.0 * std::exp(0.5) - 2.0 * std::exp(-0.25)));
  check_values(std::get<0>(grads), {3.0 * std::exp(0.5), -1.0 * std::exp(-0.25)});
  // Order follows the argnums list.
  auto [gz2, gx2] = xj::grad(f, xj::argnums<2, 0>)(x, y, z);
  check_close(gz2, gz);
  check_close(gx2, gx);
}

TEST_CASE("autodiff: has_aux returns {grads, aux}; value_and_grad returns {value, grads}") {
  auto f = [](const xj::Array& x) {
    xj::Array loss = xj::sum(x * x);
    return std::pair{loss, std::pair{x * 2.0, xj::max(x)}};
  };
  xj::Array x = f64v({1.0, -3.0, 2.0});
  auto [g, aux] = xj::grad(f, {.has_aux = true})(x);
  check_values(g, {2.0, -6.0, 4.0});
  static_assert(std::is_same_v<decltype(aux), std::pair<xj::Array, xj::Array>>);
  check_values(aux.first, {2.0, -6.0, 4.0});
  CHECK(aux.second.item<double>() == 2.0);

  auto h = [](const xj::Array& x) { return xj::sum(xj::sin(x)); };
  auto [v, gh] = xj::value_and_grad(h)(x);
  CHECK(v.item<double>() == doctest::Approx(std::sin(1.0) + std::sin(-3.0) + std::sin(2.0)).epsilon(1e-14));
  check_values(gh, {std::cos(1.0), std::cos(-3.0), std::cos(2.0)});

  auto [va, ga] = xj::value_and_grad(f, {.has_aux = true})(x);
  CHECK(va.first.item<double>() == 14.0);
  check_values(va.second.first, {2.0, -6.0, 4.0});
  check_values(ga, {2.0, -6.0, 4.0});

  auto [v2, g2] = xj::value_and_grad(
      [](const xj::Array& a, const xj::Array& b) { return xj::sum(a * b); }, xj::argnums<0, 1>)(x, x * 3.0);
  CHECK(v2.item<double>() == 42.0);
  check_values(std::get<0>(g2), {3.0, -9.0, 6.0});
  check_values(std::get<1>(g2), {1.0, -3.0, 2.0});
}

TEST_CASE("autodiff: pytree arguments get gradients in the same structure") {
  xj::Array x = f64v({0.5, -1.0});
  SUBCASE("std::map") {
    std::map<std::string, xj::Array> p{{"w", f64v({2.0, 3.0})}, {"b", xj::scalar(0.25, xj::f64)}};
    auto loss = [](const std::map<std::string, xj::Array>& p, const xj::Array& x) {
      return xj::sum(xj::tanh(p.at("w") * x + p.at("b")));
    };
    auto g = xj::grad(loss)(p, x);
    static_assert(std::is_same_v<decltype(g), std::map<std::string, xj::Array>>);
    REQUIRE(g.size() == 2);
    double z0 = 2.0 * 0.5 + 0.25, z1 = 3.0 * -1.0 + 0.25;
    double d0 = 1 - std::tanh(z0) * std::tanh(z0), d1 = 1 - std::tanh(z1) * std::tanh(z1);
    check_values(g.at("w"), {d0 * 0.5, d1 * -1.0});
    CHECK(g.at("b").shape() == xj::Shape{});
    CHECK(g.at("b").item<double>() == doctest::Approx(d0 + d1).epsilon(1e-12));
  }
  SUBCASE("hana struct") {
    Params p{f64v({2.0, 3.0}), xj::scalar(0.25, xj::f64)};
    auto loss = [](const Params& p, const xj::Array& x) { return xj::sum(xj::square(p.w * x + p.b)); };
    auto [gp, gx] = xj::grad(loss, xj::argnums<0, 1>)(p, x);
    static_assert(std::is_same_v<decltype(gp), Params>);
    double z0 = 2.0 * 0.5 + 0.25, z1 = 3.0 * -1.0 + 0.25;
    check_values(gp.w, {2 * z0 * 0.5, 2 * z1 * -1.0});
    CHECK(gp.b.item<double>() == doctest::Approx(2 * z0 + 2 * z1).epsilon(1e-12));
    check_values(gx, {2 * z0 * 2.0, 2 * z1 * 3.0});
  }
  SUBCASE("std::vector") {
    std::vector<xj::Array> xs{f64v({1.0, 2.0}), xj::scalar(3.0, xj::f64), f64v({-1.0, 0.5, 4.0})};
    auto loss = [](const std::vector<xj::Array>& v) { return xj::sum(v[0]) * v[1] + xj::sum(v[2] * v[2]); };
    auto g = xj::grad(loss)(xs);
    static_assert(std::is_same_v<decltype(g), std::vector<xj::Array>>);
    REQUIRE(g.size() == 3);
    check_values(g[0], {3.0, 3.0});
    CHECK(g[1].item<double>() == 3.0);
    check_values(g[2], {-2.0, 1.0, 8.0});
  }
}

// ---- vjp / jvp / linearize --------------------------------------------------------------------

TEST_CASE("autodiff: vjp returns the output and a function giving one cotangent per argument") {
  auto f = [](const xj::Array& x, const xj::Array& y) { return x * xj::sin(y); };
  xj::Array x = f64v({1.0, 2.0, 3.0}), y = f64v({0.1, -0.5, 1.5});
  auto [out, f_vjp] = xj::vjp(f, x, y);
  check_values(out, {std::sin(0.1), 2 * std::sin(-0.5), 3 * std::sin(1.5)});
  auto cts = f_vjp(f64v({1.0, -2.0, 0.5}));
  static_assert(std::is_same_v<decltype(cts), std::tuple<xj::Array, xj::Array>>);
  auto [cx, cy] = cts;
  check_values(cx, {std::sin(0.1), -2 * std::sin(-0.5), 0.5 * std::sin(1.5)});
  check_values(cy, {std::cos(0.1), -2 * 2 * std::cos(-0.5), 0.5 * 3 * std::cos(1.5)});
  // f_vjp can be called again with another cotangent.
  auto [cx2, cy2] = f_vjp(f64v({0.0, 1.0, 0.0}));
  check_values(cx2, {0.0, std::sin(-0.5), 0.0});
  check_values(cy2, {0.0, 2 * std::cos(-0.5), 0.0});
}

TEST_CASE("autodiff: integer arguments get zero cotangents of their own dtype (xjax's float0)") {
  // JAX gives integer inputs float0 cotangents; xjax gives a zero array of the argument's shape
  // and dtype, so that the tuple of cotangents has one array per argument.
  auto f = [](const xj::Array& x, const xj::Array& n) { return x * xj::astype(n, xj::f64); };
  xj::Array x = f64v({1.0, 2.0});
  xj::Array n = xj::array<std::int32_t>({3, -4});
  auto [out, f_vjp] = xj::vjp(f, x, n);
  check_values(out, {3.0, -8.0});
  auto [cx, cn] = f_vjp(f64v({1.0, 1.0}));
  check_values(cx, {3.0, -4.0});
  CHECK(cn.aval() == xj::ShapedArray{{2}, xj::i32});
  CHECK(cn.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0});

  // Under grad with argnums covering the integer argument too.
  auto g = xj::grad([](const xj::Array& x, const xj::Array& n) { return xj::sum(x * xj::astype(n, xj::f64)); },
                    xj::argnums<0, 1>, {.allow_int = true})(x, n);
  check_values(std::get<0>(g), {3.0, -4.0});
  CHECK(std::get<1>(g).aval() == xj::ShapedArray{{2}, xj::i32});
  CHECK(std::get<1>(g).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("autodiff: jvp with tuples of primals and tangents") {
  auto f = [](const xj::Array& x, const xj::Array& y) { return x * y + xj::sin(x); };
  xj::Array x = f64v({0.5, 1.0}), y = f64v({2.0, -3.0});
  xj::Array tx = f64v({1.0, 0.5}), ty = f64v({-1.0, 2.0});
  auto [out, t] = xj::jvp(f, std::tuple{x, y}, std::tuple{tx, ty});
  check_values(out, {0.5 * 2.0 + std::sin(0.5), -3.0 + std::sin(1.0)});
  check_values(t, {1.0 * 2.0 + 0.5 * -1.0 + std::cos(0.5) * 1.0, 0.5 * -3.0 + 1.0 * 2.0 + std::cos(1.0) * 0.5});
  // Finite differences along the tangent.
  double eps = 1e-6;
  xj::Array fp = f(x + tx * eps, y + ty * eps), fm = f(x - tx * eps, y - ty * eps);
  check_values(t, vec((fp - fm) / (2 * eps)), 1e-8);
}

TEST_CASE("autodiff: linearize gives the jvp's linear map") {
  auto f = [](const xj::Array& x, const xj::Array& y) { return xj::exp(x) * y - x * x; };
  xj::Array x = f64v({0.5, -1.0, 2.0}), y = f64v({1.5, 2.0, -0.5});
  auto [out, f_lin] = xj::linearize(f, x, y);
  check_close(out, f(x, y), 1e-14);
  for (auto [tx, ty] : {std::pair{f64v({1.0, 0.0, 0.0}), f64v({0.0, 0.0, 0.0})},
                        std::pair{f64v({0.3, -1.0, 2.0}), f64v({1.0, 1.0, -2.0})}}) {
    xj::Array lin = f_lin(tx, ty);
    auto [o, t] = xj::jvp(f, std::tuple{x, y}, std::tuple{tx, ty});
    check_close(lin, t, 1e-13);
    // closed form: exp(x) y tx + exp(x) ty - 2 x tx
    auto xv = vec(x), yv = vec(y), txv = vec(tx), tyv = vec(ty);
    std::vector<double> want;
    for (std::size_t i = 0; i < 3; ++i)
      want.push_back(std::exp(xv[i]) * yv[i] * txv[i] + std::exp(xv[i]) * tyv[i] - 2 * xv[i] * txv[i]);
    check_values(lin, want, 1e-12);
  }
}

// ---- composition ------------------------------------------------------------------------------

namespace {
// f(x) = sum(exp(x)) * sum(x^2); closed-form gradient and Hessian.
xj::Array expsq(const xj::Array& x) { return xj::sum(xj::exp(x)) * xj::sum(x * x); }
std::vector<double> expsq_hessian(const std::vector<double>& x) {
  double S = 0, Q = 0;
  for (double v : x) S += std::exp(v), Q += v * v;
  std::size_t n = x.size();
  std::vector<double> H(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      H[i * n + j] = (i == j ? std::exp(x[i]) * Q + 2 * S : 0.0) + 2 * std::exp(x[i]) * x[j] + 2 * x[i] * std::exp(x[j]);
  return H;
}
std::vector<double> matvec(const std::vector<double>& H, const std::vector<double>& v) {
  std::vector<double> out(v.size(), 0.0);
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < v.size(); ++j) out[i] += H[i * v.size() + j] * v[j];
  return out;
}
}  // namespace

TEST_CASE("autodiff: composition: jvp of grad, grad of jvp, grad of vjp, jacfwd(jacrev) are Hessian products") {
  std::vector<double> xv{0.2, -0.5, 1.0}, vv{1.0, 2.0, -0.5};
  xj::Array x = f64v(xv), v = f64v(vv);
  auto H = expsq_hessian(xv);
  auto Hv = matvec(H, vv);
  auto f = [](const xj::Array& x) { return expsq(x); };

  // closed-form gradient against finite differences, so that H above is trusted
  auto plain = [](const std::vector<double>& x) {
    double S = 0, Q = 0;
    for (double e : x) S += std::exp(e), Q += e * e;
    return S * Q;
  };
  check_values(xj::grad(f)(x), fd_grad(plain, xv), 1e-8);

  SUBCASE("jvp of grad") {
    auto [g, hv] = xj::jvp(xj::grad(f), std::tuple{x}, std::tuple{v});
    check_values(g, fd_grad(plain, xv), 1e-8);
    check_values(hv, Hv, 1e-12);
  }
  SUBCASE("grad of jvp") {
    auto dir = [f, v](const xj::Array& x) { return xj::jvp(f, std::tuple{x}, std::tuple{v}).second; };
    check_values(xj::grad(dir)(x), Hv, 1e-12);
  }
  SUBCASE("grad of vjp") {
    // x -> <vjp(sin)(x)(u), 1> = sum(u cos x), whose gradient is -u sin x.
    xj::Array u = f64v({1.0, -2.0, 0.5});
    auto g = [u](const xj::Array& x) {
      auto [out, f_vjp] = xj::vjp([](const xj::Array& a) { return xj::sin(a); }, x);
      return xj::sum(std::get<0>(f_vjp(u)));
    };
    check_values(xj::grad(g)(x), {-1.0 * std::sin(0.2), 2.0 * std::sin(-0.5), -0.5 * std::sin(1.0)}, 1e-12);
    // and the vjp of a gradient (a Hessian-vector product)
    auto [gx, f_vjp] = xj::vjp(xj::grad(f), x);
    check_values(std::get<0>(f_vjp(v)), Hv, 1e-12);
  }
  SUBCASE("jacfwd(jacrev(f)) and hessian") {
    check_values(xj::jacfwd(xj::jacrev(f))(x), H, 1e-12);
    check_values(xj::hessian(f)(x), H, 1e-12);
    check_values(xj::jacrev(xj::grad(f))(x), H, 1e-12);
    check_values(xj::jacfwd(xj::grad(f))(x), H, 1e-12);
  }
  SUBCASE("linearize of grad") {
    auto [g, lin] = xj::linearize(xj::grad(f), x);
    check_values(lin(v), Hv, 1e-12);
  }
}

TEST_CASE("autodiff: grad(grad(f)) of a two-argument function") {
  // f(x, y) = x^3 y^2 + sin(x y)
  auto f = [](const xj::Array& x, const xj::Array& y) { return x * x * x * y * y + xj::sin(x * y); };
  double a = 0.7, b = -1.3;
  xj::Array x = xj::scalar(a, xj::f64), y = xj::scalar(b, xj::f64);
  // d2f/dx2 = 6 x y^2 - y^2 sin(xy)
  CHECK(xj::grad(xj::grad(f))(x, y).item<double>() ==
        doctest::Approx(6 * a * b * b - b * b * std::sin(a * b)).epsilon(1e-13));
  // d/dy df/dx = 6 x^2 y + cos(xy) - xy sin(xy)
  double dxy = 6 * a * a * b + std::cos(a * b) - a * b * std::sin(a * b);
  CHECK(xj::grad(xj::grad(f), xj::argnums<1>)(x, y).item<double>() == doctest::Approx(dxy).epsilon(1e-13));
  // d/dx df/dy = the same
  CHECK(xj::grad(xj::grad(f, xj::argnums<1>))(x, y).item<double>() == doctest::Approx(dxy).epsilon(1e-13));
  // both second derivatives of df/dx at once
  auto [dxx, dxy2] = xj::grad(xj::grad(f), xj::argnums<0, 1>)(x, y);
  CHECK(dxx.item<double>() == doctest::Approx(6 * a * b * b - b * b * std::sin(a * b)).epsilon(1e-13));
  CHECK(dxy2.item<double>() == doctest::Approx(dxy).epsilon(1e-13));
  // finite differences of the closed-form df/dx = 3 x^2 y^2 + y cos(xy) along y
  auto dfdx = [](double x, double y) { return 3 * x * x * y * y + y * std::cos(x * y); };
  double eps = 1e-6;
  CHECK(dxy == doctest::Approx((dfdx(a, b + eps) - dfdx(a, b - eps)) / (2 * eps)).epsilon(1e-7));
}

TEST_CASE("autodiff: a grad inside a function closing over an outer traced value") {
  // h(y) = d/dx f(x, y) at x0, where the inner function captures y (a tracer of the outer grad).
  auto f = [](const xj::Array& x, const xj::Array& y) { return xj::sin(x * y) * xj::exp(y) + x * x * y; };
  auto plain = [](double x, double y) { return std::sin(x * y) * std::exp(y) + x * x * y; };
  double x0 = 0.4, y0 = 0.9;
  xj::Array xa = xj::scalar(x0, xj::f64);
  auto h = [f, xa](const xj::Array& y) {
    auto inner = [f, y](const xj::Array& x) { return f(x, y); };
    return xj::grad(inner)(xa);
  };
  // h itself: df/dx = y cos(xy) e^y + 2 x y
  CHECK(h(xj::scalar(y0, xj::f64)).item<double>() ==
        doctest::Approx(y0 * std::cos(x0 * y0) * std::exp(y0) + 2 * x0 * y0).epsilon(1e-13));
  double got = xj::grad(h)(xj::scalar(y0, xj::f64)).item<double>();
  // mixed second derivative by finite differences of plain doubles
  double e = 1e-4;
  double fd = (plain(x0 + e, y0 + e) - plain(x0 + e, y0 - e) - plain(x0 - e, y0 + e) + plain(x0 - e, y0 - e)) / (4 * e * e);
  CHECK(got == doctest::Approx(fd).epsilon(1e-6));
  // closed form: d/dy [y cos(xy) e^y + 2xy] = cos(xy) e^y - x y sin(xy) e^y + y cos(xy) e^y + 2x
  double closed = std::cos(x0 * y0) * std::exp(y0) - x0 * y0 * std::sin(x0 * y0) * std::exp(y0) +
                  y0 * std::cos(x0 * y0) * std::exp(y0) + 2 * x0;
  CHECK(got == doctest::Approx(closed).epsilon(1e-13));
  // The same grad object, called under two different outer values, must not reuse a jaxpr that
  // closed over the first tracer.
  auto gh = xj::grad(h);
  double got2 = gh(xj::scalar(1.7, xj::f64)).item<double>();
  double closed2 = std::cos(x0 * 1.7) * std::exp(1.7) - x0 * 1.7 * std::sin(x0 * 1.7) * std::exp(1.7) +
                   1.7 * std::cos(x0 * 1.7) * std::exp(1.7) + 2 * x0;
  CHECK(got2 == doctest::Approx(closed2).epsilon(1e-13));
  CHECK(gh(xj::scalar(y0, xj::f64)).item<double>() == doctest::Approx(closed).epsilon(1e-13));
}

TEST_CASE("autodiff: stop_gradient blocks the derivative") {
  auto f = [](const xj::Array& x) { return xj::sum(x * xj::stop_gradient(x)); };
  xj::Array x = f64v({1.0, -2.0, 3.0});
  check_values(xj::grad(f)(x), {1.0, -2.0, 3.0});
  auto [o, t] = xj::jvp(f, std::tuple{x}, std::tuple{f64v({1.0, 1.0, 1.0})});
  CHECK(o.item<double>() == 14.0);
  CHECK(t.item<double>() == 2.0);
}

TEST_CASE("autodiff: inputs and outputs that do not depend on each other get zero derivatives") {
  xj::Array x = f64v({1.0, 2.0}), y = f64v({3.0, -1.0, 0.5});
  // grad of an argument the function ignores
  auto f = [](const xj::Array& x, const xj::Array& y) { return xj::sum(y * y) + 0.0 * xj::sum(xj::stop_gradient(x)); };
  auto [gx, gy] = xj::grad(f, xj::argnums<0, 1>)(x, y);
  CHECK(gx.aval() == x.aval());
  check_values(gx, {0.0, 0.0});
  check_values(gy, {6.0, -2.0, 1.0});
  auto ignore = [](const xj::Array&, const xj::Array& y) { return xj::sum(y); };
  check_values(xj::grad(ignore)(x, y), {0.0, 0.0});
  // a constant function
  auto c = [](const xj::Array&) { return xj::scalar(2.0, xj::f64); };
  check_values(xj::grad(c)(x), {0.0, 0.0});
  check_values(xj::jacrev([](const xj::Array& x) { return xj::zeros_like(x) + 1.0; })(x), {0, 0, 0, 0});
  check_values(xj::jacfwd([](const xj::Array& x) { return xj::zeros_like(x) + 1.0; })(x), {0, 0, 0, 0});
  // a pytree output where one part ignores the input: vjp and jvp
  auto g = [](const xj::Array& x, const xj::Array& y) { return std::pair{x * 2.0, xj::sum(y) + 1.0}; };
  auto [out, g_vjp] = xj::vjp(g, x, y);
  static_assert(std::is_same_v<decltype(out), std::pair<xj::Array, xj::Array>>);
  auto [cx, cy] = g_vjp(std::pair{f64v({1.0, -1.0}), xj::scalar(3.0, xj::f64)});
  check_values(cx, {2.0, -2.0});
  check_values(cy, {3.0, 3.0, 3.0});
  auto [o, t] = xj::jvp(g, std::tuple{x, y}, std::tuple{f64v({1.0, 0.5}), f64v({0.0, 0.0, 0.0})});
  check_values(t.first, {2.0, 1.0});
  CHECK(t.second.aval() == xj::ShapedArray{{}, xj::f64});
  CHECK(t.second.item<double>() == 0.0);
  // non-differentiable outputs (comparisons, argmax) have zero tangents and take part in the result
  auto h = [](const xj::Array& x) {
    xj::Array i = xj::argmax(x, 0);
    return std::pair{xj::where(x > 1.5, x * x, -x), i};
  };
  auto [ho, ht] = xj::jvp(h, std::tuple{x}, std::tuple{f64v({1.0, 1.0})});
  check_values(ht.first, {-1.0, 4.0});
  CHECK(ho.second.item<std::int64_t>() == 1);
  CHECK(ht.second.dtype() == ho.second.dtype());
  CHECK(ht.second.item<std::int64_t>() == 0);
}

TEST_CASE("autodiff: jvp ignores tangents of integer primals") {
  auto f = [](const xj::Array& x, const xj::Array& n) { return x * xj::astype(n, xj::f64); };
  xj::Array x = f64v({1.0, 2.0});
  xj::Array n = xj::array<std::int32_t>({3, -4});
  auto [o, t] = xj::jvp(f, std::tuple{x, n}, std::tuple{f64v({1.0, 0.5}), xj::zeros({2}, xj::i32)});
  check_values(o, {3.0, -8.0});
  check_values(t, {3.0, -2.0});
}

TEST_CASE("autodiff: gradients through dtype casts keep each argument's dtype") {
  // f32 input, computation in f64, f32 output
  auto f = [](const xj::Array& x) { return xj::astype(xj::sum(xj::exp(xj::astype(x, xj::f64))), xj::f32); };
  xj::Array x = xj::array<float>({0.5f, -1.0f});
  xj::Array g = xj::grad(f)(x);
  CHECK(g.aval() == xj::ShapedArray{{2}, xj::f32});
  check_values(g, {std::exp(0.5), std::exp(-1.0)}, 1e-6);
}

TEST_CASE("autodiff: Hessians of piecewise and reduction functions") {
  // f(x) = sum(relu(x)^3) + max(x)^2 + logsumexp(x)
  auto f = [](const xj::Array& x) {
    return xj::sum(xj::integer_pow(xj::relu(x), 3)) + xj::square(xj::max(x)) + xj::logsumexp(x);
  };
  std::vector<double> xv{0.4, -0.3, 1.1};
  xj::Array x = f64v(xv);
  double S = 0;
  for (double v : xv) S += std::exp(v);
  std::vector<double> p(3);
  for (std::size_t i = 0; i < 3; ++i) p[i] = std::exp(xv[i]) / S;
  std::vector<double> H(9);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      H[i * 3 + j] = (i == j ? (xv[i] > 0 ? 6 * xv[i] : 0.0) + p[i] : 0.0) - p[i] * p[j] + (i == 2 && j == 2 ? 2.0 : 0.0);
  check_values(xj::hessian(f)(x), H, 1e-12);
  check_values(xj::jacrev(xj::grad(f))(x), H, 1e-12);
  // gradient against finite differences of a plain loop
  auto plain = [](const std::vector<double>& x) {
    double s = 0, m = x[0], e = 0;
    for (double v : x) s += v > 0 ? v * v * v : 0.0, m = std::max(m, v), e += std::exp(v);
    return s + m * m + std::log(e);
  };
  check_values(xj::grad(f)(x), fd_grad(plain, xv), 1e-8);
}

TEST_CASE("autodiff: a small MLP loss: grads of every parameter match finite differences") {
  std::map<std::string, xj::Array> p{{"w1", f64v({0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, {2, 3})},
                                     {"b1", f64v({0.01, -0.02, 0.03})},
                                     {"w2", f64v({0.7, -0.8, 0.9}, {3, 1})}};
  xj::Array xb = f64v({1.0, 2.0, -1.0, 0.5, 0.3, -0.7, 2.0, 1.5}, {4, 2});
  xj::Array yb = f64v({0.5, -0.25, 1.0, 0.0}, {4, 1});
  auto loss = [](const std::map<std::string, xj::Array>& p, const xj::Array& x, const xj::Array& y) {
    xj::Array h = xj::tanh(xj::matmul(x, p.at("w1")) + p.at("b1"));
    xj::Array out = xj::matmul(h, p.at("w2"));
    return xj::mean(xj::square(out - y));
  };
  auto g = xj::grad(loss)(p, xb, yb);
  for (const auto& [name, value] : p) {
    CAPTURE(name);
    auto base = vec(value);
    auto fn = [&, name = name, value = value](const std::vector<double>& v) {
      auto q = p;
      q[name] = f64v(v, value.shape());
      return loss(q, xb, yb).item<double>();
    };
    CHECK(g.at(name).shape() == value.shape());
    check_values(g.at(name), fd_grad(fn, base), 1e-7);
  }
}

TEST_CASE("autodiff: the jaxprs of other gradients are lean too") {
  xj::Array x3 = xj::zeros({3});
  SUBCASE("stop_gradient, comparisons and integer parts") {
    auto f = [](const xj::Array& x) {
      xj::Array i = xj::astype(xj::argmax(x, 0), xj::f32);
      xj::Array above = xj::astype(x > 0.5, xj::f32);  // bool path: a symbolic zero tangent
      return xj::sum(xj::sin(x) * xj::stop_gradient(xj::exp(x)) + above * x) + i;
    };
    check_lean(xj::make_jaxpr(xj::grad(f))(x3));
  }
  SUBCASE("where: the select transpose needs zeros, as in JAX, one broadcast of them") {
    // The user's weakly typed 0.0 (of x > 0.0) is its own broadcast: CSE keeps a weak value apart
    // from a strong one (test_passes), as the jaxpr's weak types decide promotion when re-traced.
    auto f = [](const xj::Array& x) { return xj::sum(xj::where(x > 0.0, x, x * x) * xj::stop_gradient(xj::exp(x))); };
    auto j = xj::make_jaxpr(xj::grad(f))(x3);
    check_lean(j, true);
    int zero_broadcasts = 0;
    for (const auto& e : j->eqns)
      if (auto* lit = std::get_if<xj::Literal>(&e.inputs.at(0)); lit && lit->value.item<double>() == 0.0) ++zero_broadcasts;
    CHECK(zero_broadcasts == 2);
    std::vector<double> xs{-0.5, 0.0, 0.7};
    auto out = xj::eval_jaxpr(j, std::vector<xj::Array>{xj::astype(f64v(xs), xj::f32)});
    std::vector<double> want;
    for (double v : xs) want.push_back((v > 0 ? 1.0 : 2 * v) * std::exp(v));
    check_values(out.at(0), want, 1e-6);
  }
  SUBCASE("two arguments, both differentiated") {
    auto f = [](const xj::Array& x, const xj::Array& y) { return xj::sum(xj::matmul(x, y) * x); };
    check_lean(xj::make_jaxpr(xj::grad(f, xj::argnums<0, 1>))(xj::zeros({3, 3}), xj::zeros({3, 3})));
    check_lean(xj::make_jaxpr(xj::grad(f, xj::argnums<1>))(xj::zeros({3, 3}), xj::zeros({3, 3})));
  }
  SUBCASE("second order") {
    auto f = [](const xj::Array& x) { return xj::sin(x) * x; };
    auto j = xj::make_jaxpr(xj::grad(xj::grad(f)))(xj::scalar(0.0));
    check_lean(j);
    auto out = xj::eval_jaxpr(j, std::vector<xj::Array>{xj::scalar(0.3, xj::f32)});
    CHECK(out.at(0).item<double>() == doctest::Approx(2 * std::cos(0.3) - 0.3 * std::sin(0.3)).epsilon(1e-6));
  }
  SUBCASE("value_and_grad") {
    auto f = [](const xj::Array& x) { return xj::sum(xj::tanh(x)); };
    check_lean(xj::make_jaxpr(xj::value_and_grad(f))(x3));
  }
  SUBCASE("has_aux") {
    auto f = [](const xj::Array& x) { return std::pair{xj::sum(xj::exp(x)), xj::argmax(x, 0)}; };
    check_lean(xj::make_jaxpr(xj::grad(f, {.has_aux = true}))(x3));
  }
}

TEST_CASE("autodiff: jvp of vjp and jacfwd(jacrev) of a vector function") {
  std::vector<double> xv{0.2, -0.5, 1.0};
  xj::Array x = f64v(xv), u = f64v({1.0, -2.0, 0.5}), v = f64v({0.5, 1.0, -1.0});
  // h(x) = vjp(sin)(x)(u) = u cos x; its jvp along v is -u sin(x) v.
  auto h = [u](const xj::Array& x) {
    auto [out, f_vjp] = xj::vjp([](const xj::Array& a) { return xj::sin(a); }, x);
    return std::get<0>(f_vjp(u));
  };
  auto [o, t] = xj::jvp(h, std::tuple{x}, std::tuple{v});
  check_values(o, {std::cos(0.2), -2 * std::cos(-0.5), 0.5 * std::cos(1.0)}, 1e-14);
  check_values(t, {-1.0 * std::sin(0.2) * 0.5, 2.0 * std::sin(-0.5) * 1.0, -0.5 * std::sin(1.0) * -1.0}, 1e-14);

  // g : R^3 -> R^2, g(x) = (x0 x1 x2, sin(x0) x2^2); second derivatives [2, 3, 3]
  auto g = [](const xj::Array& x) { return xj::stack({x[0] * x[1] * x[2], xj::sin(x[0]) * x[2] * x[2]}); };
  double a = xv[0], b = xv[1], c = xv[2];
  std::vector<double> want{0, c, b, c, 0, a, b, a, 0,  //
                           -std::sin(a) * c * c, 0, 2 * std::cos(a) * c, 0, 0, 0, 2 * std::cos(a) * c, 0, 2 * std::sin(a)};
  xj::Array fr = xj::jacfwd(xj::jacrev(g))(x);
  CHECK(fr.shape() == xj::Shape{2, 3, 3});
  check_values(fr, want, 1e-13);
  check_values(xj::jacrev(xj::jacfwd(g))(x), want, 1e-13);
}

TEST_CASE("autodiff: vjp and linearize on pytree arguments") {
  std::map<std::string, xj::Array> p{{"a", f64v({1.0, 2.0})}, {"b", f64v({-1.0, 0.5})}};
  xj::Array s = xj::scalar(3.0, xj::f64);
  auto f = [](const std::map<std::string, xj::Array>& p, const xj::Array& s) { return p.at("a") * p.at("b") * s; };
  auto [out, f_vjp] = xj::vjp(f, p, s);
  check_values(out, {-3.0, 3.0});
  auto [cp, cs] = f_vjp(f64v({1.0, 2.0}));
  static_assert(std::is_same_v<decltype(cp), std::map<std::string, xj::Array>>);
  check_values(cp.at("a"), {-3.0, 3.0});
  check_values(cp.at("b"), {3.0, 12.0});
  CHECK(cs.item<double>() == -1.0 + 2.0);

  auto [o2, f_lin] = xj::linearize(f, p, s);
  std::map<std::string, xj::Array> tp{{"a", f64v({1.0, 0.0})}, {"b", f64v({0.0, 1.0})}};
  // d(a b s) = da b s + a db s + a b ds
  check_values(f_lin(tp, xj::scalar(0.5, xj::f64)), {1.0 * -1.0 * 3.0 + 1.0 * -1.0 * 0.5, 2.0 * 1.0 * 3.0 + 2.0 * 0.5 * 0.5});
}

TEST_CASE("autodiff: jit(grad)'s cache keys on the pytree structure") {
  std::atomic<int> traces{0};
  auto f = [&traces](const std::vector<xj::Array>& v) {
    ++traces;
    xj::Array s = xj::scalar(0.0, xj::f64);
    for (const auto& e : v) s = s + xj::sum(e * e);
    return s;
  };
  auto g = xj::jit(xj::grad(f));
  xj::Array a = f64v({1.0, 2.0});
  auto g2 = g(std::vector<xj::Array>{a, a});
  CHECK(traces == 1);
  REQUIRE(g2.size() == 2);
  check_values(g2[1], {2.0, 4.0});
  auto g3 = g(std::vector<xj::Array>{a, a, a});
  CHECK(traces == 2);
  REQUIRE(g3.size() == 3);
  check_values(g3[2], {2.0, 4.0});
  g(std::vector<xj::Array>{a, a});
  g(std::vector<xj::Array>{a, a, a});
  CHECK(traces == 2);

  std::atomic<int> mtraces{0};
  auto m = [&mtraces](const std::map<std::string, xj::Array>& p) {
    ++mtraces;
    xj::Array s = xj::scalar(0.0, xj::f64);
    for (const auto& [k, e] : p) s = s + xj::sum(xj::sin(e));
    return s;
  };
  auto gm = xj::jit(xj::grad(m));
  auto r1 = gm(std::map<std::string, xj::Array>{{"u", a}, {"v", a}});
  auto r2 = gm(std::map<std::string, xj::Array>{{"u", a}, {"w", a}});
  CHECK(mtraces == 2);
  CHECK(r2.count("w") == 1);
  check_values(r2.at("w"), {std::cos(1.0), std::cos(2.0)});
  check_values(r1.at("v"), {std::cos(1.0), std::cos(2.0)});
}

TEST_CASE("autodiff: nested grads on several threads") {
  auto f = [](const xj::Array& x) { return xj::sin(x) * xj::exp(x); };
  auto d2 = xj::grad(xj::grad(f));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        double a = 0.1 * t + 0.05 * i;
        try {
          double got = d2(xj::scalar(a, xj::f64)).item<double>();
          // (sin x e^x)'' = 2 cos(x) e^x
          if (std::abs(got - 2 * std::cos(a) * std::exp(a)) > 1e-12) ++failures;
        } catch (...) {
          ++failures;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
}

// ---- custom_vjp under forward mode -------------------------------------------------------------

namespace {
// sin with a reverse rule: fwd saves cos(x), bwd scales the cotangent by it.
auto vjp_sin = xj::custom_vjp([](const xj::Array& x) { return xj::sin(x); },
                              [](const xj::Array& x) { return std::pair{xj::sin(x), xj::cos(x)}; },
                              [](const xj::Array& c, const xj::Array& ct) { return std::tuple{c * ct}; });
// The custom_vjp value is the output (live), unused (dead), or read only by a comparison (its
// tangent is dead).
xj::Array vjp_live(const xj::Array& x) { return vjp_sin(x) * x; }
xj::Array vjp_dead(const xj::Array& x) {
  xj::Array unused = vjp_sin(x);
  (void)unused;
  return x * 2.0;
}
xj::Array vjp_compared(const xj::Array& x) { return xj::where(vjp_sin(x) > 0.0, x * 3.0, x); }

bool is_forward_mode_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const xj::TransformError& e) {
    return contains(e.what(), "forward-mode differentiation (jvp, linearize, jacfwd) of a custom_vjp function");
  }
  return false;
}
}  // namespace

// Issue 11, finding 5: jvp returned a tangent where linearize raised, depending on whether the
// custom_vjp value was dead. Forward mode of a custom_vjp function is now always a TransformError
// (JAX's rule), while reverse mode uses the user's bwd.
TEST_CASE("autodiff: forward mode of a custom_vjp function is a TransformError whether or not its value is used") {
  xj::Array x = xj::scalar(0.4, xj::f64), one = xj::scalar(1.0, xj::f64);
  for (auto f : {&vjp_live, &vjp_dead, &vjp_compared}) {
    CHECK(is_forward_mode_error([&] { xj::jvp(f, std::tuple{x}, std::tuple{one}); }));
    CHECK(is_forward_mode_error([&] { xj::linearize(f, x); }));
    CHECK(is_forward_mode_error([&] { xj::jacfwd(f)(x); }));
    CHECK(is_forward_mode_error([&] { xj::check_grads(f, std::tuple{x}, {.order = 1, .modes = {xj::fwd}}); }));
    // jvp inside a function that grad differentiates is forward mode too.
    auto jvp_inside = [f](const xj::Array& v) { return xj::jvp(f, std::tuple{v}, std::tuple{xj::scalar(1.0, xj::f64)}).second; };
    CHECK(is_forward_mode_error([&] { xj::grad(jvp_inside)(x); }));
  }
  // Reverse mode works on all three (closed forms).
  CHECK(xj::grad(vjp_live)(x).item<double>() == doctest::Approx(std::cos(0.4) * 0.4 + std::sin(0.4)).epsilon(1e-14));
  CHECK(xj::grad(vjp_dead)(x).item<double>() == doctest::Approx(2.0).epsilon(1e-14));
  CHECK(xj::grad(vjp_compared)(x).item<double>() == doctest::Approx(3.0).epsilon(1e-14));
  auto [y, f_vjp] = xj::vjp(vjp_live, x);
  CHECK(y.item<double>() == doctest::Approx(std::sin(0.4) * 0.4).epsilon(1e-14));
  CHECK(std::get<0>(f_vjp(xj::scalar(2.0, xj::f64))).item<double>() == doctest::Approx(2.0 * (std::cos(0.4) * 0.4 + std::sin(0.4))).epsilon(1e-14));
  CHECK(xj::jacrev(vjp_live)(x).item<double>() == doctest::Approx(std::cos(0.4) * 0.4 + std::sin(0.4)).epsilon(1e-14));
  CHECK_NOTHROW(xj::check_grads(vjp_live, std::tuple{x}, {.order = 2, .modes = {xj::rev}}));
  // Forward over reverse differentiates fwd and bwd (ordinary functions): d/dx (cos x x + sin x).
  CHECK(xj::hessian(vjp_live)(x).item<double>() == doctest::Approx(-std::sin(0.4) * 0.4 + 2.0 * std::cos(0.4)).epsilon(1e-13));
  // grad inside a jvp'd function (its custom_vjp is differentiated in reverse mode first).
  auto g = [](const xj::Array& v) { return xj::grad(vjp_live)(v); };
  CHECK(xj::jvp(g, std::tuple{x}, std::tuple{one}).second.item<double>() ==
        doctest::Approx(-std::sin(0.4) * 0.4 + 2.0 * std::cos(0.4)).epsilon(1e-13));
  // A custom_vjp function whose input carries no tangent is not differentiated: no error.
  auto const_input = [](const xj::Array& v) { return vjp_sin(xj::scalar(0.3, xj::f64)) * v; };
  CHECK(xj::jvp(const_input, std::tuple{x}, std::tuple{one}).second.item<double>() == doctest::Approx(std::sin(0.3)).epsilon(1e-14));
}

// ---- errors -----------------------------------------------------------------------------------

TEST_CASE("autodiff: errors") {
  xj::Array x = f64v({1.0, 2.0});
  SUBCASE("grad of a non-scalar function") {
    auto g = xj::grad([](const xj::Array& x) { return xj::sin(x); });
    CHECK_THROWS_AS(g(x), xj::TypeError);
    CHECK(contains(error_message([&] { g(x); }), "scalar"));
  }
  SUBCASE("grad of an integer-valued function") {
    auto g = xj::grad([](const xj::Array& x) { return xj::argmax(x, 0); });
    CHECK_THROWS_AS(g(x), xj::TypeError);
  }
  SUBCASE("has_aux mismatch") {
    auto plain = [](const xj::Array& x) { return xj::sum(x); };
    auto paired = [](const xj::Array& x) { return std::pair{xj::sum(x), x}; };
    CHECK_THROWS_AS(xj::grad(plain, {.has_aux = true})(x), xj::Error);
    CHECK_THROWS_AS(xj::grad(paired)(x), xj::Error);
    CHECK(contains(error_message([&] { xj::grad(paired)(x); }), "has_aux"));
    CHECK(contains(error_message([&] { xj::grad(plain, {.has_aux = true})(x); }), "has_aux"));
  }
  SUBCASE("vjp with a cotangent of the wrong shape or dtype") {
    auto [out, f_vjp] = xj::vjp([](const xj::Array& x) { return xj::sin(x); }, x);
    CHECK_THROWS_AS(f_vjp(f64v({1.0, 2.0, 3.0})), xj::Error);
    CHECK_THROWS_AS(f_vjp(xj::ones({2}, xj::f32)), xj::Error);
    CHECK_THROWS_AS(f_vjp(xj::ones({2, 1}, xj::f64)), xj::Error);
  }
  SUBCASE("jvp with a tangent of the wrong shape or dtype") {
    auto f = [](const xj::Array& x) { return xj::sin(x); };
    CHECK_THROWS_AS(xj::jvp(f, std::tuple{x}, std::tuple{f64v({1.0, 2.0, 3.0})}), xj::Error);
    CHECK_THROWS_AS(xj::jvp(f, std::tuple{x}, std::tuple{xj::ones({2}, xj::f32)}), xj::Error);
  }
  SUBCASE("grad of a size-1 array that is not rank 0") {
    auto g = xj::grad([](const xj::Array& x) { return xj::sum(x, {0}, true); });
    CHECK_THROWS_AS(g(x), xj::TypeError);
  }
  SUBCASE("grad of a function returning two arrays") {
    auto g = xj::grad([](const xj::Array& x) { return std::tuple{xj::sum(x), xj::sum(x)}; });
    CHECK_THROWS_AS(g(x), xj::TypeError);
  }
}

// ---- check_grads ------------------------------------------------------------------------------

TEST_CASE("autodiff: check_grads passes on composite functions in f64") {
  xj::Array x = f64v({0.3, -0.8, 1.2, 0.1}, {2, 2});
  xj::Array y = f64v({0.5, 1.5, -0.4, 0.9}, {2, 2});
  CHECK_NOTHROW(xj::check_grads([](const xj::Array& x) { return xj::sum(xj::tanh(x) * xj::exp(-x * x)); }, std::tuple{x}));
  CHECK_NOTHROW(xj::check_grads([](const xj::Array& a, const xj::Array& b) { return xj::log_softmax(xj::matmul(a, b)); },
                                std::tuple{x, y}));
  CHECK_NOTHROW(xj::check_grads(
      [](const xj::Array& a, const xj::Array& b) { return xj::sin(a) * xj::sqrt(b * b + 1.0) / (1.0 + xj::square(a)); },
      std::tuple{x, y}, {.order = 3}));
  CHECK_NOTHROW(xj::check_grads([](const Params& p) { return xj::sum(xj::logistic(p.w * p.b)); },
                                std::tuple{Params{x, y}}, {.order = 2, .modes = {xj::rev}}));
}

TEST_CASE("autodiff: check_grads passes in f32 with its default tolerances") {
  xj::Array x = xj::array<float>({0.3f, -0.8f, 1.2f});
  CHECK_NOTHROW(xj::check_grads([](const xj::Array& x) { return xj::sum(xj::sin(x) * x); }, std::tuple{x}));
  CHECK_NOTHROW(xj::check_grads([](const xj::Array& x) { return xj::softmax(x); }, std::tuple{x}, {.order = 1}));
}

TEST_CASE("autodiff: check_grads rejects a function whose derivative is wrong") {
  // Value x^2 but derivative 1: stop_gradient hides x^2 from AD, and x - stop_gradient(x) adds 0
  // with derivative 1.
  auto wrong = [](const xj::Array& x) { return xj::stop_gradient(x * x) + x - xj::stop_gradient(x); };
  xj::Array x = f64v({0.7, -1.3, 2.0});
  // the premise: the value is x^2, the jvp is the tangent itself
  check_values(wrong(x), {0.49, 1.69, 4.0}, 1e-14);
  auto [o, t] = xj::jvp(wrong, std::tuple{x}, std::tuple{f64v({1.0, 1.0, 1.0})});
  check_values(t, {1.0, 1.0, 1.0});

  for (auto mode : {xj::fwd, xj::rev}) {
    CAPTURE(static_cast<int>(mode));
    CHECK_THROWS_AS(xj::check_grads(wrong, std::tuple{x}, {.order = 1, .modes = {mode}}), xj::GradCheckError);
    std::string msg = error_message([&] { xj::check_grads(wrong, std::tuple{x}, {.order = 1, .modes = {mode}}); });
    CHECK(contains(msg, "order"));
    CHECK(contains(msg, "expected"));
    CHECK(contains(msg, mode == xj::fwd ? "fwd" : "rev"));
  }
  // First order right, second order wrong: value and first derivative of x^3, second derivative 0.
  // g(x) = stop_gradient(x^3) + 3 stop_gradient(x^2) (x - stop_gradient(x)).
  auto wrong2 = [](const xj::Array& x) {
    return xj::stop_gradient(x * x * x) + 3.0 * xj::stop_gradient(x * x) * (x - xj::stop_gradient(x));
  };
  CHECK_NOTHROW(xj::check_grads(wrong2, std::tuple{x}, {.order = 1}));
  std::string msg = error_message([&] { xj::check_grads(wrong2, std::tuple{x}, {.order = 2}); });
  CHECK(contains(msg, "order 2"));
  CHECK(contains(msg, "expected"));
}

TEST_CASE("autodiff: grad with several argnums whose indices sum past the argument count") {
  auto f = [](const xj::Array& a, const xj::Array& b, const xj::Array& c) { return xj::sum(a * b * c); };
  xj::Array x = xj::array({1.f, 2.f});
  auto [ga, gb, gc] = xj::grad(f, xj::argnums<0, 1, 2>)(x, x * 2.0, x * 3.0);
  CHECK(ga.to_vector<float>() == std::vector<float>{6.f, 24.f});  // b * c
  CHECK(gb.to_vector<float>() == std::vector<float>{3.f, 12.f});  // a * c
  CHECK(gc.to_vector<float>() == std::vector<float>{2.f, 8.f});   // a * b
  auto [g1, g2] = xj::grad(f, xj::argnums<1, 2>)(x, x * 2.0, x * 3.0);
  CHECK(g1.to_vector<float>() == gb.to_vector<float>());
  CHECK(g2.to_vector<float>() == gc.to_vector<float>());
}

TEST_CASE("autodiff: d(a / b) = (da - db y) / b stays finite for a tiny b (fuzz seed 312124)") {
  // With b subnormal, da / b and db (a / b) / b overflow separately and gave inf - inf = NaN.
  for (double b : {1e-310, std::numeric_limits<double>::denorm_min(), 1e-300, 3.0}) {
    auto f = [](const xj::Array& a, const xj::Array& d) { return xj::div(a, d); };
    auto [y, t] = xj::jvp(f, std::tuple{test_util::f64v({b}), test_util::f64v({b})},
                          std::tuple{test_util::f64v({1.0}), test_util::f64v({1.0})});
    CHECK(vec(y) == std::vector<double>{1.0});
    CHECK(vec(t) == std::vector<double>{0.0});  // (1 - 1 * 1) / b, exactly
    // one tangent alone: da / b and -db y / b, as before
    auto [y1, t1] = xj::jvp(f, std::tuple{test_util::f64v({2.0 * b}), test_util::f64v({b})},
                            std::tuple{test_util::f64v({0.0}), test_util::f64v({1.0})});
    CHECK(vec(t1)[0] == -2.0 / b);  // -inf for the smallest b, as the true value overflows
  }
  // The gradient in b alone, -ct a / b^2 = -ct (y / b), is finite where ct / b overflows (review
  // finding: (ct / b) y was -inf here).
  auto in_b = [](const xj::Array& a, const xj::Array& d) { return xj::div(a, d); };
  const double a64 = 4e-310, b64 = 4e-309;
  const double g64 = xj::grad(in_b, xj::argnums<1>)(xj::scalar(a64, xj::f64), xj::scalar(b64, xj::f64)).item<double>();
  CHECK(std::isfinite(g64));
  CHECK(g64 == doctest::Approx(-static_cast<double>(static_cast<long double>(a64) / (static_cast<long double>(b64) * b64))).epsilon(1e-3));
  const float g32 = xj::jit(xj::grad(in_b, xj::argnums<1>))(xj::scalar(1e-40f), xj::scalar(1e-39f)).item<float>();
  CHECK(std::isfinite(g32));
  CHECK(g32 == doctest::Approx(-1e38).epsilon(1e-3));
}

TEST_CASE("API regressions from review: check_grads compares a custom rule's primal output and uses narrow dtypes' tolerances; jacrev of an integer output; tree_map names the tree that differs") {
  // A custom_jvp whose rule returns a wrong primal output (sin x + 0.5) with the right tangent:
  // check_grads passed (JAX's check_jvp compares the primal too).
  auto wrong_primal = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                                     [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                                       const xj::Array& v = std::get<0>(p);
                                       return std::pair{xj::sin(v) + 0.5, xj::cos(v) * std::get<0>(t)};
                                     });
  const xj::Array x = test_util::f64v({0.3, -0.7, 1.1}, {3});
  CHECK_THROWS_AS(xj::check_grads(wrong_primal, std::tuple{x}, {.order = 1, .modes = {xj::fwd}}), xj::Error);
  // Reverse mode too (twenty-fifth session's review: only check_jvp compared it).
  CHECK_THROWS_AS(xj::check_grads(wrong_primal, std::tuple{x}, {.order = 1, .modes = {xj::rev}}), xj::Error);
  auto right = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                              [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                                const xj::Array& v = std::get<0>(p);
                                return std::pair{xj::sin(v), xj::cos(v) * std::get<0>(t)};
                              });
  xj::check_grads(right, std::tuple{x}, {.order = 2});
  // f16 / bf16 arguments get JAX's tolerances (1e-2, 1e-1): 2 v in f16 failed at f64's 1e-5
  const auto twice = [](const xj::Array& v) { return v * 2.0; };
  xj::check_grads(twice, std::tuple{xj::astype(x, xj::f16)}, {.order = 1, .eps = 0.25});
  xj::check_grads(twice, std::tuple{xj::astype(x, xj::bf16)}, {.order = 1, .eps = 0.25});
  // jacrev of an integer output is an error, as grad's (it returned zeros)
  CHECK_THROWS_AS((void)xj::jacrev([](const xj::Array& v) { return xj::astype(v, xj::i32); })(x), xj::TypeError);
  // tree_map: the tree of `rest` that differs is named by its position (it always said "tree 1")
  const std::vector<xj::Array> two{x, x}, one{x};
  const std::string msg = test_util::message_of<xj::Error>([&] {
    (void)xj::tree_map([](const xj::Array& p, const xj::Array&, const xj::Array&) { return p; }, two, two, one);
  });
  CHECK(contains(msg, "tree 2 of rest"));
}

TEST_CASE("grad: the value must be one array, not a pytree, with or without has_aux (review finding: a tuple's first leaf was differentiated)") {
  const xj::Array x = test_util::f64v({0.3, -0.7, 1.2}, {3});
  using Two = std::tuple<xj::Array, xj::Array>;
  const auto tuple_value = [](const xj::Array& a) { return std::pair<Two, xj::Array>{{xj::sum(a), xj::sum(a * a)}, a}; };
  CHECK_THROWS_WITH_AS((void)xj::value_and_grad(tuple_value, {.has_aux = true})(x), doctest::Contains("one scalar array"), xj::TypeError);
  CHECK_THROWS_WITH_AS((void)xj::grad(tuple_value, {.has_aux = true})(x), doctest::Contains("a pytree of 2 leaves"), xj::TypeError);
  CHECK_THROWS_AS((void)xj::grad([](const xj::Array& a) { return std::tuple<xj::Array>{xj::sum(a * a)}; })(x), xj::TypeError);
  // One array with its aux still works: d sum(a^2) = 2a.
  const auto [g, aux] = xj::grad([](const xj::Array& a) { return std::pair{xj::sum(a * a), a + 1.0}; }, {.has_aux = true})(x);
  CHECK(g.to_vector<double>() == std::vector<double>{0.6, -1.4, 2.4});
  CHECK(aux.to_vector<double>() == (x + 1.0).to_vector<double>());
}

TEST_CASE("custom_jvp / custom_vjp: differentiating with respect to a captured value is an error, not a silent zero (twenty-seventh session's review)") {
  // JAX raises CustomJVPException / CustomVJPException; the gradient through the capture was 0
  const xj::Array x = xj::array<double>({1.0, 2.0}, {2});
  const auto vjp_loss = [&](const xj::Array& a) {
    auto f = xj::custom_vjp([a](const xj::Array& y) { return a * y; },
                            [a](const xj::Array& y) { return std::pair{a * y, a}; },
                            [](const xj::Array& r, const xj::Array& ct) { return std::tuple{r * ct}; });
    return xj::sum(f(x));
  };
  const xj::Array a0 = xj::array<double>({2.0, 3.0}, {2});
  CHECK(vjp_loss(a0).item<double>() == 8.0);
  CHECK_THROWS_WITH_AS((void)xj::grad(vjp_loss)(a0), doctest::Contains("captures"), xj::TransformError);
  CHECK_THROWS_AS((void)xj::jit(xj::grad(vjp_loss))(a0), xj::TransformError);
  const auto jvp_loss = [&](const xj::Array& a) {
    auto f = xj::custom_jvp([a](const xj::Array& y) { return a * xj::sin(y); },
                            [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                              return std::pair{xj::sin(std::get<0>(p)), xj::cos(std::get<0>(p)) * std::get<0>(t)};
                            });
    return xj::sum(f(x));
  };
  CHECK_THROWS_WITH_AS((void)xj::grad(jvp_loss)(a0), doctest::Contains("captures"), xj::TransformError);
  // a captured value that is not differentiated is fine: d/dy sum(a * y) = a
  const auto by_y = [&](const xj::Array& y) {
    auto f = xj::custom_vjp([a0](const xj::Array& v) { return a0 * v; },
                            [a0](const xj::Array& v) { return std::pair{a0 * v, a0}; },
                            [](const xj::Array& r, const xj::Array& ct) { return std::tuple{r * ct}; });
    return xj::sum(f(y));
  };
  CHECK(xj::grad(by_y)(x).to_vector<double>() == std::vector<double>{2.0, 3.0});
}

TEST_CASE("custom_jvp / custom_vjp: rules capturing a traced value that is not differentiated compute, as in JAX (was a TracerError)") {
  // The rules are traced where the call is made, their captures riding along as operands.
  const xj::Array x = xj::array<double>({0.5, -1.25}, {2});
  const xj::Array s0 = xj::array<double>({2.0, 3.0}, {2});
  // f(y) = s * sin(y) with the rule's tangent s * cos(y) dy; s traced but outside argnums.
  const auto scaled_sin = [](const xj::Array& s) {
    return xj::custom_jvp([s](const xj::Array& y) { return s * xj::sin(y); },
                          [s](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                            return std::pair{s * xj::sin(std::get<0>(p)), s * xj::cos(std::get<0>(p)) * std::get<0>(t)};
                          });
  };
  const auto loss = [&](const xj::Array& y, const xj::Array& s) { return xj::sum(scaled_sin(s)(y)); };
  const std::vector<double> xv = x.to_vector<double>(), sv = s0.to_vector<double>();
  const xj::Array g = xj::grad(loss)(x, s0);
  const xj::Array gj = xj::jit(xj::grad(loss))(x, s0);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(g.to_vector<double>()[i] == doctest::Approx(sv[i] * std::cos(xv[i])));
    CHECK(gj.to_vector<double>()[i] == doctest::Approx(sv[i] * std::cos(xv[i])));
  }
  // differentiating s itself (the function captures it) stays JAX's error; so does a value only
  // the rule captures (its tangent would be dropped)
  CHECK_THROWS_AS((void)xj::grad(loss, xj::argnums<1>)(x, s0), xj::TransformError);
  const auto rule_only = [&](const xj::Array& y, const xj::Array& s) {
    auto f = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                            [s](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                              return std::pair{xj::sin(std::get<0>(p)), s * xj::cos(std::get<0>(p)) * std::get<0>(t)};
                            });
    return xj::sum(f(y));
  };
  CHECK_THROWS_WITH_AS((void)xj::grad(rule_only, xj::argnums<0, 1>)(x, s0), doctest::Contains("its rule captures"), xj::TransformError);
  // s alone: the call is not differentiated (its value does not read s), so the gradient is 0
  CHECK(xj::grad(rule_only, xj::argnums<1>)(x, s0).to_vector<double>() == std::vector<double>{0.0, 0.0});
  // but when the arguments carry no tangent the rule never runs, so what only it captures may be
  // differentiated (JAX binds the primal): d/ds sum(f(x) s) = f(x) = sin(x) (diff review: it raised)
  const auto rule_capture_only = [&](const xj::Array& s) {
    auto f = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                            [s](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                              return std::pair{xj::sin(std::get<0>(p)), s * xj::cos(std::get<0>(p)) * std::get<0>(t)};
                            });
    return xj::sum(f(x) * s);
  };
  const auto bwd_capture_only = [&](const xj::Array& s) {
    auto f = xj::custom_vjp([](const xj::Array& v) { return v * v; }, [](const xj::Array& v) { return std::pair{v * v, v}; },
                            [s](const xj::Array& v, const xj::Array& ct) { return std::tuple{2.0 * s * v * ct}; });
    return xj::sum(f(x) * s);
  };
  for (const xj::Array& gs : {xj::grad(rule_capture_only)(s0), xj::jit(xj::grad(rule_capture_only))(s0)})
    for (std::size_t i = 0; i < 2; ++i) CHECK(gs.to_vector<double>()[i] == doctest::Approx(std::sin(xv[i])));
  for (const xj::Array& gs : {xj::grad(bwd_capture_only)(s0), xj::jit(xj::grad(bwd_capture_only))(s0)})
    for (std::size_t i = 0; i < 2; ++i) CHECK(gs.to_vector<double>()[i] == doctest::Approx(xv[i] * xv[i]));
  // the rule's scale s (not differentiated) scales the gradient in y: s cos(y)
  const xj::Array gr = xj::grad(rule_only)(x, s0);
  for (std::size_t i = 0; i < 2; ++i) CHECK(gr.to_vector<double>()[i] == doctest::Approx(sv[i] * std::cos(xv[i])));
  // a stop_gradient value captured by the rule
  const auto stopped = [&](const xj::Array& y) { return xj::sum(scaled_sin(xj::stop_gradient(y * 2.0))(y)); };
  const xj::Array gs = xj::grad(stopped)(x);
  for (std::size_t i = 0; i < 2; ++i) CHECK(gs.to_vector<double>()[i] == doctest::Approx(2.0 * xv[i] * std::cos(xv[i])));
  // grad(vmap(...)): the rule captures the member's row, batched by the enclosing vmap
  const xj::Array rows = xj::array<double>({1.0, 2.0, 3.0, 4.0}, {2, 2});
  const auto batched = [&](const xj::Array& y) {
    return xj::sum(xj::vmap([&](const xj::Array& r) { return scaled_sin(r)(y); })(rows));
  };
  const xj::Array gb = xj::grad(batched)(x);
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(gb.to_vector<double>()[i] == doctest::Approx((i == 0 ? 1.0 + 3.0 : 2.0 + 4.0) * std::cos(xv[i])));  // sum of the rows' column i
  // a slice of scan's xs captured in the body's rule, under grad: d/dc sum_t s_t sin(c) = sum_t s_t cos(c)
  const auto scanned = [&](const xj::Array& c0) {
    auto [c, ys] = xj::scan([&](const xj::Array& c, const xj::Array& s) { return std::pair{c, scaled_sin(s)(c)}; }, c0, rows);
    return xj::sum(ys);
  };
  const xj::Array gsc = xj::grad(scanned)(x);
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(gsc.to_vector<double>()[i] == doctest::Approx((i == 0 ? 4.0 : 6.0) * std::cos(xv[i])));
  // custom_vjp's bwd capturing s (outside argnums): d/dy sum(s * y^2) by the bwd 2 s y ct
  const auto vjp_loss = [&](const xj::Array& y, const xj::Array& s) {
    auto f = xj::custom_vjp([s](const xj::Array& v) { return s * v * v; },
                            [s](const xj::Array& v) { return std::pair{s * v * v, v}; },
                            [s](const xj::Array& v, const xj::Array& ct) { return std::tuple{2.0 * s * v * ct}; });
    return xj::sum(f(y));
  };
  for (const xj::Array& gv : {xj::grad(vjp_loss)(x, s0), xj::jit(xj::grad(vjp_loss))(x, s0)})
    for (std::size_t i = 0; i < 2; ++i) CHECK(gv.to_vector<double>()[i] == doctest::Approx(2.0 * sv[i] * xv[i]));
  // and under vmap of grad, the captured s batched
  const xj::Array gvm = xj::vmap([&](const xj::Array& s) { return xj::grad(vjp_loss)(x, s); })(rows);
  const std::vector<double> gvv = gvm.to_vector<double>(), rv = rows.to_vector<double>();
  for (std::size_t k = 0; k < 4; ++k) CHECK(gvv[k] == doctest::Approx(2.0 * rv[k] * xv[k % 2]));
}

TEST_CASE("custom_jvp rule / custom_vjp fwd calling the function itself, JAX's documented pattern (twenty-eighth session's hunt: it recursed forever)") {
  const xj::Array x = xj::array<double>({0.3, -0.7, 1.1}, {3});
  const std::vector<double> xv = x.to_vector<double>();
  // f = x^3 with a rule saying f' = 2 f, computed by calling f: grad 2 x^3, hessian (rule twice) 4 x^3
  std::function<xj::Array(const xj::Array&)> f_ref;
  auto f = xj::custom_jvp([](const xj::Array& v) { return v * v * v; },
                          [&f_ref](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                            const xj::Array y = f_ref(std::get<0>(p));
                            return std::pair{y, y * 2.0 * std::get<0>(t)};
                          });
  f_ref = f;
  const auto total = [&](const xj::Array& v) { return xj::sum(f(v)); };
  const std::vector<double> jitted = xj::jit(f)(x).to_vector<double>();
  const std::vector<double> g = xj::grad(total)(x).to_vector<double>();
  const xj::Array h = xj::hessian(total)(x);
  for (std::size_t i = 0; i < 3; ++i) {
    const double c = xv[i] * xv[i] * xv[i];
    CHECK(jitted[i] == doctest::Approx(c));
    CHECK(g[i] == doctest::Approx(2.0 * c));
    for (std::size_t j = 0; j < 3; ++j)
      CHECK(h.to_vector<double>()[i * 3 + j] == doctest::Approx(i == j ? 4.0 * c : 0.0));
  }
  // nested custom functions whose rule and body both call the next: one rule trace per level
  int rule_traces = 0;
  std::vector<std::function<xj::Array(const xj::Array&)>> level(21);
  level[0] = [](const xj::Array& v) { return xj::sin(v); };
  for (std::size_t k = 1; k < level.size(); ++k) {
    auto inner = level[k - 1];
    level[k] = xj::custom_jvp([inner](const xj::Array& v) { return inner(v) * 0.5; },
                              [inner, &rule_traces](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                                ++rule_traces;
                                return std::pair{inner(std::get<0>(p)) * 0.5, xj::cos(std::get<0>(p)) * std::get<0>(t) * 0.5};
                              });
  }
  const std::vector<double> deep = xj::jit(level.back())(x).to_vector<double>();
  CHECK(rule_traces <= 2 * 20);
  for (std::size_t i = 0; i < 3; ++i) CHECK(deep[i] == doctest::Approx(std::sin(xv[i]) * std::ldexp(1.0, -20)));
  // custom_vjp: fwd returns f(x) by calling f (eager, jit, grad)
  std::function<xj::Array(const xj::Array&)> g_ref;
  auto gf = xj::custom_vjp([](const xj::Array& v) { return xj::sin(v); },
                           [&g_ref](const xj::Array& v) { return std::pair{g_ref(v), xj::cos(v)}; },
                           [](const xj::Array& c, const xj::Array& ct) { return std::tuple{c * ct}; });
  g_ref = gf;
  const std::vector<double> eager = gf(x).to_vector<double>(), jv = xj::jit(gf)(x).to_vector<double>();
  const std::vector<double> gg = xj::grad([&](const xj::Array& v) { return xj::sum(gf(v)); })(x).to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(eager[i] == doctest::Approx(std::sin(xv[i])));
    CHECK(jv[i] == doctest::Approx(std::sin(xv[i])));
    CHECK(gg[i] == doctest::Approx(std::cos(xv[i])));
  }
  // a different custom_vjp of the same C++ types inside a fwd is not "the same function" (second
  // diff review: the straight-through estimator inside another fwd evaluated round, gradient 0)
  using Fn = xj::Array (*)(const xj::Array&);
  using FwdFn = std::pair<xj::Array, xj::Array> (*)(const xj::Array&);
  using BwdFn = std::tuple<xj::Array> (*)(const xj::Array&, const xj::Array&);
  static std::function<xj::Array(const xj::Array&)> ste;
  ste = xj::custom_vjp(Fn([](const xj::Array& v) { return xj::round(v); }),
                       FwdFn([](const xj::Array& v) { return std::pair{xj::round(v), v}; }),
                       BwdFn([](const xj::Array&, const xj::Array& ct) { return std::tuple{ct}; }));
  auto layer = xj::custom_vjp(Fn([](const xj::Array& v) { return v * 2.0; }),
                              FwdFn([](const xj::Array& v) {
                                return std::pair{v * 2.0, xj::grad([](const xj::Array& u) { return xj::sum(ste(u)); })(v)};
                              }),
                              BwdFn([](const xj::Array& g2, const xj::Array& ct) { return std::tuple{g2 * ct}; }));
  CHECK(xj::grad([&](const xj::Array& v) { return xj::sum(layer(v)); })(x).to_vector<double>() == std::vector<double>{1.0, 1.0, 1.0});
  // a bwd calling its own custom_vjp: the second derivative uses bwd again (third diff review: 6,
  // plain autodiff of x^2); q' = q (the bwd says so), so q'' (3) = q(3) = 9
  std::function<xj::Array(const xj::Array&)> sq;
  auto q = xj::custom_vjp([](const xj::Array& v) { return v * v; }, [](const xj::Array& v) { return std::pair{v * v, v}; },
                          [&sq](const xj::Array& v, const xj::Array& g2) { return std::tuple{g2 * sq(v)}; });
  sq = q;
  CHECK(xj::grad(q)(xj::scalar(3.0)).item<double>() == 9.0);
  CHECK(xj::grad(xj::grad(q))(xj::scalar(3.0)).item<double>() == 9.0);
}

TEST_CASE("a jit first traced inside a custom_jvp rule's trace is not cached with a callable rule (second diff review: later calls raised)") {
  const xj::Array x = xj::array<double>({0.5, -1.25}, {2});
  const xj::Array s = xj::array<double>({2.0, 3.0}, {2});
  const auto scaled_sin = [](const xj::Array& w, const xj::Array& c) {
    return xj::custom_jvp([c](const xj::Array& y) { return c * xj::sin(y); },
                          [c](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                            return std::pair{c * xj::sin(std::get<0>(p)), c * xj::cos(std::get<0>(p)) * std::get<0>(t)};
                          })(w);
  };
  auto jg = xj::jit(scaled_sin);
  auto h = xj::custom_jvp([](const xj::Array& y) { return y; },
                          [&](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                            return std::pair{std::get<0>(p) + 0.0 * jg(std::get<0>(p), s), std::get<0>(t)};
                          });
  CHECK(xj::grad([&](const xj::Array& v) { return xj::sum(h(v)); })(x).to_vector<double>() == std::vector<double>{1.0, 1.0});
  const std::vector<double> g = xj::grad([&](const xj::Array& v) { return xj::sum(jg(v, s)); })(x).to_vector<double>();
  const std::vector<double> xv = x.to_vector<double>(), sv = s.to_vector<double>();
  for (std::size_t i = 0; i < 2; ++i) CHECK(g[i] == doctest::Approx(sv[i] * std::cos(xv[i])));
}

TEST_CASE("jacfwd / jacrev / hessian on pytrees and several arguments, nested as JAX's (output outside, argument inside)") {
  std::vector<double> xv = {0.3, -1.1, 0.7}, yv = {0.5, 2.0};
  xj::Array x = f64v(xv), y = f64v(yv);
  const double s = yv[0] + yv[1];
  // f(x, y) = (sin(x) * sum(y), x[0] * y): d/dx of the first is diag(cos x) s, d/dy is sin(x_i);
  // of the second, d/dx_j = [j == 0] y_i and d/dy_j = [i == j] x_0.
  auto f = [](const xj::Array& a, const xj::Array& b) { return std::tuple{xj::sin(a) * xj::sum(b), a[0] * b}; };
  std::vector<double> d1x(9, 0.0), d1y, d2x(6, 0.0), d2y(4, 0.0);
  for (int i = 0; i < 3; ++i) d1x[i * 3 + i] = std::cos(xv[i]) * s;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) d1y.push_back(std::sin(xv[i]));
  for (int i = 0; i < 2; ++i) d2x[i * 3] = yv[i];
  for (int i = 0; i < 2; ++i) d2y[i * 2 + i] = xv[0];
  auto check_both = [&](const auto& jac) {
    const auto& [of_first, of_second] = jac;
    CHECK(std::get<0>(of_first).shape() == xj::Shape{3, 3});
    CHECK(std::get<1>(of_first).shape() == xj::Shape{3, 2});
    CHECK(std::get<0>(of_second).shape() == xj::Shape{2, 3});
    CHECK(std::get<1>(of_second).shape() == xj::Shape{2, 2});
    check_values(std::get<0>(of_first), d1x, 1e-14);
    check_values(std::get<1>(of_first), d1y, 1e-14);
    check_values(std::get<0>(of_second), d2x, 1e-14);
    check_values(std::get<1>(of_second), d2y, 1e-14);
  };
  check_both(xj::jacfwd(f, xj::argnums<0, 1>)(x, y));
  check_both(xj::jacrev(f, xj::argnums<0, 1>)(x, y));
  check_both(xj::jit(xj::jacrev(f, xj::argnums<0, 1>))(x, y));
  // one index: the argument's own structure inside (here an Array), as JAX's argnums=1
  auto [by_y_first, by_y_second] = xj::jacrev(f, xj::argnums<1>)(x, y);
  check_values(by_y_first, d1y, 1e-14);
  check_values(by_y_second, d2y, 1e-14);
  // argnums out of order: the blocks in argnums' order (they came in the arguments' order, swapped)
  auto [rev_first, rev_second] = xj::jacrev(f, xj::argnums<1, 0>)(x, y);
  check_values(std::get<0>(rev_first), d1y, 1e-14);
  check_values(std::get<1>(rev_first), d1x, 1e-14);
  check_values(std::get<0>(rev_second), d2y, 1e-14);
  check_values(std::get<1>(rev_second), d2x, 1e-14);
  auto swapped = xj::jacfwd(f, xj::argnums<1, 0>)(x, y);
  CHECK(std::get<0>(std::get<0>(swapped)).shape() == xj::Shape{3, 2});
  check_values(std::get<1>(std::get<1>(swapped)), d2x, 1e-14);
  // a repeated index repeats its blocks (as grad's gradients)
  auto [twice_first, twice_second] = xj::jacrev(f, xj::argnums<0, 0>)(x, y);
  check_values(std::get<0>(twice_first), d1x, 1e-14);
  check_values(std::get<1>(twice_first), d1x, 1e-14);
  check_values(std::get<1>(twice_second), d2x, 1e-14);
  auto [fwd_first, fwd_second] = xj::jacfwd(f)(x, y);  // argument 0 by default
  check_values(fwd_first, d1x, 1e-14);
  check_values(fwd_second, d2x, 1e-14);

  // A map argument of mixed dtypes: jacrev's blocks take the argument leaves' dtypes, jacfwd's the output's.
  std::map<std::string, xj::Array> p{{"a", xj::array<float>({0.5f, -0.25f, 1.5f, 2.0f}, {2, 2})}, {"b", y}};
  auto g = [](const std::map<std::string, xj::Array>& q) {  // g_i = sum_j a_ij^2 * b_i
    return xj::sum(xj::square(xj::astype(q.at("a"), xj::f64)), {1}) * q.at("b");
  };
  std::vector<double> av = {0.5, -0.25, 1.5, 2.0};
  std::vector<double> da(8, 0.0), db(4, 0.0);  // dg_i/da_kl = [i == k] 2 a_kl b_i; dg_i/db_k = [i == k] sum_l a_il^2
  for (int i = 0; i < 2; ++i) {
    for (int l = 0; l < 2; ++l) da[i * 4 + i * 2 + l] = 2 * av[i * 2 + l] * yv[i];
    db[i * 2 + i] = av[i * 2] * av[i * 2] + av[i * 2 + 1] * av[i * 2 + 1];
  }
  auto jr = xj::jacrev(g)(p);
  auto jf = xj::jacfwd(g)(p);
  CHECK(jr.at("a").dtype() == xj::f32);
  CHECK(jf.at("a").dtype() == xj::f64);
  CHECK(jr.at("a").shape() == xj::Shape{2, 2, 2});
  for (const auto* jac : {&jr, &jf}) {
    check_values(jac->at("a"), da, 1e-6);
    check_values(jac->at("b"), db, 1e-6);
  }

  // hessian of a function of a pair: h(x, y) = sum(x^2) * sum(y) + sum(y^3): H_xx = 2 s I, H_xy_ij =
  // 2 x_i, H_yy = diag(6 y).
  auto h = [](const std::pair<xj::Array, xj::Array>& xy) {
    return xj::sum(xj::square(xy.first)) * xj::sum(xy.second) + xj::sum(xj::integer_pow(xy.second, 3));
  };
  std::vector<double> hxx(9, 0.0), hxy, hyx, hyy(4, 0.0);
  for (int i = 0; i < 3; ++i) hxx[i * 3 + i] = 2 * s;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) hxy.push_back(2 * xv[i]);
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 3; ++i) hyx.push_back(2 * xv[i]);
  for (int j = 0; j < 2; ++j) hyy[j * 2 + j] = 6 * yv[j];
  auto H = xj::hessian(h)(std::pair{x, y});
  check_values(H.first.first, hxx, 1e-13);
  check_values(H.first.second, hxy, 1e-13);
  check_values(H.second.first, hyx, 1e-13);
  check_values(H.second.second, hyy, 1e-13);
  auto h2 = [&](const xj::Array& a, const xj::Array& b) { return h(std::pair{a, b}); };
  auto H2 = xj::hessian(h2, xj::argnums<0, 1>)(x, y);
  auto H3 = xj::hessian(h2, xj::argnums<1, 0>)(x, y);  // [0][0] is H_yy
  check_values(std::get<0>(std::get<0>(H3)), hyy, 1e-13);
  check_values(std::get<1>(std::get<0>(H3)), hyx, 1e-13);
  check_values(std::get<1>(std::get<0>(H2)), hxy, 1e-13);
  check_values(std::get<0>(std::get<1>(H2)), hyx, 1e-13);
  check_values(std::get<1>(std::get<1>(H2)), hyy, 1e-13);

  // A struct output with respect to one Array: the struct of blocks.
  auto k = [](const xj::Array& a) { return Params{xj::exp(a), xj::sum(a)}; };
  Params kp = xj::jacrev(k)(x);
  CHECK(kp.w.shape() == xj::Shape{3, 3});
  CHECK(kp.b.shape() == xj::Shape{3});
  check_values(kp.b, {1, 1, 1}, 1e-15);

  // Empty leaves give empty blocks; errors name the offending leaf.
  auto [e1, e2] = xj::jacfwd(f, xj::argnums<0, 1>)(x, xj::zeros({0}, xj::f64));
  CHECK(std::get<1>(e1).shape() == xj::Shape{3, 0});
  CHECK(std::get<0>(e2).shape() == xj::Shape{0, 3});
  auto int_arg = [&] { (void)xj::jacrev(f, xj::argnums<0, 1>)(x, xj::array<int>({1, 2}, {2})); };
  CHECK(contains(message_of<xj::TypeError>(int_arg), "argument 1 is i32[2]"));
  auto int_out = [&] { (void)xj::jacfwd([](const xj::Array& a) { return std::pair{a, xj::astype(a, xj::i32)}; })(x); };
  CHECK(contains(message_of<xj::TypeError>(int_out), "output leaf 1 is i32[3]"));
}

TEST_CASE("pytree regressions from the thirty-first session: tree_unflatten into a type of another structure is an xj::Error") {
  // (it read by position: a pair's structure into a 3-tuple threw std::out_of_range, a map's
  // into a struct filled members by order)
  auto [leaves, pair_def] = xj::tree_flatten(std::pair{xj::scalar(1.0), xj::scalar(2.0)});
  using Triple = std::tuple<xj::Array, xj::Array, xj::Array>;
  CHECK_THROWS_AS((void)xj::tree_unflatten<Triple>(pair_def, leaves), xj::Error);
  using Map = std::map<std::string, xj::Array>;
  CHECK_THROWS_AS((void)xj::tree_unflatten<Map>(pair_def, leaves), xj::Error);
  CHECK_THROWS_AS((void)xj::tree_unflatten<xj::Array>(pair_def, std::span<const xj::Array>(leaves).subspan(0, 1)), xj::Error);
  auto [map_leaves, map_def] = xj::tree_flatten(std::map<std::string, xj::Array>{{"b", xj::scalar(1.0)}, {"w", xj::scalar(2.0)}});
  CHECK_THROWS_AS((void)xj::tree_unflatten<Params>(map_def, map_leaves), xj::Error);
  auto [p_leaves, p_def] = xj::tree_flatten(Params{xj::scalar(1.0), xj::scalar(2.0)});
  CHECK(test_util::contains(test_util::message_of<xj::Error>([&] { (void)xj::tree_unflatten<Swapped>(p_def, p_leaves); }), "member 0 is .b"));
  // the matching types still read it
  CHECK(xj::tree_unflatten<std::pair<xj::Array, xj::Array>>(pair_def, leaves).second.item<double>() == 2.0);
  CHECK(xj::tree_unflatten<std::vector<xj::Array>>(pair_def, leaves).size() == 2);  // any sequence of its length
  CHECK(xj::tree_unflatten<Params>(p_def, p_leaves).b.item<double>() == 2.0);
}

TEST_CASE("custom_vjp regressions from the thirty-first session's review: an unbatched integer argument under vmap keeps its cotangent's dtype") {
  // f(x, n) = x * n with n an integer array shared by vmap's members; bwd gives n zeros. The
  // batched bwd summed n's cotangents with xj::sum, which widens to i64 / u64: the cotangent
  // check refused it (and a bool argument always).
  auto f = xj::custom_vjp(
      [](const xj::Array& x, const xj::Array& n) { return x * xj::astype(n, xj::f64); },
      [](const xj::Array& x, const xj::Array& n) { return std::pair{x * xj::astype(n, xj::f64), n}; },
      [](const xj::Array& n, const xj::Array& ct) { return std::tuple{ct * xj::astype(n, xj::f64), xj::zeros_like(n)}; });
  const xj::Array x = xj::array<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  for (xj::DType dt : {xj::i32, xj::u8, xj::i64, xj::bool_}) {
    INFO(xj::dtype_name(dt));
    const xj::Array n = xj::astype(xj::array<int>({2, 3, 4}, {3}), dt);
    auto loss = [&](const xj::Array& v) { return xj::sum(xj::vmap([&](const xj::Array& xi) { return f(xi, n); })(v)); };
    const std::vector<double> nv = xj::astype(n, xj::f64).to_vector<double>();  // d loss / dx_ij = n_j
    check_values(xj::grad(loss)(x), {nv[0], nv[1], nv[2], nv[0], nv[1], nv[2]}, 1e-15);
  }
}
