// test_arith.cpp: atan2, rem, floor_divide and remainder (mod) against the C library and
// Python's definitions written as loops: both signs of each operand, zeros, infinities, NaN,
// integer edges (division by zero, MIN by -1), broadcasting, and their derivatives where the
// closed form is simple. Finite-difference and batching checks: the gradcheck rows.
#include <climits>
#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace xj = xjax;
using test_util::vec;

namespace {

const double inf = std::numeric_limits<double>::infinity();

/// Equal within `ulps` units in the last place (0: bit-identical values), with the same sign
/// (zeros included) and NaN where NaN is wanted.
void check_same(const xj::Array& got, const std::vector<double>& want, double ulps = 0) {
  const auto g = vec(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(g[i]));
      continue;
    }
    CHECK(std::signbit(g[i]) == std::signbit(want[i]));
    if (ulps == 0 || std::isinf(want[i])) CHECK(g[i] == want[i]);
    else CHECK(std::abs(g[i] - want[i]) <= ulps * std::numeric_limits<double>::epsilon() * std::abs(want[i]));
  }
}

}  // namespace

TEST_CASE("atan2 and rem against the C library: signs, zeros, infinities, NaN; f32 and f64") {
  const std::vector<double> y{1.0, -1.0, 0.0, -0.0, 3.5, -7.25, inf, 2.0, std::nan(""), 1e300, 5.0, -5.0};
  const std::vector<double> x{2.0, 2.0, -1.0, -1.0, -0.5, 0.75, 1.0, -inf, 1.0, 1e-300, 3.0, 3.0};
  std::vector<double> want_atan2, want_rem;
  for (std::size_t i = 0; i < y.size(); ++i) {
    want_atan2.push_back(std::atan2(y[i], x[i]));
    want_rem.push_back(std::fmod(y[i], x[i]));
  }
  check_same(xj::atan2(test_util::f64v(y), test_util::f64v(x)), want_atan2, 2);  // xsimd's atan2: within 2 ulps of libm's
  // rem is exact (C's fmod), also where y / x is far beyond 2^53 (1e300 / 1e-300).
  check_same(xj::rem(test_util::f64v(y), test_util::f64v(x)), want_rem);
  // f32: against the float functions.
  const xj::Array yf = xj::astype(test_util::f64v(y), xj::f32), xf = xj::astype(test_util::f64v(x), xj::f32);
  const auto yv = vec(yf), xv = vec(xf);
  std::vector<double> want_f;
  for (std::size_t i = 0; i < yv.size(); ++i) want_f.push_back(std::fmod(static_cast<float>(yv[i]), static_cast<float>(xv[i])));
  check_same(xj::rem(yf, xf), want_f);
  const auto got = vec(xj::atan2(yf, xf));
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!std::isnan(yv[i])) CHECK(got[i] == doctest::Approx(std::atan2(static_cast<float>(yv[i]), static_cast<float>(xv[i]))).epsilon(1e-6));
  // Broadcasting, and atan2 refuses integers.
  check_same(xj::rem(test_util::f64v({7.5, -7.5}), xj::scalar(2.0, xj::f64)), {1.5, -1.5});
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([] {
          (void)xj::atan2(xj::array<std::int32_t>({1}, {1}), xj::array<std::int32_t>({1}, {1}));
        }),
        "floating"));
}

TEST_CASE("rem, floor_divide, remainder on integers: C's and Python's rules, division by zero, MIN by -1") {
  const xj::Array x = xj::array<std::int32_t>({7, -7, 7, -7, 0, 5, INT_MIN, INT_MIN, -5}, {9});
  const xj::Array y = xj::array<std::int32_t>({2, 2, -2, -2, 3, 0, -1, 3, 0}, {9});
  CHECK(xj::rem(x, y).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -1, 1, -1, 0, 5, 0, INT_MIN % 3, -5});
  // Python: 7 // 2 = 3, -7 // 2 = -4, 7 // -2 = -4, -7 // -2 = 3; 7 % 2 = 1, -7 % 2 = 1, 7 % -2 = -1.
  const auto q = xj::floor_divide(x, y).to_vector<std::int64_t>();
  const auto r = xj::remainder(x, y).to_vector<std::int64_t>();
  const std::vector<std::int64_t> q_want{3, -4, -4, 3, 0}, r_want{1, 1, -1, -1, 0};
  for (std::size_t i = 0; i < q_want.size(); ++i) {
    CHECK(q[i] == q_want[i]);
    CHECK(r[i] == r_want[i]);
  }
  // Division by zero: xjax's div gives 0 and rem gives x; floor_divide and mod keep them.
  CHECK(q[5] == 0);
  CHECK(r[5] == 5);
  CHECK(q[8] == 0);
  CHECK(r[8] == -5);
  CHECK(r[6] == 0);
  CHECK(xj::rem(x, y).dtype() == xj::i32);
  // Every pair in a range against Python's floor rules written out.
  for (int a = -7; a <= 7; ++a)
    for (int b = -4; b <= 4; ++b) {
      if (b == 0) continue;
      const int fq = static_cast<int>(std::floor(static_cast<double>(a) / b));
      const xj::Array xa = xj::array<std::int64_t>({a}, {1}), xb = xj::array<std::int64_t>({b}, {1});
      CHECK(xj::floor_divide(xa, xb).to_vector<std::int64_t>()[0] == fq);
      CHECK(xj::mod(xa, xb).to_vector<std::int64_t>()[0] == a - fq * b);
    }
}

TEST_CASE("floor_divide and remainder on floats: Python's results, y's sign, derivatives of atan2 and rem") {
  const std::vector<double> a{7.5, -7.5, 7.5, -7.5, 6.0, -6.0, 0.3};
  const std::vector<double> b{2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.1};
  std::vector<double> q_want, r_want;
  for (std::size_t i = 0; i < a.size(); ++i) {
    q_want.push_back(std::floor(a[i] / b[i]));
    r_want.push_back(a[i] - std::floor(a[i] / b[i]) * b[i]);
  }
  test_util::check_values(xj::floor_divide(test_util::f64v(a), test_util::f64v(b)), q_want, 1e-15);
  test_util::check_values(xj::remainder(test_util::f64v(a), test_util::f64v(b)), r_want, 1e-12);
  // d atan2(y, x) = (x dy - y dx) / (x^2 + y^2); d rem(x, y) = dx - trunc(x / y) dy.
  auto [gy, gx] = xj::grad([](const xj::Array& yy, const xj::Array& xx) { return xj::sum(xj::atan2(yy, xx)); }, xj::argnums<0, 1>)(
      test_util::f64v({1.0, -2.0}), test_util::f64v({-3.0, 0.5}));
  test_util::check_values(gy, {-3.0 / 10.0, 0.5 / 4.25}, 1e-15);
  test_util::check_values(gx, {-1.0 / 10.0, 2.0 / 4.25}, 1e-15);
  auto [g0, g1] = xj::grad([](const xj::Array& u, const xj::Array& v) { return xj::sum(xj::rem(u, v)); }, xj::argnums<0, 1>)(
      test_util::f64v({7.5, -7.5}), test_util::f64v({2.0, 2.0}));
  test_util::check_values(g0, {1.0, 1.0}, 1e-15);
  test_util::check_values(g1, {-3.0, 3.0}, 1e-15);
}
