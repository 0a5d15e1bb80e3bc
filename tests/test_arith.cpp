// test_arith.cpp: atan2, rem, floor_divide and remainder (mod) against the C library and
// Python's definitions written as loops: both signs of each operand, zeros, infinities, NaN,
// integer edges (division by zero, MIN by -1), broadcasting, and their derivatives where the
// closed form is simple. Finite-difference and batching checks: the gradcheck rows.
#include <bit>
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
  // Division by zero: xjax's div gives 0 and rem gives x; floor_divide keeps div's 0, and mod
  // gives 0, as jnp's remainder (it reads a zero divisor as 1; it gave x)
  CHECK(q[5] == 0);
  CHECK(r[5] == 0);
  CHECK(q[8] == 0);
  CHECK(r[8] == 0);
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

TEST_CASE("bitwise and, or, xor, not, shifts and population_count against C++ on i32, i64, u32 and bool") {
  const std::vector<std::int64_t> a{0, 1, -1, 6, -7, 123456, INT_MIN, INT_MAX};
  const std::vector<std::int64_t> b{3, -1, 5, 12, 2, -98765, -1, 1};
  for (xj::DType dtype : {xj::i32, xj::i64}) {
    INFO(dtype);
    const xj::Array x = xj::astype(xj::array<std::int64_t>(a, {8}), dtype), y = xj::astype(xj::array<std::int64_t>(b, {8}), dtype);
    const auto g_and = (x & y).to_vector<std::int64_t>(), g_or = (x | y).to_vector<std::int64_t>();
    const auto g_xor = (x ^ y).to_vector<std::int64_t>(), g_not = (~x).to_vector<std::int64_t>();
    const auto g_pop = xj::population_count(x).to_vector<std::int64_t>();
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(g_and[i] == (a[i] & b[i]));
      CHECK(g_or[i] == (a[i] | b[i]));
      CHECK(g_xor[i] == (a[i] ^ b[i]));
      CHECK(g_not[i] == ~a[i]);
      const std::uint64_t bits = dtype == xj::i32 ? static_cast<std::uint32_t>(a[i]) : static_cast<std::uint64_t>(a[i]);
      CHECK(g_pop[i] == std::popcount(bits));
    }
    CHECK((x & y).dtype() == dtype);
  }
  // u32: the same bits, and a logical right shift is the only right shift there.
  const xj::Array u = xj::astype(xj::array<std::int64_t>({4294967295LL, 8, 1}, {3}), xj::u32);
  CHECK(xj::population_count(u).to_vector<std::int64_t>() == std::vector<std::int64_t>{32, 1, 1});
  CHECK((~u).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 4294967287LL, 4294967294LL});
  // bool: logical, and shifts refuse it; floats are refused by all.
  const xj::Array t = xj::astype(xj::array<std::int32_t>({1, 1, 0, 0}, {4}), xj::bool_);
  const xj::Array f = xj::astype(xj::array<std::int32_t>({1, 0, 1, 0}, {4}), xj::bool_);
  CHECK((t & f).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0, 0});
  CHECK((t | f).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 1, 0});
  CHECK((t ^ f).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 1, 0});
  CHECK((~t).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1, 1});
  CHECK((~t).dtype() == xj::bool_);
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([&] { (void)xj::shift_left(t, f); }), "not bool"));
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([&] { (void)(test_util::f64v({1.0}) & test_util::f64v({1.0})); }),
                            "integer"));
}

TEST_CASE("shifts: XLA's rule for amounts outside [0, bits): everything shifted out; the arithmetic shift keeps the sign") {
  const xj::Array x = xj::array<std::int32_t>({1, -8, INT_MIN, 5, -5, 7, -7, 1}, {8});
  const xj::Array s = xj::array<std::int32_t>({31, 1, 31, 32, 33, -1, 40, 0}, {8});
  const auto left = xj::shift_left(x, s).to_vector<std::int64_t>();
  const auto logical = xj::shift_right_logical(x, s).to_vector<std::int64_t>();
  const auto arith = xj::shift_right_arithmetic(x, s).to_vector<std::int64_t>();
  CHECK(left == std::vector<std::int64_t>{INT_MIN, -16, 0, 0, 0, 0, 0, 1});
  CHECK(logical == std::vector<std::int64_t>{0, 2147483644LL, 1, 0, 0, 0, 0, 1});
  CHECK(arith == std::vector<std::int64_t>{0, -4, -1, 0, -1, 0, -1, 1});
  // i64 at 63 and 64, and broadcasting a scalar amount.
  const xj::Array y = xj::array<std::int64_t>({-1, 3}, {2});
  CHECK(xj::shift_right_logical(y, xj::scalar(63.0, xj::i64)).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(xj::shift_left(y, xj::scalar(64.0, xj::i64)).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0});
  // Under vmap and jit, as the eager values.
  const xj::Array xs = xj::array<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const xj::Array by = xj::array<std::int32_t>({1, 2, 3}, {3});
  const xj::Array batched = xj::vmap([&](const xj::Array& r) { return xj::shift_left(r, by); }, {0})(xs);
  CHECK(batched.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 8, 24, 8, 20, 48});
  CHECK(xj::jit([](const xj::Array& v) { return xj::population_count(v ^ xj::scalar(1.0, xj::i32)); })(xs).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{0, 2, 1, 2, 1, 3});
}

TEST_CASE("round: halfway cases away from zero or to even, -0, NaN, infinities, f32; gelu's exact form") {
  const std::vector<double> x{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 2.4, -2.6, -0.0, 1e300};
  std::vector<double> away, even;
  for (double v : x) {
    away.push_back(std::round(v));
    even.push_back(std::nearbyint(v));
  }
  check_same(xj::round(test_util::f64v(x)), away);
  check_same(xj::round(test_util::f64v(x), xj::RoundingMethod::to_nearest_even), even);
  CHECK(even[2] == 2.0);  // the reference itself: ties to even
  CHECK(away[2] == 3.0);
  check_same(xj::round(test_util::f64v({inf, -inf, std::nan("")})), {inf, -inf, std::nan("")});
  const xj::Array f = xj::astype(test_util::f64v({2.5, -3.5, 0.25}), xj::f32);
  CHECK(xj::round(f).dtype() == xj::f32);
  check_same(xj::round(f, xj::RoundingMethod::to_nearest_even), {2.0, -4.0, 0.0});
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([] { (void)xj::round(xj::array<std::int32_t>({1}, {1})); }), "floating"));
  CHECK(xj::grad([](const xj::Array& v) { return xj::sum(xj::round(v) * v); })(test_util::f64v({1.2, -2.7})).to_vector<double>() ==
        std::vector<double>{1.0, -3.0});
}

TEST_CASE("nextafter against the C library: both directions, signs, zeros, subnormals, infinities, NaN; f32 and f64") {
  const double nan = std::nan(""), tiny = std::numeric_limits<double>::denorm_min(), big = std::numeric_limits<double>::max();
  std::vector<double> x{0.0, -0.0, 1.0, -1.0, 1e-310, -2.5, 3.0, inf, -inf, nan, tiny, big, 2.0, 2.0, -0.0, 0.0, -tiny, 1.0};
  std::vector<double> y{1.0, -1.0, 2.0, -2.0, 0.0, 3.0, -3.0, 0.0, 0.0, 1.0, 0.0, inf, 2.0, -1.0, 0.0, -0.0, 1.0, nan};
  // Repeated so that every entry also lands in a vector lane, not only in the scalar tail.
  for (int r = 0; r < 3; ++r) {
    x.insert(x.end(), x.begin(), x.begin() + 18);
    y.insert(y.end(), y.begin(), y.begin() + 18);
  }
  std::vector<double> want;
  for (std::size_t i = 0; i < x.size(); ++i) want.push_back(std::nextafter(x[i], y[i]));
  check_same(xj::nextafter(test_util::f64v(x), test_util::f64v(y)), want);
  const xj::Array xf = xj::astype(test_util::f64v(x), xj::f32), yf = xj::astype(test_util::f64v(y), xj::f32);
  const auto xv = vec(xf), yv = vec(yf);
  std::vector<double> want_f;
  for (std::size_t i = 0; i < xv.size(); ++i) want_f.push_back(std::nextafter(static_cast<float>(xv[i]), static_cast<float>(yv[i])));
  check_same(xj::nextafter(xf, yf), want_f);
  // Its derivative: dx (one ulp is a constant step almost everywhere), nothing for y.
  auto [gx, gy] = xj::grad([](const xj::Array& a, const xj::Array& b) { return xj::sum(xj::nextafter(a, b)); }, xj::argnums<0, 1>)(
      test_util::f64v({0.5, -2.0}), test_util::f64v({1.0, -3.0}));
  CHECK(vec(gx) == std::vector<double>{1.0, 1.0});
  CHECK(vec(gy) == std::vector<double>{0.0, 0.0});
}

TEST_CASE("math regressions from the twenty-sixth session: exp's top binade, subnormal logs, pow, lgamma near 0-, trigamma, atanh' and acosh' near 1") {
  using ld = long double;
  const auto f64s = [](std::vector<double> v) { return test_util::f64v(v); };
  const auto f32s = [](std::vector<double> v) { return xj::astype(test_util::f64v(v), xj::f32); };
  const auto ulps_f32 = [](double got, double want) { return std::abs(got - want) / (std::abs(want) * 0x1p-23); };
  // exp / exp2 / expm1 overflowed to inf about 0.35 below the largest finite result
  check_same(xj::exp(f64s({709.5, 709.78})), {std::exp(709.5), std::exp(709.78)}, 2);
  check_same(xj::exp2(f64s({1023.0, 1023.5})), {std::ldexp(1.0, 1023), std::exp2(1023.5)}, 2);
  check_same(xj::expm1(f64s({709.78})), {std::expm1(709.78)}, 2);
  const auto e32 = vec(xj::exp(f32s({88.5, 88.7})));
  CHECK(ulps_f32(e32[0], static_cast<float>(std::exp(88.5))) <= 2);
  CHECK(ulps_f32(e32[1], static_cast<float>(std::exp(static_cast<double>(88.7f)))) <= 2);
  CHECK(vec(xj::exp2(f32s({127.0})))[0] == std::ldexp(1.0, 127));
  // f64 log, log2, cbrt of subnormals (xsimd took them as normal numbers: log(1e-310) = -746.5)
  check_same(xj::log(f64s({1e-310, 5e-324, 2.225073858507201e-308})), {std::log(1e-310), std::log(5e-324), std::log(2.225073858507201e-308)}, 2);
  check_same(xj::log2(f64s({5e-324, 1e-310})), {-1074.0, std::log2(1e-310)}, 2);
  check_same(xj::cbrt(f64s({5e-324, -1e-310})), {std::cbrt(5e-324), std::cbrt(-1e-310)}, 2);
  // pow is C's (glibc's, within an ulp): 2^1000 was no power of two, 3^10 not 59049
  check_same(xj::pow(f64s({2.0, 3.0, 10.0, 1.7976931348623157e308}), f64s({1000.0, 10.0, 10.0, 1.0})),
             {std::ldexp(1.0, 1000), 59049.0, 1e10, 1.7976931348623157e308});
  CHECK(vec(xj::pow(f32s({10.0}), f32s({5.0})))[0] == 100000.0);
  // lgamma of tiny negatives: log(pi / |sin|) overflowed to inf
  check_same(xj::lgamma(f64s({-1e-310, -1e-300})), {std::lgamma(-1e-310), std::lgamma(-1e-300)}, 4);
  CHECK(ulps_f32(vec(xj::lgamma(f32s({-1e-39})))[0], static_cast<float>(std::lgamma(static_cast<double>(-1e-39f)))) <= 4);
  check_same(xj::lgamma(f64s({-5e-324, -1e-320, 1e-300})), {std::lgamma(-5e-324), std::lgamma(-1e-320), std::lgamma(1e-300)}, 4);
  // lgamma''' at positive integers: psi''(n) = -2 zeta(3) + 2 sum_{k<n} 1/k^3 (the reflection's
  // unused branch was inf there, and inf times a zero cotangent NaN)
  const double zeta3 = 1.2020569031595942854;
  const auto third = xj::grad(xj::grad(xj::grad([](const xj::Array& v) { return xj::lgamma(v); })));
  CHECK(third(xj::scalar(1.0, xj::f64)).item<double>() == doctest::Approx(-2 * zeta3).epsilon(1e-12));
  CHECK(third(xj::scalar(2.0, xj::f64)).item<double>() == doctest::Approx(-2 * zeta3 + 2).epsilon(1e-12));
  // trigamma (digamma's derivative) at negatives: sin(pi x) is reduced first. Oracle:
  // psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x), psi1(z) ~ 1/z + 1/(2z^2) + 1/(6z^3) - 1/(30z^5) at large z
  const double x = -100000.3;
  const ld z = 1.0L - x, r = static_cast<ld>(x - std::round(x));
  const ld s = std::sin(3.14159265358979323846264338L * r);
  const ld want = 9.86960440108935861883449099L / (s * s) - (1 / z + 1 / (2 * z * z) + 1 / (6 * z * z * z) - 1 / (30 * z * z * z * z * z));
  const double got = xj::grad([](const xj::Array& v) { return xj::digamma(v); })(xj::scalar(x, xj::f64)).item<double>();
  CHECK(std::abs(got - static_cast<double>(want)) <= 1e-13 * static_cast<double>(want));
  // trigamma(+inf) = 0 (psi1(x) ~ 1/x): the series' shift started as x * 0, NaN at inf (thirty-first session)
  const auto dpsi = xj::grad([](const xj::Array& v) { return xj::digamma(v); });
  CHECK(dpsi(xj::scalar(std::numeric_limits<double>::infinity(), xj::f64)).item<double>() == 0.0);
  CHECK(dpsi(xj::scalar(std::numeric_limits<float>::infinity(), xj::f32)).item<float>() == 0.0f);
  CHECK(xj::grad(dpsi)(xj::scalar(std::numeric_limits<double>::infinity(), xj::f64)).item<double>() == 0.0);  // psi''(inf)
  // psi''(x) at negative half-integers (cos(fl(pi) r) is not 0 at r = -1/2); oracle: mpmath's polygamma(2, x)
  const auto d2psi = xj::grad(dpsi);
  CHECK(d2psi(xj::scalar(-0.5, xj::f64)).item<double>() == doctest::Approx(-0.82879664423431999560).epsilon(1e-14));
  CHECK(d2psi(xj::scalar(-5.5, xj::f64)).item<double>() == doctest::Approx(-0.027587910706876798794).epsilon(1e-14));
  CHECK(d2psi(xj::scalar(-50.5, xj::f64)).item<double>() == doctest::Approx(-0.00038443056696236073347).epsilon(1e-13));
  CHECK(d2psi(xj::scalar(-50.5f, xj::f32)).item<float>() == doctest::Approx(-0.00038443056696236073347).epsilon(2e-6));
  CHECK(d2psi(xj::scalar(-2.3, xj::f64)).item<double>() == doctest::Approx(68.713792529270165411).epsilon(1e-14));
  // atanh' and acosh' near 1 in the factored forms (x^2 - 1 lost 1e5 ulps there)
  const double a = 0.999999, b = 1.000001;
  const ld datanh = 1 / ((1 - static_cast<ld>(a)) * (1 + static_cast<ld>(a)));
  const ld dacosh = 1 / std::sqrt((static_cast<ld>(b) - 1) * (static_cast<ld>(b) + 1));
  CHECK(std::abs(xj::grad([](const xj::Array& v) { return xj::atanh(v); })(xj::scalar(a, xj::f64)).item<double>() - static_cast<double>(datanh)) <=
        1e-14 * static_cast<double>(datanh));
  CHECK(std::abs(xj::grad([](const xj::Array& v) { return xj::acosh(v); })(xj::scalar(b, xj::f64)).item<double>() - static_cast<double>(dacosh)) <=
        1e-14 * static_cast<double>(dacosh));
}

TEST_CASE("floor_divide and remainder regressions from the twenty-seventh session's review: float x // 0, integer x mod 0, logaddexp of integers") {
  // x // 0 is x / 0 (+-inf, NaN for 0 / 0), as jnp's and Python's divmod; it was NaN
  const auto q = xj::floor_divide(test_util::f64v({1.5, -1.5, 0.0, -1.5}), test_util::f64v({0.0, 0.0, 0.0, -0.0})).to_vector<double>();
  CHECK(q[0] == std::numeric_limits<double>::infinity());
  CHECK(q[1] == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(q[2]));
  CHECK(q[3] == std::numeric_limits<double>::infinity());
  CHECK(xj::floor_divide(xj::array<float>({3.0f}, {1}), xj::array<float>({0.0f}, {1})).to_vector<float>()[0] ==
        std::numeric_limits<float>::infinity());
  // integers: x mod 0 = 0 in every dtype
  for (xj::DType d : {xj::i8, xj::u8, xj::i32, xj::u32, xj::i64, xj::u64}) {
    CAPTURE(xj::dtype_name(d));
    const xj::Array x = xj::astype(xj::array<std::int32_t>({5, 7, 0}, {3}), d);
    CHECK(xj::remainder(x, xj::zeros({3}, d)).to_vector<double>() == std::vector<double>{0, 0, 0});
    CHECK(xj::remainder(x, xj::astype(xj::array<std::int32_t>({0, 3, 0}, {3}), d)).to_vector<double>() == std::vector<double>{0, 1, 0});
  }
  // logaddexp of integers in f64 (a - b wrapped in i8: 127 and -127 gave 127.127); bools too
  const xj::Array l = xj::logaddexp(xj::array<std::int8_t>({127, 100}, {2}), xj::array<std::int8_t>({-127, -100}, {2}));
  CHECK(l.dtype() == xj::f64);
  const auto lv = l.to_vector<double>();
  CHECK(lv[0] == doctest::Approx(127.0 + std::log1p(std::exp(-254.0))));
  CHECK(lv[1] == doctest::Approx(100.0 + std::log1p(std::exp(-200.0))));
  const xj::Array t = xj::astype(xj::array<std::uint8_t>({1, 0}, {2}), xj::bool_);
  const auto lb = xj::logaddexp(t, t).to_vector<double>();
  CHECK(lb[0] == doctest::Approx(1.0 + std::log(2.0)));
  CHECK(lb[1] == doctest::Approx(std::log(2.0)));
}

TEST_CASE("lgamma within a few ulp of the C library's long double lgammal: (0, 40], its zeros at 1 and 2, negatives; f32 rounded once") {
  // Oracle: glibc's lgammal (80-bit, its own algorithm), rounded. The shift to x >= 10 that
  // lgamma used before cancelled (63 ulp at 3.58 in f64, 76 in f32 at 2.5).
  std::vector<double> xs;
  for (int i = 1; i <= 4000; ++i) xs.push_back(i * 0.01);           // (0, 40]
  for (double d : {1e-12, 1e-8, 1e-4, 0.03}) {                       // near lgamma's zeros
    for (double at : {1.0, 2.0}) xs.insert(xs.end(), {at - d, at + d});
  }
  xs.insert(xs.end(), {0.5, 1.5, 2.5, 3.58, 7.3, 9.999999, 10.000001, 1e-5, 123.4, 1e6});
  const auto got = vec(xj::lgamma(test_util::f64v(xs)));
  const auto got32 = vec(xj::astype(xj::lgamma(xj::astype(test_util::f64v(xs), xj::f32)), xj::f64));
  double worst = 0, worst32 = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = static_cast<double>(lgammal(static_cast<long double>(xs[i])));
    worst = std::max(worst, std::abs(got[i] - want) / (std::abs(want) * 0x1p-52));
    const float x32 = static_cast<float>(xs[i]);
    const float want32 = static_cast<float>(lgammal(static_cast<long double>(x32)));
    if (want32 != 0) worst32 = std::max(worst32, std::abs(got32[i] - want32) / (std::abs(static_cast<double>(want32)) * 0x1p-23));
  }
  CHECK(worst <= 4);
  CHECK(worst32 <= 1);
  // negatives: the reflection's log(pi / |sin(pi x)|) - lgamma(1 - x) cancels near lgamma's
  // zeros there (-2.457...), as every implementation's does: within 4 ulp of the larger part
  double worst_negative = 0;
  for (int i = 1; i <= 2000; ++i) {
    const double x = -i * 0.01 - 0.001;
    const double want = static_cast<double>(lgammal(static_cast<long double>(x)));
    const double got_negative = xj::lgamma(xj::scalar(x, xj::f64)).item<double>();
    const double scale = std::max(std::abs(want), static_cast<double>(lgammal(1.0L - x)));
    worst_negative = std::max(worst_negative, std::abs(got_negative - want) / (scale * 0x1p-52));
  }
  CHECK(worst_negative <= 4);
}

TEST_CASE("digamma within a few ulp of a long double shift-and-series evaluation on (0, 40] and near its zero; f32 rounded once") {
  // Oracle: psi(x) = psi(x + 40) - sum_{k < 40} 1 / (x + k), the asymptotic series at x + 40,
  // all in long double (its 11 extra bits absorb the shift's cancellation).
  const auto psi = [](long double x) {
    long double shift = 0;
    for (int k = 0; k < 40; ++k) shift += 1.0L / (x + k);
    const long double z = x + 40, r = 1 / (z * z);
    const long double series = std::log(z) - 0.5L / z - r * (1.0L / 12 - r * (1.0L / 120 - r * (1.0L / 252 - r * (1.0L / 240 - r / 132))));
    return series - shift;
  };
  const double x0 = 1.4616321449683623;  // psi's zero
  std::vector<double> xs;
  for (int i = 1; i <= 4000; ++i) xs.push_back(i * 0.01);
  for (double d : {1e-3, 3e-3, 1e-2}) xs.insert(xs.end(), {x0 - d, x0 + d});
  xs.insert(xs.end(), {1e-5, 0.5, 2.5, 9.999999, 10.000001});
  const auto got = vec(xj::digamma(test_util::f64v(xs)));
  const auto got32 = vec(xj::astype(xj::digamma(xj::astype(test_util::f64v(xs), xj::f32)), xj::f64));
  double worst = 0, worst32 = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = static_cast<double>(psi(xs[i]));
    worst = std::max(worst, std::abs(got[i] - want) / (std::abs(want) * 0x1p-52));
    const float want32 = static_cast<float>(psi(static_cast<float>(xs[i])));
    worst32 = std::max(worst32, std::abs(got32[i] - want32) / (std::abs(static_cast<double>(want32)) * 0x1p-23));
  }
  CHECK(worst <= 4);
  CHECK(worst32 <= 1);
}

TEST_CASE("f32 erfc within an ulp of the C library's double erfc rounded, into the subnormal tail") {
  // xsimd's float erfc was up to 76 ulp off on [4, 9.2] (its exp(-x^2) in float)
  std::vector<double> xs;
  for (int i = -300; i <= 1050; ++i) xs.push_back(i * 0.01);
  xs.insert(xs.end(), {1.7e7, 1e30, -1e30});
  const auto got = vec(xj::astype(xj::erfc(xj::astype(test_util::f64v(xs), xj::f32)), xj::f64));
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float x = static_cast<float>(xs[i]);
    const float want = static_cast<float>(std::erfc(static_cast<double>(x)));
    // an ulp of want (the subnormal spacing 2^-149 at the bottom)
    const double ulp = std::max(std::abs(static_cast<double>(std::nextafter(want, INFINITY)) - want), 0x1p-149);
    worst = std::max(worst, std::abs(got[i] - want) / ulp);
    CHECK(!std::signbit(got[i]));
  }
  CHECK(worst <= 1);
}
