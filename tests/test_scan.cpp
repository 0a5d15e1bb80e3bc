// test_scan.cpp: xj::scan from the user's side (issue 4, scan part): evaluation (forward,
// reverse, length without xs, unroll), autodiff (jvp, linearize, grad, check_grads) against the
// same function written as a plain unrolled C++ loop, the deep-stack task, the structure of the
// grad jaxpr (one forward and one backward scan), what the forward scan saves for the backward
// pass (stacked layer inputs and masks, nothing loop-invariant, no copy of xs), error messages,
// and composition (grad of grad through scan, jvp on pytree carries and xs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

/// The top-level equations of a jaxpr that apply `prim`.
std::vector<const xj::Eqn*> eqns_of(const xj::ClosedJaxpr& j, xj::Primitive prim) {
  std::vector<const xj::Eqn*> out;
  for (const auto& e : j->eqns)
    if (e.prim == prim) out.push_back(&e);
  return out;
}

bool reads(const xj::Eqn& e, const xj::Var& v) {
  return std::any_of(e.inputs.begin(), e.inputs.end(), [&](const xj::Atom& a) {
    auto* x = std::get_if<xj::Var>(&a);
    return x && *x == v;
  });
}

// ---- the body of acceptance 2 -----------------------------------------------------------------

// c' = sin(c * b), b = cos(sum(sin(a)) + sum(cos(c))); y = b.
std::pair<xj::Array, xj::Array> sin_body(const xj::Array& c, const xj::Array& a) {
  xj::Array b = xj::cos(xj::sum(xj::sin(a)) + xj::sum(xj::cos(c)));
  return {xj::sin(c * b), b};
}

std::pair<xj::Array, xj::Array> sin_scan(const xj::Array& c0, const xj::Array& as) {
  return xj::scan(sin_body, c0, as);
}

// The same computation as a plain loop: no scan anywhere.
std::pair<xj::Array, xj::Array> sin_loop(const xj::Array& c0, const xj::Array& as) {
  xj::Array c = c0;
  std::vector<xj::Array> ys;
  for (std::int64_t i = 0; i < as.dim(0); ++i) {
    auto [next, y] = sin_body(c, as[i]);
    c = next;
    ys.push_back(y);
  }
  return {c, xj::stack(ys)};
}

xj::Array sin_loss_scan(const xj::Array& c0, const xj::Array& as) {
  auto [c, ys] = sin_scan(c0, as);
  return xj::sum(xj::sin(c)) + xj::sum(ys * ys);
}

xj::Array sin_loss_loop(const xj::Array& c0, const xj::Array& as) {
  auto [c, ys] = sin_loop(c0, as);
  return xj::sum(xj::sin(c)) + xj::sum(ys * ys);
}

// ---- the deep stack ---------------------------------------------------------------------------

xj::Array deep_scan(const xj::Array& W, const xj::Array& x) {
  auto [y, none] = xj::scan(
      [](const xj::Array& y, const xj::Array& w) { return std::pair{xj::relu(xj::matmul(y, w)), xj::None{}}; }, x, W);
  (void)none;
  return y;
}

xj::Array deep_loop(const xj::Array& W, const xj::Array& x) {
  xj::Array y = x;
  for (std::int64_t i = 0; i < W.dim(0); ++i) y = xj::relu(xj::matmul(y, W[i]));
  return y;
}

xj::Array deep_loss(const xj::Array& W, const xj::Array& x) {
  xj::Array y = deep_scan(W, x);
  return xj::sum(y * y);
}

xj::Array deep_loss_loop(const xj::Array& W, const xj::Array& x) {
  xj::Array y = deep_loop(W, x);
  return xj::sum(y * y);
}

/// A stack of L per-layer matrices near the identity (so the relus are not all dead).
xj::Array layer_weights(std::int64_t L, std::int64_t d, unsigned seed, xj::DType dtype) {
  xj::Array I = xj::broadcast_to(xj::eye(d, xj::f64), {L, d, d});
  return xj::astype(I + randn({L, d, d}, seed, xj::f64, 0.3), dtype);
}

}  // namespace

// ---- 1. evaluation ----------------------------------------------------------------------------

TEST_CASE("scan: cumulative sum, reverse, length without xs, unroll") {
  auto cumsum = [](const xj::Array& c, const xj::Array& x) {
    xj::Array n = c + x;
    return std::pair{n, n};
  };
  xj::Array xs = xj::array<float>({3, 1, 4, 1, 5, 9});
  xj::Array init = xj::scalar(0, xj::f32);

  SUBCASE("forward") {
    auto [c, ys] = xj::scan(cumsum, init, xs);
    CHECK(c.aval() == xj::ShapedArray{{}, xj::f32});
    CHECK(c.item<double>() == 23);
    REQUIRE(ys.aval() == xj::ShapedArray{{6}, xj::f32});
    CHECK(vec(ys) == std::vector<double>{3, 4, 8, 9, 14, 23});
  }
  SUBCASE("reverse") {
    auto [c, ys] = xj::scan(cumsum, init, xs, {.reverse = true});
    CHECK(c.item<double>() == 23);
    CHECK(vec(ys) == std::vector<double>{23, 20, 19, 15, 14, 9});
  }
  SUBCASE("length with xs None runs that many steps") {
    auto count = [](const xj::Array& c, xj::None) { return std::pair{c + 1, c}; };
    auto [c, ys] = xj::scan(count, xj::scalar(0, xj::i32), xj::None{}, {.length = 20});
    CHECK(c.dtype() == xj::i32);
    CHECK(c.item<int>() == 20);
    REQUIRE(ys.aval() == xj::ShapedArray{{20}, xj::i32});
    std::vector<double> want(20);
    for (int i = 0; i < 20; ++i) want[static_cast<std::size_t>(i)] = i;
    CHECK(vec(ys) == want);

    // y may be None: no stacked output is built.
    auto steps = [](const xj::Array& c, xj::None) { return std::pair{c + 1, xj::None{}}; };
    auto [c2, none] = xj::scan(steps, xj::scalar(0, xj::i32), xj::None{}, {.length = 20});
    (void)none;
    CHECK(c2.item<int>() == 20);
    auto j = xj::make_jaxpr([&](const xj::Array& c0) {
      return xj::scan(steps, c0, xj::None{}, {.length = 20}).first;
    })(xj::scalar(0, xj::i32));
    auto scans = eqns_of(j, xj::Primitive::scan);
    REQUIRE(scans.size() == 1);
    CHECK(scans[0]->outputs.size() == 1);  // the carry only
    CHECK(scans[0]->params.get<xj::params::Scan>().length == 20);
  }
  SUBCASE("length zero returns the initial carry and empty ys") {
    auto [c, ys] = xj::scan(cumsum, xj::scalar(7, xj::f32), xj::zeros({0}, xj::f32));
    CHECK(c.item<double>() == 7);
    CHECK(ys.aval() == xj::ShapedArray{{0}, xj::f32});
  }
  SUBCASE("unroll 1, 2 and full agree, forward and reverse") {
    for (bool reverse : {false, true}) {
      auto [c1, y1] = xj::scan(cumsum, init, xs, {.reverse = reverse, .unroll = 1});
      auto [c2, y2] = xj::scan(cumsum, init, xs, {.reverse = reverse, .unroll = 2});
      auto [c6, y6] = xj::scan(cumsum, init, xs, {.reverse = reverse, .unroll = 6});
      CHECK(vec(c1) == vec(c2));
      CHECK(vec(c1) == vec(c6));
      CHECK(vec(y1) == vec(y2));
      CHECK(vec(y1) == vec(y6));
    }
    // unroll is recorded on the primitive (and so in the printed jaxpr).
    auto j = xj::make_jaxpr([&](const xj::Array& x) { return xj::scan(cumsum, init, x, {.unroll = 2}).second; })(xs);
    auto scans = eqns_of(j, xj::Primitive::scan);
    REQUIRE(scans.size() == 1);
    CHECK(scans[0]->params.get<xj::params::Scan>().unroll == 2);
    CHECK(str(j).find("unroll=2") != std::string::npos);
    // A nonlinear body gives the same values with every unroll too (the grad path included).
    xj::Array c0 = randn({4}, 3), as = randn({5, 3}, 4);
    auto loss = [](std::int64_t u) {
      return [u](const xj::Array& c, const xj::Array& a) {
        auto [cf, ys] = xj::scan(sin_body, c, a, {.unroll = u});
        return xj::sum(xj::sin(cf)) + xj::sum(ys * ys);
      };
    };
    auto g1 = xj::grad(loss(1))(c0, as), g2 = xj::grad(loss(2))(c0, as), g5 = xj::grad(loss(5))(c0, as);
    check_close(g2, g1, 1e-12);
    check_close(g5, g1, 1e-12);
  }
}

TEST_CASE("scan: the primitive's params and consts") {
  // Closed-over arrays and tracers of the body become consts of the primitive.
  xj::Array k = xj::array<float>({2, 3});
  auto f = [&](const xj::Array& c0, const xj::Array& xs, const xj::Array& s) {
    return xj::scan([&](const xj::Array& c, const xj::Array& x) { return std::pair{c * k + x * s, xj::None{}}; }, c0, xs,
                    {.reverse = true})
        .first;
  };
  auto j = xj::make_jaxpr(f)(xj::zeros({2}), xj::ones({4, 2}), xj::scalar(2, xj::f32));
  auto scans = eqns_of(j, xj::Primitive::scan);
  REQUIRE(scans.size() == 1);
  const auto& ps = scans[0]->params;
  INFO(str(j));
  CHECK(ps.get<xj::params::Scan>().num_consts == 2);  // k (a concrete closure) and s (a tracer)
  CHECK(ps.get<xj::params::Scan>().num_carry == 1);
  CHECK(ps.get<xj::params::Scan>().length == 4);
  CHECK(ps.get<xj::params::Scan>().reverse == true);
  CHECK(ps.get<xj::params::Scan>().unroll == 1);
  CHECK(scans[0]->inputs.size() == 4);
  std::string s = str(j);
  for (const char* p : {"jaxpr={", "length=4", "num_consts=2", "num_carry=1", "reverse=True", "unroll=1"}) {
    INFO(p);
    CHECK(s.find(p) != std::string::npos);
  }
  // And the values: c <- c * k + x * s over 4 rows of ones, from zeros.
  auto out = f(xj::zeros({2}), xj::ones({4, 2}), xj::scalar(2, xj::f32));
  double a = 0, b = 0;
  for (int i = 0; i < 4; ++i) a = a * 2 + 2, b = b * 3 + 2;
  CHECK(vec(out) == std::vector<double>{a, b});
}

// ---- 2. autodiff against a plain loop ---------------------------------------------------------

TEST_CASE("scan: value, jvp, linearize and grad equal a plain loop; check_grads order 2") {
  xj::Array c0 = randn({4}, 11), as = randn({5, 3}, 12);
  xj::Array dc = randn({4}, 13), das = randn({5, 3}, 14);

  auto [cs, ys] = sin_scan(c0, as);
  auto [cl, yl] = sin_loop(c0, as);
  CHECK(ys.aval() == xj::ShapedArray{{5}, xj::f64});
  check_close(cs, cl, 1e-12);
  check_close(ys, yl, 1e-12);

  auto [ps, ts] = xj::jvp(sin_scan, std::tuple{c0, as}, std::tuple{dc, das});
  auto [pl, tl] = xj::jvp(sin_loop, std::tuple{c0, as}, std::tuple{dc, das});
  check_close(ps.first, pl.first, 1e-12);
  check_close(ps.second, pl.second, 1e-12);
  check_close(ts.first, tl.first, 1e-10);
  check_close(ts.second, tl.second, 1e-10);

  // Tangent only on xs, and only on the carry (the carry fixpoint makes both nonzero after one step).
  auto zc = xj::zeros_like(dc), zas = xj::zeros_like(das);
  for (auto [tc, ta] : {std::pair{zc, das}, std::pair{dc, zas}}) {
    auto [p1, t1] = xj::jvp(sin_scan, std::tuple{c0, as}, std::tuple{tc, ta});
    auto [p2, t2] = xj::jvp(sin_loop, std::tuple{c0, as}, std::tuple{tc, ta});
    check_close(t1.first, t2.first, 1e-10);
    check_close(t1.second, t2.second, 1e-10);
  }

  auto [lo, f_lin] = xj::linearize(sin_scan, c0, as);
  check_close(lo.first, cl, 1e-12);
  check_close(lo.second, yl, 1e-12);
  auto lt = f_lin(dc, das);
  check_close(lt.first, tl.first, 1e-10);
  check_close(lt.second, tl.second, 1e-10);
  // Linear: a second tangent, scaled.
  auto lt2 = f_lin(dc * 3.0, das * 3.0);
  check_close(lt2.first, tl.first * 3.0, 1e-10);

  auto [gc, ga] = xj::grad(sin_loss_scan, xj::argnums<0, 1>)(c0, as);
  auto [gcl, gal] = xj::grad(sin_loss_loop, xj::argnums<0, 1>)(c0, as);
  check_close(gc, gcl, 1e-10);
  check_close(ga, gal, 1e-10);

  // vjp of the pair-valued function against the loop's.
  xj::Array uc = randn({4}, 15), uy = randn({5}, 16);
  auto [vo, f_vjp] = xj::vjp(sin_scan, c0, as);
  auto [vol, f_vjpl] = xj::vjp(sin_loop, c0, as);
  auto [vc, va] = f_vjp(std::pair{uc, uy});
  auto [vcl, val] = f_vjpl(std::pair{uc, uy});
  check_close(vc, vcl, 1e-10);
  check_close(va, val, 1e-10);

  SUBCASE("check_grads f64, order 2, fwd and rev") {
    CHECK_NOTHROW(xj::check_grads(sin_scan, std::tuple{c0, as}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
    CHECK_NOTHROW(xj::check_grads(sin_loss_scan, std::tuple{c0, as}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  }
  SUBCASE("check_grads f32, order 2, fwd and rev") {
    xj::Array c32 = xj::astype(c0, xj::f32), a32 = xj::astype(as, xj::f32);
    CHECK_NOTHROW(xj::check_grads(sin_scan, std::tuple{c32, a32},
                                  {.order = 2, .modes = {xj::fwd, xj::rev}, .atol = 1e-2, .rtol = 1e-2, .eps = 2e-3}));
  }
  SUBCASE("reverse scan against a reversed loop") {
    auto rscan = [](const xj::Array& c, const xj::Array& a) { return xj::scan(sin_body, c, a, {.reverse = true}); };
    auto rloop = [](const xj::Array& c_init, const xj::Array& a) {
      xj::Array c = c_init;
      std::vector<xj::Array> ys(static_cast<std::size_t>(a.dim(0)));
      for (std::int64_t i = a.dim(0) - 1; i >= 0; --i) {
        auto [next, y] = sin_body(c, a[i]);
        c = next;
        ys[static_cast<std::size_t>(i)] = y;
      }
      return std::pair{c, xj::stack(ys)};
    };
    auto [p1, t1] = xj::jvp(rscan, std::tuple{c0, as}, std::tuple{dc, das});
    auto [p2, t2] = xj::jvp(rloop, std::tuple{c0, as}, std::tuple{dc, das});
    check_close(p1.first, p2.first, 1e-12);
    check_close(p1.second, p2.second, 1e-12);
    check_close(t1.first, t2.first, 1e-10);
    check_close(t1.second, t2.second, 1e-10);
    auto [r1, g1] = xj::vjp(rscan, c0, as);
    auto [r2, g2] = xj::vjp(rloop, c0, as);
    auto [a1, b1] = g1(std::pair{uc, uy});
    auto [a2, b2] = g2(std::pair{uc, uy});
    check_close(a1, a2, 1e-10);
    check_close(b1, b2, 1e-10);
    CHECK_NOTHROW(xj::check_grads(rscan, std::tuple{c0, as}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  }
}

// ---- 3. the deep stack ------------------------------------------------------------------------

TEST_CASE("scan: deep stack of relu layers, identity weights give gradient 2 everywhere") {
  const std::int64_t L = 8, d = 2;
  for (xj::DType dt : {xj::f32, xj::f64}) {
    INFO(dt);
    xj::Array W = xj::broadcast_to(xj::eye(d, dt), {L, d, d});
    xj::Array x = xj::ones({1, d}, dt);
    CHECK(deep_loss(W, x).item<double>() == 2.0);
    xj::Array g = xj::grad(deep_loss)(W, x);
    REQUIRE(g.aval() == xj::ShapedArray{{L, d, d}, dt});
    CHECK(vec(g) == std::vector<double>(static_cast<std::size_t>(L * d * d), 2.0));
    // The gradient with respect to x as well: the stack is the identity, so 2x.
    auto [gW, gx] = xj::grad(deep_loss, xj::argnums<0, 1>)(W, x);
    CHECK(vec(gW) == vec(g));
    CHECK(vec(gx) == std::vector<double>{2.0, 2.0});
    // The same through a plain unrolled loop.
    CHECK(vec(xj::grad(deep_loss_loop)(W, x)) == vec(g));
  }
}

TEST_CASE("scan: deep stack with random inputs matches finite differences and the unrolled loop") {
  const std::int64_t L = 8, d = 3, N = 2;
  xj::Array W = layer_weights(L, d, 21, xj::f64);
  xj::Array x = randn({N, d}, 22);
  // Not at a kink of relu (finite differences would be meaningless there).
  {
    xj::Array y = x;
    double closest = 1e9;
    for (std::int64_t i = 0; i < L; ++i) {
      xj::Array z = xj::matmul(y, W[i]);
      for (double v : vec(z)) closest = std::min(closest, std::abs(v));
      y = xj::relu(z);
    }
    REQUIRE(closest > 1e-3);
    CHECK(xj::sum(xj::abs(y)).item<double>() > 0);  // something survives to the end
  }
  check_close(deep_scan(W, x), deep_loop(W, x), 1e-12);
  auto [gW, gx] = xj::grad(deep_loss, xj::argnums<0, 1>)(W, x);
  auto [gWl, gxl] = xj::grad(deep_loss_loop, xj::argnums<0, 1>)(W, x);
  check_close(gW, gWl, 1e-10);
  check_close(gx, gxl, 1e-10);
  CHECK_NOTHROW(xj::check_grads(deep_loss, std::tuple{W, x}, {.order = 1, .modes = {xj::rev}}));
  CHECK_NOTHROW(xj::check_grads(deep_loss, std::tuple{W, x}, {.order = 1, .modes = {xj::fwd}}));
  CHECK_NOTHROW(xj::check_grads(deep_scan, std::tuple{W, x}, {.order = 1, .modes = {xj::fwd, xj::rev}}));

  // Independent finite differences of the loss, entry by entry, evaluated concretely.
  auto wv = vec(W);
  std::vector<double> fd(wv.size());
  for (std::size_t i = 0; i < wv.size(); ++i) {
    const double eps = 1e-6;
    auto at = [&](double delta) {
      auto w2 = wv;
      w2[i] += delta;
      return deep_loss(f64v(w2, {L, d, d}), x).item<double>();
    };
    fd[i] = (at(eps) - at(-eps)) / (2 * eps);
  }
  check_values(gW, fd, 1e-6);
}

// ---- 4. the grad jaxpr: one forward scan, one backward scan -----------------------------------

TEST_CASE("scan: the jaxpr of grad has exactly one forward and one backward scan") {
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    auto loss = [reverse](const xj::Array& W, const xj::Array& x) {
      auto [y, none] = xj::scan(
          [](const xj::Array& y_, const xj::Array& w) { return std::pair{xj::relu(xj::matmul(y_, w)), xj::None{}}; }, x,
          W, {.reverse = reverse});
      (void)none;
      return xj::sum(y * y);
    };
    xj::Array W = layer_weights(8, 3, 31, xj::f32), x = randn({2, 3}, 32, xj::f32);
    auto j = xj::make_jaxpr(xj::grad(loss))(W, x);
    INFO(str(j));
    auto scans = eqns_of(j, xj::Primitive::scan);
    REQUIRE(scans.size() == 2);
    CHECK(scans[0]->params.get<xj::params::Scan>().reverse == reverse);
    CHECK(scans[1]->params.get<xj::params::Scan>().reverse == !reverse);
    CHECK(scans[0]->params.get<xj::params::Scan>().length == 8);
    CHECK(scans[1]->params.get<xj::params::Scan>().length == 8);
    // Neither body holds another scan.
    for (const auto* e : scans) {
      const auto& body = *e->params.get<xj::params::Scan>().jaxpr;
      CHECK(eqns_of(body, xj::Primitive::scan).empty());
    }
    // The jaxpr evaluates to the gradient.
    auto g = xj::eval_jaxpr(j, std::vector<xj::Array>{W, x});
    REQUIRE(g.size() == 1);
    check_close(g[0], xj::grad(loss)(W, x), 1e-6);
  }
  // The same count for the body of acceptance 2 (a carry and a stacked y).
  auto j = xj::make_jaxpr(xj::grad(sin_loss_scan, xj::argnums<0, 1>))(randn({4}, 1), randn({5, 3}, 2));
  INFO(str(j));
  auto scans = eqns_of(j, xj::Primitive::scan);
  REQUIRE(scans.size() == 2);
  CHECK(scans[0]->params.get<xj::params::Scan>().reverse == false);
  CHECK(scans[1]->params.get<xj::params::Scan>().reverse == true);
}

// ---- 5. what the forward scan saves -----------------------------------------------------------

namespace {

/// The forward (known) scan of a grad jaxpr, the backward one, and the forward one's output types.
struct ForwardScan {
  const xj::Eqn* eqn = nullptr;
  const xj::Eqn* backward = nullptr;
  std::vector<xj::ShapedArray> outs;
};

ForwardScan forward_scan(const xj::ClosedJaxpr& j) {
  auto scans = eqns_of(j, xj::Primitive::scan);
  REQUIRE(scans.size() == 2);
  ForwardScan f{scans[0], scans[1], {}};
  for (const auto& v : scans[0]->outputs) f.outs.push_back(v.aval());
  return f;
}

/// Evaluates j's equations up to and including `last`, returning last's outputs.
std::vector<xj::Array> eval_prefix(const xj::ClosedJaxpr& j, const xj::Eqn* last, std::span<const xj::Array> args) {
  auto p = std::make_shared<xj::Jaxpr>();
  p->constvars = j->constvars;
  p->invars = j->invars;
  for (const auto& e : j->eqns) {
    p->eqns.push_back(e);
    if (&e == last) break;
  }
  for (const auto& v : last->outputs) p->outvars.push_back(v);
  return xj::eval_jaxpr(xj::ClosedJaxpr{p, j.consts}, args);
}

}  // namespace

TEST_CASE("scan: reverse mode keeps the stacked layer inputs and masks, nothing loop-invariant") {
  const std::int64_t L = 8, d = 3, N = 2;
  xj::Array W = layer_weights(L, d, 41, xj::f32), x = randn({N, d}, 42, xj::f32);
  auto j = xj::make_jaxpr(xj::grad(deep_loss))(W, x);
  INFO(str(j));
  ForwardScan f = forward_scan(j);
  CHECK(f.eqn->params.get<xj::params::Scan>().reverse == false);
  REQUIRE(f.eqn->params.get<xj::params::Scan>().num_carry == 1);
  REQUIRE(f.outs.size() == 3);
  CHECK(f.outs[0] == xj::ShapedArray{{N, d}, xj::f32});  // the final carry
  std::vector<xj::ShapedArray> stacked(f.outs.begin() + 1, f.outs.end());
  auto has = [&](const xj::ShapedArray& a) { return std::count(stacked.begin(), stacked.end(), a) == 1; };
  CHECK(has(xj::ShapedArray{{L, N, d}, xj::f32}));    // the per-layer inputs y
  CHECK(has(xj::ShapedArray{{L, N, d}, xj::bool_}));  // the relu masks
  // W is not copied into a residual: the backward scan reads the original operand.
  const xj::Var& Wvar = j->invars.at(0);
  CHECK(reads(*f.eqn, Wvar));
  CHECK(reads(*f.backward, Wvar));
  for (const auto& a : f.outs) CHECK(a.shape != xj::Shape{L, d, d});

  // The stacked residuals hold exactly the layer inputs and the masks (y @ W[i] > 0).
  auto outs = eval_prefix(j, f.eqn, std::vector<xj::Array>{W, x});
  REQUIRE(outs.size() == 3);
  std::size_t iy = outs[1].dtype() == xj::f32 ? 1 : 2, im = 3 - iy;
  xj::Array y = x;
  for (std::int64_t i = 0; i < L; ++i) {
    INFO("layer " << i);
    xj::Array z = xj::matmul(y, W[i]);
    check_close(outs[iy][i], y, 1e-6);
    CHECK(vec(outs[im][i]) == vec(z > 0.0));
    y = xj::relu(z);
  }
  check_close(outs[0], y, 1e-6);
}

TEST_CASE("scan: loop-invariant residuals are hoisted, not stacked") {
  const std::int64_t L = 8, d = 3, N = 2;
  // y' = relu(y @ w) + 0.1 y @ sin(M): the backward pass needs sin(M) (and cos(M) for dM), which do
  // not depend on the iteration.
  auto loss = [](const xj::Array& W, const xj::Array& x, const xj::Array& M) {
    auto [y, none] = xj::scan(
        [&](const xj::Array& y_, const xj::Array& w) {
          return std::pair{xj::relu(xj::matmul(y_, w)) + xj::matmul(y_, xj::sin(M)) * 0.1, xj::None{}};
        },
        x, W);
    (void)none;
    return xj::sum(y * y);
  };
  xj::Array W = layer_weights(L, d, 51, xj::f32), x = randn({N, d}, 52, xj::f32), M = randn({d, d}, 53, xj::f32);

  auto check_forward = [&](const xj::ClosedJaxpr& j, bool diff_M) {
    INFO(str(j));
    ForwardScan f = forward_scan(j);
    REQUIRE(f.outs.size() == 3);
    CHECK(f.outs[0] == xj::ShapedArray{{N, d}, xj::f32});
    std::vector<xj::ShapedArray> stacked(f.outs.begin() + 1, f.outs.end());
    CHECK(std::count(stacked.begin(), stacked.end(), xj::ShapedArray{{L, N, d}, xj::f32}) == 1);
    CHECK(std::count(stacked.begin(), stacked.end(), xj::ShapedArray{{L, N, d}, xj::bool_}) == 1);
    // Nothing of M's (or a W slice's) shape stacked along the iteration axis.
    for (const auto& a : f.outs) CHECK(a.shape != xj::Shape{L, d, d});
    // sin(M) is computed once, outside both scans, and the backward scan reads it.
    auto hoisted = [&](xj::Primitive prim) {
      for (const auto& e : j->eqns)
        if (e.prim == prim && e.outputs.at(0).aval().shape == xj::Shape{d, d} && reads(*f.backward, e.outputs[0]))
          return true;
      return false;
    };
    CHECK(hoisted(xj::Primitive::sin));
    if (diff_M) CHECK(hoisted(xj::Primitive::cos));
    // The backward scan takes no per-iteration input of shape [L, d, d] other than W itself.
    for (const auto& a : f.backward->inputs) {
      auto* v = std::get_if<xj::Var>(&a);
      if (v && v->aval().shape == xj::Shape{L, d, d}) CHECK(*v == j->invars.at(0));
    }
  };
  SUBCASE("M not differentiated") { check_forward(xj::make_jaxpr(xj::grad(loss))(W, x, M), false); }
  SUBCASE("M differentiated") {
    check_forward(xj::make_jaxpr(xj::grad(loss, xj::argnums<0, 2>))(W, x, M), true);
    xj::Array W64 = xj::astype(W, xj::f64), x64 = xj::astype(x, xj::f64), M64 = xj::astype(M, xj::f64);
    CHECK_NOTHROW(xj::check_grads(loss, std::tuple{W64, x64, M64}, {.order = 1, .modes = {xj::rev, xj::fwd}}));
  }
}

// ---- 6. errors --------------------------------------------------------------------------------

TEST_CASE("scan: error messages") {
  xj::Array xs = xj::ones({5, 2});
  xj::Array c0 = xj::zeros({2});

  SUBCASE("body output not a pair") {
    auto body = [](const xj::Array& c, const xj::Array& x) { return c + x; };
    std::string m = message_of<xj::TypeError>([&] { xj::scan(body, c0, xs); });
    CHECK(contains(m, "must return std::pair"));
    CHECK(contains(m, "test_scan.cpp"));  // the caller's location
  }
  SUBCASE("carry structure differs: a pair in, an array out") {
    auto body = [](const std::pair<xj::Array, xj::Array>& c, const xj::Array& x) {
      return std::pair{c.first + x, xj::None{}};
    };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::scan(body, std::pair{c0, c0}, xs); });
    CHECK(contains(m, "scan: the body returns a carry of structure * but the carry has (*, *)"));
  }
  SUBCASE("carry structure differs: vectors of different lengths") {
    auto body = [](const std::vector<xj::Array>& c, const xj::Array& x) {
      return std::pair{std::vector<xj::Array>{c[0] + x}, xj::None{}};
    };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::scan(body, std::vector<xj::Array>{c0, c0}, xs); });
    CHECK(contains(m, "scan: the body returns a carry of structure (*) but the carry has (*, *)"));
  }
  SUBCASE("carry dtype differs") {
    auto body = [](const std::pair<xj::Array, xj::Array>& c, const xj::Array& x) {
      return std::pair{std::pair{c.first + x, xj::astype(c.second, xj::f64)}, xj::None{}};
    };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::scan(body, std::pair{c0, xj::scalar(0, xj::f32)}, xs); });
    CHECK(contains(m, "carry leaf 1 ([1]) enters the body as f32[] but the body returns f64[]"));
  }
  SUBCASE("carry dtype differs in a map: the leaf's key path") {
    using M = std::map<std::string, xj::Array>;
    auto body = [](const M& c, const xj::Array& x) {
      return std::pair{M{{"a", c.at("a") + x}, {"b", xj::stack({c.at("b"), c.at("b")})}}, xj::None{}};
    };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::scan(body, M{{"a", c0}, {"b", xj::scalar(0, xj::f32)}}, xs); });
    CHECK(contains(m, "carry leaf 1 (['b']) enters the body as f32[] but the body returns f32[2]"));
  }
  SUBCASE("carry shape differs") {
    auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{xj::sum(c + x), xj::None{}}; };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::scan(body, c0, xs); });
    CHECK(contains(m, "carry leaf 0 enters the body as f32[2] but the body returns f32[]"));
  }
  SUBCASE("xs leading axes disagree with length") {
    auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{c + x, xj::None{}}; };
    std::string m = message_of<xj::ShapeError>([&] { (void)xj::scan(body, c0, xs, {.length = 7}); });
    CHECK(contains(m, "leading axis 5"));
    CHECK(contains(m, "length is 7"));
  }
  SUBCASE("xs leaves disagree with each other") {
    auto body = [](const xj::Array& c, const std::pair<xj::Array, xj::Array>& x) {
      return std::pair{c + x.first + x.second, xj::None{}};
    };
    std::string m = message_of<xj::ShapeError>([&] { (void)xj::scan(body, c0, std::pair{xs, xj::ones({4, 2})}); });
    CHECK(contains(m, "leading axis 4 but an earlier leaf has 5"));
  }
  SUBCASE("scalar xs leaf") {
    auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{c + x, xj::None{}}; };
    std::string m = message_of<xj::ShapeError>([&] { (void)xj::scan(body, c0, xj::scalar(1, xj::f32)); });
    CHECK(contains(m, "is a scalar f32[]"));
  }
  SUBCASE("xs None without length") {
    auto body = [](const xj::Array& c, xj::None) { return std::pair{c, xj::None{}}; };
    std::string m = message_of<xj::ShapeError>([&] { (void)xj::scan(body, c0, xj::None{}); });
    CHECK(contains(m, ".length must be given"));
  }
  SUBCASE("negative length") {
    auto body = [](const xj::Array& c, xj::None) { return std::pair{c, xj::None{}}; };
    std::string m = message_of<xj::ShapeError>([&] { (void)xj::scan(body, c0, xj::None{}, {.length = -3}); });
    CHECK(contains(m, "negative length -3"));
  }
  SUBCASE("negative or zero unroll") {
    auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{c + x, xj::None{}}; };
    for (std::int64_t u : {std::int64_t{-2}, std::int64_t{0}}) {
      std::string m = message_of<xj::Error>([&] { (void)xj::scan(body, c0, xs, {.unroll = u}); });
      CHECK(contains(m, "unroll must be at least 1, got " + std::to_string(u)));
    }
  }
  SUBCASE("a carry error while tracing under grad") {
    auto body = [](const xj::Array& c, const xj::Array& x) {
      return std::pair{xj::astype(c + x, xj::f64), xj::None{}};
    };
    auto loss = [&](const xj::Array& c) { return xj::sum(xj::scan(body, c, xs).first); };
    std::string m = message_of<xj::TypeError>([&] { (void)xj::grad(loss)(c0); });
    CHECK(contains(m, "carry leaf 0 enters the body as f32[2] but the body returns f64[2]"));
  }
}

// ---- 7. composition ---------------------------------------------------------------------------

TEST_CASE("scan: grad of grad through scan matches second differences") {
  // h(p) = sum(ys) + c_final for c' = sin(c * p + x), y = c'^2.
  auto h = [](const xj::Array& p, const xj::Array& xs) {
    auto [c, ys] = xj::scan(
        [&](const xj::Array& c_, const xj::Array& x) {
          xj::Array n = xj::sin(c_ * p + x);
          return std::pair{n, n * n};
        },
        xj::scalar(0.5, xj::f64), xs);
    return xj::sum(ys) + c;
  };
  xj::Array xs = randn({6}, 61);
  xj::Array p = xj::scalar(0.7, xj::f64);
  auto dh = xj::grad(h);
  auto d2h = xj::grad([dh](const xj::Array& q, const xj::Array& x) { return dh(q, x); });
  auto H = [&](double q) { return h(xj::scalar(q, xj::f64), xs).item<double>(); };
  const double e = 1e-3;
  double fd1 = (H(0.7 + e) - H(0.7 - e)) / (2 * e);
  double fd2 = (H(0.7 + e) - 2 * H(0.7) + H(0.7 - e)) / (e * e);
  CHECK(dh(p, xs).item<double>() == doctest::Approx(fd1).epsilon(1e-5));
  CHECK(d2h(p, xs).item<double>() == doctest::Approx(fd2).epsilon(1e-4));
  // Gradient of a function of the gradient with respect to the xs, against finite differences.
  auto gx = [h](const xj::Array& x) {
    return xj::sum(xj::grad(h, xj::argnums<1>)(xj::scalar(0.7, xj::f64), x) * x);
  };
  CHECK_NOTHROW(xj::check_grads(gx, std::tuple{xs}, {.order = 1, .modes = {xj::fwd, xj::rev}}));
  CHECK_NOTHROW(xj::check_grads(h, std::tuple{p, xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("scan: grad inside the scan body") {
  // Each step moves the carry along the gradient of an energy that depends on x.
  auto energy = [](const xj::Array& c, const xj::Array& x) { return xj::sum(xj::sin(c * x) + c * c); };
  auto step = [energy](const xj::Array& c, const xj::Array& x) {
    xj::Array g = xj::grad(energy)(c, x);
    xj::Array n = c - g * 0.1;
    return std::pair{n, xj::sum(n)};
  };
  auto f = [step](const xj::Array& c0, const xj::Array& xs) {
    auto [c, ys] = xj::scan(step, c0, xs);
    return xj::sum(c * c) + xj::sum(ys);
  };
  auto floop = [step](const xj::Array& c0, const xj::Array& xs) {
    xj::Array c = c0, acc = xj::scalar(0, xj::f64);
    for (std::int64_t i = 0; i < xs.dim(0); ++i) {
      auto [n, y] = step(c, xs[i]);
      c = n;
      acc = acc + y;
    }
    return xj::sum(c * c) + acc;
  };
  xj::Array c0 = randn({3}, 71), xs = randn({4, 3}, 72);
  CHECK(f(c0, xs).item<double>() == doctest::Approx(floop(c0, xs).item<double>()).epsilon(1e-12));
  auto [g1, g2] = xj::grad(f, xj::argnums<0, 1>)(c0, xs);
  auto [l1, l2] = xj::grad(floop, xj::argnums<0, 1>)(c0, xs);
  check_close(g1, l1, 1e-10);
  check_close(g2, l2, 1e-10);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{c0, xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("scan: jvp, linearize and grad over pytrees (pair carry, map xs)") {
  using Carry = std::pair<xj::Array, xj::Array>;
  using Xs = std::map<std::string, xj::Array>;
  auto body = [](const Carry& c, const Xs& x) {
    const xj::Array& a = x.at("a");
    const xj::Array& b = x.at("b");
    Carry n{c.first * a + xj::sin(c.second), c.second * xj::cos(b) + xj::sum(c.first)};
    return std::pair{n, std::map<std::string, xj::Array>{{"p", c.first * c.second}, {"s", xj::sum(n.first)}}};
  };
  auto f = [body](const Carry& c0, const Xs& xs) { return xj::scan(body, c0, xs); };
  auto floop = [body](const Carry& c0, const Xs& xs) {
    Carry c = c0;
    std::vector<xj::Array> ps, ss;
    for (std::int64_t i = 0; i < xs.at("a").dim(0); ++i) {
      auto [n, y] = body(c, Xs{{"a", xs.at("a")[i]}, {"b", xs.at("b")[i]}});
      c = n;
      ps.push_back(y.at("p"));
      ss.push_back(y.at("s"));
    }
    return std::pair{c, std::map<std::string, xj::Array>{{"p", xj::stack(ps)}, {"s", xj::stack(ss)}}};
  };
  Carry c0{randn({2}, 81), randn({}, 82)};
  Xs xs{{"a", randn({5, 2}, 83)}, {"b", randn({5}, 84)}};
  Carry dc{randn({2}, 85), randn({}, 86)};
  Xs dxs{{"a", randn({5, 2}, 87)}, {"b", randn({5}, 88)}};

  auto [p1, t1] = xj::jvp(f, std::tuple{c0, xs}, std::tuple{dc, dxs});
  auto [p2, t2] = xj::jvp(floop, std::tuple{c0, xs}, std::tuple{dc, dxs});
  check_close(p1.first.first, p2.first.first, 1e-12);
  check_close(p1.first.second, p2.first.second, 1e-12);
  check_close(p1.second.at("p"), p2.second.at("p"), 1e-12);
  check_close(p1.second.at("s"), p2.second.at("s"), 1e-12);
  check_close(t1.first.first, t2.first.first, 1e-10);
  check_close(t1.first.second, t2.first.second, 1e-10);
  check_close(t1.second.at("p"), t2.second.at("p"), 1e-10);
  check_close(t1.second.at("s"), t2.second.at("s"), 1e-10);

  auto [lo, f_lin] = xj::linearize(f, c0, xs);
  auto lt = f_lin(dc, dxs);
  check_close(lt.first.first, t2.first.first, 1e-10);
  check_close(lt.second.at("p"), t2.second.at("p"), 1e-10);

  auto loss = [f](const Carry& c, const Xs& x) {
    auto [cf, ys] = f(c, x);
    return xj::sum(cf.first) * cf.second + xj::sum(ys.at("p")) * xj::sum(ys.at("s") * ys.at("s"));
  };
  auto lloop = [floop](const Carry& c, const Xs& x) {
    auto [cf, ys] = floop(c, x);
    return xj::sum(cf.first) * cf.second + xj::sum(ys.at("p")) * xj::sum(ys.at("s") * ys.at("s"));
  };
  auto [gc, gx] = xj::grad(loss, xj::argnums<0, 1>)(c0, xs);
  auto [lc, lx] = xj::grad(lloop, xj::argnums<0, 1>)(c0, xs);
  check_close(gc.first, lc.first, 1e-10);
  check_close(gc.second, lc.second, 1e-10);
  check_close(gx.at("a"), lx.at("a"), 1e-10);
  check_close(gx.at("b"), lx.at("b"), 1e-10);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{c0, xs}, {.order = 1, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("scan: integer carry beside a float carry, and a carry with no tangent") {
  // A step counter (i32) rides along a differentiable carry; the derivative ignores it.
  auto f = [](const xj::Array& c0, const xj::Array& xs) {
    auto [c, ys] = xj::scan(
        [](const std::pair<xj::Array, xj::Array>& c, const xj::Array& x) {
          xj::Array k = xj::astype(c.second, xj::f64);
          return std::pair{std::pair{c.first * xj::cos(x) + k, c.second + 1}, c.first * k};
        },
        std::pair{c0, xj::scalar(0, xj::i32)}, xs);
    return xj::sum(c.first) + xj::sum(ys) + xj::astype(c.second, xj::f64);
  };
  xj::Array c0 = randn({3}, 91), xs = randn({4, 3}, 92);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{c0, xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  // A carry that never sees a tangent (it depends only on itself) next to one that does.
  auto g = [](const xj::Array& c0, const xj::Array& xs) {
    auto [c, ys] = xj::scan(
        [](const std::pair<xj::Array, xj::Array>& c, const xj::Array& x) {
          return std::pair{std::pair{xj::sin(c.first) * x + c.second, c.second * 0.5}, xj::None{}};
        },
        std::pair{c0, xj::ones({3}, xj::f64)}, xs);
    (void)ys;
    return xj::sum(c.first * c.second);
  };
  CHECK_NOTHROW(xj::check_grads(g, std::tuple{c0, xs}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("scan: carries that get a tangent only inside the loop, and dead carries") {
  // The initial carry is a constant (a symbolic zero tangent); the jvp must still find that the
  // carry has a tangent after one step (the fixpoint).
  auto f = [](const xj::Array& as) { return xj::scan(sin_body, xj::full({4}, 0.3, xj::f64), as); };
  auto floop = [](const xj::Array& as) { return sin_loop(xj::full({4}, 0.3, xj::f64), as); };
  xj::Array as = randn({5, 3}, 101), das = randn({5, 3}, 102);
  auto [p1, t1] = xj::jvp(f, std::tuple{as}, std::tuple{das});
  auto [p2, t2] = xj::jvp(floop, std::tuple{as}, std::tuple{das});
  check_close(t1.first, t2.first, 1e-10);
  check_close(t1.second, t2.second, 1e-10);
  CHECK(xj::sum(xj::abs(t1.first)).item<double>() > 0);
  auto loss = [f](const xj::Array& a) {
    auto [c, ys] = f(a);
    return xj::sum(c) + xj::sum(ys);
  };
  auto lloop = [floop](const xj::Array& a) {
    auto [c, ys] = floop(a);
    return xj::sum(c) + xj::sum(ys);
  };
  check_close(xj::grad(loss)(as), xj::grad(lloop)(as), 1e-10);

  // Only the ys are used: carry a feeds the ys and reads carry b, which must be kept; carry z
  // is dead and must be dropped from both scans of the grad jaxpr.
  using C3 = std::tuple<xj::Array, xj::Array, xj::Array>;
  auto g = [](const xj::Array& xs) {
    C3 init{xj::zeros({3}, xj::f64), xj::ones({3}, xj::f64), xj::ones({3}, xj::f64)};
    auto [c, ys] = xj::scan(
        [](const C3& c, const xj::Array& x) {
          auto [a, b, z] = c;
          return std::pair{C3{a + xj::sin(b) * x, b * 0.9 + x, xj::exp(z * x)}, a * a};
        },
        init, xs);
    (void)c;
    return xj::sum(ys);
  };
  auto gloop = [](const xj::Array& xs) {
    xj::Array a = xj::zeros({3}, xj::f64), b = xj::ones({3}, xj::f64), acc = xj::scalar(0, xj::f64);
    for (std::int64_t i = 0; i < xs.dim(0); ++i) {
      xj::Array x = xs[i];
      acc = acc + xj::sum(a * a);
      xj::Array a2 = a + xj::sin(b) * x;
      b = b * 0.9 + x;
      a = a2;
    }
    return acc;
  };
  xj::Array xs = randn({6, 3}, 103);
  CHECK(g(xs).item<double>() == doctest::Approx(gloop(xs).item<double>()).epsilon(1e-12));
  check_close(xj::grad(g)(xs), xj::grad(gloop)(xs), 1e-10);
  auto j = xj::make_jaxpr(xj::grad(g))(xs);
  INFO(str(j));
  auto scans = eqns_of(j, xj::Primitive::scan);
  REQUIRE(scans.size() == 2);
  for (const auto* e : scans) {
    const auto& body = *e->params.get<xj::params::Scan>().jaxpr;
    CHECK(eqns_of(body, xj::Primitive::exp).empty());  // z's update is gone
  }
  CHECK(scans[0]->params.get<xj::params::Scan>().num_carry == 2);  // a and b
}

TEST_CASE("scan: unroll that does not divide the length agrees with unroll 1, forward and reverse") {
  auto xs = xj::array({3.f, 1.f, 4.f, 1.f, 5.f});
  auto body = [](const xj::Array& c, const xj::Array& x) {
    xj::Array n = c * 0.5 + x;
    return std::pair{n, n * n};
  };
  for (bool reverse : {false, true}) {
    auto [c1, ys1] = xj::scan(body, xj::scalar(0.0), xs, {.reverse = reverse, .unroll = 1});
    for (std::int64_t u : {2, 3, 4, 7}) {
      auto [c, ys] = xj::scan(body, xj::scalar(0.0), xs, {.reverse = reverse, .unroll = u});
      CHECK(c.item<float>() == c1.item<float>());
      CHECK(ys.to_vector<float>() == ys1.to_vector<float>());
    }
  }
  // the unrolled evaluation runs the body the same number of times
  xj::reset_eval_counts();
  (void)xj::scan(body, xj::scalar(0.0), xs, {.unroll = 2});
  CHECK(xj::eval_counts()["mul"] == 10);  // c * 0.5 and n * n, five times
}
