// test_trust.cpp: regression tests for results that were silently wrong (issue 11): exact literal
// identity in CSE, grad tracing afresh on every call, scan's unroll=true, operators' source
// locations, leaked-tracer advice, grad of integer arguments, reduce_prod's derivative at zeros.
// Each case is the exact reproduction from the issue, checked against an independent value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

// The exact bits of every element, so that "equal" means bit-identical.
template <class T> std::vector<T> bits_of(const xj::Array& a) {
  std::vector<T> v(static_cast<std::size_t>(a.size()));
  std::memcpy(v.data(), a.raw_data(), a.aval().nbytes());
  return v;
}

}  // namespace

// ---- 1. CSE: literals are identical only when dtype and bits agree ----------------------------

TEST_CASE("trust: jit does not merge literals equal to 6 decimals (x * 1e-7 + x * 0.0)") {
  auto f = [](const xj::Array& x) { return x * 1e-7 + x * 0.0; };
  xj::Array x = xj::ones({3});
  xj::Array eager = f(x);
  xj::Array jitted = xj::jit(f)(x);
  CHECK(eager.to_vector<float>()[0] == 1e-7f);
  CHECK(bits_of<float>(jitted) == bits_of<float>(eager));
}

TEST_CASE("trust: grad of sum(x * 0.5000001 + x * 0.5) is 1.0000001") {
  auto f = [](const xj::Array& x) { return xj::sum(x * 0.5000001 + x * 0.5); };
  xj::Array g = xj::grad(f)(xj::ones({3}, xj::f64));
  for (double v : vec(g)) CHECK(v == 0.5000001 + 0.5);
  auto [value, g2] = xj::value_and_grad(f)(xj::ones({3}, xj::f64));
  CHECK(value.item<double>() == doctest::Approx(3 * 1.0000001).epsilon(1e-15));
  check_values(g2, {1.0000001, 1.0000001, 1.0000001}, 1e-15);
  auto [out, f_vjp] = xj::vjp(f, xj::ones({3}, xj::f64));
  check_values(std::get<0>(f_vjp(xj::scalar(1.0, xj::f64))), {1.0000001, 1.0000001, 1.0000001}, 1e-15);
  auto [out2, f_lin] = xj::linearize(f, xj::ones({3}, xj::f64));
  CHECK(f_lin(xj::ones({3}, xj::f64)).item<double>() == doctest::Approx(3.0000003).epsilon(1e-15));
}

TEST_CASE("trust: jit(1e-16 * x + 1e-10 * x) at 2 is 2.000002e-10") {
  auto f = [](const xj::Array& x) { return 1e-16 * x + 1e-10 * x; };
  xj::Array x = xj::scalar(2.0, xj::f64);
  CHECK(xj::jit(f)(x).item<double>() == doctest::Approx(2.000002e-10).epsilon(1e-15));
  CHECK(bits_of<double>(xj::jit(f)(x)) == bits_of<double>(f(x)));
}

TEST_CASE("trust: jitted random::uniform f64 matches eager (2^-52 and 2^-32 are different constants)") {
  auto u = [](const xj::Array& key) { return xj::random::uniform(key, {3}, xj::f64); };
  xj::Array key = xj::random::key(3);
  xj::Array eager = u(key);
  CHECK(eager.to_vector<double>()[0] == doctest::Approx(0.20424).epsilon(1e-4));
  CHECK(bits_of<double>(xj::jit(u)(key)) == bits_of<double>(eager));
}

TEST_CASE("trust: random::normal under jit and jvp equals eager (2^-23, 2^-32, 2^-52 and 0 literals)") {
  for (xj::DType dt : {xj::f32, xj::f64}) {
    INFO(xj::dtype_name(dt));
    auto n = [dt](const xj::Array& key, const xj::Array& x) { return xj::random::normal(key, {5}, dt) * x; };
    xj::Array key = xj::random::key(89), x = xj::ones({5}, dt);
    xj::Array eager = n(key, x);
    CHECK(vec(xj::jit(n)(key, x)) == vec(eager));
    auto [y, t] = xj::jvp([&](const xj::Array& v) { return n(key, v); }, std::tuple{x}, std::tuple{xj::ones({5}, dt)});
    CHECK(vec(y) == vec(eager));
    CHECK(vec(t) == vec(eager));  // d(normal * x)/dx along ones = normal
  }
}

TEST_CASE("trust: f32 dropout keeps the same units under jit as eagerly") {
  auto dropout = [](const xj::Array& key, const xj::Array& x) {
    xj::Array keep = xj::random::bernoulli(key, 0.5, x.shape());
    return xj::where(keep, x * 2.0, xj::zeros_like(x));
  };
  xj::Array x = xj::ones({8});
  for (std::uint32_t seed : {0u, 1u, 2u, 3u, 7u, 42u}) {
    INFO("seed " << seed);
    xj::Array key = xj::random::key(seed);
    CHECK(bits_of<float>(xj::jit(dropout)(key, x)) == bits_of<float>(dropout(key, x)));
  }
}

TEST_CASE("trust: the gradient of a dropped unit is exactly 0, with and without checkpoint") {
  xj::Array key = xj::random::key(11);
  auto loss = [key](const xj::Array& x) {
    xj::Array keep = xj::random::bernoulli(key, 0.5, x.shape());
    return xj::sum(xj::where(keep, x * 2.0, xj::zeros_like(x)));
  };
  xj::Array x = randn({16}, 5, xj::f32);
  xj::Array keep = xj::random::bernoulli(key, 0.5, x.shape());
  auto kept = keep.to_vector<int>();
  REQUIRE(std::count(kept.begin(), kept.end(), 0) > 0);
  REQUIRE(std::count(kept.begin(), kept.end(), 1) > 0);
  xj::Array g = xj::grad(loss)(x);
  xj::Array gc = xj::grad(xj::checkpoint(loss))(x);
  xj::Array gj = xj::jit(xj::grad(loss))(x);
  auto gv = g.to_vector<float>();
  for (std::size_t i = 0; i < kept.size(); ++i) CHECK(gv[i] == (kept[i] ? 2.0f : 0.0f));
  CHECK(bits_of<float>(gc) == bits_of<float>(g));
  CHECK(bits_of<float>(gj) == bits_of<float>(g));
}

TEST_CASE("trust: CSE keeps 0.0 and -0.0 apart (1 / (x * 0.0) is +inf, 1 / (x * -0.0) is -inf)") {
  auto f = [](const xj::Array& x) { return std::pair{1.0 / (x * 0.0), 1.0 / (x * -0.0)}; };
  auto [pos, neg] = xj::jit(f)(xj::scalar(1.0, xj::f64));
  CHECK(pos.item<double>() == INFINITY);
  CHECK(neg.item<double>() == -INFINITY);
}

TEST_CASE("trust: CSE merges literals that are bit-identical, and not across dtypes") {
  auto f = [](const xj::Array& x) { return xj::sin(x * 0.25) + xj::sin(x * 0.25); };
  xj::ClosedJaxpr j = xj::detail::jit_prepare(xj::make_jaxpr(f)(xj::ones({3})));  // what jit runs
  CHECK(count(str(j), " sin ") == 1);
  CHECK(xj::jit(f)(xj::ones({3})).to_vector<float>()[0] == 2 * std::sin(0.25f));
}

// ---- 2. grad traces afresh: no stale captured values ------------------------------------------

TEST_CASE("trust: grad of a lambda capturing w by reference sees w's new value") {
  xj::Array w = xj::scalar(2.0, xj::f64);
  auto f = [&w](const xj::Array& x) { return xj::sum(x * w); };
  auto g = xj::grad(f);
  auto vg = xj::value_and_grad(f);
  xj::Array x = xj::ones({2}, xj::f64);
  check_values(g(x), {2.0, 2.0});
  check_values(vg(x).second, {2.0, 2.0});
  w = xj::scalar(5.0, xj::f64);
  check_values(g(x), {5.0, 5.0});  // JAX gives 5: grad traces on every call
  auto [value, grads] = vg(x);
  CHECK(value.item<double>() == 10.0);
  check_values(grads, {5.0, 5.0});
  auto [out, f_vjp] = xj::vjp(f, x);
  check_values(std::get<0>(f_vjp(xj::scalar(1.0, xj::f64))), {5.0, 5.0});
  auto [out2, f_lin] = xj::linearize(f, x);
  CHECK(f_lin(xj::ones({2}, xj::f64)).item<double>() == 10.0);
}

TEST_CASE("trust: jit's documented rule: a captured array is baked in at the first trace") {
  xj::Array w = xj::scalar(2.0, xj::f64);
  auto f = xj::jit([&w](const xj::Array& x) { return x * w; });
  CHECK(f(xj::scalar(1.0, xj::f64)).item<double>() == 2.0);
  w = xj::scalar(5.0, xj::f64);
  CHECK(f(xj::scalar(1.0, xj::f64)).item<double>() == 2.0);          // cached signature: old w
  CHECK(f(xj::ones({1}, xj::f64)).to_vector<double>()[0] == 5.0);     // new signature: traced again
}

TEST_CASE("trust: jit's static arguments are keyed exactly (long double, -0.0, '|' in strings)") {
  auto f = [](const xj::Array& x, long double c) { return x * static_cast<double>((c - 1.0L) * 1e18L); };
  auto jf = xj::jit(f);
  xj::Array x = xj::scalar(1.0, xj::f64);
  CHECK(jf(x, 1.0L).item<double>() == 0.0);
  long double c = 1.0L + 1e-18L;  // differs from 1.0L only past 17 significant digits
  REQUIRE(c != 1.0L);
  CHECK(jf(x, c).item<double>() == static_cast<double>((c - 1.0L) * 1e18L));
  CHECK(jf(x, c).item<double>() > 0.5);
  auto g = xj::jit([](const xj::Array& y, double c) { return y / c; });
  CHECK(g(x, 0.0).item<double>() == INFINITY);
  CHECK(g(x, -0.0).item<double>() == -INFINITY);
  auto h = xj::jit([](const xj::Array& y, std::string a, std::string b) { return y * double(a.size() + 10 * b.size()); });
  CHECK(h(x, std::string("a|"), std::string("b")).item<double>() == 12.0);
  CHECK(h(x, std::string("a"), std::string("|b")).item<double>() == 21.0);
}

// ---- 4. scan's unroll accepts JAX's bool ------------------------------------------------------

TEST_CASE("trust: scan {.unroll = true} unrolls fully; false means 1") {
  auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{xj::sin(c) + x, c * x}; };
  xj::Array xs = randn({7, 3}, 3), c0 = randn({3}, 4);
  auto [c1, ys1] = xj::scan(body, c0, xs);
  auto [c2, ys2] = xj::scan(body, c0, xs, {.unroll = true});
  auto [c3, ys3] = xj::scan(body, c0, xs, {.unroll = false});
  check_close(c2, c1, 1e-15);
  check_close(ys2, ys1, 1e-15);
  check_close(c3, c1, 1e-15);
  check_close(ys3, ys1, 1e-15);
  auto params_of = [&](xj::ScanOptions opts) {
    return str(xj::make_jaxpr([&](const xj::Array& c) { return xj::scan(body, c, xs, opts).first; })(c0));
  };
  CHECK(contains(params_of({.unroll = true}), "unroll=7"));
  CHECK(contains(params_of({.unroll = false}), "unroll=1"));
  CHECK(contains(params_of({.unroll = 3}), "unroll=3"));
  // A fully unrolled scan of length 0 is one (empty) step.
  auto [c4, ys4] = xj::scan(body, c0, xj::zeros({0, 3}, xj::f64), {.unroll = true});
  CHECK(vec(c4) == vec(c0));
  // Its gradient agrees with the rolled loop's.
  auto loss = [&](const xj::Array& c, xj::ScanOptions opts) {
    auto [c_, ys] = xj::scan(body, c, xs, opts);
    return xj::sum(c_) + xj::sum(ys);
  };
  check_close(xj::grad([&](const xj::Array& c) { return loss(c, {.unroll = true}); })(c0),
              xj::grad([&](const xj::Array& c) { return loss(c, {}); })(c0), 1e-13);
}

// ---- 6. operators record the user's line ------------------------------------------------------

TEST_CASE("trust: errors from operators name the user's line, not src/ops.cpp") {
  xj::Array a = xj::ones({3}), b = xj::ones({4});
  int line = __LINE__ + 1;
  std::string m = message_of<xj::ShapeError>([&] { (void)(a * b); });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  CHECK_FALSE(contains(m, "ops.cpp"));
  {
    xj::DtypePromotion strict;  // mixed dtypes promote unless strict
    line = __LINE__ + 1;
    m = message_of<xj::TypeError>([&] { (void)(a + xj::ones({3}, xj::f64)); });
    CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  }
  line = __LINE__ + 1;
  m = message_of<xj::ShapeError>([&] { (void)(2.0 - xj::ones({2, 2}) * b); });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  m = message_of<xj::ShapeError>([&] { (void)a[5]; });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  m = message_of<xj::ShapeError>([&] { xj::Array c = a; c += b; });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
}

TEST_CASE("trust: an empty operand or indexing a scalar names the operator's line") {
  xj::Array empty, x = xj::ones({3});
  int line = __LINE__ + 1;
  std::string m = message_of<xj::Error>([&] { (void)(empty * 2.0); });
  CHECK(contains(m, "empty"));
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  m = message_of<xj::Error>([&] { (void)(x + empty); });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  m = message_of<xj::ShapeError>([&] { (void)xj::scalar(1.0)[0]; });
  CHECK(contains(m, "f32[]"));
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
}

TEST_CASE("trust: a leaked tracer made by an operator names the user's line") {
  xj::Array leaked;
  int line = __LINE__ + 2;
  (void)xj::make_jaxpr([&](const xj::Array& x) {
    leaked = x * 2.0;
    return leaked;
  })(xj::ones({3}));
  std::string m = message_of<xj::TracerError>([&] { (void)leaked.to_vector<float>(); });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
}

TEST_CASE("trust: saved_residuals of operators name the user's line") {
  auto f = [](const xj::Array& x) {
    xj::Array y = xj::sin(x) * xj::cos(x);  // y is saved for d(y * y) = 2 y dy: line checked below
    return xj::sum(y * y);
  };
  int line = __LINE__ - 3;
  auto res = xj::saved_residuals(f, xj::ones({3}));
  bool found = false;
  for (const auto& r : res)
    found = found || (contains(r.description, "output of mul") && contains(r.description, "test_trust.cpp:" + std::to_string(line)));
  CHECK(found);
  for (const auto& r : res) CHECK_FALSE(contains(r.description, "ops.cpp"));
}

TEST_CASE("trust: a leaked tracer used in an operator names the line of the use") {
  xj::Array leaked;
  (void)xj::make_jaxpr([&](const xj::Array& x) {
    leaked = xj::sin(x);
    return leaked;
  })(xj::ones({3}));
  int line = __LINE__ + 1;
  std::string m = message_of<xj::TracerError>([&] { (void)(leaked * 2.0); });
  CHECK(contains(m, "used at"));
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
}

TEST_CASE("trust: operators accept what converts to an Array, scalars on either side, compound forms") {
  xj::Array x = f64v({1.0, 2.0});
  std::reference_wrapper<const xj::Array> r = std::cref(x);
  check_values(r * 2.0, {2.0, 4.0});
  check_values(r + x, {2.0, 4.0});
  check_values(x - r, {0.0, 0.0});
  CHECK(vec(xj::astype(2.0 == x, xj::f64)) == std::vector<double>{0.0, 1.0});
  CHECK(vec(xj::astype(1.5 < x, xj::f64)) == std::vector<double>{0.0, 1.0});
  CHECK(vec(xj::astype(1.5 >= x, xj::f64)) == std::vector<double>{1.0, 0.0});
  xj::Array v = x;
  v *= 3.0;
  v /= x;
  v += 1;
  v -= r;
  check_values(v, {3.0, 2.0});
  CHECK(x[std::size_t{1}].item<double>() == 2.0);
  CHECK(x[xj::scalar(1, xj::i32)].item<double>() == 2.0);
  int line = __LINE__ + 1;
  std::string m = message_of<xj::ShapeError>([&] { v /= xj::ones({3}, xj::f64); });
  CHECK(contains(m, "test_trust.cpp:" + std::to_string(line)));
}

// ---- 7. leaked tracer advice ------------------------------------------------------------------

TEST_CASE("trust: reading a leaked tracer says it escaped its transform and how to return it") {
  xj::Array leaked;
  (void)xj::grad([&](const xj::Array& x) {
    leaked = xj::sin(x);
    return xj::sum(leaked);
  })(xj::ones({3}));
  std::string m = message_of<xj::TracerError>([&] { (void)leaked.to_vector<float>(); });
  CHECK(contains(m, "escaped"));
  CHECK(contains(m, "created at"));
  CHECK(contains(m, "test_trust.cpp"));
  CHECK(contains(m, "has_aux"));
  CHECK_FALSE(contains(m, "xj::cond"));
  // Inside its own trace, a value demanded of a tracer still gets the cond/where advice.
  std::string inside = message_of<xj::TracerError>([] {
    (void)xj::make_jaxpr([](const xj::Array& x) { return x.item<float>() > 0 ? x : -x; })(xj::scalar(1.0));
  });
  CHECK(contains(inside, "xj::cond"));
}

// ---- 8. grad of integer arguments -------------------------------------------------------------

TEST_CASE("trust: grad w.r.t. an integer argument is a TypeError unless allow_int") {
  auto f = [](const xj::Array& x, const xj::Array& n) { return xj::sum(x * xj::astype(n, xj::f64)); };
  xj::Array x = f64v({1.0, 2.0});
  xj::Array n = xj::array<std::int32_t>({3, -4});
  std::string m = message_of<xj::TypeError>([&] { (void)xj::grad(f, xj::argnums<1>)(x, n); });
  CHECK(contains(m, "argument 1"));
  CHECK(contains(m, "i32[2]"));
  CHECK(contains(m, "allow_int"));
  CHECK_THROWS_AS((void)xj::grad([](const xj::Array& n) { return xj::sum(xj::astype(n, xj::f32)); })(n), xj::TypeError);
  CHECK_THROWS_AS((void)xj::value_and_grad(f, xj::argnums<0, 1>)(x, n), xj::TypeError);
  // An integer leaf inside a differentiated pytree.
  auto g = [](const std::pair<xj::Array, xj::Array>& p) { return xj::sum(p.first * xj::astype(p.second, xj::f64)); };
  CHECK_THROWS_AS((void)xj::grad(g)(std::pair{x, n}), xj::TypeError);
  // allow_int: zeros of the argument's own dtype, and the float gradient as before.
  auto grads = xj::grad(f, xj::argnums<0, 1>, {.allow_int = true})(x, n);
  check_values(std::get<0>(grads), {3.0, -4.0});
  CHECK(std::get<1>(grads).aval() == xj::ShapedArray{{2}, xj::i32});
  CHECK(std::get<1>(grads).to_vector<int>() == std::vector<int>{0, 0});
  auto pg = xj::grad(g, {.allow_int = true})(std::pair{x, n});
  check_values(pg.first, {3.0, -4.0});
  // Integer arguments that are not differentiated are fine without allow_int.
  check_values(xj::grad(f)(x, n), {3.0, -4.0});
}

// ---- 9. reduce_prod's derivative at zeros -----------------------------------------------------

TEST_CASE("trust: the derivative of prod is exact where elements are 0") {
  // d/dx_i prod x = prod_{j != i} x_j, written out by hand.
  auto others = [](const std::vector<double>& x) {
    std::vector<double> g(x.size(), 1.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      for (std::size_t j = 0; j < x.size(); ++j)
        if (i != j) g[i] *= x[j];
    return g;
  };
  auto f = [](const xj::Array& x) { return xj::prod(x); };
  for (const auto& x : std::vector<std::vector<double>>{
           {2.0, 0.0, 3.0}, {0.0, 0.0, 3.0}, {1.5, -2.0, 0.5, 4.0, 0.0}, {0.0}, {5.0}, {1, 2, 3, 4, 5, 6, 7}}) {
    INFO("x[0] = " << x[0] << ", n = " << x.size());
    check_values(xj::grad(f)(f64v(x)), others(x), 1e-15);
    auto [y, t] = xj::jvp(f, std::tuple{f64v(x)}, std::tuple{xj::ones({static_cast<std::int64_t>(x.size())}, xj::f64)});
    double dsum = 0;
    for (double v : others(x)) dsum += v;
    CHECK(t.item<double>() == doctest::Approx(dsum).epsilon(1e-15));
  }
  // Over some axes of a rank-3 array, with zeros, against the hand-written rule per row.
  xj::Array x = f64v({1, 0, 2, 3, -1, 0, 0, 4, 5, 6, 2, 1}, {2, 3, 2});
  xj::Array g = xj::grad([](const xj::Array& a) { return xj::sum(xj::prod(a, {0, 2}) * f64v({1.0, 2.0, 3.0})); })(x);
  auto xv = vec(x);
  std::vector<double> want(12);
  for (int j = 0; j < 3; ++j) {
    std::vector<double> row;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) row.push_back(xv[static_cast<std::size_t>(i * 6 + j * 2 + k)]);
    auto o = others(row);
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) want[static_cast<std::size_t>(i * 6 + j * 2 + k)] = (j + 1) * o[static_cast<std::size_t>(i * 2 + k)];
  }
  check_values(g, want, 1e-15);
  // Second order with one zero: d2/dx0 dx1 of x0 x1 x2 at (2, 0, 3) is x2 = 3.
  xj::Array h = xj::hessian(f)(f64v({2.0, 0.0, 3.0}));
  check_values(h, {0, 3, 0, 3, 0, 2, 0, 2, 0}, 1e-15);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{f64v({2.0, 0.0, 3.0, 0.0})}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

// ---- found by the fuzzer ------------------------------------------------------------------------

namespace {
// A custom_jvp whose rule's tangent does not depend on the input tangent (zeros_like), and a
// custom_vjp (x * x with its hand-written backward): the pair of fuzzer seeds 1140 and 414449.
auto zero_tangent_custom_jvp() {
  return xj::custom_jvp([](const xj::Array& x) { return xj::sin(x); },
                        [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                          return std::pair{xj::sin(std::get<0>(p)), xj::zeros_like(std::get<0>(t))};
                        });
}
auto square_custom_vjp() {
  return xj::custom_vjp([](const xj::Array& x) { return x * x; }, [](const xj::Array& x) { return std::pair{x * x, x}; },
                        [](const xj::Array& x, const xj::Array& ct) { return std::tuple{2.0 * x * ct}; });
}
}  // namespace

TEST_CASE("trust: vjp through a custom_vjp whose input tangent is a custom_jvp's zero (fuzzer seed 1140)") {
  // The custom_jvp rule's tangent does not depend on the input tangent (it is zeros_like), so the
  // custom_vjp's custom_lin had only known inputs and was evaluated: "forward mode" error.
  auto cj = zero_tangent_custom_jvp();
  auto cv = square_custom_vjp();
  auto f = [&](const xj::Array& x) { return xj::sum(cv(cj(x)) + x * 3.0); };
  xj::Array x = f64v({0.5, -1.0, 2.0});
  // d/dx = 2 cj(x) * (custom derivative of cj = 0) + 3 = 3
  auto [out, f_vjp] = xj::vjp(f, x);
  check_values(std::get<0>(f_vjp(xj::scalar(1.0, xj::f64))), {3.0, 3.0, 3.0}, 1e-15);
  check_values(xj::grad(f)(x), {3.0, 3.0, 3.0}, 1e-15);
  check_values(xj::jit(xj::grad(f))(x), {3.0, 3.0, 3.0}, 1e-15);
  check_values(xj::jacrev([&](const xj::Array& y) { return cv(cj(y)); })(x), {0, 0, 0, 0, 0, 0, 0, 0, 0}, 1e-15);
}

TEST_CASE("trust: the same inside a checkpoint, a scan and a cond (fuzzer seed 414449)") {
  // The custom_lin with known (zero) tangents sat inside a higher-order equation whose inputs were
  // all known, so partial evaluation kept the whole equation on the known side, custom_lin
  // included, and vjp's forward pass evaluated it: "forward mode" error.
  auto cj = zero_tangent_custom_jvp();
  auto cv = square_custom_vjp();
  auto in_checkpoint = [&](const xj::Array& x) { return xj::sum(xj::checkpoint([&](const xj::Array& y) { return cv(y); })(cj(x)) + x * 3.0); };
  auto in_scan = [&](const xj::Array& x) {
    auto body = [&](const xj::Array& c, const xj::None&) { return std::pair{cv(c), xj::None{}}; };
    return xj::sum(xj::scan(body, cj(x), xj::None{}, {.length = 2}).first + x * 3.0);
  };
  auto in_cond = [&](const xj::Array& x) {
    return xj::sum(xj::cond(xj::scalar(true, xj::bool_), [&](const xj::Array& y) { return cv(y); }, [](const xj::Array& y) { return y; }, cj(x)) +
                   x * 3.0);
  };
  xj::Array x = f64v({0.5, -1.0, 2.0});
  for (const auto& f : std::vector<std::function<xj::Array(const xj::Array&)>>{in_checkpoint, in_scan, in_cond}) {
    auto [out, f_vjp] = xj::vjp(f, x);
    check_values(std::get<0>(f_vjp(xj::scalar(1.0, xj::f64))), {3.0, 3.0, 3.0}, 1e-15);
    check_values(xj::grad(f)(x), {3.0, 3.0, 3.0}, 1e-15);
  }
  // Forward mode of a custom_vjp function stays an error (its tangents are not zero).
  CHECK_THROWS_AS(xj::jvp(cv, std::tuple{x}, std::tuple{xj::ones_like(x)}), xj::TransformError);
}

TEST_CASE("trust: the same with an integer argument to the custom_vjp (its tangent is an integer zero)") {
  auto cj = zero_tangent_custom_jvp();
  auto scaled = xj::custom_vjp([](const xj::Array& x, const xj::Array& k) { return x * xj::astype(k, xj::f64); },
                               [](const xj::Array& x, const xj::Array& k) { return std::pair{x * xj::astype(k, xj::f64), k}; },
                               [](const xj::Array& k, const xj::Array& ct) {
                                 return std::tuple{ct * xj::astype(k, xj::f64), xj::zeros_like(k)};
                               });
  xj::Array k = xj::scalar(3, xj::i32);
  auto f = [&](const xj::Array& x) {
    return xj::sum(xj::checkpoint([&](const xj::Array& y) { return scaled(y, k); })(cj(x)) + x * 3.0);
  };
  xj::Array x = f64v({0.5, -1.0, 2.0});
  auto [out, f_vjp] = xj::vjp(f, x);
  check_values(std::get<0>(f_vjp(xj::scalar(1.0, xj::f64))), {3.0, 3.0, 3.0}, 1e-15);
  check_values(xj::grad(f)(x), {3.0, 3.0, 3.0}, 1e-15);
}
