// test_ops.cpp: every user-level operation of API.md ("Operations", "Arrays") run eagerly and
// compared against a plain C++ reference loop.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <xjax/xjax.hpp>

#include "internal.hpp"  // detail::abstract_eval, detail::trace_flat: shapes past 2^31 without allocating them
#include "test_util.hpp"

namespace xj = xjax;

namespace {

using Vec = std::vector<double>;

// Checks shape, dtype and every element (as double) within a relative+absolute tolerance.
void check_array(const xj::Array& got, const xj::Shape& shape, xj::DType dtype, const Vec& want,
                 double tol = 1e-6) {
  REQUIRE(got.is_concrete());
  CHECK(got.shape() == shape);
  CHECK(got.dtype() == dtype);
  auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(g[i]));
    } else if (std::isinf(want[i])) {
      CHECK(g[i] == want[i]);
    } else {
      CHECK(std::abs(g[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
    }
  }
}

xj::Array f32v(const std::vector<float>& v, xj::Shape s) { return xj::array<float>(v, std::move(s)); }
xj::Array f64_array(const std::vector<double>& v, xj::Shape s) { return xj::array<double>(v, std::move(s)); }
xj::Array i32v(const std::vector<std::int32_t>& v, xj::Shape s) { return xj::array<std::int32_t>(v, std::move(s)); }

// Values 0..n-1 scaled and shifted, as floats.
std::vector<float> ramp_values(std::size_t n, float scale = 0.25f, float shift = -1.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale + shift;
  return v;
}

Vec as_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

Vec map(const std::vector<float>& v, const std::function<double(float)>& f) {
  Vec out;
  for (float x : v) out.push_back(f(x));
  return out;
}

std::size_t element_count(const xj::Shape& s) {
  std::size_t n = 1;
  for (auto d : s) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

// ---- creation ---------------------------------------------------------------------------------

TEST_CASE("ops: creation functions") {
  check_array(xj::zeros({2, 3}), {2, 3}, xj::f32, Vec(6, 0.0));
  check_array(xj::ones({4}, xj::i64), {4}, xj::i64, Vec(4, 1.0));
  check_array(xj::full({2}, 2.5, xj::f64), {2}, xj::f64, {2.5, 2.5});
  check_array(xj::full({3}, 7.9, xj::i32), {3}, xj::i32, {7, 7, 7});
  check_array(xj::full({2}, 3.0, xj::bool_), {2}, xj::bool_, {1, 1});
  check_array(xj::arange(5), {5}, xj::i32, {0, 1, 2, 3, 4});
  check_array(xj::arange(3, xj::f32), {3}, xj::f32, {0, 1, 2});
  check_array(xj::arange(0), {0}, xj::i32, {});
  check_array(xj::eye(3), {3, 3}, xj::f32, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  check_array(xj::eye(2, xj::u32), {2, 2}, xj::u32, {1, 0, 0, 1});
  xj::Array a = xj::array<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  check_array(xj::zeros_like(a), {2, 3}, xj::f64, Vec(6, 0.0));
  check_array(xj::ones_like(a), {2, 3}, xj::f64, Vec(6, 1.0));
  check_array(xj::scalar(3.0, xj::f32), {}, xj::f32, {3.0});
  check_array(xj::scalar(-2.0, xj::i64), {}, xj::i64, {-2.0});
  check_array(xj::scalar(1.5), {}, xj::f32, {1.5});
  check_array(xj::array({1.f, 2.f}), {2}, xj::f32, {1, 2});
  check_array(xj::array({1.0, 2.0, 3.0}), {3}, xj::f64, {1, 2, 3});
  check_array(xj::array<std::uint32_t>({7, 8}, {2, 1}), {2, 1}, xj::u32, {7, 8});
  check_array(xj::array<std::int64_t>({}, {0, 3}), {0, 3}, xj::i64, {});
  check_array(xj::zeros({2, 0, 3}), {2, 0, 3}, xj::f32, {});
  CHECK_THROWS_AS(xj::array<float>({1, 2, 3}, {2, 2}), xj::ShapeError);
  CHECK_THROWS_AS(xj::zeros({-1}), xj::ShapeError);
  check_array(xj::arange(-1), {0}, xj::i32, {});  // jnp.arange(-1): empty (it raised)
}

TEST_CASE("ops: Array accessors") {
  xj::Array a = xj::array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.ndim() == 2);
  CHECK(a.size() == 6);
  CHECK(a.dim(0) == 2);
  CHECK(a.dim(-1) == 3);
  CHECK_THROWS_AS(a.dim(2), xj::ShapeError);
  CHECK(a.aval().str() == "f32[2,3]");
  CHECK(a.to_vector<int>() == std::vector<int>{1, 2, 3, 4, 5, 6});
  CHECK(a.data<float>()[4] == 5.0f);
  CHECK_THROWS_AS(a.data<double>(), xj::TypeError);
  CHECK(xj::scalar(4.0).item<float>() == 4.0f);
  CHECK_THROWS_AS(a.item<float>(), xj::ShapeError);
  CHECK(xj::array<std::int64_t>({9}, {1, 1}).item<double>() == 9.0);
}

// ---- elementwise unary ------------------------------------------------------------------------

TEST_CASE("ops: unary float elementwise ops against std::") {
  std::vector<float> v = ramp_values(12, 0.3f, -1.6f);  // -1.6 .. 1.7
  std::vector<float> pos = ramp_values(12, 0.4f, 0.1f);  // 0.1 .. 4.5
  xj::Array x = f32v(v, {3, 4}), p = f32v(pos, {3, 4});
  const xj::Shape s{3, 4};
  check_array(xj::neg(x), s, xj::f32, map(v, [](float a) { return -a; }));
  check_array(-x, s, xj::f32, map(v, [](float a) { return -a; }));
  check_array(xj::exp(x), s, xj::f32, map(v, [](float a) { return std::exp(a); }));
  check_array(xj::log(p), s, xj::f32, map(pos, [](float a) { return std::log(a); }));
  check_array(xj::log1p(p), s, xj::f32, map(pos, [](float a) { return std::log1p(a); }));
  check_array(xj::expm1(x), s, xj::f32, map(v, [](float a) { return std::expm1(a); }));
  check_array(xj::sin(x), s, xj::f32, map(v, [](float a) { return std::sin(a); }));
  check_array(xj::cos(x), s, xj::f32, map(v, [](float a) { return std::cos(a); }));
  check_array(xj::tan(x), s, xj::f32, map(v, [](float a) { return std::tan(a); }), 1e-5);
  check_array(xj::tanh(x), s, xj::f32, map(v, [](float a) { return std::tanh(a); }));
  check_array(xj::sqrt(p), s, xj::f32, map(pos, [](float a) { return std::sqrt(a); }));
  check_array(xj::rsqrt(p), s, xj::f32, map(pos, [](float a) { return 1 / std::sqrt(a); }));
  check_array(xj::abs(x), s, xj::f32, map(v, [](float a) { return std::abs(a); }));
  check_array(xj::square(x), s, xj::f32, map(v, [](float a) { return a * a; }));
  check_array(xj::reciprocal(p), s, xj::f32, map(pos, [](float a) { return 1 / a; }));
  check_array(xj::logistic(x), s, xj::f32, map(v, [](float a) { return 1 / (1 + std::exp(-a)); }));
  check_array(xj::sigmoid(x), s, xj::f32, map(v, [](float a) { return 1 / (1 + std::exp(-a)); }));
  check_array(xj::integer_pow(x, 3), s, xj::f32, map(v, [](float a) { return a * a * a; }), 1e-5);
  check_array(xj::integer_pow(p, -2), s, xj::f32, map(pos, [](float a) { return 1 / (a * a); }), 1e-5);
  check_array(xj::integer_pow(x, 0), s, xj::f32, Vec(12, 1.0));
  check_array(xj::stop_gradient(x), s, xj::f32, as_double(v));
  // special values
  check_array(xj::log(f32v({0.f, -1.f}, {2})), {2}, xj::f32, {-std::numeric_limits<double>::infinity(), NAN});
  check_array(xj::sqrt(f32v({-1.f}, {1})), {1}, xj::f32, {NAN});
}

TEST_CASE("ops: unary ops in f64 keep f64 precision") {
  std::vector<double> v{0.1, 0.2, 1.0 / 3.0};
  xj::Array x = f64_array(v, {3});
  Vec want;
  for (double a : v) want.push_back(std::exp(std::sin(a)));
  check_array(xj::exp(xj::sin(x)), {3}, xj::f64, want, 1e-14);
  check_array(xj::logistic(f64_array({-40.0, 40.0}, {2})), {2}, xj::f64, {1 / (1 + std::exp(40.0)), 1.0}, 1e-14);
}

TEST_CASE("ops: sign and abs on floats and ints") {
  check_array(xj::sign(f32v({-2.5f, 0.f, 3.f}, {3})), {3}, xj::f32, {-1, 0, 1});
  check_array(xj::sign(i32v({-7, 0, 9}, {3})), {3}, xj::i32, {-1, 0, 1});
  check_array(xj::abs(i32v({-7, 0, 9}, {3})), {3}, xj::i32, {7, 0, 9});
  check_array(xj::neg(xj::array<std::int64_t>({5, -6}, {2})), {2}, xj::i64, {-5, 6});
  check_array(xj::integer_pow(i32v({2, -3}, {2}), 3), {2}, xj::i32, {8, -27});
}

TEST_CASE("ops: relu, gelu (tanh approximation), softplus") {
  std::vector<float> v{-3.f, -1.f, -0.5f, 0.f, 0.5f, 1.f, 3.f, 10.f};
  xj::Array x = f32v(v, {8});
  check_array(xj::relu(x), {8}, xj::f32, map(v, [](float a) { return a > 0 ? a : 0.0; }));
  CHECK(xj::relu(xj::scalar(0.0)).item<float>() == 0.0f);
  auto gelu_ref = [](float a) {
    double c = std::sqrt(2.0 / M_PI);
    return 0.5 * a * (1 + std::tanh(c * (a + 0.044715 * a * a * a)));
  };
  check_array(xj::gelu(x), {8}, xj::f32, map(v, gelu_ref), 1e-5);
  // Known values of jax.nn.gelu(approximate=True).
  check_array(xj::gelu(f32v({1.0f, -1.0f}, {2})), {2}, xj::f32, {0.8411920, -0.1588080}, 1e-5);
  // The exact form, x Phi(x), against std::erf in double.
  std::vector<double> exact;
  for (double e : {-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5}) exact.push_back(0.5 * e * (1 + std::erf(e / std::sqrt(2.0))));
  check_array(xj::gelu(xj::array<double>({-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5}, {7}), false), {7}, xj::f64, exact, 1e-15);
  CHECK(xj::gelu(x, true).to_vector<double>() == xj::gelu(x).to_vector<double>());
  check_array(xj::softplus(x), {8}, xj::f32, map(v, [](float a) { return std::log1p(std::exp(double(a))); }), 1e-5);
  // Numerically stable for large |x|.
  check_array(xj::softplus(f32v({1000.f, -1000.f}, {2})), {2}, xj::f32, {1000.0, 0.0});
  check_array(xj::relu(i32v({-2, 0, 5}, {3})), {3}, xj::i32, {0, 0, 5});
}

TEST_CASE("ops: softplus, logaddexp and what is built on them are smooth at their kinks: derivatives there, to second order") {
  // Regression (fuzzer seed 600004): softplus was max(x, 0) + log1p(e^-|x|), whose kinks cancel in
  // value and slope but not under a second differentiation: at exactly x = 0 jvp(grad) gave 0
  // instead of logistic'(0) = 1/4 (max's tie split and sign(0) = 0 lose the curvature).
  // softplus' = logistic, softplus'' = logistic (1 - logistic): closed forms in double.
  const std::vector<double> xs{-2.0, -0.5, 0.0, 0.0, 0.75, 3.0};
  const xj::Array x = xj::array<double>(xs, {6});
  auto total = [](const xj::Array& v) { return xj::sum(xj::softplus(v)); };
  auto [g, hvp] = xj::jvp(xj::grad(total), std::tuple{x}, std::tuple{xj::ones({6}, xj::f64)});
  const auto gv = g.to_vector<double>(), hv = hvp.to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-xs[i]));
    CHECK(gv[i] == doctest::Approx(s).epsilon(1e-14));
    CHECK(hv[i] == doctest::Approx(s * (1.0 - s)).epsilon(1e-14));
  }
  // log_sigmoid'' = -logistic'; sigmoid_binary_cross_entropy(z, y)'' in z = logistic'(z)
  const xj::Array zero = xj::zeros({1}, xj::f64);
  auto second = [&](auto f) {
    const xj::Array h = std::get<1>(xj::jvp(xj::grad([f](const xj::Array& v) { return xj::sum(f(v)); }), std::tuple{zero}, std::tuple{xj::ones({1}, xj::f64)}));
    return h.item<double>();
  };
  CHECK(second([](const xj::Array& v) { return xj::log_sigmoid(v); }) == doctest::Approx(-0.25).epsilon(1e-14));
  CHECK(second([](const xj::Array& v) { return xj::optim::sigmoid_binary_cross_entropy(v, xj::full({1}, 0.3, xj::f64)); }) ==
        doctest::Approx(0.25).epsilon(1e-14));
  // still exact far out
  check_array(xj::grad(total)(xj::array<double>({-1000.0, 1000.0}, {2})), {2}, xj::f64, {0.0, 1.0});
  xj::check_grads(total, std::tuple{x}, {.order = 2});

  // logaddexp(a, b): d/da = logistic(a - b), d2/da2 = logistic' (a - b), ties included
  const std::vector<double> as{-1.0, 0.0, 0.5, 2.0}, bs{0.5, 0.0, 0.5, -3.0};
  const xj::Array a = xj::array<double>(as, {4}), b = xj::array<double>(bs, {4});
  auto lae = [&](const xj::Array& u) { return xj::sum(xj::logaddexp(u, b)); };
  auto [ga, ha] = xj::jvp(xj::grad(lae), std::tuple{a}, std::tuple{xj::ones({4}, xj::f64)});
  for (std::size_t i = 0; i < as.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-(as[i] - bs[i])));
    CHECK(ga.to_vector<double>()[i] == doctest::Approx(s).epsilon(1e-14));
    CHECK(ha.to_vector<double>()[i] == doctest::Approx(s * (1.0 - s)).epsilon(1e-14));
  }
  xj::check_grads([](const xj::Array& u, const xj::Array& v) { return xj::logaddexp(u, v); }, std::tuple{a, b}, {.order = 2});
  // third order: d3/da3 = logistic''(a - b) = s (1 - s) (1 - 2 s), 0 at the tie
  auto second_of = [&](const xj::Array& u) { return std::get<1>(xj::jvp(xj::grad(lae), std::tuple{u}, std::tuple{xj::ones({4}, xj::f64)})); };
  const auto third = std::get<1>(xj::jvp(second_of, std::tuple{a}, std::tuple{xj::ones({4}, xj::f64)})).to_vector<double>();
  for (std::size_t i = 0; i < as.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-(as[i] - bs[i])));
    CHECK(third[i] == doctest::Approx(s * (1.0 - s) * (1.0 - 2.0 * s)).epsilon(1e-13));
  }
  // operands far larger than their difference, in f32: the weights are logistic(a - b), not
  // e^(a - out) of a rounded out (review: 1e7 and 1e7 - 1 gave 1 and 0.368)
  auto [big_a, big_b] = xj::grad([](const xj::Array& u, const xj::Array& v) { return xj::sum(xj::logaddexp(u, v)); }, xj::argnums<0, 1>)(
      xj::array<float>({1e7f, 1e8f}, {2}), xj::array<float>({1e7f - 1.0f, 1e8f}, {2}));
  const double s1 = 1.0 / (1.0 + std::exp(-1.0));
  CHECK(big_a.to_vector<double>()[0] == doctest::Approx(s1).epsilon(1e-6));
  CHECK(big_b.to_vector<double>()[0] == doctest::Approx(1.0 - s1).epsilon(1e-6));
  CHECK(big_a.to_vector<double>()[1] == 0.5);
  CHECK(big_b.to_vector<double>()[1] == 0.5);
  // the infinite edges: the whole derivative to an operand equal to the (infinite) result, NaN
  // for a NaN result; the values as before
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const xj::Array ea = xj::array<double>({inf, -inf, -inf, nan, 1.0}, {5}), eb = xj::array<double>({1.0, 2.0, -inf, 1.0, inf}, {5});
  auto [da, db] = xj::grad([](const xj::Array& u, const xj::Array& v) { return xj::sum(xj::logaddexp(u, v)); }, xj::argnums<0, 1>)(ea, eb);
  const auto dav = da.to_vector<double>(), dbv = db.to_vector<double>();
  CHECK(dav[0] == 1.0);
  CHECK(dbv[0] == 0.0);
  CHECK(dav[1] == 0.0);
  CHECK(dbv[1] == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(dav[2] == 1.0);
  CHECK(dbv[2] == 1.0);
  CHECK(std::isnan(dav[3]));
  CHECK(std::isnan(dbv[3]));
  CHECK(dav[4] == 0.0);
  CHECK(dbv[4] == 1.0);
}

// ---- elementwise binary and broadcasting ------------------------------------------------------

TEST_CASE("ops: binary elementwise ops against a loop") {
  std::vector<float> a = ramp_values(6, 0.5f, -1.2f), b = ramp_values(6, -0.3f, 2.1f);
  xj::Array x = f32v(a, {2, 3}), y = f32v(b, {2, 3});
  auto zip = [&](const std::function<double(float, float)>& f) {
    Vec out;
    for (std::size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
    return out;
  };
  const xj::Shape s{2, 3};
  check_array(xj::add(x, y), s, xj::f32, zip([](float p, float q) { return p + q; }));
  check_array(x + y, s, xj::f32, zip([](float p, float q) { return p + q; }));
  check_array(xj::sub(x, y), s, xj::f32, zip([](float p, float q) { return p - q; }));
  check_array(x - y, s, xj::f32, zip([](float p, float q) { return p - q; }));
  check_array(x * y, s, xj::f32, zip([](float p, float q) { return p * q; }));
  check_array(x / y, s, xj::f32, zip([](float p, float q) { return p / q; }));
  check_array(xj::div(x, y), s, xj::f32, zip([](float p, float q) { return p / q; }));
  check_array(xj::maximum(x, y), s, xj::f32, zip([](float p, float q) { return std::max(p, q); }));
  check_array(xj::minimum(x, y), s, xj::f32, zip([](float p, float q) { return std::min(p, q); }));
  xj::Array py = xj::abs(y) + 0.5f;
  check_array(xj::pow(py, x), s, xj::f32, zip([](float p, float q) { return std::pow(std::abs(q) + 0.5f, p); }), 1e-5);
  check_array(xj::pow(py, 2.0), s, xj::f32, zip([](float, float q) { return std::pow(std::abs(q) + 0.5f, 2.0f); }), 1e-5);
  check_array(xj::pow(py, 0.5), s, xj::f32, zip([](float, float q) { return std::sqrt(std::abs(q) + 0.5f); }), 1e-5);

  xj::Array acc = x;
  acc += y;
  acc *= y;
  acc -= x;
  check_array(acc, s, xj::f32, zip([](float p, float q) { return (p + q) * q - p; }), 1e-5);
}

TEST_CASE("ops: where (and its alias select) takes a predicate of any dtype as pred != 0, as jnp.where (review finding)") {
  const xj::Array a = test_util::f64v({1, 2, 3, 4}), b = test_util::f64v({10, 20, 30, 40});
  const std::vector<double> want{1, 20, 3, 4};  // pred != 0 picks a
  CHECK(xj::where(xj::array<std::int32_t>({5, 0, -1, 7}, {4}), a, b).to_vector<double>() == want);
  CHECK(xj::where(test_util::f64v({0.5, -0.0, std::nan(""), -2}), a, b).to_vector<double>() == want);  // NaN is nonzero
  CHECK(xj::jit([&](const xj::Array& p) { return xj::where(p, a, b); })(xj::array<std::uint32_t>({1, 0, 2, 3}, {4})).to_vector<double>() == want);
  CHECK(xj::select(xj::array<std::int32_t>({1, 0, 1, 1}, {4}), a, b).to_vector<double>() == want);
}

TEST_CASE("ops: integer arithmetic (div truncates toward zero; the operator / is jnp's true division)") {
  xj::Array a = i32v({7, -7, 7, -7, 0}, {5}), b = i32v({2, 2, -2, -2, 3}, {5});
  check_array(xj::div(a, b), {5}, xj::i32, {3, -3, -3, 3, 0});
  check_array(a / b, {5}, xj::f64, {3.5, -3.5, -3.5, 3.5, 0.0});
  check_array(a / 2, {5}, xj::f64, {3.5, -3.5, 3.5, -3.5, 0.0});
  check_array(1 / b, {5}, xj::f64, {0.5, 0.5, -0.5, -0.5, 1.0 / 3.0});
  check_array(xj::astype(a, xj::f32) / b, {5}, xj::f32, {3.5, -3.5, -3.5, 3.5, 0.0});  // a float operand keeps its dtype
  xj::Array q = a;
  q /= 2;
  CHECK(q.dtype() == xj::f64);
  check_array(a * b, {5}, xj::i32, {14, -14, -14, 14, 0});
  check_array(a - b, {5}, xj::i32, {5, -9, 9, -5, -3});
  check_array(xj::maximum(a, b), {5}, xj::i32, {7, 2, 7, -2, 3});
  xj::Array u = xj::array<std::uint32_t>({1, 5}, {2});
  check_array(u + u, {2}, xj::u32, {2, 10});
}

TEST_CASE("ops: broadcasting [3,1] with [4], scalars with arrays") {
  std::vector<float> a{1, 2, 3}, b{10, 20, 30, 40};
  xj::Array x = f32v(a, {3, 1}), y = f32v(b, {4});
  Vec sum_ref, sub_ref;
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      sum_ref.push_back(a[i] + b[j]);
      sub_ref.push_back(b[j] - a[i]);
    }
  check_array(x + y, {3, 4}, xj::f32, sum_ref);
  check_array(y + x, {3, 4}, xj::f32, sum_ref);
  check_array(y - x, {3, 4}, xj::f32, sub_ref);

  // rank-0 array with an array, both orders
  xj::Array s = xj::scalar(2.0);
  check_array(s * y, {4}, xj::f32, {20, 40, 60, 80});
  check_array(y / s, {4}, xj::f32, {5, 10, 15, 20});
  check_array(s - y, {4}, xj::f32, {-8, -18, -28, -38});

  // [2,1,3] with [4,1] -> [2,4,3]
  std::vector<float> c = ramp_values(6), d = ramp_values(4, 1.0f, 0.0f);
  xj::Array p = f32v(c, {2, 1, 3}), q = f32v(d, {4, 1});
  Vec want;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t k = 0; k < 3; ++k) want.push_back(c[i * 3 + k] * d[j]);
  check_array(p * q, {2, 4, 3}, xj::f32, want);
}

TEST_CASE("ops: C++ scalars are weakly typed") {
  xj::Array x = f32v({1, 2, 3}, {3});
  check_array(x * 2.0f, {3}, xj::f32, {2, 4, 6});
  check_array(x * 2.0, {3}, xj::f32, {2, 4, 6});  // a double scalar keeps f32
  check_array(2.0 * x, {3}, xj::f32, {2, 4, 6});
  check_array(1.0 - x, {3}, xj::f32, {0, -1, -2});
  check_array(x - 1.0, {3}, xj::f32, {0, 1, 2});
  check_array(x + 0.5, {3}, xj::f32, {1.5, 2.5, 3.5});
  check_array(6.0 / x, {3}, xj::f32, {6, 3, 2});
  check_array(x / 2.0, {3}, xj::f32, {0.5, 1, 1.5});
  xj::Array d = f64_array({0.1, 0.2}, {2});
  xj::Array r = d * 2.0;
  CHECK(r.dtype() == xj::f64);
  CHECK(r.to_vector<double>() == std::vector<double>{0.2, 0.4});  // exact in f64
  check_array(i32v({1, 2}, {2}) * 3, {2}, xj::i32, {3, 6});      // an integer adopts i32
  check_array(i32v({1, 2}, {2}) * 1.5, {2}, xj::f32, {1.5, 3});   // a float makes it f32 (JAX)
  check_array(xj::scalar(1.0, xj::f64) + 1.0, {}, xj::f64, {2.0});
}

TEST_CASE("ops: rank-0 and rank-4 arrays, size-0 dimensions") {
  xj::Array a = xj::scalar(0.5), b = xj::scalar(0.25);
  check_array(xj::sin(a) + b, {}, xj::f32, {std::sin(0.5f) + 0.25f});

  xj::Shape s4{2, 1, 3, 2};
  std::vector<float> v = ramp_values(element_count(s4), 0.1f, -0.5f);
  xj::Array x = f32v(v, s4);
  check_array(xj::exp(x) * x, s4, xj::f32, map(v, [](float t) { return std::exp(t) * t; }));
  // rank 4 broadcast against rank 1
  xj::Array bias = f32v({1, -1}, {2});
  Vec want;
  for (std::size_t i = 0; i < v.size(); ++i) want.push_back(v[i] + (i % 2 == 0 ? 1.0 : -1.0));
  check_array(x + bias, s4, xj::f32, want);

  xj::Array e = xj::zeros({0, 3});
  check_array(xj::sin(e), {0, 3}, xj::f32, {});
  check_array(e + f32v({1, 2, 3}, {3}), {0, 3}, xj::f32, {});
  check_array(e * 2.0, {0, 3}, xj::f32, {});
  check_array(xj::zeros({3, 0}) + xj::zeros({1, 0}), {3, 0}, xj::f32, {});
  check_array(xj::sum(e, {0}), {3}, xj::f32, {0, 0, 0});
  check_array(xj::sum(e), {}, xj::f32, {0});
  check_array(xj::prod(e, {0}), {3}, xj::f32, {1, 1, 1});
}

// ---- comparisons and where --------------------------------------------------------------------

TEST_CASE("ops: comparisons return bool arrays") {
  xj::Array x = f32v({1, 2, 3}, {3}), y = f32v({3, 2, 1}, {3});
  check_array(xj::eq(x, y), {3}, xj::bool_, {0, 1, 0});
  check_array(x == y, {3}, xj::bool_, {0, 1, 0});
  check_array(x != y, {3}, xj::bool_, {1, 0, 1});
  check_array(xj::ne(x, y), {3}, xj::bool_, {1, 0, 1});
  check_array(x < y, {3}, xj::bool_, {1, 0, 0});
  check_array(xj::lt(x, y), {3}, xj::bool_, {1, 0, 0});
  check_array(x <= y, {3}, xj::bool_, {1, 1, 0});
  check_array(xj::le(x, y), {3}, xj::bool_, {1, 1, 0});
  check_array(x > y, {3}, xj::bool_, {0, 0, 1});
  check_array(xj::gt(x, y), {3}, xj::bool_, {0, 0, 1});
  check_array(x >= y, {3}, xj::bool_, {0, 1, 1});
  check_array(xj::ge(x, y), {3}, xj::bool_, {0, 1, 1});
  check_array(x > 1.5, {3}, xj::bool_, {0, 1, 1});
  check_array(x == 2.0, {3}, xj::bool_, {0, 1, 0});
  check_array(x != 2.0, {3}, xj::bool_, {1, 0, 1});
  check_array(x < 2.0, {3}, xj::bool_, {1, 0, 0});
  check_array(x <= 2.0, {3}, xj::bool_, {1, 1, 0});
  check_array(x >= 2.0, {3}, xj::bool_, {0, 1, 1});
  // broadcasting comparison
  check_array(f32v({1, 2}, {2, 1}) < f32v({0, 1.5f, 3}, {3}), {2, 3}, xj::bool_, {0, 1, 1, 0, 0, 1});
  check_array(i32v({-1, 0}, {2}) < i32v({0, 0}, {2}), {2}, xj::bool_, {1, 0});
  // NaN compares unequal
  xj::Array n = f32v({NAN}, {1});
  check_array(n == n, {1}, xj::bool_, {0});
  check_array(n != n, {1}, xj::bool_, {1});
}

TEST_CASE("ops: where / select") {
  xj::Array pred = xj::astype(i32v({1, 0, 1}, {3}), xj::bool_);
  xj::Array a = f32v({1, 2, 3}, {3}), b = f32v({-1, -2, -3}, {3});
  check_array(xj::where(pred, a, b), {3}, xj::f32, {1, -2, 3});
  check_array(xj::select(pred, a, b), {3}, xj::f32, {1, -2, 3});
  check_array(xj::where(pred, a, 0.0), {3}, xj::f32, {1, 0, 3});
  check_array(xj::where(pred, 9.0, b), {3}, xj::f32, {9, -2, 9});
  check_array(xj::where(a > 1.5, a, b), {3}, xj::f32, {-1, 2, 3});
  // all three broadcast
  xj::Array p2 = f32v({0, 1}, {2, 1}) > 0.5;
  check_array(xj::where(p2, a, xj::scalar(0.0)), {2, 3}, xj::f32, {0, 0, 0, 1, 2, 3});
  check_array(xj::where(xj::scalar(1.0) > 0.0, a, b), {3}, xj::f32, {1, 2, 3});
}

TEST_CASE("ops: astype") {
  xj::Array x = f32v({-1.7f, -0.5f, 0.f, 0.5f, 2.9f}, {5});
  check_array(xj::astype(x, xj::i32), {5}, xj::i32, {-1, 0, 0, 0, 2});  // truncation
  check_array(xj::astype(x, xj::bool_), {5}, xj::bool_, {1, 1, 0, 1, 1});
  check_array(xj::astype(x, xj::f64), {5}, xj::f64, {-1.7f, -0.5f, 0.f, 0.5f, 2.9f});
  check_array(xj::astype(i32v({3, -4}, {2}), xj::f32), {2}, xj::f32, {3, -4});
  check_array(xj::astype(xj::astype(i32v({0, 5}, {2}), xj::bool_), xj::i64), {2}, xj::i64, {0, 1});
  CHECK(xj::astype(x, xj::f32).impl() == x.impl());  // same dtype: no-op
}

// ---- linear algebra ---------------------------------------------------------------------------

namespace {

// Reference matmul of row-major [m,k] x [k,n].
Vec matmul_ref(const std::vector<float>& a, const std::vector<float>& b, std::size_t m, std::size_t k,
               std::size_t n) {
  Vec out(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t l = 0; l < k; ++l) out[i * n + j] += double(a[i * k + l]) * b[l * n + j];
  return out;
}

}  // namespace

TEST_CASE("ops: matmul 2-D, 1-D and batched with broadcasting") {
  std::vector<float> a = ramp_values(6, 0.5f, -1.0f), b = ramp_values(12, 0.25f, -1.5f);
  xj::Array x = f32v(a, {2, 3}), y = f32v(b, {3, 4});
  check_array(xj::matmul(x, y), {2, 4}, xj::f32, matmul_ref(a, b, 2, 3, 4), 1e-5);

  // 1-D operands
  std::vector<float> v{1, -2, 0.5f};
  check_array(xj::matmul(x, f32v(v, {3})), {2}, xj::f32, matmul_ref(a, v, 2, 3, 1), 1e-5);
  std::vector<float> w{2, -1};
  check_array(xj::matmul(f32v(w, {2}), x), {3}, xj::f32, matmul_ref(w, a, 1, 2, 3), 1e-5);
  check_array(xj::matmul(f32v(v, {3}), f32v(v, {3})), {}, xj::f32, {1 + 4 + 0.25}, 1e-6);

  // batched: [2,2,3] @ [2,3,4]
  std::vector<float> ba = ramp_values(12, 0.1f, -0.6f), bb = ramp_values(24, 0.05f, -0.5f);
  Vec want;
  for (std::size_t t = 0; t < 2; ++t) {
    std::vector<float> pa(ba.begin() + long(t * 6), ba.begin() + long(t * 6 + 6));
    std::vector<float> pb(bb.begin() + long(t * 12), bb.begin() + long(t * 12 + 12));
    auto r = matmul_ref(pa, pb, 2, 3, 4);
    want.insert(want.end(), r.begin(), r.end());
  }
  check_array(xj::matmul(f32v(ba, {2, 2, 3}), f32v(bb, {2, 3, 4})), {2, 2, 4}, xj::f32, want, 1e-5);

  // broadcast batch: [2,2,3] @ [3,4] and [1,2,3] @ [5,3,4] -> [5,2,4]
  Vec want2;
  for (std::size_t t = 0; t < 2; ++t) {
    std::vector<float> pa(ba.begin() + long(t * 6), ba.begin() + long(t * 6 + 6));
    auto r = matmul_ref(pa, b, 2, 3, 4);
    want2.insert(want2.end(), r.begin(), r.end());
  }
  check_array(xj::matmul(f32v(ba, {2, 2, 3}), y), {2, 2, 4}, xj::f32, want2, 1e-5);
  std::vector<float> b5 = ramp_values(60, 0.01f, -0.3f);
  Vec want3;
  for (std::size_t t = 0; t < 5; ++t) {
    std::vector<float> pb(b5.begin() + long(t * 12), b5.begin() + long(t * 12 + 12));
    auto r = matmul_ref(a, pb, 2, 3, 4);
    want3.insert(want3.end(), r.begin(), r.end());
  }
  check_array(xj::matmul(f32v(a, {1, 2, 3}), f32v(b5, {5, 3, 4})), {5, 2, 4}, xj::f32, want3, 1e-5);

  // one matrix times a stack: [2,3] @ [5,3,4] -> [5,2,4]
  check_array(xj::matmul(f32v(a, {2, 3}), f32v(b5, {5, 3, 4})), {5, 2, 4}, xj::f32, want3, 1e-5);

  // f64 and int
  std::vector<double> da{1, 2, 3, 4};
  check_array(xj::matmul(f64_array(da, {2, 2}), f64_array(da, {2, 2})), {2, 2}, xj::f64, {7, 10, 15, 22});
  check_array(xj::matmul(i32v({1, 2, 3, 4}, {2, 2}), i32v({1, 0, 0, 1}, {2, 2})), {2, 2}, xj::i32, {1, 2, 3, 4});
  // size-0 contraction gives zeros
  check_array(xj::matmul(xj::zeros({2, 0}), xj::zeros({0, 3})), {2, 3}, xj::f32, Vec(6, 0.0));
}

TEST_CASE("ops: dot and dot_general") {
  std::vector<float> v{1, 2, 3}, u{4, 5, 6};
  check_array(xj::dot(f32v(v, {3}), f32v(u, {3})), {}, xj::f32, {32});
  std::vector<float> a = ramp_values(6), b = ramp_values(6, 0.5f, 0.0f);
  check_array(xj::dot(f32v(a, {2, 3}), f32v(b, {3, 2})), {2, 2}, xj::f32, matmul_ref(a, b, 2, 3, 2), 1e-5);
  check_array(xj::dot(f32v(a, {2, 3}), f32v(v, {3})), {2}, xj::f32, matmul_ref(a, v, 2, 3, 1), 1e-5);
  check_array(xj::dot(xj::scalar(2.0), f32v(v, {3})), {3}, xj::f32, {2, 4, 6});
  // dot_general: contract lhs dim 0 with rhs dim 0 -> a^T b, shape [3,3]
  Vec want(9, 0.0);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t l = 0; l < 2; ++l) want[i * 3 + j] += double(a[l * 3 + i]) * b[l * 3 + j];
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {0}, {0}), {3, 3}, xj::f32, want, 1e-5);
  // batch dims: [2,3] . [2,3] batched on 0, contracting 1 -> [2] (row-wise dot)
  Vec rows{0, 0};
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t l = 0; l < 3; ++l) rows[r] += double(a[r * 3 + l]) * b[r * 3 + l];
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {1}, {1}, {0}, {0}), {2}, xj::f32, rows, 1e-5);
  // outer product (no contraction)
  check_array(xj::dot_general(f32v({1, 2}, {2}), f32v({3, 4, 5}, {3}), {}, {}), {2, 3}, xj::f32, {3, 4, 5, 6, 8, 10});
  // API.md's (JAX's) spelling: dimension numbers as pairs {lhs axes, rhs axes} (it threw "repeated
  // axis" before: the nested braces read as one flat list)
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {{0}, {0}}), {3, 3}, xj::f32, want, 1e-5);
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {{1}, {1}}, {{0}, {0}}), {2}, xj::f32, rows, 1e-5);
  const xj::Array wide = xj::dot_general(xj::astype(f32v(a, {2, 3}), xj::bf16), xj::astype(f32v(b, {2, 3}), xj::bf16), {{1}, {1}},
                                         {{0}, {0}}, {.preferred_element_type = xj::f32});
  CHECK(wide.dtype() == xj::f32);
  CHECK_THROWS_AS((void)xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {{0}, {0}, {1}}), xj::Error);
  // Axes variables in braces keep the flat form (the first pair overload took `{lc}` as a pair list
  // and threw; the review of the thirty-third session's diff)
  const xj::Axes lc{0}, rc{0}, lb{0}, rb{0}, lc1{1}, rc1{1};
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {lc}, {rc}), {3, 3}, xj::f32, want, 1e-5);
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), {lc1}, {rc1}, {lb}, {rb}), {2}, xj::f32, rows, 1e-5);
  check_array(xj::dot_general(f32v(a, {2, 3}), f32v(b, {2, 3}), lc, rc), {3, 3}, xj::f32, want, 1e-5);
}

TEST_CASE("ops: einsum") {
  std::vector<float> a = ramp_values(6, 0.5f, -1.0f), b = ramp_values(12, 0.25f, -1.5f);
  xj::Array x = f32v(a, {2, 3}), y = f32v(b, {3, 4});
  check_array(xj::einsum("ij,jk->ik", x, y), {2, 4}, xj::f32, matmul_ref(a, b, 2, 3, 4), 1e-5);
  check_array(xj::einsum("ij, jk -> ik", x, y), {2, 4}, xj::f32, matmul_ref(a, b, 2, 3, 4), 1e-5);
  // transposed output
  auto m = matmul_ref(a, b, 2, 3, 4);
  Vec mt;
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t i = 0; i < 2; ++i) mt.push_back(m[i * 4 + k]);
  check_array(xj::einsum("ij,jk->ki", x, y), {4, 2}, xj::f32, mt, 1e-5);
  // batched
  std::vector<float> ba = ramp_values(12, 0.1f, -0.6f), bb = ramp_values(24, 0.05f, -0.5f);
  Vec want;
  for (std::size_t t = 0; t < 2; ++t) {
    std::vector<float> pa(ba.begin() + long(t * 6), ba.begin() + long(t * 6 + 6));
    std::vector<float> pb(bb.begin() + long(t * 12), bb.begin() + long(t * 12 + 12));
    auto r = matmul_ref(pa, pb, 2, 3, 4);
    want.insert(want.end(), r.begin(), r.end());
  }
  check_array(xj::einsum("bij,bjk->bik", f32v(ba, {2, 2, 3}), f32v(bb, {2, 3, 4})), {2, 2, 4}, xj::f32, want, 1e-5);
  // one operand: transpose, full sum, row sums
  check_array(xj::einsum("ij->ji", x), {3, 2}, xj::f32, {a[0], a[3], a[1], a[4], a[2], a[5]});
  check_array(xj::einsum("ij->", x), {}, xj::f32, {std::accumulate(a.begin(), a.end(), 0.0)}, 1e-6);
  check_array(xj::einsum("ij->i", x), {2}, xj::f32, {a[0] + a[1] + a[2], a[3] + a[4] + a[5]}, 1e-6);
  // outer product and a letter summed out of one operand only
  check_array(xj::einsum("i,j->ij", f32v({1, 2}, {2}), f32v({3, 4}, {2})), {2, 2}, xj::f32, {3, 4, 6, 8});
  check_array(xj::einsum("ij,k->ik", x, f32v({1, 2}, {2})), {2, 2}, xj::f32,
              {a[0] + a[1] + a[2], 2 * (a[0] + a[1] + a[2]), a[3] + a[4] + a[5], 2 * (a[3] + a[4] + a[5])}, 1e-6);
  // dot product
  check_array(xj::einsum("i,i->", f32v({1, 2, 3}, {3}), f32v({4, 5, 6}, {3})), {}, xj::f32, {32});
  // no "->": the output is the letters named once, sorted (NumPy's implicit mode)
  check_array(xj::einsum("ij,jk", x, y), {2, 4}, xj::f32, matmul_ref(a, b, 2, 3, 4), 1e-5);
  CHECK_THROWS_AS(xj::einsum("ij->ji", x, y), xj::Error);
}

// ---- reductions -------------------------------------------------------------------------------

namespace {

// Reference reduction over one axis of a [2,3,4] array.
Vec reduce_ref(const std::vector<float>& v, int axis, double init, const std::function<double(double, double)>& f) {
  const std::size_t d[3] = {2, 3, 4};
  Vec out;
  for (std::size_t i = 0; i < (axis == 0 ? 1 : d[0]); ++i)
    for (std::size_t j = 0; j < (axis == 1 ? 1 : d[1]); ++j)
      for (std::size_t k = 0; k < (axis == 2 ? 1 : d[2]); ++k) {
        double acc = init;
        for (std::size_t r = 0; r < d[axis]; ++r) {
          std::size_t ii = axis == 0 ? r : i, jj = axis == 1 ? r : j, kk = axis == 2 ? r : k;
          acc = f(acc, v[(ii * 3 + jj) * 4 + kk]);
        }
        out.push_back(acc);
      }
  return out;
}

}  // namespace

TEST_CASE("ops: sum, max, min, prod, mean over axes, keepdims, negative axes") {
  std::vector<float> v(24);
  for (std::size_t i = 0; i < 24; ++i) v[i] = static_cast<float>((i * 7) % 11) * 0.5f - 2.0f;
  xj::Array x = f32v(v, {2, 3, 4});
  auto plus = [](double a, double b) { return a + b; };
  auto times = [](double a, double b) { return a * b; };
  auto mx = [](double a, double b) { return std::max(a, b); };
  auto mn = [](double a, double b) { return std::min(a, b); };
  const double inf = std::numeric_limits<double>::infinity();

  check_array(xj::sum(x, {0}), {3, 4}, xj::f32, reduce_ref(v, 0, 0, plus));
  check_array(xj::sum(x, {1}), {2, 4}, xj::f32, reduce_ref(v, 1, 0, plus));
  check_array(xj::sum(x, {-1}), {2, 3}, xj::f32, reduce_ref(v, 2, 0, plus));
  check_array(xj::sum(x, {2}, true), {2, 3, 1}, xj::f32, reduce_ref(v, 2, 0, plus));
  check_array(xj::sum(x, {-3}, true), {1, 3, 4}, xj::f32, reduce_ref(v, 0, 0, plus));
  check_array(xj::max(x, {1}), {2, 4}, xj::f32, reduce_ref(v, 1, -inf, mx));
  check_array(xj::min(x, {-1}), {2, 3}, xj::f32, reduce_ref(v, 2, inf, mn));
  check_array(xj::prod(x, {0}), {3, 4}, xj::f32, reduce_ref(v, 0, 1, times));
  Vec m = reduce_ref(v, 1, 0, plus);
  for (auto& t : m) t /= 3;
  check_array(xj::mean(x, {1}), {2, 4}, xj::f32, m);
  check_array(xj::mean(x, {-2}, true), {2, 1, 4}, xj::f32, m);

  // all axes
  double total = std::accumulate(v.begin(), v.end(), 0.0);
  check_array(xj::sum(x), {}, xj::f32, {total}, 1e-6);
  check_array(xj::sum(x, {}, true), {1, 1, 1}, xj::f32, {total}, 1e-6);
  check_array(xj::mean(x), {}, xj::f32, {total / 24}, 1e-6);
  check_array(xj::max(x), {}, xj::f32, {*std::max_element(v.begin(), v.end())});
  check_array(xj::min(x), {}, xj::f32, {*std::min_element(v.begin(), v.end())});
  // several axes, unordered
  Vec s02(3, 0.0);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) s02[j] += v[(i * 3 + j) * 4 + k];
  check_array(xj::sum(x, {2, 0}), {3}, xj::f32, s02, 1e-6);
  check_array(xj::sum(x, {-1, 0}, true), {1, 3, 1}, xj::f32, s02, 1e-6);

  // ints (widened to i64 as jnp's), rank 0, empty
  check_array(xj::sum(i32v({1, 2, 3, 4}, {2, 2}), {0}), {2}, xj::i64, {4, 6});
  check_array(xj::prod(i32v({1, 2, 3, 4}, {2, 2}), {1}), {2}, xj::i64, {2, 12});
  check_array(xj::max(i32v({-5, -2}, {2})), {}, xj::i32, {-2});
  check_array(xj::sum(xj::scalar(3.0)), {}, xj::f32, {3});
  check_array(xj::max(xj::zeros({0})), {}, xj::f32, {-inf});
  check_array(xj::min(xj::zeros({0})), {}, xj::f32, {inf});
  check_array(xj::max(xj::zeros({2, 0}), {1}), {2}, xj::f32, {-inf, -inf});
}

TEST_CASE("ops: argmax (first maximum)") {
  xj::Array x = f32v({1, 5, 5, 2, 9, 0, 9, 3}, {2, 4});
  check_array(xj::argmax(x, 1), {2}, xj::i32, {1, 0});
  check_array(xj::argmax(x, -1, xj::i64), {2}, xj::i64, {1, 0});
  check_array(xj::argmax(x, 0), {4}, xj::i32, {1, 0, 1, 1});
  check_array(xj::argmax(f32v({-3, -1, -2}, {3}), 0), {}, xj::i32, {1});
}

TEST_CASE("ops: logsumexp, softmax, log_softmax (stable for large inputs)") {
  std::vector<float> v{0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 1.0f};
  xj::Array x = f32v(v, {2, 3});
  auto lse = [](double a, double b, double c) {
    double m = std::max({a, b, c});
    return m + std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m));
  };
  Vec l{lse(v[0], v[1], v[2]), lse(v[3], v[4], v[5])};
  check_array(xj::logsumexp(x, {1}), {2}, xj::f32, l, 1e-6);
  check_array(xj::logsumexp(x, {-1}, true), {2, 1}, xj::f32, l, 1e-6);
  double all = std::log(std::exp(l[0]) + std::exp(l[1]));
  check_array(xj::logsumexp(x), {}, xj::f32, {all}, 1e-6);
  Vec sm, lsm;
  for (std::size_t i = 0; i < 6; ++i) {
    sm.push_back(std::exp(v[i] - l[i / 3]));
    lsm.push_back(v[i] - l[i / 3]);
  }
  check_array(xj::softmax(x), {2, 3}, xj::f32, sm, 1e-6);
  check_array(xj::softmax(x, 1), {2, 3}, xj::f32, sm, 1e-6);
  check_array(xj::log_softmax(x), {2, 3}, xj::f32, lsm, 1e-6);
  // along axis 0
  Vec sm0;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) sm0.push_back(std::exp(v[i * 3 + j]) / (std::exp(v[j]) + std::exp(v[3 + j])));
  check_array(xj::softmax(x, 0), {2, 3}, xj::f32, sm0, 1e-6);

  // large inputs: no overflow
  xj::Array big = f32v({1000, 1000, 999}, {3});
  double lb = 1000 + std::log(2 + std::exp(-1.0));
  check_array(xj::logsumexp(big), {}, xj::f32, {lb}, 1e-6);
  double z = 2 + std::exp(-1.0);
  check_array(xj::softmax(big), {3}, xj::f32, {1 / z, 1 / z, std::exp(-1.0) / z}, 1e-6);
  check_array(xj::log_softmax(big), {3}, xj::f32, {-std::log(z), -std::log(z), -1 - std::log(z)}, 1e-6);
  check_array(xj::softmax(f32v({-1000, -1000}, {2})), {2}, xj::f32, {0.5, 0.5});
  // f64
  check_array(xj::logsumexp(f64_array({1e300, 1e300}, {2})), {}, xj::f64, {1e300}, 1e-12);
}

// ---- shape ops --------------------------------------------------------------------------------

TEST_CASE("ops: reshape (with -1)") {
  std::vector<float> v = ramp_values(12);
  xj::Array x = f32v(v, {3, 4});
  check_array(xj::reshape(x, {4, 3}), {4, 3}, xj::f32, as_double(v));
  check_array(xj::reshape(x, {2, -1}), {2, 6}, xj::f32, as_double(v));
  check_array(xj::reshape(x, {-1}), {12}, xj::f32, as_double(v));
  check_array(xj::reshape(x, {2, 1, 3, 2}), {2, 1, 3, 2}, xj::f32, as_double(v));
  check_array(xj::reshape(xj::scalar(5.0), {1, 1}), {1, 1}, xj::f32, {5});
  check_array(xj::reshape(f32v({5}, {1, 1}), {}), {}, xj::f32, {5});
  check_array(xj::reshape(xj::zeros({0, 4}), {2, 0, 2}), {2, 0, 2}, xj::f32, {});
  // the result is independent of the input
  xj::Array r = xj::reshape(x, {12});
  CHECK(r.to_vector<float>() == v);
}

TEST_CASE("ops: transpose") {
  std::vector<float> v = ramp_values(24, 1.0f, 0.0f);
  xj::Array x = f32v(v, {2, 3, 4});
  // default: reverse the axes
  Vec want;
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t i = 0; i < 2; ++i) want.push_back(v[(i * 3 + j) * 4 + k]);
  check_array(xj::transpose(x), {4, 3, 2}, xj::f32, want);
  // explicit perm (1, 2, 0): out[j][k][i] = x[i][j][k]
  Vec want2;
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t k = 0; k < 4; ++k)
      for (std::size_t i = 0; i < 2; ++i) want2.push_back(v[(i * 3 + j) * 4 + k]);
  check_array(xj::transpose(x, {1, 2, 0}), {3, 4, 2}, xj::f32, want2);
  check_array(xj::transpose(x, {-2, -1, -3}), {3, 4, 2}, xj::f32, want2);
  check_array(xj::transpose(f32v({1, 2, 3, 4, 5, 6}, {2, 3})), {3, 2}, xj::f32, {1, 4, 2, 5, 3, 6});
  check_array(xj::transpose(xj::scalar(2.0)), {}, xj::f32, {2});
  check_array(xj::transpose(xj::zeros({0, 2})), {2, 0}, xj::f32, {});
  check_array(xj::transpose(i32v({1, 2, 3, 4}, {2, 2})), {2, 2}, xj::i32, {1, 3, 2, 4});
}

TEST_CASE("ops: broadcast_to, broadcast_in_dim, expand_dims, squeeze") {
  xj::Array v = f32v({1, 2, 3}, {3});
  check_array(xj::broadcast_to(v, {2, 3}), {2, 3}, xj::f32, {1, 2, 3, 1, 2, 3});
  check_array(xj::broadcast_to(f32v({1, 2}, {2, 1}), {2, 3}), {2, 3}, xj::f32, {1, 1, 1, 2, 2, 2});
  check_array(xj::broadcast_to(xj::scalar(4.0), {2, 2}), {2, 2}, xj::f32, {4, 4, 4, 4});
  check_array(xj::broadcast_to(v, {2, 0, 3}), {2, 0, 3}, xj::f32, {});
  check_array(xj::broadcast_in_dim(v, {3, 2}, {0}), {3, 2}, xj::f32, {1, 1, 2, 2, 3, 3});
  check_array(xj::broadcast_in_dim(f32v({1, 2}, {1, 2}), {3, 2, 2}, {0, 2}), {3, 2, 2}, xj::f32,
              {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2});

  check_array(xj::expand_dims(v, 0), {1, 3}, xj::f32, {1, 2, 3});
  check_array(xj::expand_dims(v, 1), {3, 1}, xj::f32, {1, 2, 3});
  check_array(xj::expand_dims(v, -1), {3, 1}, xj::f32, {1, 2, 3});
  check_array(xj::expand_dims(xj::scalar(1.0), 0), {1}, xj::f32, {1});

  xj::Array s = f32v({1, 2, 3}, {1, 3, 1});
  check_array(xj::squeeze(s), {3}, xj::f32, {1, 2, 3});
  check_array(xj::squeeze(s, {0}), {3, 1}, xj::f32, {1, 2, 3});
  check_array(xj::squeeze(s, {-1}), {1, 3}, xj::f32, {1, 2, 3});
  check_array(xj::squeeze(f32v({7}, {1, 1})), {}, xj::f32, {7});
  check_array(xj::squeeze(v), {3}, xj::f32, {1, 2, 3});
}

TEST_CASE("ops: concatenate and stack") {
  xj::Array a = f32v({1, 2, 3, 4}, {2, 2}), b = f32v({5, 6}, {1, 2}), c = f32v({7, 8, 9, 10, 11, 12}, {2, 3});
  check_array(xj::concatenate({a, b}), {3, 2}, xj::f32, {1, 2, 3, 4, 5, 6});
  check_array(xj::concatenate({a, c}, 1), {2, 5}, xj::f32, {1, 2, 7, 8, 9, 3, 4, 10, 11, 12});
  check_array(xj::concatenate({a, c}, -1), {2, 5}, xj::f32, {1, 2, 7, 8, 9, 3, 4, 10, 11, 12});
  check_array(xj::concatenate({a, xj::zeros({0, 2}), b}), {3, 2}, xj::f32, {1, 2, 3, 4, 5, 6});
  check_array(xj::concatenate({a}), {2, 2}, xj::f32, {1, 2, 3, 4});
  check_array(xj::concatenate({i32v({1}, {1}), i32v({2, 3}, {2})}), {3}, xj::i32, {1, 2, 3});

  xj::Array x = f32v({1, 2}, {2}), y = f32v({3, 4}, {2});
  check_array(xj::stack({x, y}), {2, 2}, xj::f32, {1, 2, 3, 4});
  check_array(xj::stack({x, y}, 1), {2, 2}, xj::f32, {1, 3, 2, 4});
  check_array(xj::stack({x, y}, -1), {2, 2}, xj::f32, {1, 3, 2, 4});
  check_array(xj::stack({xj::scalar(1.0), xj::scalar(2.0), xj::scalar(3.0)}), {3}, xj::f32, {1, 2, 3});
}

TEST_CASE("ops: slice with and without strides, slice_in_dim, x[i]") {
  std::vector<float> v = ramp_values(20, 1.0f, 0.0f);
  xj::Array x = f32v(v, {4, 5});
  // rows 1..3, cols 1..4
  Vec want;
  for (std::size_t i = 1; i < 3; ++i)
    for (std::size_t j = 1; j < 4; ++j) want.push_back(v[i * 5 + j]);
  check_array(xj::slice(x, {1, 1}, {3, 4}), {2, 3}, xj::f32, want);
  // strides (2, 3): rows 0,2; cols 0,3
  check_array(xj::slice(x, {0, 0}, {4, 5}, {2, 3}), {2, 2}, xj::f32, {0, 3, 10, 13});
  check_array(xj::slice(x, {1, 1}, {4, 5}, {2, 2}), {2, 2}, xj::f32, {6, 8, 16, 18});
  check_array(xj::slice(f32v({0, 1, 2, 3, 4, 5, 6}, {7}), {1}, {7}, {3}), {2}, xj::f32, {1, 4});
  check_array(xj::slice(x, {2, 0}, {2, 5}), {0, 5}, xj::f32, {});
  check_array(xj::slice_in_dim(x, 1, 3, 1, 1), {4, 2}, xj::f32, {1, 2, 6, 7, 11, 12, 16, 17});
  check_array(xj::slice_in_dim(x, 3, 4), {1, 5}, xj::f32, {15, 16, 17, 18, 19});

  check_array(x[0], {5}, xj::f32, {0, 1, 2, 3, 4});
  check_array(x[2], {5}, xj::f32, {10, 11, 12, 13, 14});
  check_array(x[-1], {5}, xj::f32, {15, 16, 17, 18, 19});
  check_array(x[1][3], {}, xj::f32, {8});
  check_array(f32v({4, 5, 6}, {3})[1], {}, xj::f32, {5});
}

TEST_CASE("ops: x[Array i] (traced-style dynamic index)") {
  std::vector<float> v = ramp_values(12, 1.0f, 0.0f);
  xj::Array x = f32v(v, {3, 4});
  check_array(x[xj::scalar(1, xj::i32)], {4}, xj::f32, {4, 5, 6, 7});
  check_array(x[xj::scalar(2, xj::i64)], {4}, xj::f32, {8, 9, 10, 11});
  // clamped like dynamic_slice
  check_array(x[xj::scalar(7, xj::i32)], {4}, xj::f32, {8, 9, 10, 11});
  // inside a trace the index is a tracer
  auto j = xj::make_jaxpr([](const xj::Array& a, const xj::Array& i) { return a[i]; })(x, xj::scalar(0, xj::i32));
  std::vector<xj::Array> args{x, xj::scalar(1, xj::i32)};
  check_array(xj::eval_jaxpr(j, args).at(0), {4}, xj::f32, {4, 5, 6, 7});
}

TEST_CASE("ops: dynamic_slice clamps, dynamic_update_slice") {
  std::vector<float> v = ramp_values(20, 1.0f, 0.0f);
  xj::Array x = f32v(v, {4, 5});
  auto i = [](int k) { return xj::scalar(k, xj::i32); };
  check_array(xj::dynamic_slice(x, {i(1), i(2)}, {2, 2}), {2, 2}, xj::f32, {7, 8, 12, 13});
  // starts clamped to [0, dim - size]
  check_array(xj::dynamic_slice(x, {i(3), i(4)}, {2, 2}), {2, 2}, xj::f32, {13, 14, 18, 19});
  // a negative start counts from the end (JAX's rule), then clamps: -5 + 4 = -1 -> 0; -1 + 5 = 4 -> 3
  check_array(xj::dynamic_slice(x, {i(-5), i(-1)}, {2, 2}), {2, 2}, xj::f32, {3, 4, 8, 9});
  check_array(xj::dynamic_slice(x, {i(0), xj::scalar(1, xj::i64)}, {4, 5}), {4, 5}, xj::f32, as_double(v));
  check_array(xj::dynamic_slice(x, {i(2), i(2)}, {0, 3}), {0, 3}, xj::f32, {});

  xj::Array u = f32v({-1, -2, -3, -4}, {2, 2});
  Vec want(v.begin(), v.end());
  want[1 * 5 + 2] = -1;
  want[1 * 5 + 3] = -2;
  want[2 * 5 + 2] = -3;
  want[2 * 5 + 3] = -4;
  check_array(xj::dynamic_update_slice(x, u, {i(1), i(2)}), {4, 5}, xj::f32, want);
  CHECK(x.to_vector<float>() == v);  // the operand is unchanged (immutable)
  // clamped: start (9, 9) -> (2, 3)
  Vec want2(v.begin(), v.end());
  want2[2 * 5 + 3] = -1;
  want2[2 * 5 + 4] = -2;
  want2[3 * 5 + 3] = -3;
  want2[3 * 5 + 4] = -4;
  check_array(xj::dynamic_update_slice(x, u, {i(9), i(9)}), {4, 5}, xj::f32, want2);
  // a negative start counts from the end (JAX): -2 + 3 = 1
  check_array(xj::dynamic_update_slice(f32v({1, 2, 3}, {3}), f32v({9}, {1}), {i(-2)}), {3}, xj::f32, {1, 9, 3});
}

TEST_CASE("ops: take (negative indices count from the end, others clamp)") {
  std::vector<float> v = ramp_values(12, 1.0f, 0.0f);
  xj::Array x = f32v(v, {4, 3});
  check_array(xj::take(x, i32v({2, 0}, {2}), 0), {2, 3}, xj::f32, {6, 7, 8, 0, 1, 2});
  check_array(xj::take(x, i32v({-1}, {1}), 0), {1, 3}, xj::f32, {9, 10, 11});
  check_array(xj::take(x, i32v({1, 2}, {2}), 1), {4, 2}, xj::f32, {1, 2, 4, 5, 7, 8, 10, 11});
  check_array(xj::take(x, i32v({-1, 0}, {2}), -1), {4, 2}, xj::f32, {2, 0, 5, 3, 8, 6, 11, 9});
  check_array(xj::take(x, xj::array<std::int64_t>({3, 1, 0, 2}, {2, 2}), 0), {2, 2, 3}, xj::f32,
              {9, 10, 11, 3, 4, 5, 0, 1, 2, 6, 7, 8});
  check_array(xj::take(x, xj::scalar(1, xj::i32), 0), {3}, xj::f32, {3, 4, 5});
  check_array(xj::take(x, i32v({}, {0}), 0), {0, 3}, xj::f32, {});
  // Without an axis x is flattened first (jnp.take's axis=None; xjax had taken rows: a port of
  // the thirty-sixth session): x.flat[i], here the plain loop's element (i / 3, i % 3).
  const std::vector<std::int32_t> flat_at{1, 4, 11, -1, 0};
  Vec want;
  for (std::int32_t i : flat_at) want.push_back(v[static_cast<std::size_t>(i < 0 ? i + 12 : i)]);
  check_array(xj::take(x, i32v(flat_at, {5})), {5}, xj::f32, want);
  check_array(xj::take(x, i32v({1, 4, 11, 0}, {2, 2})), {2, 2}, xj::f32, {v[1], v[4], v[11], v[0]});
  check_array(xj::take(xj::scalar(7.0f), i32v({0, 0}, {2})), {2}, xj::f32, {7, 7});
  // out of range indices clamp
  check_array(xj::take(f32v({1, 2, 3}, {3}), i32v({5, -10}, {2})), {2}, xj::f32, {3, 1});
}

TEST_CASE("ops: iota") {
  check_array(xj::iota(xj::i32, {2, 3}, 1), {2, 3}, xj::i32, {0, 1, 2, 0, 1, 2});
  check_array(xj::iota(xj::f32, {2, 3}, 0), {2, 3}, xj::f32, {0, 0, 0, 1, 1, 1});
  check_array(xj::iota(xj::i64, {4}), {4}, xj::i64, {0, 1, 2, 3});
}

TEST_CASE("ops: printing concrete arrays and tracers") {
  std::ostringstream os;
  os << f32v({1, 2.5f}, {2});
  CHECK(os.str() == "f32[2] [1, 2.5]");
  std::ostringstream ot;
  (void)xj::make_jaxpr([&](const xj::Array& x) {
    ot << x;
    return x;
  })(xj::zeros({3}));
  CHECK(ot.str() == "Traced<f32[3]>");
}

namespace {
xj::Array bools(const std::vector<std::int32_t>& v) { return xj::astype(xj::array<std::int32_t>(v, {static_cast<std::int64_t>(v.size())}), xj::bool_); }
std::vector<std::int32_t> ints_of(const xj::Array& x) { return xj::astype(x, xj::i32).to_vector<std::int32_t>(); }
using I = std::vector<std::int32_t>;
}  // namespace

TEST_CASE("argmin, all, any, logical ops, is_finite, clamp: against loops, edge cases (NaN, empty, integer extremes)") {
  const xj::Array f = xj::array<float>({3.f, -1.f, 2.f, -1.f, 5.f, 0.f}, {2, 3});
  CHECK(xj::argmin(f, 1).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0});
  CHECK(xj::argmin(f, 0).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 1});
  CHECK(xj::argmin(xj::array<float>({1.f, NAN, -3.f}, {3}), 0).item<std::int32_t>() == 1);  // NaN first, as JAX
  const xj::Array ints = xj::array<std::int32_t>({0, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()}, {3});
  CHECK(xj::argmin(ints, 0).item<std::int32_t>() == 1);
  CHECK(xj::argmin(xj::array<std::uint32_t>({7u, 4294967295u, 0u, 0u}, {4}), 0).item<std::int32_t>() == 2);
  CHECK(xj::argmin(bools({1, 0, 0}), 0).item<std::int32_t>() == 1);

  const xj::Array b = xj::array<std::int32_t>({1, 0, 2, 3}, {2, 2});
  CHECK(ints_of(xj::all(b))[0] == 0);
  CHECK(ints_of(xj::any(b))[0] == 1);
  CHECK(ints_of(xj::all(b, {1})) == I{0, 1});
  CHECK(xj::any(b, {0}, true).shape() == xj::Shape{1, 2});
  CHECK(ints_of(xj::all(xj::zeros({0}, xj::f32)))[0] == 1);   // empty: true
  CHECK(ints_of(xj::any(xj::zeros({0}, xj::f32)))[0] == 0);  // empty: false
  CHECK(ints_of(xj::logical_and(b, bools({1, 1}))) == I{1, 0, 1, 1});
  CHECK(ints_of(xj::logical_or(b, xj::zeros({2, 2}, xj::f32))) == I{1, 0, 1, 1});
  CHECK(ints_of(xj::logical_not(b)) == I{0, 1, 0, 0});
  CHECK(ints_of(xj::logical_not(bools({1, 0}))) == I{0, 1});

  CHECK(ints_of(xj::is_finite(xj::array<double>({1.0, INFINITY, -INFINITY, NAN, -0.0, 1e308}, {6}))) == I{1, 0, 0, 0, 1, 1});
  CHECK(ints_of(xj::is_finite(b)) == I{1, 1, 1, 1});

  const xj::Array x = xj::array<double>({-2.0, -1.0, 0.5, 1.0, 3.0}, {5});
  CHECK(xj::clamp(-1.0, x, 1.0).to_vector<double>() == std::vector<double>{-1.0, -1.0, 0.5, 1.0, 1.0});
  const xj::Array lo = xj::array<double>({0.0, 0.0, 0.0, 2.0, 2.0}, {5});
  CHECK(xj::clamp(lo, x, xj::scalar(2.5, xj::f64)).to_vector<double>() == std::vector<double>{0.0, 0.0, 0.5, 2.0, 2.5});
  // d clamp / dx: 1 strictly inside, 0 outside; the bound's at a tie.
  const auto g = xj::grad([](const xj::Array& v) { return xj::sum(xj::clamp(-1.0, v, 1.0) * v); })(x).to_vector<double>();
  // d/dv (clamp(v) v) = clamp'(v) v + clamp(v)
  CHECK(g == std::vector<double>{-1.0, -1.0, 2 * 0.5, 1.0, 1.0});
}

TEST_CASE("roll, tile, repeat, split, linspace: against NumPy's definitions written as loops") {
  const xj::Array x = xj::astype(xj::iota(xj::i32, {2, 3}, 0) * 10 + xj::iota(xj::i32, {2, 3}, 1), xj::f32);  // [[0,1,2],[10,11,12]]
  CHECK(xj::roll(x, 1, 1).to_vector<float>() == std::vector<float>{2, 0, 1, 12, 10, 11});
  CHECK(xj::roll(x, -4, 1).to_vector<float>() == std::vector<float>{1, 2, 0, 11, 12, 10});
  CHECK(xj::roll(x, 2).to_vector<float>() == std::vector<float>{11, 12, 0, 1, 2, 10});  // flattened
  CHECK(xj::roll(x, 3, 0).to_vector<float>() == std::vector<float>{10, 11, 12, 0, 1, 2});
  const xj::Array t = xj::tile(x, {2, 2});
  REQUIRE(t.shape() == xj::Shape{4, 6});
  const auto tv = t.to_vector<float>(), xv = x.to_vector<float>();
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 6; ++j) CHECK(tv[i * 6 + j] == xv[(i % 2) * 3 + j % 3]);
  CHECK(xj::tile(xj::array<float>({1.f, 2.f}, {2}), {2, 1, 2}).shape() == xj::Shape{2, 1, 4});
  CHECK(xj::tile(x, {3}).shape() == xj::Shape{2, 9});
  CHECK(xj::repeat(x, 2, 1).to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 2, 10, 10, 11, 11, 12, 12});
  CHECK(xj::repeat(x, 2, 0).to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 2, 10, 11, 12, 10, 11, 12});
  CHECK(xj::repeat(x, 2).shape() == xj::Shape{12});
  CHECK(xj::repeat(x, 0, 1).shape() == xj::Shape{2, 0});
  const auto parts = xj::split(xj::arange(6, xj::f32), 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].to_vector<float>() == std::vector<float>{2, 3});
  const auto at = xj::split(x, std::vector<std::int64_t>{1, 5}, 1);
  REQUIRE(at.size() == 3);
  CHECK(at[0].shape() == xj::Shape{2, 1});
  CHECK(at[1].to_vector<float>() == std::vector<float>{1, 2, 11, 12});
  CHECK(at[2].shape() == xj::Shape{2, 0});
  CHECK_THROWS_WITH_AS(xj::split(x, 2, 1), doctest::Contains("do not divide"), xj::ShapeError);
  const auto l = xj::linspace(0.0, 1.0, 5, xj::f64).to_vector<double>();
  CHECK(l == std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0});
  CHECK(xj::linspace(0.0, 1.0, 4, xj::f64, false).to_vector<double>() == std::vector<double>{0.0, 0.25, 0.5, 0.75});
  CHECK(xj::linspace(2.0, 3.0, 1).to_vector<float>() == std::vector<float>{2.f});
  CHECK(xj::linspace(2.0, 3.0, 0).shape() == xj::Shape{0});
  // Their derivatives are those of slices and broadcasts: the gradient of sum(tile(x) * w) is w
  // folded back onto x.
  const auto gt = xj::grad([](const xj::Array& v) { return xj::sum(xj::tile(v, {2, 1}) * xj::tile(v, {2, 1})); })(x).to_vector<float>();
  for (std::size_t i = 0; i < 6; ++i) CHECK(gt[i] == 4 * xv[i]);
  const auto gr = xj::grad([](const xj::Array& v) { return xj::sum(xj::roll(v, 1, 1) * xj::arange(3, xj::f32)); })(x).to_vector<float>();
  CHECK(gr == std::vector<float>{1, 2, 0, 1, 2, 0});  // x[:, j] lands at j + 1 mod 3
}

TEST_CASE("matmul of a stack by one matrix lowers as jnp.matmul: no batch dims, no broadcast weights in the gradient") {
  // x (B, T, d) @ W (d, e): one dot_general without batch dims; W's gradient contracts B and T at
  // once, so no (B, d, e) array appears anywhere in the gradient's jaxpr (issue 32).
  const xj::Array x = xj::zeros({4, 7, 8}), w = xj::zeros({8, 6});
  const auto loss = [](const xj::Array& a, const xj::Array& b) { return xj::sum(xj::tanh(xj::matmul(a, b))); };
  const auto text = [](const xj::ClosedJaxpr& j) {
    std::ostringstream os;
    os << j;
    return os.str();
  };
  const auto count = [](const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  const std::string fwd = text(xj::make_jaxpr(loss)(x, w));
  const std::string bwd = text(xj::make_jaxpr(xj::grad(loss, xj::argnums<0, 1>))(x, w));
  for (const std::string& j : {fwd, bwd}) {
    INFO(j);
    CHECK(count(j, "dot_general[") == count(j, "lhs_batch=()"));
    CHECK(count(j, "f32[4,8,6]") == 0);
    CHECK(count(j, "broadcast_in_dim") == count(j, "broadcast_in_dim[broadcast_dimensions=()"));
  }
  CHECK(count(bwd, "dot_general[") == 3);  // forward, d/dx, d/dW
}

TEST_CASE("clamp is lax's min(max(x, lo), hi): lo > hi gives hi, a NaN bound gives NaN; eager and fused agree") {
  const xj::Array x = xj::array<double>({-3, -1, 0, 1, 3}, {5});
  CHECK(xj::clamp(2.0, x, 1.0).to_vector<double>() == std::vector<double>{1, 1, 1, 1, 1});
  const auto nan_lo = xj::clamp(xj::scalar(std::nan(""), xj::f64), x, xj::scalar(1.0, xj::f64)).to_vector<double>();
  for (double v : nan_lo) CHECK(std::isnan(v));
  auto f = [](const xj::Array& lo, const xj::Array& v, const xj::Array& hi) { return xj::clamp(lo, xj::sin(v), hi) * 2.0; };
  const xj::Array lo = xj::array<double>({0.5, -0.5, std::nan(""), 0.9, -1.0}, {5});
  const xj::Array hi = xj::array<double>({-0.5, 0.5, 0.5, std::nan(""), 1.0}, {5});
  const auto eager = f(lo, x, hi).to_vector<double>(), fused = xj::jit(f)(lo, x, hi).to_vector<double>();
  for (std::size_t i = 0; i < eager.size(); ++i)
    CHECK((eager[i] == fused[i] || (std::isnan(eager[i]) && std::isnan(fused[i]))));
  CHECK(eager[0] == -1.0);  // lo 0.5 > hi -0.5: hi
  // The derivative goes to hi when lo > hi.
  auto [glo, gx, ghi] = xj::grad([](const xj::Array& a, const xj::Array& v, const xj::Array& b) { return xj::sum(xj::clamp(a, v, b)); },
                                 xj::argnums<0, 1, 2>)(xj::scalar(2.0, xj::f64), x, xj::scalar(1.0, xj::f64));
  CHECK(glo.item<double>() == 0.0);
  CHECK(ghi.item<double>() == 5.0);
  CHECK(gx.to_vector<double>() == std::vector<double>{0, 0, 0, 0, 0});
}

TEST_CASE("pad: edges, negative crops, interior, the value converted; its derivative against finite differences") {
  const xj::Array x = xj::array<double>({1, 2, 3}, {3});
  const xj::Array p = xj::pad(x, xj::scalar(9.0, xj::f32), {1}, {-1}, {1});  // [9, 1, 9, 2, 9, 3] less the last
  CHECK(p.dtype() == xj::f64);
  CHECK(p.to_vector<double>() == std::vector<double>{9, 1, 9, 2, 9});
  const xj::Array m = xj::reshape(xj::iota(xj::f64, {6}), {2, 3});
  const xj::Array q = xj::pad(m, xj::scalar(0.0, xj::f64), {0, -1}, {1, 2});
  CHECK(q.shape() == xj::Shape{3, 4});
  CHECK(q.to_vector<double>() == std::vector<double>{1, 2, 0, 0, 4, 5, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_AS(xj::pad(x, xj::scalar(0.0, xj::f64), {-2}, {-2}), xj::ShapeError);
  xj::check_grads([](const xj::Array& a, const xj::Array& v) { return xj::sin(xj::pad(a, v, {2, 0}, {-1, 1}, {1, 0})); },
                  std::tuple{xj::reshape(xj::iota(xj::f64, {6}), {3, 2}) * 0.3, xj::scalar(0.5, xj::f64)});
}

TEST_CASE("ops regressions from review: negative dynamic starts count from the end; take_along_axis clamps wide indices; linspace floors integers; var with ddof >= N is NaN") {
  // dynamic_slice / dynamic_update_slice / x[i] with a negative traced or concrete start: JAX adds
  // the dimension first (then clamps); these clamped -1 to 0 and read the first rows.
  const xj::Array x = xj::astype(xj::arange(10, xj::i32), xj::f32);
  const xj::Array minus_one = xj::scalar(-1, xj::i32);
  check_array(xj::dynamic_slice(x, {minus_one}, {3}), {3}, xj::f32, {7, 8, 9});
  auto sliced = xj::jit([](const xj::Array& a, const xj::Array& s) { return xj::dynamic_slice(a, {s}, {3}); });
  check_array(sliced(x, minus_one), {3}, xj::f32, {7, 8, 9});
  check_array(sliced(x, xj::scalar(-4, xj::i32)), {3}, xj::f32, {6, 7, 8});
  const xj::Array u = f32v({-1, -2, -3}, {3});
  check_array(xj::dynamic_update_slice(x, u, {minus_one}), {10}, xj::f32, {0, 1, 2, 3, 4, 5, 6, -1, -2, -3});
  auto updated = xj::jit([&](const xj::Array& a, const xj::Array& s) { return xj::dynamic_update_slice(a, u, {s}); });
  check_array(updated(x, xj::scalar(-5, xj::i32)), {10}, xj::f32, {0, 1, 2, 3, 4, -1, -2, -3, 8, 9});
  CHECK(x[minus_one].item<float>() == 9.0f);
  check_array(xj::reshape(x, {5, 2})[xj::scalar(-2, xj::i32)], {2}, xj::f32, {6, 7});
  // batched starts, one per member
  const xj::Array starts = xj::array<int>({-1, 0, -9, 2}, {4});
  const xj::Array rows = xj::vmap([&](const xj::Array& s) { return xj::dynamic_slice(x, {s}, {2}); })(starts);
  check_array(rows, {4, 2}, xj::f32, {8, 9, 0, 1, 1, 2, 2, 3});
  // batched u64 starts past i64's range clamp to the end (~0 had become -1, then 0)
  const xj::Array huge = xj::array<std::uint64_t>({18446744073709551615ull, 1}, {2});
  check_array(xj::vmap([&](const xj::Array& s) { return xj::dynamic_slice(x, {s}, {2}); })(huge), {2, 2}, xj::f32, {8, 9, 1, 2});
  // the gradient lands where the values came from
  const xj::Array g = xj::grad([&](const xj::Array& a) { return xj::sum(xj::dynamic_slice(a, {minus_one}, {3})); })(x);
  check_array(g, {10}, xj::f32, {0, 0, 0, 0, 0, 0, 0, 1, 1, 1});
  const xj::Array gu = xj::grad([&](const xj::Array& v) { return xj::sum(xj::dynamic_update_slice(x, v, {minus_one}) * x); })(u);
  check_array(gu, {3}, xj::f32, {7, 8, 9});
  // take_along_axis: i64 / u32 indices past i32's range clamp to the last element (they wrapped)
  const xj::Array t = f32v({10, 11, 12, 13}, {4});
  const xj::Array wide = xj::array<std::int64_t>({std::int64_t{1} << 32, (std::int64_t{1} << 32) + 1, 3000000000}, {3});
  check_array(xj::take_along_axis(t, wide, 0), {3}, xj::f32, {13, 13, 13});
  check_array(xj::take_along_axis(t, xj::array<std::uint32_t>({4000000000u, 3u}, {2}), 0), {2}, xj::f32, {13, 13});
  check_array(xj::take_along_axis(t, xj::array<std::int64_t>({-1, -4, -(std::int64_t{1} << 33)}, {3}), 0), {3}, xj::f32, {13, 10, 10});
  // linspace into integers floors (JAX's rule), not truncates toward zero
  check_array(xj::linspace(0, -10, 4, xj::i32), {4}, xj::i32, {0, -4, -7, -10});
  check_array(xj::linspace(-1, 1, 5, xj::i32), {5}, xj::i32, {-1, -1, 0, 0, 1});
  // integer steps stay exact (start (1 - t) + stop t gave 14 at i = 15 of linspace(0, 22, 23))
  check_array(xj::linspace(0, 22, 23, xj::i32)[15], {}, xj::i32, {15});
  // a span beyond the largest double: JAX's start (1 - t) + stop t (numpy's step overflowed: nan, inf)
  check_array(xj::linspace(-1e308, 1e308, 3, xj::f64), {3}, xj::f64, {-1e308, 0.0, 1e308});
  // var / std with no degrees of freedom left: NaN (JAX), not inf
  const xj::Array four = f32v({1, 2, 3, 4}, {4});
  CHECK(std::isnan(xj::var(four, {}, 4).item<float>()));
  CHECK(std::isnan(xj::var(four, {}, 5).item<float>()));
  CHECK(std::isnan(xj::std(four, {}, 4).item<float>()));
  CHECK(xj::var(four, {}, 3).item<float>() == doctest::Approx(5.0));
}

TEST_CASE("ops regressions from review: einsum's repeated letters and bad specs, x[i] of a rank-0 array, preferred_element_type's rules, integers printed exactly") {
  const xj::Array a = xj::array<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  // a letter repeated within an operand takes the diagonal (JAX's sum_repeats): "ii->" summed
  // every entry (45), "ii->i" returned a unchanged
  CHECK(xj::einsum("ii->", a).item<double>() == 15.0);
  check_array(xj::einsum("ii->i", a), {3}, xj::f64, {1, 5, 9});
  const xj::Array c = xj::array<double>({1, 2, 3}, {3});
  check_array(xj::einsum("ii,i->i", a, c), {3}, xj::f64, {1, 10, 27});
  std::vector<double> bv(18);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<double>(i);
  const xj::Array b = xj::array<double>(bv, {3, 2, 3});
  // "iji->j": sum over i of b[i, j, i]
  std::vector<double> want(2, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) want[static_cast<std::size_t>(j)] += bv[static_cast<std::size_t>(i * 6 + j * 3 + i)];
  check_array(xj::einsum("iji->j", b), {2}, xj::f64, want);
  // its gradient lands on the diagonal
  check_array(xj::grad([](const xj::Array& m) { return xj::einsum("ii->", m); })(a), {3, 3}, xj::f64, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK_THROWS_AS((void)xj::einsum("ii->", xj::zeros({2, 3}, xj::f64)), xj::ShapeError);
  // bad specs name the spec (they failed inside transpose)
  for (const char* spec : {"ij->ik", "ij->ii", "ij->j->i", "i.j->ij"})
    CHECK(test_util::contains(test_util::message_of<xj::Error>([&] { (void)xj::einsum(spec, xj::zeros({2, 3}, xj::f64)); }), spec));
  // x[i] of a rank-0 array is an error (it wrote past an empty shape and crashed)
  CHECK_THROWS_AS((void)xj::scalar(1.0)[xj::scalar(0, xj::i32)], xj::ShapeError);
  // preferred_element_type: JAX's rules (these converted the operands first: f32 asked for i32 truncated them)
  const xj::Array f = xj::array<float>({0.5f, 1.5f, 2.5f}, {3}), ones = xj::ones({3});
  const xj::Array i = xj::array<std::int32_t>({100, 100, 100}, {3});
  CHECK_THROWS_AS((void)xj::dot_general(f, ones, {0}, {0}, {}, {}, {.preferred_element_type = xj::i32}), xj::TypeError);
  CHECK_THROWS_AS((void)xj::dot_general(f, ones, {0}, {0}, {}, {}, {.preferred_element_type = xj::bf16}), xj::TypeError);
  CHECK_THROWS_AS((void)xj::dot_general(i, i, {0}, {0}, {}, {}, {.preferred_element_type = xj::i8}), xj::TypeError);
  CHECK_THROWS_AS((void)xj::dot_general(i, i, {0}, {0}, {}, {}, {.preferred_element_type = xj::u32}), xj::TypeError);
  CHECK(xj::dot_general(i, i, {0}, {0}, {}, {}, {.preferred_element_type = xj::i64}).item<std::int64_t>() == 30000);
  CHECK(xj::dot_general(i, i, {0}, {0}, {}, {}, {.preferred_element_type = xj::f32}).item<float>() == 30000.0f);
  CHECK(xj::dot_general(f, ones, {0}, {0}, {}, {}, {.preferred_element_type = xj::f64}).item<double>() == 4.5);
  // an integer asking for a narrower float is refused too (i32 -> f16 overflowed to inf); an
  // unsigned operand may ask for a wider signed integer
  CHECK_THROWS_AS((void)xj::dot_general(i, i, {0}, {0}, {}, {}, {.preferred_element_type = xj::f16}), xj::TypeError);
  CHECK_THROWS_AS((void)xj::dot_general(xj::astype(i, xj::i64), xj::astype(i, xj::i64), {0}, {0}, {}, {}, {.preferred_element_type = xj::f32}),
                  xj::TypeError);
  const xj::Array u = xj::astype(xj::array<std::int32_t>({200, 200}, {2}), xj::u8);
  CHECK(xj::dot_general(u, u, {0}, {0}, {}, {}, {.preferred_element_type = xj::i32}).item<std::int32_t>() == 80000);
  // a concrete array of more than 64 elements prints inside a trace too (the first 64)
  std::ostringstream inside;
  (void)xj::jit([&](const xj::Array& v) {
    inside << xj::arange(100, xj::i32);
    return v;
  })(u);
  CHECK(test_util::contains(inside.str(), "62, 63, ..."));
  // integers print exactly (through double: 2.14748e+09)
  std::ostringstream os;
  os << xj::array<std::int32_t>({1234567, 2147483647}, {2}) << xj::array<std::uint64_t>({18446744073709551615ull}, {1});
  CHECK(test_util::contains(os.str(), "1234567, 2147483647"));
  CHECK(test_util::contains(os.str(), "18446744073709551615"));
}

TEST_CASE("creation regressions from review: negative and overflowing shapes, item / to_vector converting as astype, fori_loop bounds past i32") {
  // (-2) x (-3) = 6 values were accepted as f32[-2,-3]; 2^62 x 4 elements wrapped to a size-0
  // array (then a crash); 2^61 f64 wrapped nbytes to 0
  CHECK_THROWS_AS((void)xj::array<float>({1, 2, 3, 4, 5, 6}, {-2, -3}), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::full({std::int64_t{1} << 62, 4}, 1.0), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::zeros({std::int64_t{1} << 61}, xj::f64), xj::Error);
  CHECK_THROWS_AS((void)xj::arange(std::int64_t{1} << 62), xj::Error);
  CHECK_THROWS_AS((void)xj::eye(3037000500), xj::ShapeError);
  CHECK(test_util::contains(test_util::message_of<xj::ShapeError>([] { (void)xj::eye(-1); }), "xj::eye"));
  // item / to_vector to an integer type convert as astype does (a C++ cast of NaN or 3e9 to int
  // is undefined: it gave INT_MIN)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const xj::Array x = xj::array<float>({static_cast<float>(nan), 3e9f, -3e9f, 1e20f, -1.5f, 300.0f}, {6});
  CHECK(x.to_vector<std::int32_t>() == xj::astype(x, xj::i32).to_vector<std::int32_t>());
  CHECK(x.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 2147483647, -2147483647 - 1, 2147483647, -1, 300});
  CHECK(x.to_vector<std::int8_t>() == std::vector<std::int8_t>{0, 127, -128, 127, -1, 127});
  CHECK(x.to_vector<std::uint64_t>() == std::vector<std::uint64_t>{0, 3000000000u, 0, 18446744073709551615ull, 0, 300});
  CHECK(x[3].item<std::int64_t>() == std::numeric_limits<std::int64_t>::max());
  // fori_loop: a bound outside the i32 counter's range is an error (the counter wrapped)
  const auto last = [](const xj::Array& i, const xj::Array&) { return xj::astype(i, xj::i64); };
  CHECK_THROWS_AS((void)xj::fori_loop(3000000000LL, 3000000002LL, last, xj::scalar(0, xj::i64)), xj::Error);
  // i64 Array bounds count in i64 (lax.fori_loop's counter has the bounds' dtype), eager and
  // traced (a traced i64 bound was converted to i32: 2^32 + 2 ran 2 trips)
  CHECK(xj::fori_loop(xj::scalar(3e9, xj::i64), xj::scalar(3e9 + 2, xj::i64), last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 3000000001LL);
  const auto trips = [](const xj::Array& lo, const xj::Array& hi) {
    return xj::fori_loop(lo, hi, [](const xj::Array&, const xj::Array& c) { return c + 1.0f; }, xj::scalar(0.0f));
  };
  CHECK(xj::jit(trips)(xj::scalar(2147483646.0, xj::i64), xj::scalar(2147483649.0, xj::i64)).item<float>() == 3.0f);
  CHECK(xj::jit([](const xj::Array& hi) {
          return xj::fori_loop(4294967290LL - 4294967290LL, hi, [](const xj::Array& i, const xj::Array&) { return i; }, xj::scalar(0, xj::i64));
        })(xj::scalar(5.0, xj::i64)).item<std::int64_t>() == 4);  // a C++ lower bound with an i64 upper: an i64 counter
  CHECK_THROWS_AS((void)xj::fori_loop(xj::scalar(0, xj::u64), xj::reshape(xj::array<std::uint64_t>({std::uint64_t{1} << 63}), {}), last, xj::scalar(0, xj::i64)), xj::Error);
  CHECK(xj::fori_loop(xj::scalar(5, xj::i64), xj::scalar(7, xj::i64), last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 6);
  CHECK(xj::fori_loop(0, 3, last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 2);
  CHECK_THROWS_AS((void)xj::fori_loop(std::int64_t{2147483646}, std::int64_t{2147483649}, last, xj::scalar(0, xj::i64)), xj::Error);
  CHECK(xj::fori_loop(false, 4, last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 3);  // bool and char bounds compile
  CHECK(xj::fori_loop(char{1}, 4u, last, xj::scalar(0, xj::i64)).item<std::int64_t>() == 3);
  // a zero dimension empties the count wherever it stands
  CHECK(xj::zeros({std::int64_t{1} << 62, 4, 0}).size() == 0);
  // check_grads: a NaN primal output matched by f's NaN is close (numpy's allclose)
  const auto nan_at_zero = [](const xj::Array& v) {
    return xj::where(xj::eq(v, xj::zeros_like(v)), xj::ones_like(v) * std::numeric_limits<double>::quiet_NaN(), xj::ones_like(v)) + v * 0.0;
  };
  xj::check_grads(nan_at_zero, std::tuple{xj::array<double>({0.0, 0.5, -0.7}, {3})}, {.order = 1});
}

// ---- found by the twenty-fifth session's narrow-dtype review (the kernels' special values) -----

TEST_CASE("ops: pow has C's special values on every kernel path (review finding: 0^0 was 0, (-1)^1e10 was -1)") {
  // xsimd's pow gave 0 for a zero base whatever the exponent, took even exponents past 2^24 for
  // odd and NaN for a -inf base. Oracle: std::pow on each pair, in double and in float.
  const double inf = INFINITY, nan = std::nan("");
  const std::vector<double> as{0, 0, -0.0, -0.0, 0, -inf, -inf, -1, -1, -2, nan, 1, -2, 2, 0.5, 0.5, -1, inf, 2.5, -2.5, -8, 3, -3};
  const std::vector<double> bs{0, -1, -3, 3, nan, 0.5, -3, 1e10, inf, 1e10, 0, nan, -inf, inf, inf, -inf, -inf, -2, 1.5, 0.5, 1.0 / 3, 2, 3};
  const auto n = static_cast<std::int64_t>(as.size());
  for (const xj::DType dt : {xj::f64, xj::f32}) {
    const xj::Array a = xj::astype(test_util::f64v(as, {n}), dt), b = xj::astype(test_util::f64v(bs, {n}), dt);
    const xj::Array eager = xj::pow(a, b), fused = xj::jit([](const xj::Array& x, const xj::Array& y) { return xj::pow(x, y) * 1.0; })(a, b);
    for (const xj::Array& r : {eager, fused}) {
      const auto got = xj::astype(r, xj::f64).to_vector<double>();
      for (std::size_t i = 0; i < as.size(); ++i) {
        const double want = dt == xj::f64 ? std::pow(as[i], bs[i]) : static_cast<double>(std::pow(static_cast<float>(as[i]), static_cast<float>(bs[i])));
        CAPTURE(as[i]);
        CAPTURE(bs[i]);
        if (std::isnan(want)) CHECK(std::isnan(got[i]));
        else if (std::isinf(want) || want == 0) CHECK((got[i] == want && std::signbit(got[i]) == std::signbit(want)));
        else CHECK(got[i] == doctest::Approx(want).epsilon(1e-6));
      }
    }
  }
  // The derivative in the base at b = 0 is 0 (JAX's select), at (0, 1) it is 1.
  const auto dbase = xj::grad([](const xj::Array& x, const xj::Array& y) { return xj::sum(xj::pow(x, y)); });
  CHECK(dbase(test_util::f64v({0.0, 0.0}), test_util::f64v({0.0, 1.0})).to_vector<double>() == std::vector<double>{0.0, 1.0});
}

TEST_CASE("ops: acosh below 1 is NaN, neg(+0) is -0 and relu keeps NaN (review findings)") {
  // xsimd's acosh rounded large negative inputs to -inf, 0 or inf; its AVX-512 neg is 0 - v.
  for (const xj::DType dt : {xj::f32, xj::f64, xj::bf16}) {
    const auto got = xj::astype(xj::acosh(xj::astype(test_util::f64v({-5, -1e4, -1e8, -1e20, 0.5, 1, 2}), dt)), xj::f64).to_vector<double>();
    for (std::size_t i = 0; i < 5; ++i) CHECK(std::isnan(got[i]));
    CHECK(got[5] == 0.0);
    CHECK(got[6] == doctest::Approx(std::acosh(2.0)).epsilon(1e-2));
  }
  for (const xj::DType dt : {xj::f32, xj::f64, xj::f16}) {
    const xj::Array z = xj::zeros({19}, dt);
    for (const xj::Array& r : {xj::neg(z), xj::jit([](const xj::Array& x) { return -x; })(z), xj::jit([](const xj::Array& x) { return -(x * 1.0); })(z)})
      for (double v : xj::astype(r, xj::f64).to_vector<double>()) CHECK((v == 0.0 && std::signbit(v)));
  }
  // jax.nn.relu is max(x, 0): NaN stays NaN, eager and fused; the derivative mask stays x > 0.
  const xj::Array x = xj::array<float>({std::nanf(""), -1.0f, 2.0f, 0.0f, -0.0f});
  for (const xj::Array& r : {xj::relu(x), xj::jit([](const xj::Array& v) { return xj::relu(v) * 1.0; })(x)}) {
    const auto v = r.to_vector<float>();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == 0.0f);
    CHECK(v[2] == 2.0f);
    CHECK(v[3] == 0.0f);
    CHECK(v[4] == 0.0f);
  }
  CHECK(xj::grad([](const xj::Array& v) { return xj::sum(xj::relu(v)); })(test_util::f64v({-1.0, 2.0, 0.0, 3.0})).to_vector<double>() ==
        std::vector<double>{0, 1, 0, 1});
}

TEST_CASE("ops: review findings of the twenty-fifth session: floor_divide of large quotients, var of bf16, leaky_relu of ints, iota, split") {
  // floor_divide rounded (x - rem) / y with floor(q + 0.5): q + 0.5 ties to even where the
  // spacing is 1 (f32 past 2^23, bf16 past 128). Oracle: std::floor of the quotient in double.
  const xj::Array big = xj::floor_divide(xj::array<float>({8388609.0f, -8388609.0f, 7.0f, -7.0f}), xj::array<float>({1.0f, 1.0f, 2.0f, 2.0f}));
  CHECK(big.to_vector<float>() == std::vector<float>{8388609.0f, -8388609.0f, 3.0f, -4.0f});
  const xj::Array b = xj::astype(test_util::f64v({129, 255, 200}), xj::bf16), one = xj::astype(test_util::f64v({1, 1, 3}), xj::bf16);
  const auto eager = xj::astype(xj::floor_divide(b, one), xj::f64).to_vector<double>();
  CHECK(eager == std::vector<double>{129, 255, 66});
  CHECK(xj::astype(xj::jit([](const xj::Array& p, const xj::Array& q) { return xj::floor_divide(p, q); })(b, one), xj::f64).to_vector<double>() == eager);
  CHECK(std::signbit(xj::floor_divide(test_util::f64v({0.0}), test_util::f64v({-1.0})).to_vector<double>()[0]));  // -0, as numpy
  // var / std of bf16 / f16 in f32 (the bf16 mean rounded before centring: 8 for 4).
  CHECK(xj::astype(xj::var(xj::astype(test_util::f64v({1000, 1004}), xj::bf16)), xj::f64).item<double>() == 4.0);
  CHECK(xj::astype(xj::std(xj::astype(test_util::f64v({2048, 2050}), xj::f16), {}, 1), xj::f64).item<double>() ==
        doctest::Approx(std::sqrt(2.0)).epsilon(1e-3));
  // leaky_relu of integers is float (the slope 0.01 became an integer 0).
  const xj::Array lr = xj::leaky_relu(xj::array<std::int32_t>({-5, 3}, {2}));
  CHECK(xj::is_floating(lr.dtype()));
  CHECK(xj::astype(lr, xj::f64).to_vector<double>()[0] == doctest::Approx(-0.05));
  CHECK_THROWS_AS((void)xj::optim::l2_loss(xj::array<std::int32_t>({3}, {1})), xj::TypeError);  // optax asserts floats
  CHECK_THROWS_AS((void)xj::optim::softmax_cross_entropy_with_integer_labels(xj::array<std::int32_t>({1, 2, 3}, {1, 3}),
                                                                              xj::array<std::int32_t>({2}, {1})),
                  xj::TypeError);
  // iota with a negative dimension is an error (was an array of negative size).
  CHECK_THROWS_AS((void)xj::iota(xj::i32, {-2, 3}, 0), xj::ShapeError);
  // split at decreasing points: numpy's pieces [0:3], [3:1] (empty), [1:6].
  const auto pieces = xj::split(xj::arange(6), std::vector<std::int64_t>{3, 1});
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[1].size() == 0);
  CHECK(xj::astype(pieces[2], xj::f64).to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5});
}

TEST_CASE("autodiff: pow's mixed second derivative at b = 0 is 1/a, and jit's negative donate_argnums donate (review findings)") {
  // d2(a^b)/da db = a^(b-1) (1 + b log a): 1/a at b = 0. A select of the whole slope at b = 0 made it 0.
  const auto dadb = xj::grad([](const xj::Array& y) { return xj::grad([&](const xj::Array& x) { return xj::pow(x, y); })(xj::scalar(2.0, xj::f64)); });
  CHECK(dadb(xj::scalar(0.0, xj::f64)).item<double>() == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(xj::grad([](const xj::Array& x) { return xj::pow(x, xj::scalar(0.0, xj::f64)); })(xj::scalar(0.0, xj::f64)).item<double>() == 0.0);
  // donate_argnums {-1} is the last argument: reading it afterwards is the donation error.
  const xj::Array a = test_util::f64v({1, 2, 3}) * 1.0;
  xj::Array b = test_util::f64v({1, 2, 3}) * 2.0;
  const auto add = [](const xj::Array& p, const xj::Array& q) { return p + q; };
  CHECK(xj::jit(add, {.donate_argnums = {-1}})(a, b).to_vector<double>() == std::vector<double>{3, 6, 9});
  CHECK_THROWS_AS((void)b.to_vector<double>(), xj::Error);
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3});
}

TEST_CASE("ops: logsumexp of integers and bools computes in f64, as jnp (it raised)") {
  const xj::Array r = xj::logsumexp(xj::array<std::int32_t>({1, 2, 3, 4}, {2, 2}), {1});
  CHECK(r.dtype() == xj::f64);
  const auto v = r.to_vector<double>();
  CHECK(v[0] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0))).epsilon(1e-14));
  CHECK(v[1] == doctest::Approx(std::log(std::exp(3.0) + std::exp(4.0))).epsilon(1e-14));
  CHECK(xj::logsumexp(xj::array<std::int32_t>({1, 0}, {2}) > 0).item<double>() == doctest::Approx(std::log(std::exp(1.0) + 1.0)).epsilon(1e-14));
}

TEST_CASE("ops: mean of integers is f64, as jnp (review finding: an i8 mean of 100 and 100 was -28); a FIFO is refused, not waited on") {
  CHECK(xj::mean(xj::astype(xj::array<std::int32_t>({100, 100}, {2}), xj::i8)).item<double>() == 100.0);
  const xj::Array m = xj::mean(xj::array<std::int32_t>({1, 2, 3, 5}, {2, 2}), {1});
  CHECK(m.dtype() == xj::f64);
  CHECK(m.to_vector<double>() == std::vector<double>{1.5, 4.0});
  const std::string fifo = "/tmp/xjax_test_fifo_" + std::to_string(::getpid()) + ".npy";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS((void)xj::load_npy(fifo), doctest::Contains("not a regular file"), xj::Error);
  std::remove(fifo.c_str());
}

TEST_CASE("ops: take from an empty axis is an error, as jnp.take's (review finding: the clamped gather read zeros)") {
  CHECK_THROWS_WITH_AS((void)xj::take(xj::zeros({0}), xj::array<std::int32_t>({0, 1}, {2})), doctest::Contains("empty axis"), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::take(xj::zeros({3, 0}), xj::array<std::int32_t>({0}, {1}), 1), xj::ShapeError);
  // taking nothing from an empty axis is fine, and so is taking from a non-empty axis of an empty array
  CHECK(xj::take(xj::zeros({0}), xj::zeros({0}, xj::i32)).shape() == xj::Shape{0});
  CHECK(xj::take(xj::zeros({0, 3}), xj::array<std::int32_t>({2}, {1}), 1).shape() == xj::Shape{0, 1});
}

TEST_CASE("ops regressions from the twenty-seventh session's review: huge strides, paddings and dilations, broadcast_in_dim's dims") {
  const xj::Array x = xj::reshape(xj::arange(6, xj::f32), {2, 3});
  constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
  // a stride past the size takes the first element (it wrapped to a size of -1: a crash)
  const xj::Array s = xj::slice(x, {0, 0}, {2, 3}, {big, 1});
  CHECK(s.shape() == xj::Shape{1, 3});
  CHECK(s.to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(xj::slice(x, {0, 1}, {2, 3}, {1, big}).to_vector<float>() == std::vector<float>{1, 4});
  // sizes past 2^63 - 1 are errors (they wrapped to small or negative shapes)
  CHECK_THROWS_WITH_AS((void)xj::pad(xj::ones({4}), xj::scalar(0.0f), {big}, {big}), doctest::Contains("2^61"), xj::ShapeError);
  CHECK_THROWS_WITH_AS((void)xj::pad(xj::ones({5}), xj::scalar(0.0f), {0}, {0}, {std::int64_t{1} << 61}), doctest::Contains("exceeds"), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::pad(xj::ones({3}), xj::scalar(0.0f), {0}, {0}, {big}), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::reduce_window(xj::arange(10, xj::f32), 0, xj::WindowOp::add, {2}, {1}, "VALID", {}, {big}), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::conv(xj::ones({1, 1, 5, 5}), xj::ones({1, 1, 2, 2}), {1, 1}, xj::Padding(std::vector<std::pair<std::int64_t, std::int64_t>>{{big, big}, {0, 0}})), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::linspace(0, 1, big), xj::Error);
  // broadcast_in_dim to the operand's own shape checks its dims (they were accepted unchecked)
  CHECK_THROWS_AS((void)xj::broadcast_in_dim(x, {2, 3}, {1, 0}), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::broadcast_in_dim(x, {2, 3}, {0, big}), xj::ShapeError);
  CHECK(xj::broadcast_in_dim(x, {2, 3}, {0, 1}).to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("reduction regressions from the thirty-first session: integer sum / prod widen as jnp's, argmax's index_dtype, abs / sign of unsigned") {
  // jnp.sum / jnp.prod accumulate integers narrower than 64 bits in i64 / u64 (promote_integers):
  // i32 sums wrapped at 2^31 (4e9 gave -294967296)
  const xj::Array s = xj::sum(xj::array<std::int32_t>({2000000000, 2000000000}, {2}));
  CHECK(s.dtype() == xj::i64);
  CHECK(s.item<std::int64_t>() == 4000000000LL);
  const xj::Array su = xj::sum(xj::array<std::uint32_t>({4000000000u, 4000000000u}, {2}));
  CHECK(su.dtype() == xj::u64);
  CHECK(su.item<std::uint64_t>() == 8000000000ULL);
  const xj::Array p8 = xj::prod(xj::astype(xj::array<int>({16, 16}, {2}), xj::i8));
  CHECK(p8.dtype() == xj::i64);
  CHECK(p8.item<std::int64_t>() == 256);
  const xj::Array pu8 = xj::prod(xj::astype(xj::array<int>({200, 200}, {2}), xj::u8));
  CHECK(pu8.dtype() == xj::u64);
  CHECK(pu8.item<std::uint64_t>() == 40000);
  CHECK(xj::jit([](const xj::Array& v) { return xj::sum(v, {1}); })(xj::full({2, 3}, 2000000000, xj::i32)).dtype() == xj::i64);
  CHECK(xj::sum(xj::full({2}, 1, xj::i64)).dtype() == xj::i64);
  CHECK(xj::cumsum(xj::full({2}, 1, xj::i32), 0).dtype() == xj::i32);  // jnp.cumsum keeps it (promote_integers=False)

  // argmax / argmin take any integer index_dtype (JAX's rule), a float one is a TypeError
  const xj::Array x = test_util::f64v({0.5, 3.0, -1.0});
  const xj::Array a8 = xj::argmax(x, 0, xj::u8);
  CHECK(a8.dtype() == xj::u8);
  CHECK(xj::astype(a8, xj::i64).item<std::int64_t>() == 1);
  CHECK(xj::astype(xj::argmin(x, 0, xj::i16), xj::i64).item<std::int64_t>() == 2);
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([&] { (void)xj::argmax(x, 0, xj::f32); }), "index_dtype must be an integer type"));
  // einsum's sums stay in the operands' dtype, as JAX's (the widening of xj::sum made "ij->i" of
  // i32 an i64, and "ij,jk->i" a mixed product that strict promotion refused)
  const xj::Array m = xj::array<std::int32_t>({1, 2, 3, 4}, {2, 2});
  CHECK(xj::einsum("ij->i", m).dtype() == xj::i32);
  CHECK(xj::einsum("ii->", m).dtype() == xj::i32);
  {
    xj::DtypePromotion strict(xj::PromotionMode::strict);
    const xj::Array e = xj::einsum("ij,jk->i", m, m);
    CHECK(e.dtype() == xj::i32);
    CHECK(e.to_vector<std::int32_t>() == std::vector<std::int32_t>{17, 37});  // rows of m m = [7 10; 15 22]
  }
  // jnp.abs of bool is x
  CHECK(xj::abs(xj::array({true, false})).dtype() == xj::bool_);

  // abs of an unsigned integer is itself (jnp.abs), sign is 0 or 1 (lax.sign): both threw
  for (xj::DType dt : {xj::u8, xj::u16, xj::u32, xj::u64}) {
    const xj::Array u = xj::astype(xj::array<int>({0, 7, 255}, {3}), dt);
    CHECK(xj::astype(xj::abs(u), xj::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 7, 255});
    CHECK(xj::astype(xj::sign(u), xj::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 1});
    CHECK(xj::abs(u).dtype() == dt);
  }
}


TEST_CASE("ops: an index dtype that cannot number the axis is an error, not a wrapped index") {
  // A hunt of the thirty-fifth session: argmax of bool[2^31 + 5] in i32 returned -2147483645
  // (its index past 2^31 wrapped), argmax's converted index dtypes wrapped the same way, and
  // top_k's and argsort's i32 indices would have too. Checked on abstract values (no allocation).
  const std::int64_t big = (std::int64_t{1} << 31) + 5;
  const std::vector<xj::ShapedArray> in{xj::ShapedArray{{big}, xj::bool_}};
  for (auto p : {xj::Primitive::argmax, xj::Primitive::argmin}) {
    CHECK_THROWS_AS(xj::detail::abstract_eval(p, in, xj::params::Argmax{.axes = {0}, .index_dtype = xj::i32}), xj::ShapeError);
    CHECK(xj::detail::abstract_eval(p, in, xj::params::Argmax{.axes = {0}, .index_dtype = xj::i64})[0].dtype == xj::i64);
  }
  CHECK_THROWS_AS(xj::detail::abstract_eval(xj::Primitive::top_k, in, xj::params::TopK{.k = 2}), xj::ShapeError);
  // exactly 2^31 elements: the last index, 2^31 - 1, still fits
  const std::vector<xj::ShapedArray> edge{xj::ShapedArray{{std::int64_t{1} << 31}, xj::bool_}};
  CHECK_NOTHROW(xj::detail::abstract_eval(xj::Primitive::argmax, edge, xj::params::Argmax{.axes = {0}, .index_dtype = xj::i32}));
  const xj::detail::FlatFn sorted_indices = [](std::span<const xj::Array> a) { return std::vector<xj::Array>{xj::argsort(a[0], 0)}; };
  const std::vector<xj::ShapedArray> big_f32{xj::ShapedArray{{big}, xj::f32}};
  CHECK_THROWS_AS(xj::detail::trace_flat(sorted_indices, big_f32), xj::ShapeError);
  // argmax's converted index dtypes: u8 numbers 256 elements, not 257
  const xj::Array x = xj::at(xj::zeros({257}), 256).set(1.0);
  CHECK_THROWS_AS(xj::argmax(x, 0, xj::u8), xj::ShapeError);
  CHECK(xj::argmax(x, 0, xj::i16).item<std::int16_t>() == 256);
  CHECK(xj::argmax(xj::zeros({256}), 0, xj::u8).item<std::uint8_t>() == 0);
}

TEST_CASE("ops: sort's derivative numbers a dimension past 2^31 with i64 positions") {
  // A review of the thirty-fifth session: sort's jvp sorted an i32 iota along with the operand, so
  // positions past 2^31 wrapped and their tangents moved to wrong places. Traced on abstract values.
  const std::int64_t big = (std::int64_t{1} << 31) + 5;
  const std::vector<xj::ShapedArray> in{xj::ShapedArray{{big}, xj::f32}, xj::ShapedArray{{big}, xj::f32}};
  const xj::detail::FlatFn sorted_jvp = [](std::span<const xj::Array> a) {
    auto [out, tangent] = xj::jvp([](const xj::Array& x) { return xj::sort(x, 0); }, std::tuple{a[0]}, std::tuple{a[1]});
    return std::vector<xj::Array>{out, tangent};
  };
  std::ostringstream printed;
  printed << xj::detail::trace_flat(sorted_jvp, in);
  CHECK(printed.str().find("dtype=int64 shape=(2147483653,)") != std::string::npos);
  CHECK(printed.str().find("dtype=int32 shape=(2147483653,)") == std::string::npos);
  const std::vector<xj::ShapedArray> small{xj::ShapedArray{{5}, xj::f32}, xj::ShapedArray{{5}, xj::f32}};
  std::ostringstream printed_small;
  printed_small << xj::detail::trace_flat(sorted_jvp, small);
  CHECK(printed_small.str().find("dtype=int32 shape=(5,)") != std::string::npos);
}

// Positional slots where a port's call meant something else (hunts of the thirty-sixth session):
// lax.slice_in_dim(x, start, limit, stride, axis) (xjax's took axis fourth), jnp.split(x, [2])
// (`{2}` chose the count overload), jnp.flip(x, ()) (`{}` flipped axis 0). Expected values from
// plain index arithmetic on the arange.
TEST_CASE("ops: slice_in_dim's stride, split(x, {2}) and flip(x, {}) as JAX's") {
  const xj::Array x = xj::reshape(xj::astype(xj::arange(16), xj::f32), {4, 4});
  check_array(xj::slice_in_dim(x, 1, 3, 1), {2, 4}, xj::f32, {4, 5, 6, 7, 8, 9, 10, 11});
  check_array(xj::slice_in_dim(x, 0, 4, 2), {2, 4}, xj::f32, {0, 1, 2, 3, 8, 9, 10, 11});
  check_array(xj::slice_in_dim(x, 0, 4, 2, 1), {4, 2}, xj::f32, {0, 2, 4, 6, 8, 10, 12, 14});
  check_array(xj::slice_in_dim(x, 1, 4, 2, -1), {4, 2}, xj::f32, {1, 3, 5, 7, 9, 11, 13, 15});
  check_array(xj::slice_in_dim(x, -3, -1), {2, 4}, xj::f32, {4, 5, 6, 7, 8, 9, 10, 11});  // lax's: from the end
  const xj::Array r = xj::astype(xj::arange(6), xj::f32);
  const auto at2 = xj::split(r, {2});
  REQUIRE(at2.size() == 2);
  check_array(at2[0], {2}, xj::f32, {0, 1});
  check_array(at2[1], {4}, xj::f32, {2, 3, 4, 5});
  const auto thirds = xj::split(r, 3);
  REQUIRE(thirds.size() == 3);
  check_array(thirds[2], {2}, xj::f32, {4, 5});
  CHECK(xj::split(r, std::size_t{2}).size() == 2);
  const xj::Array x23 = xj::reshape(r, {2, 3});
  check_array(xj::flip(x23, {}), {2, 3}, xj::f32, {0, 1, 2, 3, 4, 5});
  check_array(xj::flip(x23, 0), {2, 3}, xj::f32, {3, 4, 5, 0, 1, 2});
  check_array(xj::flip(x23, {1}), {2, 3}, xj::f32, {2, 1, 0, 5, 4, 3});
  check_array(xj::flip(x23), {2, 3}, xj::f32, {5, 4, 3, 2, 1, 0});
}
