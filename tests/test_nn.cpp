// test_nn.cpp: the normalization layers (nn.hpp) against plain loops in double, their gradients
// against finite differences (check_grads at f64), and their shape errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

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
  // integers are computed in f64; ddof >= N is NaN (JAX's _var: where(normalizer > 0, result, nan))
  const xj::Array ints = xj::array<std::int32_t>({1, 2, 3, 4}, {4});
  CHECK(xj::var(ints).dtype() == xj::f64);
  CHECK(xj::var(ints).to_vector<double>()[0] == doctest::Approx(1.25));
  CHECK(std::isnan(xj::var(ints, {}, 4).to_vector<double>()[0]));
  xj::check_grads([](const xj::Array& v) { return xj::std(v, {0}, 1); }, std::tuple{x}, {.order = 2});
}

TEST_CASE("nn and math regressions from review: logsumexp of infinite maxima, atan2's zeros and infinities, lgamma / digamma of negatives, exact gelu's tail, d|x| at 0, bf16 statistics, uniform below maxval") {
  const double inf = std::numeric_limits<double>::infinity();
  // logsumexp: JAX's max is 0 where not finite: an all -inf row gives -inf, an inf gives inf (NaN before)
  const xj::Array rows = test_util::f64v({-inf, -inf, -inf, 1.0, 2.0, 0.5}, {2, 3});
  const auto lse = xj::logsumexp(rows, {1}).to_vector<double>();
  CHECK(lse[0] == -inf);
  CHECK(lse[1] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5))).epsilon(1e-15));
  CHECK(xj::logsumexp(test_util::f64v({inf, 0.0}, {2})).item<double>() == inf);
  // and its gradient on a finite row is still softmax
  const auto g = xj::grad([](const xj::Array& v) { return xj::logsumexp(v); })(test_util::f64v({1.0, 2.0}, {2})).to_vector<double>();
  CHECK(g[0] == doctest::Approx(1.0 / (1.0 + std::exp(1.0))).epsilon(1e-14));
  // atan2 against C's for signed zeros and infinities, f32 and f64
  for (double y : {0.0, -0.0, inf, -inf, 1.0})
    for (double x : {0.0, -0.0, inf, -inf, 2.0}) {
      CAPTURE(y);
      CAPTURE(x);
      const double want = std::atan2(y, x);
      const double got = xj::atan2(test_util::f64v({y}, {}), test_util::f64v({x}, {})).item<double>();
      CHECK(got == doctest::Approx(want).epsilon(1e-15));
      CHECK(std::signbit(got) == std::signbit(want));
      const float got32 = xj::atan2(xj::scalar(y, xj::f32), xj::scalar(x, xj::f32)).item<float>();
      CHECK(got32 == doctest::Approx(static_cast<float>(want)).epsilon(1e-6));
      CHECK(std::signbit(got32) == std::signbit(want));
    }
  // lgamma / digamma of negatives: the reflection on v - round(v) (pi v lost it), +inf at +-inf
  for (double v : {-6.99999332, -2.5, -1000.25, -325.841675, -1e6 - 0.3}) {
    CAPTURE(v);
    CHECK(xj::lgamma(test_util::f64v({v}, {})).item<double>() == doctest::Approx(std::lgamma(v)).epsilon(1e-12));
    const auto f = static_cast<float>(v);
    CHECK(xj::lgamma(xj::scalar(f, xj::f32)).item<float>() == doctest::Approx(std::lgamma(static_cast<double>(f))).epsilon(2e-5));
  }
  CHECK(xj::lgamma(test_util::f64v({inf, -inf}, {2})).to_vector<double>() == std::vector<double>{inf, inf});
  // digamma(v) = digamma(1 - v) - pi / tan(pi v), the right side in long double as the oracle
  const auto psi = [](long double x) {  // x >= 1: recurrence up to 20, then the asymptotic series
    long double shift = 0;
    for (; x < 20; x += 1) shift -= 1 / x;
    const long double r = 1 / (x * x);
    return std::log(x) - 0.5L / x - r * (1.0L / 12 - r * (1.0L / 120 - r * (1.0L / 252 - r / 240))) + shift;
  };
  for (double v : {-1000.25, -325.841675, -4.75, -1e9 - 0.25}) {
    CAPTURE(v);
    const long double pi = 3.141592653589793238462643383279502884L;
    const long double want = psi(1.0L - v) - pi / std::tan(pi * (static_cast<long double>(v) - std::round(static_cast<long double>(v))));
    CHECK(xj::digamma(test_util::f64v({v}, {})).item<double>() == doctest::Approx(static_cast<double>(want)).epsilon(1e-9));
  }
  // exact gelu = x Phi(x), Phi by erfc: no cancellation for negative x
  for (double v : {-5.0, -6.0, -8.0, -10.0, 0.3, 4.0}) {
    CAPTURE(v);
    const double want = v * 0.5 * std::erfc(-v / std::sqrt(2.0));
    CHECK(xj::gelu(test_util::f64v({v}, {}), false).item<double>() == doctest::Approx(want).epsilon(1e-12));
    if (v > -7) CHECK(xj::gelu(xj::scalar(v, xj::f32), false).item<float>() == doctest::Approx(want).epsilon(1e-5));
  }
  // layer_norm / standardize / rms_norm of bf16: statistics in f32, the result rounded once
  const xj::Array big = xj::astype(test_util::f64v({1000, 1000, 1000, 1004}, {1, 4}), xj::bf16);
  const xj::Array ln = xj::layer_norm(big);
  CHECK(ln.dtype() == xj::bf16);
  const double sd = std::sqrt(3.0);  // mean 1001, deviations -1, -1, -1, 3: variance 3
  const auto ln_v = xj::astype(ln, xj::f64).to_vector<double>();
  for (std::size_t i = 0; i < 4; ++i) CHECK(ln_v[i] == doctest::Approx((i == 3 ? 3.0 : -1.0) / sd).epsilon(1e-2));
  CHECK(xj::rms_norm(big).dtype() == xj::bf16);
  CHECK(xj::astype(xj::rms_norm(big), xj::f64).to_vector<double>()[3] ==
        doctest::Approx(1004.0 / std::sqrt((3 * 1000.0 * 1000.0 + 1004.0 * 1004.0) / 4.0)).epsilon(1e-2));
  // uniform: never maxval, in every float dtype (f16 in [1000, 1001) rounded up a quarter of its draws)
  const xj::Array key = xj::random::key(7);
  for (const auto& [dtype, lo, hi] : {std::tuple{xj::f16, 1000.0, 1001.0}, std::tuple{xj::bf16, 2.0, 3.0}, std::tuple{xj::f32, 100.0, 101.0}}) {
    CAPTURE(xj::dtype_name(dtype));
    const auto draws = xj::astype(xj::random::uniform(key, {200000}, dtype, lo, hi), xj::f64).to_vector<double>();
    CHECK(*std::max_element(draws.begin(), draws.end()) < hi);
    CHECK(*std::min_element(draws.begin(), draws.end()) >= lo);
  }
  // a reversed range gives minval, as JAX's (the upper clamp must not apply there)
  CHECK(xj::random::uniform(key, {4}, xj::f32, 3.0, 1.0).to_vector<float>() == std::vector<float>(4, 3.0f));
}

TEST_CASE("nn, losses and clamp regressions from the twenty-sixth session's review") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // bf16 layer_norm with scale and bias rounded after each step (up to 2 ulps, nothing left of
  // outputs near zero); now once, as flax: within half an ulp of the f64 layer (plus f32's own error)
  const std::size_t rows = 16, cols = 48;
  const std::vector<double> xv = values(rows * cols, 0.3), sv = values(cols, 1.1), bv = values(cols, 2.9);
  const auto in_bf16 = [](const std::vector<double>& v, const xj::Shape& s) { return xj::astype(test_util::f64v(v, s), xj::bf16); };
  const auto rounded = [](const xj::Array& a) { return xj::astype(a, xj::f64).to_vector<double>(); };
  const xj::Array xb = in_bf16(xv, {16, 48}), sb = in_bf16(sv, {48}), bb = in_bf16(bv, {48});
  for (const bool rms : {false, true}) {
    CAPTURE(rms);
    const xj::Array got = rms ? xj::rms_norm(xb, sb) : xj::layer_norm(xb, sb, bb);
    CHECK(got.dtype() == xj::bf16);
    const auto want = normalized(rounded(xb), rows, cols, 1, rms, rounded(sb), rms ? std::vector<double>{} : rounded(bb), rms ? 1e-6 : 1e-5);
    const auto g = rounded(got);
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double half_ulp = std::ldexp(1.0, std::ilogb(want[i]) - 8);  // bf16: 8 significant bits
      CHECK(std::abs(g[i] - want[i]) <= half_ulp + 1e-6 * std::abs(want[i]));
    }
  }
  // a bf16 layer with f32 parameters is f32 (the promoted dtype), computed in f32
  CHECK(xj::layer_norm(xb, xj::astype(sb, xj::f32), bb).dtype() == xj::f32);
  // sigmoid_binary_cross_entropy converts the labels to the logits' dtype (optax's): f32 logits with
  // f64 labels gave f64, bf16 logits with f32 labels f32; integer logits are refused
  const xj::Array z = test_util::f64v({0.5, -2.0, 3.0}, {3}), y = test_util::f64v({1.0, 0.0, 0.3}, {3});
  CHECK(xj::optim::sigmoid_binary_cross_entropy(xj::astype(z, xj::f32), y).dtype() == xj::f32);
  CHECK(xj::optim::sigmoid_binary_cross_entropy(xj::astype(z, xj::bf16), xj::astype(y, xj::f32)).dtype() == xj::bf16);
  CHECK_THROWS_AS((void)xj::optim::sigmoid_binary_cross_entropy(xj::astype(z, xj::i32), y), xj::TypeError);
  // an integer label outside [0, classes) gives NaN as optax's (it gave the last class's loss)
  const xj::Array logits = test_util::f64v({0.1, 0.7, -0.4, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, {3, 3});
  const auto loss = xj::optim::softmax_cross_entropy_with_integer_labels(logits, xj::array<std::int32_t>({3, -4, 1}, {3})).to_vector<double>();
  CHECK(std::isnan(loss[0]));
  CHECK(std::isnan(loss[1]));
  CHECK(loss[2] == doctest::Approx(std::log(3.0)));
  // a negative label counts from the end (jnp.take_along_axis): -1 is the last class
  const double last = xj::optim::softmax_cross_entropy_with_integer_labels(logits, xj::array<std::int32_t>({-1, 0, 0}, {3})).to_vector<double>()[0];
  CHECK(last == doctest::Approx(std::log(std::exp(0.1) + std::exp(0.7) + std::exp(-0.4)) + 0.4));
  CHECK(std::isnan(xj::optim::softmax_cross_entropy_with_integer_labels(xj::zeros({2, 0}), xj::zeros({2}, xj::i32)).to_vector<double>()[0]));
  // softmax, log_softmax, softplus and elu of integers compute in f64 (jnp.exp / logaddexp promote)
  const xj::Array k = xj::array<std::int32_t>({-2, 0, 3}, {3});
  const xj::Array kf = xj::astype(k, xj::f64);
  for (const auto& [got, want] : {std::pair{xj::softmax(k), xj::softmax(kf)}, std::pair{xj::log_softmax(k), xj::log_softmax(kf)},
                                  std::pair{xj::softplus(k), xj::softplus(kf)}, std::pair{xj::elu(k), xj::elu(kf)}}) {
    CHECK(got.dtype() == xj::f64);
    check_close_to(got, want.to_vector<double>(), 1e-15);
  }
  // clamp's C++ bounds are weakly typed (jnp.clip): -0.5 on an i32 array was truncated to 0
  const xj::Array ki = xj::array<std::int32_t>({-3, 0, 3}, {3});
  const xj::Array fl = xj::clamp(-0.5, ki, 2.5);
  CHECK(xj::is_floating(fl.dtype()));
  check_close_to(xj::astype(fl, xj::f64), {-0.5, 0.0, 2.5}, 1e-15);
  const xj::Array in = xj::clamp(0, ki, 2);
  CHECK(in.dtype() == xj::i32);
  CHECK(in.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 2});
  // integer bounds past a narrow type's range saturate (300 on u8 wrapped to 44, -1 to 255)
  const xj::Array bytes = xj::array<std::uint8_t>({0, 5, 200, 255}, {4});
  CHECK(xj::clamp(0, bytes, 300).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 5, 200, 255});
  CHECK(xj::clamp(-1, bytes, 10).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 5, 10, 10});
  CHECK(xj::clamp(std::numeric_limits<std::int64_t>::min(), ki, 1000).to_vector<std::int32_t>() == std::vector<std::int32_t>{-3, 0, 3});
  // with a float bound the result is a float and the integer bound stands (it saturated to i8's 127)
  const xj::Array small = xj::array<std::int8_t>({-100, 0, 100}, {3});
  check_close_to(xj::astype(xj::clamp(200, small, 1000.5), xj::f64), {200, 200, 200}, 1e-15);
  // a NaN operand passes no tangent through max / min / clamp (JAX's rules): 1 - w0 sent all of
  // it to the second operand, and cummax's gradient reached an element it never selected
  const auto [g0, g1] = xj::grad([](const xj::Array& a, const xj::Array& b) { return xj::maximum(a, b); }, xj::argnums<0, 1>)(
      xj::scalar(0.0, xj::f64), xj::scalar(nan, xj::f64));
  CHECK(g0.item<double>() == 0.0);
  CHECK(g1.item<double>() == 0.0);
  const auto [h0, h1] = xj::grad([](const xj::Array& a, const xj::Array& b) { return xj::minimum(a, b); }, xj::argnums<0, 1>)(
      xj::scalar(nan, xj::f64), xj::scalar(2.0, xj::f64));
  CHECK(h0.item<double>() == 0.0);
  CHECK(h1.item<double>() == 0.0);
  const auto gc = xj::grad([](const xj::Array& a) { return xj::cummax(a, 0)[2]; })(test_util::f64v({nan, 0.0, 1.0}, {3})).to_vector<double>();
  CHECK(gc == std::vector<double>{0.0, 0.0, 0.0});
  CHECK(xj::grad([](const xj::Array& a) { return xj::clamp(0.0, a, 1.0); })(xj::scalar(nan, xj::f64)).item<double>() == 0.0);
  // ties and ordinary points keep their rules
  const auto [t0, t1] = xj::grad([](const xj::Array& a, const xj::Array& b) { return xj::maximum(a, b); }, xj::argnums<0, 1>)(
      xj::scalar(1.0, xj::f64), xj::scalar(1.0, xj::f64));
  CHECK(t0.item<double>() == 0.5);
  CHECK(t1.item<double>() == 0.5);
  CHECK(xj::grad([](const xj::Array& a) { return xj::clamp(0.0, a, 1.0); })(xj::scalar(0.5, xj::f64)).item<double>() == 1.0);
}

TEST_CASE("bf16 / f16 composites called eagerly round once, as their jit (twenty-ninth session's hunt: f16 tanh-gelu was 2040 ulps off)") {
  // Every f16 value in [-8, 8) by steps of 1/64 (and the bf16 ones): the eager result equals the
  // f32 computation on the same values rounded once, and the jitted result.
  std::vector<double> grid;
  for (int k = -512; k < 512; ++k) grid.push_back(k / 64.0);
  using Fn = std::function<xj::Array(const xj::Array&)>;
  const std::vector<std::pair<const char*, Fn>> fns{
      {"gelu tanh", [](const xj::Array& v) { return xj::gelu(v, true); }},
      {"gelu erf", [](const xj::Array& v) { return xj::gelu(v, false); }},
      {"softplus", [](const xj::Array& v) { return xj::softplus(v); }},
      {"log_sigmoid", [](const xj::Array& v) { return xj::log_sigmoid(v); }},
      {"silu", [](const xj::Array& v) { return xj::silu(v); }},
      {"logaddexp", [](const xj::Array& v) { return xj::logaddexp(v, v * 0.75); }},
  };
  for (const xj::DType dt : {xj::f16, xj::bf16})
    for (const auto& [name, fn] : fns) {
      const std::string label = std::string(name) + " " + xj::dtype_name(dt);
      CAPTURE(label);
      const xj::Array x = xj::astype(xj::array<double>(grid, {static_cast<std::int64_t>(grid.size())}), dt);
      const xj::Array eager = fn(x);
      CHECK(eager.dtype() == dt);
      // the oracle: the same function in f64 on the narrow values, rounded once to dt; one ulp
      // of dt apart at most (f32 against f64 inside), and equal to the jit's
      const std::vector<double> want = xj::astype(xj::astype(fn(xj::astype(x, xj::f64)), dt), xj::f64).to_vector<double>();
      const std::vector<double> got = xj::astype(eager, xj::f64).to_vector<double>();
      const std::vector<double> jitted = xj::astype(xj::jit(fn)(x), xj::f64).to_vector<double>();
      // one ulp of dt (eps |want|, or the subnormal spacing 2^-24 of f16 near 0)
      const double eps = xj::finfo(dt).eps;
      double worst_eager = 0, worst_jit = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double ulp = eps * std::abs(want[i]) + 0x1p-24;
        worst_eager = std::max(worst_eager, std::abs(got[i] - want[i]) / ulp);
        worst_jit = std::max(worst_jit, std::abs(jitted[i] - want[i]) / ulp);
      }
      CAPTURE(worst_jit);
      CHECK(worst_eager <= 2.0);  // f32 inside: 1 + tanh(u) cancels near x = -3.5, an ulp more
      CHECK(worst_jit <= 4.0);
    }
}

TEST_CASE("tanh gelu's derivative is 0, not NaN, for large negative x (thirty-third session's hunt)") {
  // gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 k x^2), t = tanh(c (x + k x^3)): 0 where t is -1
  // and x^2 is finite (JAX's tanh rule); xjax's form overflowed x du from |x| about 1.5e13 in f32.
  const long double c = std::sqrt(2.0L / 3.141592653589793238462643383279502884L), k = 0.044715L;
  auto derivative = [&](long double x) {
    const long double t = std::tanh(c * (x + k * x * x * x));
    return (1 + t) / 2 + x / 2 * (1 - t * t) * c * (1 + 3 * k * x * x);
  };
  auto grad_gelu = xj::grad([](const xj::Array& v) { return xj::gelu(v, true); });
  for (double v : {-2e13, -1e16, -4e18, -30.0, -3.0, -0.5, 0.0, 0.7, 5.0, 1e16}) {
    CAPTURE(v);
    const double want = static_cast<double>(derivative(v));
    CHECK(grad_gelu(xj::scalar(v, xj::f32)).item<float>() == doctest::Approx(want).epsilon(1e-5));
    CHECK(xj::jit(grad_gelu)(xj::scalar(v, xj::f32)).item<float>() == doctest::Approx(want).epsilon(1e-5));
  }
  for (double v : {-2e103, -1e150, -40.0, 2.5, 1e150}) {
    CAPTURE(v);
    CHECK(grad_gelu(xj::scalar(v, xj::f64)).item<double>() == doctest::Approx(static_cast<double>(derivative(v))).epsilon(1e-12));
  }
}

// jax.nn.standardize(x, axis, mean, variance, epsilon): a port's third argument is the mean (it
// had been epsilon). Against the closed form (x - m) / sqrt(v + eps) in double, v given or the
// mean of (x - m)^2 (JAX's algorithm="stable").
TEST_CASE("nn: standardize with a given mean and variance (jax.nn.standardize's slots)") {
  const std::vector<double> xv{1, 2, 3, 6};
  const xj::Array x = test_util::f64v(xv, {4});
  const xj::Array zero = xj::scalar(0.0, xj::f64), var = xj::scalar(2.5, xj::f64);
  double mean_sq = 0;
  for (double v : xv) mean_sq += v * v / 4;
  std::vector<double> given_mean, both;
  for (double v : xv) given_mean.push_back(v / std::sqrt(mean_sq + 1e-5)), both.push_back(v / std::sqrt(2.5 + 1e-3));
  check_close_to(xj::standardize(x, -1, zero), given_mean, 1e-14);
  check_close_to(xj::standardize(x, -1, zero, var, 1e-3), both, 1e-14);
  check_close_to(xj::standardize(x, -1, std::nullopt, std::nullopt), normalized(xv, 1, 4, 1, false, {}, {}, 1e-5), 1e-12);
  // a mean that is not x's: JAX's default variance mean(x^2) - m^2 (here 12.5 - 1), not mean((x - m)^2)
  std::vector<double> off_mean;
  for (double v : xv) off_mean.push_back((v - 1) / std::sqrt(mean_sq - 1 + 1e-5));
  check_close_to(xj::standardize(x, -1, xj::scalar(1.0, xj::f64)), off_mean, 1e-14);
}
