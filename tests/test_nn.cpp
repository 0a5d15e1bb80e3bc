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

void check_close(const xj::Array& got, const std::vector<double>& want, double tol) {
  const auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(tol));
}

}  // namespace

TEST_CASE("nn: layer_norm, standardize and rms_norm against loops in double, both axes, f64 and f32") {
  const std::vector<double> xv = values(12, 0.3), s3 = values(3, 1.1), s4 = values(4, 2.2), b4 = values(4, 0.7);
  const xj::Array x = test_util::f64v(xv, {3, 4});
  check_close(xj::layer_norm(x, test_util::f64v(s4, {4}), test_util::f64v(b4, {4})), normalized(xv, 3, 4, 1, false, s4, b4, 1e-5), 1e-12);
  check_close(xj::layer_norm(x, test_util::f64v(s3, {3}), std::nullopt, 0, 1e-3), normalized(xv, 3, 4, 0, false, s3, {}, 1e-3), 1e-12);
  check_close(xj::standardize(x), normalized(xv, 3, 4, 1, false, {}, {}, 1e-5), 1e-12);
  check_close(xj::rms_norm(x, test_util::f64v(s4, {4})), normalized(xv, 3, 4, 1, true, s4, {}, 1e-6), 1e-12);
  check_close(xj::rms_norm(x, std::nullopt, 0, 0.5), normalized(xv, 3, 4, 0, true, {}, {}, 0.5), 1e-12);
  // f32 in, f32 out, within f32 rounding; a large common offset does not cancel the variance.
  std::vector<double> shifted = xv;
  for (auto& v : shifted) v += 1000.0;
  const xj::Array x32 = xj::astype(test_util::f64v(shifted, {3, 4}), xj::f32);
  const xj::Array y32 = xj::layer_norm(x32);
  CHECK(y32.dtype() == xj::f32);
  check_close(y32, normalized(shifted, 3, 4, 1, false, {}, {}, 1e-5), 2e-3);
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
