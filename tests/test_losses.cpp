// test_losses.cpp: take_along_axis against plain loops (values, gradients, batching) and the
// losses of losses.hpp against their closed forms computed in double, with gradients against the
// closed-form derivatives, and logits of magnitude 1e4 (no inf or NaN).
#include <algorithm>
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

xj::Array f64s(const std::vector<double>& v, const xj::Shape& s) { return xj::array<double>(v, s); }
xj::Array i32s(const std::vector<std::int32_t>& v, const xj::Shape& s) { return xj::array<std::int32_t>(v, s); }

void expect_values(const xj::Array& got, const std::vector<double>& want, double tol) {
  const auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isfinite(g[i]));
    if (tol == 0) CHECK(g[i] == want[i]);  // exact (Approx with epsilon 0 never holds)
    else CHECK(g[i] == doctest::Approx(want[i]).epsilon(tol).scale(1.0));
  }
}

std::vector<double> logsumexp_rows(const std::vector<double>& x, int rows, int cols) {
  std::vector<double> out;
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = std::max(m, x[static_cast<std::size_t>(r * cols + c)]);
    double s = 0;
    for (int c = 0; c < cols; ++c) s += std::exp(x[static_cast<std::size_t>(r * cols + c)] - m);
    out.push_back(m + std::log(s));
  }
  return out;
}

}  // namespace

TEST_CASE("take_along_axis: values against loops, broadcasting, negative and clamped indices") {
  const std::vector<double> xv{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24};
  xj::Array x = f64s(xv, {3, 5});
  // axis 1: out[i][j] = x[i][idx[i][j]]; -1 is the last, 9 clamps to 4.
  const std::vector<std::int32_t> iv{4, 0, -1, 2, 9, 1};
  xj::Array out = xj::take_along_axis(x, i32s(iv, {3, 2}), 1);
  CHECK(out.shape() == xj::Shape{3, 2});
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      int k = iv[static_cast<std::size_t>(i * 2 + j)];
      k = k < 0 ? k + 5 : std::min(k, 4);
      want.push_back(xv[static_cast<std::size_t>(i * 5 + k)]);
    }
  expect_values(out, want, 0);
  // axis 0 with indices broadcast along axis 1: out[i][j] = x[idx[i][0]][j].
  xj::Array col = xj::take_along_axis(x, i32s({2, 0}, {2, 1}), 0);
  CHECK(col.shape() == xj::Shape{2, 5});
  std::vector<double> want0;
  for (int i : {2, 0})
    for (int j = 0; j < 5; ++j) want0.push_back(xv[static_cast<std::size_t>(i * 5 + j)]);
  expect_values(col, want0, 0);
  // Errors name the operation and both types.
  CHECK_THROWS_AS((void)xj::take_along_axis(x, i32s({0, 1}, {2}), 1), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::take_along_axis(x, xj::zeros({3, 2}), 1), xj::TypeError);
  CHECK_THROWS_AS((void)xj::take_along_axis(x, i32s({0, 0, 0, 0}, {2, 2}), 1), xj::ShapeError);
}

TEST_CASE("take_along_axis: gradient is a scatter of the cotangent, and vmap agrees with a loop") {
  xj::Array x = f64s({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3});
  xj::Array idx = i32s({2, 2, 0, 1}, {2, 2});
  xj::Array w = f64s({1.0, 2.0, 3.0, 4.0}, {2, 2});
  auto f = [&](const xj::Array& a) { return xj::sum(xj::take_along_axis(a, idx, 1) * w); };
  // d/dx[i][k] = sum of w[i][j] over j with idx[i][j] = k (row 0 takes 2 twice: 1 + 2)
  expect_values(xj::grad(f)(x), {0, 0, 3, 3, 4, 0}, 0);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{x}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  auto per_row = [](const xj::Array& row, const xj::Array& i) { return xj::take_along_axis(row, i, 0); };
  xj::Array batched = xj::vmap(per_row)(x, idx);
  expect_values(batched, xj::take_along_axis(x, idx, 1).to_vector<double>(), 0);
}

TEST_CASE("losses: softmax cross-entropy, with probabilities and with integer labels, against closed forms") {
  const std::vector<double> lv{1.0, -2.0, 0.5, 3.0, 1e4, -1e4, 1e4 - 3.0, 0.0};
  xj::Array logits = f64s(lv, {2, 4});
  const std::vector<std::int32_t> labels{3, 2};
  const auto lse = logsumexp_rows(lv, 2, 4);
  std::vector<double> want_int;
  for (int r = 0; r < 2; ++r) want_int.push_back(lse[static_cast<std::size_t>(r)] - lv[static_cast<std::size_t>(r * 4 + labels[static_cast<std::size_t>(r)])]);
  xj::Array ce = xj::optim::softmax_cross_entropy_with_integer_labels(logits, i32s(labels, {2}));
  expect_values(ce, want_int, 1e-12);
  CHECK(want_int[1] == doctest::Approx(3.0 + std::log1p(std::exp(-3.0))).epsilon(1e-12));  // by hand: 1e4 and 1e4 - 3 dominate
  // Its gradient: softmax(logits) - one_hot(labels), in double.
  auto loss = [&](const xj::Array& z) { return xj::sum(xj::optim::softmax_cross_entropy_with_integer_labels(z, i32s(labels, {2}))); };
  std::vector<double> want_grad;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c)
      want_grad.push_back(std::exp(lv[static_cast<std::size_t>(r * 4 + c)] - lse[static_cast<std::size_t>(r)]) - (c == labels[static_cast<std::size_t>(r)] ? 1.0 : 0.0));
  expect_values(xj::grad(loss)(logits), want_grad, 1e-12);
  // In f32 too: 1e4 logits stay finite.
  expect_values(xj::optim::softmax_cross_entropy_with_integer_labels(xj::astype(logits, xj::f32), i32s(labels, {2})), want_int, 1e-5);
  // With probabilities: -sum(p log softmax(z)); one-hot probabilities give the integer-label loss.
  std::vector<double> pv(8, 0.0);
  pv[3] = 1.0;
  pv[6] = 1.0;
  expect_values(xj::optim::softmax_cross_entropy(logits, f64s(pv, {2, 4})), want_int, 1e-12);
  const std::vector<double> soft{0.1, 0.2, 0.3, 0.4, 0.25, 0.25, 0.25, 0.25};
  std::vector<double> want_soft(2, 0.0);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c)
      want_soft[static_cast<std::size_t>(r)] -= soft[static_cast<std::size_t>(r * 4 + c)] * (lv[static_cast<std::size_t>(r * 4 + c)] - lse[static_cast<std::size_t>(r)]);
  expect_values(xj::optim::softmax_cross_entropy(logits, f64s(soft, {2, 4})), want_soft, 1e-12);
  CHECK_THROWS_AS((void)xj::optim::softmax_cross_entropy_with_integer_labels(logits, i32s({1, 2, 3}, {3})), xj::ShapeError);
}

TEST_CASE("losses: sigmoid binary cross-entropy, l2 and huber against closed forms and their derivatives") {
  const std::vector<double> zv{-1e4, -3.0, 0.0, 0.5, 2.0, 1e4};
  const std::vector<double> yv{0.0, 1.0, 0.5, 0.2, 1.0, 0.0};
  xj::Array z = f64s(zv, {6}), y = f64s(yv, {6});
  std::vector<double> want, dwant;
  for (std::size_t i = 0; i < zv.size(); ++i) {
    // log(1 + e^z) - y z, stably: max(z, 0) + log1p(e^-|z|) - y z
    want.push_back(std::max(zv[i], 0.0) + std::log1p(std::exp(-std::abs(zv[i]))) - yv[i] * zv[i]);
    dwant.push_back(1.0 / (1.0 + std::exp(-zv[i])) - yv[i]);
  }
  expect_values(xj::optim::sigmoid_binary_cross_entropy(z, y), want, 1e-12);
  auto bce = [&](const xj::Array& a) { return xj::sum(xj::optim::sigmoid_binary_cross_entropy(a, y)); };
  expect_values(xj::grad(bce)(z), dwant, 1e-12);
  expect_values(xj::optim::sigmoid_binary_cross_entropy(xj::astype(z, xj::f32), xj::astype(y, xj::f32)), want, 1e-6);

  xj::Array p = f64s({0.5, -2.0, 3.0}, {3}), t = f64s({1.0, 1.0, 0.5}, {3});
  expect_values(xj::optim::l2_loss(p, t), {0.125, 4.5, 3.125}, 1e-15);
  expect_values(xj::optim::l2_loss(p), {0.125, 2.0, 4.5}, 1e-15);
  // huber with delta 1: errors -0.5, -3, 2.5 -> 0.125, 3 - 0.5, 2.5 - 0.5; derivative clip(e, -1, 1)
  expect_values(xj::optim::huber_loss(p, t), {0.125, 2.5, 2.0}, 1e-15);
  expect_values(xj::optim::huber_loss(p, t, 2.0), {0.125, 4.0, 3.0}, 1e-15);
  auto hub = [&](const xj::Array& a) { return xj::sum(xj::optim::huber_loss(a, t)); };
  expect_values(xj::grad(hub)(p), {-0.5, -1.0, 1.0}, 1e-15);
  CHECK_THROWS_AS((void)xj::optim::l2_loss(p, f64s({1.0}, {1})), xj::ShapeError);
}

TEST_CASE("losses regressions from the twenty-seventh session's review: labels and targets broadcast as optax's") {
  const xj::Array logits = xj::array<double>({1.0, 2.0, 0.5, -1.0, 0.0, 3.0}, {2, 3});
  const xj::Array shared = xj::array<double>({0.2, 0.3, 0.5}, {3});  // one distribution for every row
  const auto got = xj::optim::softmax_cross_entropy(logits, shared).to_vector<double>();
  const auto lv = logits.to_vector<double>(), sv = shared.to_vector<double>();
  for (int r = 0; r < 2; ++r) {
    double z = 0, want = 0;
    for (int c = 0; c < 3; ++c) z += std::exp(lv[3 * r + c]);
    for (int c = 0; c < 3; ++c) want -= sv[c] * (lv[3 * r + c] - std::log(z));
    CHECK(got[r] == doctest::Approx(want).epsilon(1e-14));
  }
  const auto bce = xj::optim::sigmoid_binary_cross_entropy(logits, xj::array<double>({1.0, 0.0, 1.0}, {3})).to_vector<double>();
  CHECK(bce[1] == doctest::Approx(std::log1p(std::exp(2.0))));  // label 0: softplus(2)
  const auto hub = xj::optim::huber_loss(xj::array<double>({0.5, 3.0, -2.0}, {3, 1}), xj::array<double>({0.0, 1.0}, {2})).to_vector<double>();
  REQUIRE(hub.size() == 6);
  CHECK(hub == std::vector<double>{0.125, 0.125, 2.5, 1.5, 1.5, 2.5});  // e = p - t per pair, 0.5 e^2 or |e| - 0.5
  CHECK_THROWS_AS((void)xj::optim::softmax_cross_entropy(logits, xj::zeros({4}, xj::f64)), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::optim::l2_loss(xj::zeros({3, 1}, xj::f64), xj::zeros({3}, xj::f64)), xj::ShapeError);  // optax asserts
}

TEST_CASE("sigmoid_binary_cross_entropy keeps its precision for confident logits (thirty-third session's hunt)") {
  // optax's -l log sigmoid(x) - (1 - l) log sigmoid(-x); against log1p / exp in double. softplus(x) - l x
  // cancelled for label 1 and a large logit: 0 in f32 from logit 17, with a zero gradient.
  const std::vector<double> xs{17.0, 20.0, 30.0, 40.0, -20.0, -30.0, 0.5};
  const std::vector<double> ls{1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.25};
  auto loss_of = [](double x, double l) {  // -l log s(x) - (1 - l) log s(-x), log s(x) = -log1p(e^-x)
    auto log_s = [](double v) { return v > 0 ? -std::log1p(std::exp(-v)) : v - std::log1p(std::exp(v)); };
    return -l * log_s(x) - (1 - l) * log_s(-x);
  };
  auto sigmoid = [](double v) { return v > 0 ? 1 / (1 + std::exp(-v)) : std::exp(v) / (1 + std::exp(v)); };
  for (const xj::DType dt : {xj::f32, xj::f64}) {
    const xj::Array x = xj::astype(xj::array<double>(xs, {7}), dt), l = xj::astype(xj::array<double>(ls, {7}), dt);
    const auto got = xj::astype(xj::optim::sigmoid_binary_cross_entropy(x, l), xj::f64).to_vector<double>();
    const auto g = xj::astype(xj::grad([&](const xj::Array& a) { return xj::sum(xj::optim::sigmoid_binary_cross_entropy(a, l)); })(x), xj::f64)
                       .to_vector<double>();
    const double tol = dt == xj::f32 ? 1e-6 : 1e-14;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == doctest::Approx(loss_of(xs[i], ls[i])).epsilon(tol));
      const double want_g = ls[i] == 1 ? -sigmoid(-xs[i]) : sigmoid(xs[i]) - ls[i];  // sigmoid(x) - l without cancelling
      CHECK(g[i] == doctest::Approx(want_g).epsilon(tol));
    }
  }
  // an infinite logit with a fractional label: an infinite loss (optax's), not inf - inf
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(xj::optim::sigmoid_binary_cross_entropy(xj::scalar(inf), xj::scalar(0.5)).item<double>() == inf);
}
