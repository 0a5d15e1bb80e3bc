// test_nn.cpp: the normalization layers (nn.hpp) against plain loops in double, their gradients
// against finite differences (check_grads at f64), and their shape errors.
#include <cmath>

#include "test_util.hpp"

namespace xj = xjax;

namespace {

// x (rows x cols) normalized along its columns (axis 1) or rows (axis 0) with a double loop.
std::vector<double> normalized(const std::vector<double>& x, std::size_t rows, std::size_t cols, int axis, bool rms,
                               const std::vector<double>& scale, const std::vector<double>& bias, double eps) {
  std::vector<double> out(x.size());
  const std::size_t groups = axis == 1 ? rows : cols, len = axis == 1 ? cols : rows;
  auto at = [&](std::size_t g, std::size_t k) { return axis == 1 ? g * cols + k : k * cols + g; };
  for (std::size_t g = 0; g < groups; ++g) {
    double mean = 0, var = 0;
    for (std::size_t k = 0; k < len; ++k) mean += x[at(g, k)] / static_cast<double>(len);
    if (rms) mean = 0;
    for (std::size_t k = 0; k < len; ++k) var += (x[at(g, k)] - mean) * (x[at(g, k)] - mean) / static_cast<double>(len);
    for (std::size_t k = 0; k < len; ++k)
      out[at(g, k)] = (x[at(g, k)] - mean) / std::sqrt(var + eps) * (scale.empty() ? 1.0 : scale[k]) +
                      (bias.empty() ? 0.0 : bias[k]);
  }
  return out;
}

std::vector<double> values(std::size_t n, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(1.7 * static_cast<double>(i) + phase) * (1.0 + static_cast<double>(i % 3));
  return v;
}

void check_close_to(const xj::Array& got, const std::vector<double>& want, double tol) {
  const auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(tol));
}

}  // namespace

TEST_CASE("nn: layer_norm, standardize and rms_norm against loops in double, both axes, f64 and f32") {
  const std::vector<double> xv = values(12, 0.3), s3 = values(3, 1.1), s4 = values(4, 2.2), b4 = values(4, 0.7);
  const xj::Array x = test_util::f64v(xv, {3, 4});
  check_close_to(xj::layer_norm(x, test_util::f64v(s4, {4}), test_util::f64v(b4, {4})), normalized(xv, 3, 4, 1, false, s4, b4, 1e-5), 1e-12);
  check_close_to(xj::layer_norm(x, test_util::f64v(s3, {3}), std::nullopt, 0, 1e-3), normalized(xv, 3, 4, 0, false, s3, {}, 1e-3), 1e-12);
  check_close_to(xj::standardize(x), normalized(xv, 3, 4, 1, false, {}, {}, 1e-5), 1e-12);
  check_close_to(xj::rms_norm(x, test_util::f64v(s4, {4})), normalized(xv, 3, 4, 1, true, s4, {}, 1e-6), 1e-12);
  check_close_to(xj::rms_norm(x, std::nullopt, 0, 0.5), normalized(xv, 3, 4, 0, true, {}, {}, 0.5), 1e-12);
  // f32 in, f32 out, within f32 rounding; a large common offset does not cancel the variance.
  std::vector<double> shifted = xv;
  for (auto& v : shifted) v += 1000.0;
  const xj::Array x32 = xj::astype(test_util::f64v(shifted, {3, 4}), xj::f32);
  const xj::Array y32 = xj::layer_norm(x32);
  CHECK(y32.dtype() == xj::f32);
  check_close_to(y32, normalized(shifted, 3, 4, 1, false, {}, {}, 1e-5), 2e-3);
}

TEST_CASE("nn: gradients of the normalization layers against finite differences (f64)") {
  const xj::Array x = test_util::f64v(values(12, 0.9), {3, 4});
  const xj::Array s = test_util::f64v(values(4, 0.1), {4}), b = test_util::f64v(values(4, 0.4), {4});
  xj::check_grads([](const xj::Array& x, const xj::Array& s, const xj::Array& b) { return xj::layer_norm(x, s, b); },
                  std::tuple{x, s, b}, {.order = 2});
  xj::check_grads([](const xj::Array& x, const xj::Array& s) { return xj::rms_norm(x, s, -1, 1e-3); }, std::tuple{x, s},
                  {.order = 2});
  xj::check_grads([](const xj::Array& x) { return xj::standardize(x, 0); }, std::tuple{x}, {.order = 1});
}

TEST_CASE("nn: shape errors name the operand and the axis") {
  const xj::Array x = xj::ones({3, 4});
  CHECK_THROWS_WITH_AS((void)xj::layer_norm(x, xj::ones({3})), doctest::Contains("scale f32[3]): the scale must be 1-D of length 4"),
                       xj::ShapeError);
  CHECK_THROWS_WITH_AS((void)xj::rms_norm(x, std::nullopt, 2), doctest::Contains("axis 2 is not an axis"), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::standardize(xj::scalar(1.0)), xj::ShapeError);
}

TEST_CASE("nn: silu, swish, elu, leaky_relu, log_sigmoid, glu against their formulas in double") {
  const std::vector<double> xv = {-30.0, -2.5, -0.7, -0.1, 0.2, 1.3, 4.0, 40.0};
  const xj::Array x = test_util::f64v(xv, {8});
  std::vector<double> silu, elu, elu2, leaky, logsig;
  for (double v : xv) {
    const double sig = 1.0 / (1.0 + std::exp(-v));
    silu.push_back(v * sig);
    elu.push_back(v > 0 ? v : std::expm1(v));
    elu2.push_back(v > 0 ? v : 0.5 * std::expm1(v));
    leaky.push_back(v >= 0 ? v : 0.2 * v);
    logsig.push_back(v < 0 ? v - std::log1p(std::exp(v)) : -std::log1p(std::exp(-v)));
  }
  check_close_to(xj::silu(x), silu, 1e-14);
  check_close_to(xj::swish(x), silu, 1e-14);
  check_close_to(xj::elu(x), elu, 1e-14);
  check_close_to(xj::elu(x, 0.5), elu2, 1e-14);
  check_close_to(xj::leaky_relu(x, 0.2), leaky, 1e-14);
  check_close_to(xj::log_sigmoid(x), logsig, 1e-12);
  CHECK(xj::leaky_relu(x).to_vector<double>()[0] == doctest::Approx(-0.3));  // JAX's default slope 0.01
  // glu: the first half times the logistic of the second, along the chosen axis
  const xj::Array m = test_util::f64v(values(12, 0.5), {2, 6});
  const auto mv = m.to_vector<double>();
  std::vector<double> want;
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t c = 0; c < 3; ++c) want.push_back(mv[r * 6 + c] / (1.0 + std::exp(-mv[r * 6 + c + 3])));
  check_close_to(xj::glu(m), want, 1e-14);
  REQUIRE(xj::glu(m, 0).shape() == xj::Shape{1, 6});
  CHECK_THROWS_WITH_AS((void)xj::glu(xj::ones({2, 3})), doctest::Contains("odd length 3"), xj::ShapeError);
}

TEST_CASE("nn: gradients of the activations against finite differences (f64, away from the kinks at 0)") {
  const xj::Array x = test_util::f64v({-2.1, -0.6, -0.15, 0.3, 0.9, 2.4}, {6});
  xj::check_grads([](const xj::Array& v) { return xj::silu(v); }, std::tuple{x}, {.order = 2});
  xj::check_grads([](const xj::Array& v) { return xj::elu(v, 0.7); }, std::tuple{x}, {.order = 2});
  xj::check_grads([](const xj::Array& v) { return xj::leaky_relu(v, 0.1) * v; }, std::tuple{x}, {.order = 2});
  xj::check_grads([](const xj::Array& v) { return xj::log_sigmoid(v); }, std::tuple{x}, {.order = 2});
  xj::check_grads([](const xj::Array& v) { return xj::glu(v); }, std::tuple{x}, {.order = 2});
  // elu's derivative for a large positive x is 1, not inf * 0 = NaN (the expm1 sees only x <= 0).
  CHECK(xj::grad([](const xj::Array& v) { return xj::sum(xj::elu(v)); })(test_util::f64v({800.0}, {1})).to_vector<double>()[0] == 1.0);
}

TEST_CASE("nn: one_hot, with out-of-range and negative indices (rows of zeros, as JAX), axis and dtype") {
  const xj::Array idx = xj::array<std::int32_t>({2, 0, -1, 3, 1}, {5});
  const xj::Array h = xj::one_hot(idx, 3);
  CHECK(h.dtype() == xj::f32);
  REQUIRE(h.shape() == xj::Shape{5, 3});
  const std::vector<double> want = {0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
  CHECK(h.to_vector<double>() == want);
  const xj::Array h0 = xj::one_hot(xj::array<std::int32_t>({1, 0}, {2}), 2, xj::i32, 0);
  CHECK(h0.dtype() == xj::i32);
  CHECK(h0.to_vector<double>() == std::vector<double>{0, 1, 1, 0});  // [class][index]
  CHECK_THROWS_AS((void)xj::one_hot(xj::ones({2}, xj::bool_), 2), xj::TypeError);
  CHECK_THROWS_WITH_AS((void)xj::one_hot(idx, 3, xj::f32, 2), doctest::Contains("axis 2"), xj::ShapeError);
}

TEST_CASE("var and std: the centred sum of squares over N - ddof, against loops in double") {
  const std::vector<double> xv = values(12, 0.8);
  const xj::Array x = test_util::f64v(xv, {3, 4});
  for (std::int64_t ddof : {0, 1}) {
    std::vector<double> want;  // over axis 1
    for (std::size_t r = 0; r < 3; ++r) {
      double mean = 0, ss = 0;
      for (std::size_t c = 0; c < 4; ++c) mean += xv[r * 4 + c] / 4.0;
      for (std::size_t c = 0; c < 4; ++c) ss += (xv[r * 4 + c] - mean) * (xv[r * 4 + c] - mean);
      want.push_back(ss / static_cast<double>(4 - ddof));
    }
    check_close_to(xj::var(x, {1}, ddof), want, 1e-13);
    for (auto& w : want) w = std::sqrt(w);
    check_close_to(xj::std(x, {1}, ddof), want, 1e-13);
  }
  CHECK(xj::var(x, {}, 0, true).shape() == xj::Shape{1, 1});
  // integers are computed in f64; ddof >= N divides by 0 (inf, as JAX)
  const xj::Array ints = xj::array<std::int32_t>({1, 2, 3, 4}, {4});
  CHECK(xj::var(ints).dtype() == xj::f64);
  CHECK(xj::var(ints).to_vector<double>()[0] == doctest::Approx(1.25));
  CHECK(std::isinf(xj::var(ints, {}, 4).to_vector<double>()[0]));
  xj::check_grads([](const xj::Array& v) { return xj::std(v, {0}, 1); }, std::tuple{x}, {.order = 2});
}
