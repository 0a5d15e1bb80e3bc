// test_kernels.cpp: run_kernel of every primitive against plain-loop references written here.
//
// Read the helpers first (making arrays, running one kernel with a hand-computed output aval,
// multi-index iteration), then one TEST_CASE per primitive family in the order of
// primitives.hpp: elementwise, select_n/convert/copy, reductions, argmax, dot_general, shape ops.
// Output avals are computed by hand here, never by the shape rules.
#include <cblas.h>

#include <algorithm>
#include <doctest/doctest.h>

#include <boost/math/special_functions/digamma.hpp>
#include <boost/math/special_functions/erf.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "internal.hpp"
#include "kernels/parallel.hpp"
#include "xjax/ops.hpp"
#include "xjax/runtime.hpp"
#include "xjax/transforms.hpp"

namespace {

using xjax::Array;
using xjax::DType;
using xjax::Params;
using xjax::Primitive;
using xjax::Shape;
using xjax::ShapedArray;
using Ints = std::vector<std::int64_t>;
using U8 = std::uint8_t;

// ---- helpers -----------------------------------------------------------------------------------

template <class T> Array make(const std::vector<T>& values, const Shape& shape) {
  return xjax::array<T>(values, shape);
}
Array make_bool(const std::vector<U8>& values, const Shape& shape) {
  return xjax::detail::array_from_bytes(values.data(), {shape, DType::bool_});
}

Array run(Primitive p, std::vector<Array> in, const ShapedArray& out, const Params& params = {}) {
  std::vector<ShapedArray> outs{out};
  std::vector<Array> res = xjax::detail::run_kernel(p, in, params, outs);
  REQUIRE(res.size() == 1);
  CHECK(res[0].aval() == out);
  return res[0];
}

template <class T> std::vector<T> values_of(const Array& a) {
  const auto n = static_cast<std::size_t>(a.size());
  if (n == 0) return {};
  const T* p = static_cast<const T*>(a.raw_data());
  return std::vector<T>(p, p + n);
}

std::int64_t size_of(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

// Index of flat position `flat` in a row-major `shape`, and back.
Ints unravel(std::int64_t flat, const Shape& shape) {
  Ints idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}
std::int64_t ravel(const Ints& idx, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// n values start, start+step, ... wrapped into [lo, hi).
template <class T> std::vector<T> sample(std::int64_t n, double lo, double hi, double step = 0.737) {
  std::vector<T> v;
  double x = lo;
  for (std::int64_t i = 0; i < n; ++i) {
    v.push_back(static_cast<T>(x));
    x += step;
    if (x >= hi) x = lo + std::fmod(x - hi, hi - lo);
  }
  return v;
}

// got == want (infinities and NaNs included) or within a relative tolerance.
bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= tol * (1 + std::abs(want));
}

const std::vector<Shape> elementwise_shapes = {{}, {1}, {7}, {33}, {2, 3, 1, 5}, {0}, {3, 0, 2}};

// ---- float unary -------------------------------------------------------------------------------

double unary_reference(Primitive p, double x) {
  switch (p) {
    case Primitive::neg: return -x;
    case Primitive::exp: return std::exp(x);
    case Primitive::log: return std::log(x);
    case Primitive::log1p: return std::log1p(x);
    case Primitive::expm1: return std::expm1(x);
    case Primitive::sin: return std::sin(x);
    case Primitive::cos: return std::cos(x);
    case Primitive::tan: return std::tan(x);
    case Primitive::tanh: return std::tanh(x);
    case Primitive::logistic: return 1 / (1 + std::exp(-x));
    case Primitive::sqrt: return std::sqrt(x);
    case Primitive::rsqrt: return 1 / std::sqrt(x);
    case Primitive::abs: return std::abs(x);
    case Primitive::sign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case Primitive::asin: return std::asin(x);
    case Primitive::acos: return std::acos(x);
    case Primitive::atan: return std::atan(x);
    case Primitive::sinh: return std::sinh(x);
    case Primitive::cosh: return std::cosh(x);
    case Primitive::asinh: return std::asinh(x);
    case Primitive::acosh: return std::acosh(x);
    case Primitive::atanh: return std::atanh(x);
    case Primitive::erf: return std::erf(x);
    case Primitive::erfc: return std::erfc(x);
    case Primitive::cbrt: return std::cbrt(x);
    case Primitive::exp2: return std::exp2(x);
    case Primitive::log2: return std::log2(x);
    case Primitive::floor: return std::floor(x);
    case Primitive::ceil: return std::ceil(x);
    case Primitive::lgamma: return std::lgamma(x);
    case Primitive::digamma: return boost::math::digamma(x);
    case Primitive::erf_inv: return boost::math::erf_inv(x);
    default: return 0;
  }
}

bool needs_positive(Primitive p) {
  return p == Primitive::log || p == Primitive::sqrt || p == Primitive::rsqrt || p == Primitive::log2;
}

/// The sampling interval of p's operands: its domain (or where it is finite).
std::pair<double, double> operand_range(Primitive p) {
  if (needs_positive(p)) return {0.05, 9.0};
  if (p == Primitive::tan) return {-1.4, 1.4};
  if (p == Primitive::log1p) return {-0.9, 4.0};
  if (p == Primitive::asin || p == Primitive::acos || p == Primitive::atanh) return {-0.99, 0.99};
  if (p == Primitive::acosh) return {1.0, 9.0};
  if (p == Primitive::lgamma || p == Primitive::digamma) return {0.05, 9.0};  // negatives: their own test
  if (p == Primitive::erf_inv) return {-0.999, 0.999};
  return {-4.0, 4.0};
}

template <class T> void check_float_unary(Primitive p, const Shape& shape) {
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  const auto [lo, hi] = operand_range(p);
  std::vector<T> x = sample<T>(size_of(shape), lo, hi);
  if (!x.empty() && p == Primitive::sign) x[0] = 0;
  Array out = run(p, {make(x, shape)}, {shape, xjax::dtype_of_v<T>});
  std::vector<T> got = values_of<T>(out);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = unary_reference(p, static_cast<double>(x[i]));
    CHECK_MESSAGE(close(got[i], want, tol), xjax::primitive_name(p), " x=", x[i], " got ", got[i], " want ", want);
  }
}

TEST_CASE("kernel: float unary ops match the C library") {
  for (Primitive p : {Primitive::neg, Primitive::exp, Primitive::log, Primitive::log1p,
                      Primitive::expm1, Primitive::sin, Primitive::cos, Primitive::tan,
                      Primitive::tanh, Primitive::logistic, Primitive::sqrt, Primitive::rsqrt,
                      Primitive::abs, Primitive::sign, Primitive::asin, Primitive::acos, Primitive::atan,
                      Primitive::sinh, Primitive::cosh, Primitive::asinh, Primitive::acosh, Primitive::atanh,
                      Primitive::erf, Primitive::erfc, Primitive::cbrt, Primitive::exp2, Primitive::log2,
                      Primitive::floor, Primitive::ceil, Primitive::lgamma, Primitive::digamma, Primitive::erf_inv})
    for (const Shape& shape : elementwise_shapes) {
      check_float_unary<float>(p, shape);
      check_float_unary<double>(p, shape);
    }
}

TEST_CASE("kernel: lgamma, digamma, erf_inv at their edges: negative arguments, poles, the tails of erf_inv") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> xs{-0.5, -2.75, -3.2, -7.9, 0.001, 1.0, 2.0, 30.0, 170.5};
  std::vector<double> lg = values_of<double>(run(Primitive::lgamma, {make<double>(xs, {9})}, {{9}, DType::f64}));
  std::vector<double> dg = values_of<double>(run(Primitive::digamma, {make<double>(xs, {9})}, {{9}, DType::f64}));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK_MESSAGE(close(lg[i], std::lgamma(xs[i]), 1e-12), "lgamma x=", xs[i], " got ", lg[i]);
    CHECK_MESSAGE(close(dg[i], boost::math::digamma(xs[i]), 1e-11), "digamma x=", xs[i], " got ", dg[i]);
  }
  // Poles of digamma (XLA: NaN); erf_inv at and beyond +-1, at 0 and -0, deep in the tails.
  for (double pole : {0.0, -1.0, -4.0}) {
    std::vector<double> d = values_of<double>(run(Primitive::digamma, {make<double>({pole}, {1})}, {{1}, DType::f64}));
    CHECK(std::isnan(d[0]));
  }
  const std::vector<double> e{1.0, -1.0, 1.5, -0.0, 0.0, 1 - 1e-15, -(1 - 1e-12), 1e-300, nan};
  std::vector<double> ei = values_of<double>(run(Primitive::erf_inv, {make<double>(e, {9})}, {{9}, DType::f64}));
  CHECK(ei[0] == inf);
  CHECK(ei[1] == -inf);
  CHECK(std::isnan(ei[2]));
  CHECK((ei[3] == 0 && std::signbit(ei[3])));
  CHECK((ei[4] == 0 && !std::signbit(ei[4])));
  for (std::size_t i = 5; i < 8; ++i) CHECK_MESSAGE(close(ei[i], boost::math::erf_inv(e[i]), 1e-13), "erf_inv x=", e[i], " got ", ei[i]);
  CHECK(std::isnan(ei[8]));
  std::vector<float> ef = values_of<float>(run(Primitive::erf_inv, {make<float>({0.999999f, -0.5f, 1.0f}, {3})}, {{3}, DType::f32}));
  CHECK(close(ef[0], boost::math::erf_inv(static_cast<double>(0.999999f)), 3e-6));
  CHECK(close(ef[1], boost::math::erf_inv(-0.5), 2e-6));
  CHECK(ef[2] == std::numeric_limits<float>::infinity());
}

TEST_CASE("kernel: sign keeps zero and NaN, logistic saturates") {
  const double nan = std::nan("");
  Array s = run(Primitive::sign, {make<double>({0.0, -0.0, nan, -3, 2}, {5})}, {{5}, DType::f64});
  std::vector<double> v = values_of<double>(s);
  CHECK(v[0] == 0);
  CHECK(v[1] == 0);
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == -1);
  CHECK(v[4] == 1);
  Array l = run(Primitive::logistic, {make<float>({-1000.f, 1000.f}, {2})}, {{2}, DType::f32});
  CHECK(values_of<float>(l) == std::vector<float>{0.f, 1.f});
}

TEST_CASE("kernel: float unary ops reject integers") {
  Array x = make<std::int32_t>({1, 2}, {2});
  CHECK_THROWS_AS(run(Primitive::exp, {x}, {{2}, DType::i32}), xjax::Error);
  // abs and sign of unsigned integers are x and [x != 0] (they were refused until the
  // thirty-first session; jnp.abs and lax.sign take them)
  Array u = make<std::uint32_t>({0, 2}, {2});
  CHECK(values_of<std::uint32_t>(run(Primitive::abs, {u}, {{2}, DType::u32})) == std::vector<std::uint32_t>{0, 2});
  CHECK(values_of<std::uint32_t>(run(Primitive::sign, {u}, {{2}, DType::u32})) == std::vector<std::uint32_t>{0, 1});
}

// ---- integer unary -----------------------------------------------------------------------------

template <class T> void check_int_unary(const Shape& shape) {
  std::vector<T> x = sample<T>(size_of(shape), -50, 50, 7);
  if (!x.empty()) x[0] = std::numeric_limits<T>::min();
  const ShapedArray aval{shape, xjax::dtype_of_v<T>};
  std::vector<T> neg = values_of<T>(run(Primitive::neg, {make(x, shape)}, aval));
  std::vector<T> abs = values_of<T>(run(Primitive::abs, {make(x, shape)}, aval));
  std::vector<T> sign = values_of<T>(run(Primitive::sign, {make(x, shape)}, aval));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T wrapped_neg = x[i] == std::numeric_limits<T>::min() ? x[i] : static_cast<T>(-x[i]);
    CHECK(neg[i] == wrapped_neg);
    CHECK(abs[i] == (x[i] < 0 ? wrapped_neg : x[i]));
    CHECK(sign[i] == static_cast<T>((x[i] > 0) - (x[i] < 0)));
  }
}

TEST_CASE("kernel: integer neg, abs, sign") {
  for (const Shape& shape : elementwise_shapes) {
    check_int_unary<std::int32_t>(shape);
    check_int_unary<std::int64_t>(shape);
  }
  Array u = run(Primitive::neg, {make<std::uint32_t>({0, 1, 5}, {3})}, {{3}, DType::u32});
  CHECK(values_of<std::uint32_t>(u) == std::vector<std::uint32_t>{0, 4294967295u, 4294967291u});
}

// ---- integer_pow -------------------------------------------------------------------------------

template <class T> void check_integer_pow(std::int64_t y, const Shape& shape, double lo, double hi) {
  std::vector<T> x = sample<T>(size_of(shape), lo, hi, std::is_integral_v<T> ? 1 : 0.37);
  Params ps = xjax::params::IntegerPow{.y = y};
  std::vector<T> got = values_of<T>(
      run(Primitive::integer_pow, {make(x, shape)}, {shape, xjax::dtype_of_v<T>}, ps));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      T want = 1;
      for (std::int64_t k = 0; k < y; ++k) want = static_cast<T>(want * x[i]);
      CHECK(got[i] == want);
    } else {
      const double want = std::pow(static_cast<double>(x[i]), static_cast<double>(y));
      CHECK(std::abs(got[i] - want) <= 1e-5 * (1 + std::abs(want)));
    }
  }
}

TEST_CASE("kernel: integer_pow") {
  for (const Shape& shape : elementwise_shapes)
    for (std::int64_t y : {0, 1, 2, 3, 4, 5}) {
      check_integer_pow<float>(y, shape, -3, 3);
      check_integer_pow<double>(y, shape, -3, 3);
      check_integer_pow<std::int32_t>(y, shape, -9, 9);
      check_integer_pow<std::int64_t>(y, shape, -9, 9);
      check_integer_pow<std::uint32_t>(y, shape, 0, 9);
    }
  for (std::int64_t y : {-1, -2, -3}) {
    check_integer_pow<float>(y, {9}, 0.5, 3);
    check_integer_pow<double>(y, {2, 3}, -3, -0.5);
  }
  Params ps = xjax::params::IntegerPow{.y = std::int64_t{-1}};
  CHECK_THROWS_AS(run(Primitive::integer_pow, {make<std::int32_t>({2}, {1})}, {{1}, DType::i32}, ps),
                  xjax::Error);
}

// The exponents with straight-product loops (2, 3, 4, -1, -2) give the bits of repeated squaring
// (x x, x (x x), (x x)(x x), 1 / x, 1 / (x x), in scalar arithmetic), special values included.
template <class T> void check_integer_pow_bits() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T big = std::sqrt(std::numeric_limits<T>::max()), tiny = std::numeric_limits<T>::denorm_min();
  std::vector<T> x = {T(0), T(-0.0), T(1), T(-1), T(0.1), T(-2.5), T(3.3), big, -big, T(2) * big, tiny, -tiny,
                      std::numeric_limits<T>::min(), inf, -inf, nan, T(1e-3), T(-7.77)};
  for (std::size_t i = 0; i < 23; ++i) x.push_back(static_cast<T>(0.37 * static_cast<double>(i) - 4.1));  // past a batch
  const Shape shape{static_cast<std::int64_t>(x.size())};
  for (std::int64_t y : {2, 3, 4, -1, -2}) {
    Params ps = xjax::params::IntegerPow{.y = y};
    const std::vector<T> got = values_of<T>(run(Primitive::integer_pow, {make(x, shape)}, {shape, xjax::dtype_of_v<T>}, ps));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const volatile T v = x[i];  // scalar arithmetic, each product rounded
      const T v2 = v * v;
      const T want = y == 2 ? v2 : y == 3 ? T(v * v2) : y == 4 ? T(v2 * v2) : y == -1 ? T(T(1) / v) : T(T(1) / v2);
      INFO("y = " << y << ", x = " << x[i]);
      if (std::isnan(want)) CHECK(std::isnan(got[i]));
      else CHECK(std::memcmp(&got[i], &want, sizeof(T)) == 0);
    }
  }
}

TEST_CASE("kernel: integer_pow's common exponents give repeated squaring's bits") {
  check_integer_pow_bits<float>();
  check_integer_pow_bits<double>();
}

// ---- binary ------------------------------------------------------------------------------------

template <class T> T binary_reference(Primitive p, T a, T b) {
  switch (p) {
    case Primitive::add: return static_cast<T>(a + b);
    case Primitive::sub: return static_cast<T>(a - b);
    case Primitive::mul: return static_cast<T>(a * b);
    case Primitive::div:
      if constexpr (std::is_integral_v<T>) return b == 0 ? T{0} : static_cast<T>(a / b);
      else return a / b;
    case Primitive::max: return a > b ? a : b;
    case Primitive::min: return a < b ? a : b;
    case Primitive::pow: return static_cast<T>(std::pow(a, b));
    default: return 0;
  }
}

template <class T> void check_binary(Primitive p, const Shape& shape) {
  const std::int64_t n = size_of(shape);
  const bool positive_base = p == Primitive::pow || std::is_unsigned_v<T>;
  std::vector<T> x = sample<T>(n, positive_base ? 0.1 : -20, 20, std::is_integral_v<T> ? 3 : 0.737);
  std::vector<T> y = sample<T>(n, std::is_unsigned_v<T> ? 0 : -3, 3, std::is_integral_v<T> ? 1 : 0.41);
  const ShapedArray aval{shape, xjax::dtype_of_v<T>};
  std::vector<T> got = values_of<T>(run(p, {make(x, shape), make(y, shape)}, aval));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T want = binary_reference(p, x[i], y[i]);
    if constexpr (std::is_integral_v<T>) {
      CHECK_MESSAGE(got[i] == want, xjax::primitive_name(p), " ", x[i], " ", y[i]);
    } else {
      const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
      CHECK_MESSAGE(std::abs(got[i] - want) <= tol * (1 + std::abs(want)), xjax::primitive_name(p),
                    " ", x[i], " ", y[i], " got ", got[i], " want ", want);
    }
  }
}

TEST_CASE("kernel: binary ops on every numeric dtype") {
  for (const Shape& shape : elementwise_shapes) {
    for (Primitive p : {Primitive::add, Primitive::sub, Primitive::mul, Primitive::div,
                        Primitive::max, Primitive::min}) {
      check_binary<float>(p, shape);
      check_binary<double>(p, shape);
      check_binary<std::int32_t>(p, shape);
      check_binary<std::int64_t>(p, shape);
      check_binary<std::uint32_t>(p, shape);
    }
    check_binary<float>(Primitive::pow, shape);
    check_binary<double>(Primitive::pow, shape);
  }
}

TEST_CASE("kernel: integer division truncates and never traps") {
  using I = std::int32_t;
  const I min = std::numeric_limits<I>::min();
  Array x = make<I>({7, -7, 7, -7, 5, min, min}, {7});
  Array y = make<I>({2, 2, -2, -2, 0, -1, 0}, {7});
  std::vector<I> got = values_of<I>(run(Primitive::div, {x, y}, {{7}, DType::i32}));
  CHECK(got == std::vector<I>{3, -3, -3, 3, 0, min, 0});
  Array a = make<std::int64_t>({std::numeric_limits<std::int64_t>::min()}, {1});
  Array b = make<std::int64_t>({-1}, {1});
  CHECK(values_of<std::int64_t>(run(Primitive::div, {a, b}, {{1}, DType::i64}))[0] ==
        std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("kernel: float max/min propagate NaN; bool max/min are or/and") {
  const float nan = std::nanf("");
  Array x = make<float>({nan, 1, 2, -0.5f}, {4});
  Array y = make<float>({1, nan, 1, 3}, {4});
  std::vector<float> mx = values_of<float>(run(Primitive::max, {x, y}, {{4}, DType::f32}));
  std::vector<float> mn = values_of<float>(run(Primitive::min, {x, y}, {{4}, DType::f32}));
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2);
  CHECK(mx[3] == 3);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1);
  CHECK(mn[3] == -0.5f);
  Array a = make_bool({0, 0, 1, 1}, {4});
  Array b = make_bool({0, 1, 0, 1}, {4});
  CHECK(values_of<U8>(run(Primitive::max, {a, b}, {{4}, DType::bool_})) == std::vector<U8>{0, 1, 1, 1});
  CHECK(values_of<U8>(run(Primitive::min, {a, b}, {{4}, DType::bool_})) == std::vector<U8>{0, 0, 0, 1});
  CHECK_THROWS_AS(run(Primitive::add, {a, b}, {{4}, DType::bool_}), xjax::Error);
  Array i = make<std::int32_t>({1}, {1});
  // integer powers wrap; a negative one is 1 / x^|y| truncated
  Array base = make<std::int32_t>({3, -2, 1, -1, -1, 2, 0, 7}, {8}), ex = make<std::int32_t>({4, 3, -5, -3, -4, -1, -2, 40}, {8});
  std::int64_t seven_40 = 1;
  for (int k = 0; k < 40; ++k) seven_40 = static_cast<std::int64_t>(static_cast<std::uint64_t>(seven_40) * 7u);
  CHECK(values_of<std::int32_t>(run(Primitive::pow, {base, ex}, {{8}, DType::i32})) ==
        std::vector<std::int32_t>{81, -8, 1, -1, 1, 0, 0, static_cast<std::int32_t>(static_cast<std::uint32_t>(seven_40))});
  (void)i;
}

// ---- comparisons -------------------------------------------------------------------------------

template <class T> void check_compare(const std::vector<T>& x, const std::vector<T>& y) {
  const Shape shape{static_cast<std::int64_t>(x.size())};
  auto make_t = [&](const std::vector<T>& v) {
    if constexpr (std::is_same_v<T, U8>) return make_bool(v, shape);
    else return make(v, shape);
  };
  const std::vector<std::pair<Primitive, std::function<bool(T, T)>>> ops = {
      {Primitive::eq, [](T a, T b) { return a == b; }}, {Primitive::ne, [](T a, T b) { return a != b; }},
      {Primitive::lt, [](T a, T b) { return a < b; }},  {Primitive::le, [](T a, T b) { return a <= b; }},
      {Primitive::gt, [](T a, T b) { return a > b; }},  {Primitive::ge, [](T a, T b) { return a >= b; }}};
  for (const auto& [p, ref] : ops) {
    std::vector<U8> got = values_of<U8>(run(p, {make_t(x), make_t(y)}, {shape, DType::bool_}));
    for (std::size_t i = 0; i < x.size(); ++i)
      CHECK_MESSAGE(got[i] == (ref(x[i], y[i]) ? 1 : 0), xjax::primitive_name(p), " at ", i);
  }
}

TEST_CASE("kernel: comparisons on every dtype") {
  const double nan = std::nan("");
  check_compare<float>({1, 2, 3, -0.f, static_cast<float>(nan)}, {2, 2, 1, 0, 1});
  check_compare<double>({1, 2, 3, nan, nan}, {2, 2, 1, 1, nan});
  check_compare<std::int32_t>({-5, 2, 3}, {2, 2, -1});
  check_compare<std::int64_t>({-5, 2, 3}, {2, 2, -1});
  check_compare<std::uint32_t>({5, 2, 4000000000u}, {2, 2, 1});
  check_compare<U8>({0, 1, 0, 1}, {0, 0, 1, 1});
  check_compare<float>({}, {});
  Array s = run(Primitive::lt, {make<float>({1}, {}), make<float>({2}, {})}, {{}, DType::bool_});
  CHECK(values_of<U8>(s) == std::vector<U8>{1});
}

// ---- select_n, convert_element_type, copy, stop_gradient ---------------------------------------

TEST_CASE("kernel: select_n with bool and i32 which") {
  const Shape shape{2, 3};
  Array c0 = make<float>({0, 1, 2, 3, 4, 5}, shape);
  Array c1 = make<float>({10, 11, 12, 13, 14, 15}, shape);
  Array c2 = make<float>({20, 21, 22, 23, 24, 25}, shape);
  Array which_bool = make_bool({0, 1, 1, 0, 0, 1}, shape);
  CHECK(values_of<float>(run(Primitive::select_n, {which_bool, c0, c1}, {shape, DType::f32})) ==
        std::vector<float>{0, 11, 12, 3, 4, 15});
  Array which_int = make<std::int32_t>({2, 0, 1, 1, 2, 0}, shape);
  CHECK(values_of<float>(run(Primitive::select_n, {which_int, c0, c1, c2}, {shape, DType::f32})) ==
        std::vector<float>{20, 1, 12, 13, 24, 5});
  Array scalar_which = make<std::int32_t>({1}, {});
  CHECK(values_of<float>(run(Primitive::select_n, {scalar_which, c0, c1, c2}, {shape, DType::f32})) ==
        std::vector<float>{10, 11, 12, 13, 14, 15});
  Array i0 = make<std::int64_t>({1, 2}, {2}), i1 = make<std::int64_t>({-1, -2}, {2});
  CHECK(values_of<std::int64_t>(run(Primitive::select_n, {make_bool({1, 0}, {2}), i0, i1},
                                    {{2}, DType::i64})) == std::vector<std::int64_t>{-1, 2});
  Array b0 = make_bool({0, 0}, {2}), b1 = make_bool({1, 1}, {2});
  CHECK(values_of<U8>(run(Primitive::select_n, {make_bool({1, 0}, {2}), b0, b1}, {{2}, DType::bool_})) ==
        std::vector<U8>{1, 0});
  Array e = make<float>({}, {0, 2});
  CHECK(run(Primitive::select_n, {make_bool({}, {0, 2}), e, e}, {{0, 2}, DType::f32}).size() == 0);
}

TEST_CASE("kernel: convert_element_type") {
  auto convert = [](const Array& x, DType to) {
    return run(Primitive::convert_element_type, {x}, {x.shape(), to}, xjax::params::ConvertElementType{.new_dtype = to, .weak_type = false});
  };
  const float nan = std::nanf("");
  Array f = make<float>({-2.7f, 2.7f, 0.f, 1e20f, -1e20f, nan}, {6});
  CHECK(values_of<std::int32_t>(convert(f, DType::i32)) ==
        std::vector<std::int32_t>{-2, 2, 0, std::numeric_limits<std::int32_t>::max(),
                                  std::numeric_limits<std::int32_t>::min(), 0});
  CHECK(values_of<U8>(convert(f, DType::bool_)) == std::vector<U8>{1, 1, 0, 1, 1, 1});
  CHECK(values_of<double>(convert(make<float>({1.5f, -2.f}, {2}), DType::f64)) ==
        std::vector<double>{1.5, -2});
  CHECK(values_of<float>(convert(make<std::int32_t>({-3, 7}, {2}), DType::f32)) ==
        std::vector<float>{-3, 7});
  CHECK(values_of<std::uint32_t>(convert(make<std::int64_t>({-1, 5}, {2}), DType::u32)) ==
        std::vector<std::uint32_t>{4294967295u, 5});
  CHECK(values_of<std::int64_t>(convert(make<std::uint32_t>({4000000000u}, {1}), DType::i64)) ==
        std::vector<std::int64_t>{4000000000});
  CHECK(values_of<float>(convert(make_bool({1, 0}, {2}), DType::f32)) == std::vector<float>{1, 0});
  CHECK(values_of<U8>(convert(make<std::int64_t>({0, -4}, {2}), DType::bool_)) == std::vector<U8>{0, 1});
  CHECK(values_of<std::uint32_t>(convert(make<double>({-3.5, 3.5}, {2}), DType::u32)) ==
        std::vector<std::uint32_t>{0, 3});
  CHECK(convert(make<float>({}, {0, 3}), DType::i64).size() == 0);
  CHECK(values_of<std::int32_t>(convert(make<double>({4.9}, {}), DType::i32)) ==
        std::vector<std::int32_t>{4});
}

TEST_CASE("kernel: copy makes a new buffer, stop_gradient is the identity") {
  Array x = make<double>({1, 2, 3, 4}, {2, 2});
  Array c = run(Primitive::copy, {x}, x.aval());
  CHECK(values_of<double>(c) == values_of<double>(x));
  CHECK(c.raw_data() != x.raw_data());
  Array s = run(Primitive::stop_gradient, {x}, x.aval());
  CHECK(values_of<double>(s) == values_of<double>(x));
  Array b = make_bool({1, 0}, {2});
  CHECK(values_of<U8>(run(Primitive::copy, {b}, b.aval())) == std::vector<U8>{1, 0});
  CHECK(run(Primitive::copy, {make<float>({}, {0})}, {{0}, DType::f32}).size() == 0);
}

// ---- reductions --------------------------------------------------------------------------------

// Reference reduction: every input element folded into the output element it maps to.
template <class T>
std::vector<T> reduce_reference(Primitive p, const std::vector<T>& x, const Shape& shape,
                                 const Ints& axes, T init) {
  Shape out_shape;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) == axes.end())
      out_shape.push_back(shape[d]);
  std::vector<T> out(static_cast<std::size_t>(size_of(out_shape)), init);
  for (std::int64_t flat = 0; flat < size_of(shape); ++flat) {
    Ints idx = unravel(flat, shape), out_idx;
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) == axes.end())
        out_idx.push_back(idx[d]);
    T& acc = out[static_cast<std::size_t>(ravel(out_idx, out_shape))];
    const T v = x[static_cast<std::size_t>(flat)];
    using W = std::conditional_t<std::is_integral_v<T>, std::uint64_t, T>;  // wraps like the kernel
    switch (p) {
      case Primitive::reduce_sum: acc = static_cast<T>(static_cast<W>(acc) + static_cast<W>(v)); break;
      case Primitive::reduce_prod: acc = static_cast<T>(static_cast<W>(acc) * static_cast<W>(v)); break;
      case Primitive::reduce_max: acc = std::max(acc, v); break;
      case Primitive::reduce_min: acc = std::min(acc, v); break;
      default: break;
    }
  }
  return out;
}

template <class T> T reduce_init(Primitive p) {
  switch (p) {
    case Primitive::reduce_sum: return T{0};
    case Primitive::reduce_prod: return T{1};
    case Primitive::reduce_max:
      return std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity()
                                         : std::numeric_limits<T>::lowest();
    default:
      return std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity()
                                         : std::numeric_limits<T>::max();
  }
}

template <class T> void check_reduce(Primitive p, const Shape& shape, const Ints& axes) {
  const bool prod = p == Primitive::reduce_prod;
  std::vector<T> x = sample<T>(size_of(shape), prod ? 0.8 : -9, prod ? 1.25 : 9,
                               std::is_integral_v<T> ? 5 : 0.737);
  const std::vector<T> want = reduce_reference(p, x, shape, axes, reduce_init<T>(p));
  Shape out_shape;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) == axes.end())
      out_shape.push_back(shape[d]);
  Array out = run(p, {make(x, shape)}, {out_shape, xjax::dtype_of_v<T>}, xjax::params::Reduce{.axes = axes});
  std::vector<T> got = values_of<T>(out);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_integral_v<T>)
      CHECK(got[i] == want[i]);
    else
      CHECK(close(got[i], want[i], std::is_same_v<T, float> ? 1e-4 : 1e-12));
  }
}

// All subsets of the dims of `shape` (as sorted axis lists).
std::vector<Ints> all_axis_sets(std::size_t rank) {
  std::vector<Ints> sets;
  for (unsigned mask = 0; mask < (1u << rank); ++mask) {
    Ints axes;
    for (std::size_t d = 0; d < rank; ++d)
      if (mask & (1u << d)) axes.push_back(static_cast<std::int64_t>(d));
    sets.push_back(axes);
  }
  return sets;
}

TEST_CASE("kernel: reductions over every set of axes") {
  const std::vector<Shape> shapes = {{}, {40}, {2, 3, 4, 5}, {3, 1, 17, 2}, {2, 0, 3}};
  for (const Shape& shape : shapes)
    for (const Ints& axes : all_axis_sets(shape.size()))
      for (Primitive p : {Primitive::reduce_sum, Primitive::reduce_max, Primitive::reduce_min,
                          Primitive::reduce_prod}) {
        check_reduce<float>(p, shape, axes);
        check_reduce<double>(p, shape, axes);
        check_reduce<std::int32_t>(p, shape, axes);
        check_reduce<std::int64_t>(p, shape, axes);
        check_reduce<std::uint32_t>(p, shape, axes);
      }
}

// Rows are folded a batch width of rows at a time (their partial batches transposed), the rest
// one by one: 19 rows of every length up to 70, each with a NaN or an infinity somewhere, every
// row against a loop.
template <class T> void check_row_extrema() {
  constexpr std::int64_t rows = 19;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  for (std::int64_t n = 1; n <= 70; ++n) {
    const std::vector<T> base = sample<T>(rows * n, -9, 9, 0.737);
    for (Primitive p : {Primitive::reduce_max, Primitive::reduce_min}) {
      const bool is_max = p == Primitive::reduce_max;
      auto reduce_rows = [&](const std::vector<T>& x) {
        return values_of<T>(run(p, {make<T>(x, {rows, n})}, {{rows}, xjax::dtype_of_v<T>}, xjax::params::Reduce{.axes = Ints{1}}));
      };
      auto loop = [&](const std::vector<T>& x, std::int64_t r) {
        T m = x[static_cast<std::size_t>(r * n)];
        for (std::int64_t k = 0; k < n; ++k) {
          const T v = x[static_cast<std::size_t>(r * n + k)];
          m = v != v || m != m ? nan : is_max ? std::max(m, v) : std::min(m, v);
        }
        return m;
      };
      for (std::int64_t at = 0; at < n; ++at) {
        std::vector<T> x = base;
        x[static_cast<std::size_t>((at % rows) * n + at)] = nan;
        x[static_cast<std::size_t>(((at + 5) % rows) * n + at)] = is_max ? inf : -inf;
        const std::vector<T> got = reduce_rows(x);
        for (std::int64_t r = 0; r < rows; ++r) {
          const T want = loop(x, r);
          if (want != want) CHECK(std::isnan(got[static_cast<std::size_t>(r)]));
          else CHECK(got[static_cast<std::size_t>(r)] == want);
        }
      }
      // Rows of +0 ending in -0 (review finding: grouped rows kept the other zero than rows folded
      // one by one): every row the zero a fold in order keeps, on every kernel set.
      std::vector<T> zeros(static_cast<std::size_t>(rows * n), T(0));
      for (std::int64_t r = 0; r < rows; ++r) zeros[static_cast<std::size_t>(r * n + n - 1)] = T(-0.0);
      const std::vector<T> kept = reduce_rows(zeros);
      for (std::int64_t r = 0; r < rows; ++r) {
        T in_order = is_max ? -inf : inf;  // MaxOp / MinOp: a tie keeps the later element
        for (std::int64_t k = 0; k < n; ++k) {
          const T v = zeros[static_cast<std::size_t>(r * n + k)];
          in_order = (is_max ? in_order > v : in_order < v) ? in_order : v;
        }
        CHECK(std::signbit(kept[static_cast<std::size_t>(r)]) == std::signbit(in_order));
      }
    }
  }
}

TEST_CASE("kernel: max and min of 19 rows of every length up to 70, with NaNs, infinities or signed zeros anywhere") {
  check_row_extrema<float>();
  check_row_extrema<double>();
}

TEST_CASE("kernel: reductions of empty and special inputs") {
  Array empty = make<float>({}, {3, 0});
  CHECK(values_of<float>(run(Primitive::reduce_sum, {empty}, {{3}, DType::f32}, xjax::params::Reduce{.axes = Ints{1}})) ==
        std::vector<float>{0, 0, 0});
  std::vector<float> mx =
      values_of<float>(run(Primitive::reduce_max, {empty}, {{3}, DType::f32}, xjax::params::Reduce{.axes = Ints{1}}));
  CHECK(mx[0] == -std::numeric_limits<float>::infinity());
  CHECK(values_of<std::int32_t>(run(Primitive::reduce_min, {make<std::int32_t>({}, {0})}, {{}, DType::i32},
                                    xjax::params::Reduce{.axes = Ints{0}}))[0] == std::numeric_limits<std::int32_t>::max());
  std::vector<float> x(37, 1.f);
  x[20] = std::nanf("");
  CHECK(std::isnan(values_of<float>(run(Primitive::reduce_max, {make<float>(x, {37})}, {{}, DType::f32},
                                        xjax::params::Reduce{.axes = Ints{0}}))[0]));
  Array b = make_bool({0, 1, 1, 1, 0, 0}, {2, 3});
  CHECK(values_of<U8>(run(Primitive::reduce_max, {b}, {{2}, DType::bool_}, xjax::params::Reduce{.axes = Ints{1}})) ==
        std::vector<U8>{1, 1});
  CHECK(values_of<U8>(run(Primitive::reduce_min, {b}, {{3}, DType::bool_}, xjax::params::Reduce{.axes = Ints{0}})) ==
        std::vector<U8>{0, 0, 0});
  CHECK(values_of<U8>(run(Primitive::reduce_min, {make_bool({}, {0})}, {{}, DType::bool_},
                          xjax::params::Reduce{.axes = Ints{0}})) == std::vector<U8>{1});
  CHECK_THROWS_AS(run(Primitive::reduce_sum, {b}, {{2}, DType::bool_}, xjax::params::Reduce{.axes = Ints{1}}), xjax::Error);
}

// ---- argmax ------------------------------------------------------------------------------------

template <class T, class I> void check_argmax(const Shape& shape, std::int64_t axis) {
  std::vector<T> x = sample<T>(size_of(shape), std::is_unsigned_v<T> ? 0 : -5, 5,
                               std::is_integral_v<T> ? 3 : 0.5);  // repeats: ties
  Shape out_shape = shape;
  out_shape.erase(out_shape.begin() + axis);
  const DType index_dtype = xjax::dtype_of_v<I>;
  Array out = run(Primitive::argmax, {make(x, shape)}, {out_shape, index_dtype},
                  xjax::params::Argmax{.axes = Ints{axis}, .index_dtype = index_dtype});
  std::vector<I> got = values_of<I>(out);
  for (std::int64_t o = 0; o < size_of(out_shape); ++o) {
    Ints idx = unravel(o, out_shape);
    idx.insert(idx.begin() + axis, 0);
    I best = 0;
    for (std::int64_t k = 0; k < shape[static_cast<std::size_t>(axis)]; ++k) {
      idx[static_cast<std::size_t>(axis)] = k;
      Ints best_idx = idx;
      best_idx[static_cast<std::size_t>(axis)] = best;
      if (x[static_cast<std::size_t>(ravel(idx, shape))] > x[static_cast<std::size_t>(ravel(best_idx, shape))])
        best = static_cast<I>(k);
    }
    CHECK(got[static_cast<std::size_t>(o)] == best);
  }
}

TEST_CASE("kernel: argmax along every axis picks the first maximum") {
  for (std::int64_t axis = 0; axis < 3; ++axis) {
    check_argmax<float, std::int32_t>({3, 4, 5}, axis);
    check_argmax<double, std::int64_t>({3, 4, 5}, axis);
    check_argmax<std::int32_t, std::int32_t>({4, 1, 6}, axis);
    check_argmax<std::int64_t, std::int64_t>({2, 7, 3}, axis);
    check_argmax<std::uint32_t, std::int32_t>({2, 7, 3}, axis);
  }
  check_argmax<float, std::int32_t>({9}, 0);
  check_argmax<float, std::int32_t>({0, 3}, 1);
  // rows longer than a SIMD batch along the last axis (the vectorized path)
  check_argmax<float, std::int32_t>({4, 37}, 1);
  check_argmax<double, std::int64_t>({3, 21}, 1);
  check_argmax<std::int32_t, std::int32_t>({3, 40}, 1);
  const float nan = std::nanf("");
  Array x = make<float>({1, nan, 5, nan}, {4});
  Params ps = xjax::params::Argmax{.axes = Ints{0}, .index_dtype = DType::i32};
  CHECK(values_of<std::int32_t>(run(Primitive::argmax, {x}, {{}, DType::i32}, ps))[0] == 1);
  Array b = make_bool({0, 0, 1, 1}, {4});
  CHECK(values_of<std::int32_t>(run(Primitive::argmax, {b}, {{}, DType::i32}, ps))[0] == 2);
  // long rows: the first NaN wins wherever it sits in the vector lanes; -0 and 0 tie (first
  // wins); a row of -inf gives 0
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row(19, -1.0f);
  row[3] = 7, row[11] = nan, row[14] = nan, row[17] = 9;
  std::vector<float> zeros(19, -inf);
  zeros[6] = -0.0f, zeros[13] = 0.0f;
  std::vector<float> rows = row;
  rows.insert(rows.end(), zeros.begin(), zeros.end());
  rows.insert(rows.end(), 19, -inf);
  Params last = xjax::params::Argmax{.axes = Ints{1}, .index_dtype = DType::i32};
  CHECK(values_of<std::int32_t>(run(Primitive::argmax, {make(rows, {3, 19})}, {{3}, DType::i32}, last)) ==
        std::vector<std::int32_t>{11, 6, 0});
}

// ---- dot_general -------------------------------------------------------------------------------

struct DotCase {
  Shape lhs, rhs;
  Ints lc, rc, lb, rb;
};

// The output shape (batch, lhs free, rhs free) and a reference product, by brute force.
template <class T>
std::pair<Shape, std::vector<T>> dot_reference(const DotCase& c, const std::vector<T>& a,
                                              const std::vector<T>& b) {
  auto contains = [](const Ints& v, std::int64_t d) { return std::find(v.begin(), v.end(), d) != v.end(); };
  Ints lf, rf;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(c.lhs.size()); ++d)
    if (!contains(c.lc, d) && !contains(c.lb, d)) lf.push_back(d);
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(c.rhs.size()); ++d)
    if (!contains(c.rc, d) && !contains(c.rb, d)) rf.push_back(d);
  Shape out_shape, contract_shape;
  for (auto d : c.lb) out_shape.push_back(c.lhs[static_cast<std::size_t>(d)]);
  for (auto d : lf) out_shape.push_back(c.lhs[static_cast<std::size_t>(d)]);
  for (auto d : rf) out_shape.push_back(c.rhs[static_cast<std::size_t>(d)]);
  for (auto d : c.lc) contract_shape.push_back(c.lhs[static_cast<std::size_t>(d)]);
  std::vector<T> out(static_cast<std::size_t>(size_of(out_shape)));
  for (std::int64_t o = 0; o < size_of(out_shape); ++o) {
    const Ints oi = unravel(o, out_shape);
    Ints li(c.lhs.size()), ri(c.rhs.size());
    std::size_t pos = 0;
    for (std::size_t k = 0; k < c.lb.size(); ++k, ++pos) {
      li[static_cast<std::size_t>(c.lb[k])] = oi[pos];
      ri[static_cast<std::size_t>(c.rb[k])] = oi[pos];
    }
    for (auto d : lf) li[static_cast<std::size_t>(d)] = oi[pos++];
    for (auto d : rf) ri[static_cast<std::size_t>(d)] = oi[pos++];
    T acc = 0;
    for (std::int64_t k = 0; k < size_of(contract_shape); ++k) {
      const Ints ki = unravel(k, contract_shape);
      for (std::size_t j = 0; j < ki.size(); ++j) {
        li[static_cast<std::size_t>(c.lc[j])] = ki[j];
        ri[static_cast<std::size_t>(c.rc[j])] = ki[j];
      }
      acc = static_cast<T>(acc + a[static_cast<std::size_t>(ravel(li, c.lhs))] *
                                     b[static_cast<std::size_t>(ravel(ri, c.rhs))]);
    }
    out[static_cast<std::size_t>(o)] = acc;
  }
  return {out_shape, out};
}

template <class T> void check_dot(const DotCase& c) {
  std::vector<T> a = sample<T>(size_of(c.lhs), std::is_unsigned_v<T> ? 0 : -3, 3, std::is_integral_v<T> ? 1 : 0.37);
  std::vector<T> b = sample<T>(size_of(c.rhs), std::is_unsigned_v<T> ? 0 : -2, 4, std::is_integral_v<T> ? 1 : 0.29);
  auto [out_shape, want] = dot_reference(c, a, b);
  Params ps = xjax::params::DotGeneral{.lhs_contracting = c.lc, .rhs_contracting = c.rc, .lhs_batch = c.lb, .rhs_batch = c.rb};
  Array out = run(Primitive::dot_general, {make(a, c.lhs), make(b, c.rhs)},
                  {out_shape, xjax::dtype_of_v<T>}, ps);
  std::vector<T> got = values_of<T>(out);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_integral_v<T>)
      CHECK(got[i] == want[i]);
    else
      CHECK(std::abs(got[i] - want[i]) <= (std::is_same_v<T, float> ? 1e-4 : 1e-11) * (1 + std::abs(want[i])));
  }
}

TEST_CASE("kernel: dot_general with batch dims and contracting dims anywhere") {
  const std::vector<DotCase> cases = {
      {{3, 4}, {4, 5}, {1}, {0}, {}, {}},                 // plain matmul
      {{4, 3}, {4, 5}, {0}, {0}, {}, {}},                 // lhs stored transposed
      {{3, 4}, {5, 4}, {1}, {1}, {}, {}},                 // rhs stored transposed
      {{4, 3}, {5, 4}, {0}, {1}, {}, {}},                 // both transposed
      {{2, 3, 4}, {2, 4, 5}, {2}, {1}, {0}, {0}},         // leading batch
      {{3, 2, 4}, {4, 5, 2}, {2}, {0}, {1}, {2}},         // batch in the middle / at the end
      {{2, 3, 4}, {4, 5, 2}, {2, 0}, {0, 2}, {}, {}},     // two contracting dims, crossed order
      {{2, 3, 4}, {2, 4, 3}, {0, 2}, {0, 1}, {}, {}},     // contracting dims in the same order
      {{3, 2, 5, 4}, {4, 2, 6}, {3}, {0}, {1}, {1}},      // free dims around the batch dim
      {{2, 3, 4, 5}, {3, 5, 2, 6}, {3}, {1}, {1, 0}, {0, 2}},  // two batch dims, swapped
      {{4}, {4}, {0}, {0}, {}, {}},                       // vector dot vector
      {{3, 4}, {4}, {1}, {0}, {}, {}},                    // matrix-vector
      {{4}, {4, 3}, {0}, {0}, {}, {}},                    // vector-matrix
      {{3}, {2}, {}, {}, {}, {}},                         // outer product
      {{1, 4}, {4, 1}, {1}, {0}, {}, {}},                 // size-1 dims
      {{4, 1, 3}, {4, 2}, {0}, {0}, {}, {}},              // size-1 dim between free dims
      {{3, 0}, {0, 2}, {1}, {0}, {}, {}},                 // empty contraction: zeros
      {{0, 4}, {4, 2}, {1}, {0}, {}, {}},                 // empty output
      {{2, 0, 4}, {2, 4, 3}, {2}, {1}, {0}, {0}},         // empty free dim with batch
      {{}, {}, {}, {}, {}, {}},                           // scalars
  };
  for (const DotCase& c : cases) {
    check_dot<float>(c);
    check_dot<double>(c);
    check_dot<std::int32_t>(c);
    check_dot<std::int64_t>(c);
    check_dot<std::uint32_t>(c);
  }
}

// Float products small enough for the register-blocked loops (src/kernels/small_gemm.cpp; BLAS
// otherwise): every layout of both operands, row counts that leave remainders of the 8- and 4-row
// blocks, column counts of one, two and three SIMD batches, of an odd number of half batches
// (the last block in a batch of half the width: 2, 4, 12, 20, 24 columns, depending on the set and
// dtype) and some that are not a multiple of a half batch (BLAS), batched products, and sizes just
// past the limits (BLAS again).
TEST_CASE("kernel: dot_general of small float matrices in every layout equals the brute-force product") {
  auto layouts = [](std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
    std::vector<DotCase> out;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        DotCase c;
        c.lhs = ta ? Shape{k, m} : Shape{m, k};
        c.rhs = tb ? Shape{n, k} : Shape{k, n};
        c.lc = {ta ? 0 : 1};
        c.rc = {tb ? 1 : 0};
        if (batch > 0) {
          c.lhs.insert(c.lhs.begin(), batch);
          c.rhs.insert(c.rhs.begin(), batch);
          c.lc[0] += 1;
          c.rc[0] += 1;
          c.lb = {0};
          c.rb = {0};
        }
        out.push_back(c);
      }
    return out;
  };
  for (std::int64_t m : {1, 3, 4, 5, 8, 9, 12, 13, 16, 17})
    for (std::int64_t n : {2, 4, 8, 12, 16, 20, 24, 32, 48})
      for (std::int64_t k : {2, 7, 32})
        for (const auto& c : layouts(m, n, k, 0)) {
          check_dot<float>(c);
          check_dot<double>(c);
        }
  for (const auto& c : layouts(9, 32, 16, 3)) {
    check_dot<float>(c);
    check_dot<double>(c);
  }
  for (const auto& c : layouts(4, 128, 64, 0)) check_dot<float>(c);   // B transposed too large to pack
  for (const auto& c : layouts(136, 128, 128, 0)) check_dot<float>(c);  // past m n k = 128^3
}

// Products past the small loops' sizes run in the same loops, rows split over the threads, where
// OpenBLAS's kernels are narrower than the active set's batches (blocked_gemm, small_gemm.cpp):
// there each element is one multiply-add chain over k in order from +0, so it equals such a chain
// written here bit for bit, at one thread and at two: fused, or in a build at -O1 (the sanitizer
// stage) a product rounded before each add in the 64-byte batches (xsimd 8's AVX-512 fma is a
// multiply and an add, which GCC contracts into one from -O2; its 32-byte one, the last half
// batch of columns, is the instruction). Elsewhere
// BLAS runs them: within rounding of the same chain. Shapes: rows leaving 8-, 4-, 2- and 1-row
// remainders and groups of rows split unevenly over two threads; columns of two batches, one,
// and a half batch; depths spanning several of the loops' depth chunks; all four layouts.
template <class T> void check_blocked_product(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  std::vector<T> a = sample<T>(m * k, -3, 3, 0.37), b = sample<T>(k * n, -2, 4, 0.29);
  std::vector<T> fused(static_cast<std::size_t>(m * n)), unfused(fused.size());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      T acc = T(0), acc2 = T(0);
      for (std::int64_t p = 0; p < k; ++p) {
        const T x = a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)], y = b[static_cast<std::size_t>(tb ? j * k + p : p * n + j)];
        acc = std::fma(x, y, acc);
        volatile T product = x * y;  // rounded: not contracted into an fma
        acc2 = acc2 + product;
      }
      fused[static_cast<std::size_t>(i * n + j)] = acc;
      unfused[static_cast<std::size_t>(i * n + j)] = acc2;
    }
  const xjax::BuildInfo info = xjax::build_info();
  // the loops take n in multiples of half a batch (the AVX-512 set's 8 floats, the AVX2 set's 4)
  const auto column_step = static_cast<std::int64_t>((info.kernel_set == "avx512" ? 64 : 32) / sizeof(T) / 2);
  const bool loops = info.own_large_products && n % column_step == 0;
  Params ps = xjax::params::DotGeneral{.lhs_contracting = {ta ? 0 : 1}, .rhs_contracting = {tb ? 1 : 0}, .lhs_batch = {}, .rhs_batch = {}};
  const int before = openblas_get_num_threads();
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    std::vector<T> got = values_of<T>(run(Primitive::dot_general, {make(a, ta ? Shape{k, m} : Shape{m, k}), make(b, tb ? Shape{n, k} : Shape{k, n})},
                                          {{m, n}, xjax::dtype_of_v<T>}, ps));
    INFO("m n k " << m << " " << n << " " << k << ", transposed " << ta << tb << ", threads " << threads << ", loops " << loops);
    REQUIRE(got.size() == fused.size());
    if (loops) {
      std::size_t off = 0;
      for (std::size_t i = 0; i < got.size(); ++i) off += got[i] != fused[i] && got[i] != unfused[i];
      CHECK(off == 0);
    } else {
      std::size_t off = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        off += std::abs(got[i] - fused[i]) > (std::is_same_v<T, float> ? 1e-4 : 1e-11) * (1 + std::abs(fused[i]));
      CHECK(off == 0);
    }
  }
  openblas_set_num_threads(before);
}

TEST_CASE("kernel: float products past the small loops' sizes, in every layout (the blocked loops where they outrun BLAS)") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_blocked_product<float>(203, 72, 300, ta, tb);
      check_blocked_product<double>(203, 40, 700, ta, tb);
      check_blocked_product<float>(13, 136, 1200, ta, tb);
      // the AVX2 set's blocks (6 rows, batches of 8 floats / 4 doubles): a 2-row remainder and a
      // half batch of columns; 4- and 1-row remainders in double
      check_blocked_product<float>(14, 76, 2100, ta, tb);
      check_blocked_product<double>(17, 38, 3300, ta, tb);
    }
}

// A B stored transposed is copied whole into [k, n] for the loops only up to 16 MiB; a larger one
// (a vocabulary's output projection in the backward pass) stays with BLAS, which packs it a block
// at a time: the product's peak holds its operands and output, no copy of B.
TEST_CASE("kernel: a product whose transposed B passes 16 MiB makes no copy of it") {
  const std::int64_t m = 16, k = 1024, n = 4160;  // B: 4160 x 1024 floats, 17 MB
  std::vector<float> a = sample<float>(m * k, -3, 3, 0.37), b = sample<float>(n * k, -2, 4, 0.29);
  const Array lhs = make(a, {m, k}), rhs = make(b, {n, k});
  Params ps = xjax::params::DotGeneral{.lhs_contracting = {1}, .rhs_contracting = {1}, .lhs_batch = {}, .rhs_batch = {}};
  xjax::reset_peak_memory();
  const std::int64_t before = xjax::memory_stats().live_bytes;
  const Array out = run(Primitive::dot_general, {lhs, rhs}, {{m, n}, DType::f32}, ps);
  CHECK(xjax::memory_stats().peak_bytes - before <= m * n * 4 + 4096);
  const std::vector<float> got = values_of<float>(out);
  std::size_t off = 0;
  for (std::int64_t i = 0; i < m; i += 5)
    for (std::int64_t j = 0; j < n; j += 97) {
      double want = 0;
      for (std::int64_t p = 0; p < k; ++p) want += double(a[static_cast<std::size_t>(i * k + p)]) * double(b[static_cast<std::size_t>(j * k + p)]);
      off += std::abs(got[static_cast<std::size_t>(i * n + j)] - want) > 1e-3 * (1 + std::abs(want));
    }
  CHECK(off == 0);
}

// A stack of small products (attention's heads) is split over the threads by its entries: the
// same bits at one thread and at two, each entry the brute-force product.
TEST_CASE("kernel: a stack of small float products split over the threads") {
  const Shape lhs{40, 64, 32}, rhs{40, 32, 48};
  std::vector<float> a = sample<float>(size_of(lhs), -3, 3, 0.37), b = sample<float>(size_of(rhs), -2, 4, 0.29);
  const DotCase c{lhs, rhs, {2}, {1}, {0}, {0}};
  auto [out_shape, want] = dot_reference(c, a, b);
  Params ps = xjax::params::DotGeneral{.lhs_contracting = c.lc, .rhs_contracting = c.rc, .lhs_batch = c.lb, .rhs_batch = c.rb};
  const int before = openblas_get_num_threads();
  std::vector<std::vector<float>> got;
  const std::int64_t splits_before = xjax::detail::split_loops();
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    got.push_back(values_of<float>(run(Primitive::dot_general, {make(a, lhs), make(b, rhs)}, {out_shape, DType::f32}, ps)));
  }
  openblas_set_num_threads(before);
  if (xjax::build_info().kernel_set != "baseline")  // the set with product loops (baseline's SSE2 has none: BLAS)
    CHECK(xjax::detail::split_loops() > splits_before);  // the two-thread run split its entries
  REQUIRE(got[0].size() == want.size());
  CHECK(got[0] == got[1]);
  std::size_t off = 0;
  for (std::size_t i = 0; i < want.size(); ++i) off += std::abs(got[0][i] - want[i]) > 1e-4 * (1 + std::abs(want[i]));
  CHECK(off == 0);
}

TEST_CASE("kernel: small float products propagate NaN and infinity as a sum of products does") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<float> a(9 * 8, 1.0f), b(8 * 32, 0.5f);
  a[2 * 8 + 3] = nan;   // row 2: NaN everywhere
  a[5 * 8 + 1] = inf;   // row 5: +inf where b is positive, NaN where b is 0
  b[1 * 32 + 7] = 0.0f;
  Params ps = xjax::params::DotGeneral{.lhs_contracting = {1}, .rhs_contracting = {0}, .lhs_batch = {}, .rhs_batch = {}};
  std::vector<float> c = values_of<float>(run(Primitive::dot_general, {make(a, {9, 8}), make(b, {8, 32})}, {{9, 32}, DType::f32}, ps));
  for (std::int64_t j = 0; j < 32; ++j) {
    CHECK(std::isnan(c[static_cast<std::size_t>(2 * 32 + j)]));
    if (j == 7) CHECK(std::isnan(c[static_cast<std::size_t>(5 * 32 + j)]));
    else CHECK(c[static_cast<std::size_t>(5 * 32 + j)] == inf);
    CHECK(c[static_cast<std::size_t>(4 * 32 + j)] == (j == 7 ? 3.5f : 4.0f));
  }
}

TEST_CASE("kernel: dot_general of a larger matrix through BLAS") {
  check_dot<float>({{37, 65}, {65, 29}, {1}, {0}, {}, {}});
  check_dot<double>({{65, 37}, {29, 65}, {0}, {1}, {}, {}});
  check_dot<float>({{5, 17, 33}, {33, 5, 19}, {2}, {0}, {0}, {1}});
}

TEST_CASE("kernel: dot_general outer products (a contraction of size 1) in every layout") {
  // Written row by row without BLAS; sizes cover whole SIMD batches and tails.
  const std::vector<DotCase> cases = {
      {{7, 33}, {7, 18}, {}, {}, {0}, {0}},                // batched, no contracting dims
      {{5, 19, 1}, {5, 1, 37}, {2}, {1}, {0}, {0}},        // contraction of size 1, as stored
      {{5, 1, 19}, {5, 37, 1}, {1}, {2}, {0}, {0}},        // both stored transposed
      {{19, 4}, {4, 40}, {}, {}, {1}, {0}},                // batch dims the lhs must move (a copy)
      {{64}, {129}, {}, {}, {}, {}},                       // one large outer product
  };
  for (const DotCase& c : cases) {
    check_dot<float>(c);
    check_dot<double>(c);
    check_dot<std::int32_t>(c);
  }
}

TEST_CASE("kernel: dot_general sums from +0: a -0 product gives +0 for every contraction size") {
  for (std::int64_t k : {1, 2, 5}) {
    // Every product is -0 * 1 = -0; their sum from +0 is +0.
    std::vector<double> a(static_cast<std::size_t>(3 * k), -0.0), b(static_cast<std::size_t>(k * 4), 1.0);
    Params ps = xjax::params::DotGeneral{.lhs_contracting = {1}, .rhs_contracting = {0}, .lhs_batch = {}, .rhs_batch = {}};
    Array out = run(Primitive::dot_general, {make(a, {3, k}), make(b, {k, 4})}, {{3, 4}, xjax::f64}, ps);
    for (double v : values_of<double>(out)) CHECK(!std::signbit(v));
  }
}

// ---- shape ops ---------------------------------------------------------------------------------

template <class T> std::vector<T> iota_values(std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(i);
  return v;
}

TEST_CASE("kernel: broadcast_in_dim") {
  Array x = make<float>({1, 2, 3}, {3, 1});
  Array out = run(Primitive::broadcast_in_dim, {x}, {{2, 3, 4}, DType::f32},
                  xjax::params::BroadcastInDim{.shape = Ints{2, 3, 4}, .broadcast_dimensions = Ints{1, 2}});
  std::vector<float> got = values_of<float>(out);
  for (std::int64_t i = 0; i < 24; ++i)
    CHECK(got[static_cast<std::size_t>(i)] == static_cast<float>(unravel(i, {2, 3, 4})[1] + 1));
  Array s = make<std::int64_t>({7}, {});
  CHECK(values_of<std::int64_t>(run(Primitive::broadcast_in_dim, {s}, {{2, 2}, DType::i64},
                                    xjax::params::BroadcastInDim{.shape = Ints{2, 2}, .broadcast_dimensions = Ints{}})) ==
        std::vector<std::int64_t>(4, 7));
  Array row = make_bool({1, 0}, {2});
  CHECK(values_of<U8>(run(Primitive::broadcast_in_dim, {row}, {{2, 2}, DType::bool_},
                          xjax::params::BroadcastInDim{.shape = Ints{2, 2}, .broadcast_dimensions = Ints{0}})) ==
        std::vector<U8>{1, 1, 0, 0});
  CHECK(run(Primitive::broadcast_in_dim, {row}, {{2, 0}, DType::bool_},
            xjax::params::BroadcastInDim{.shape = Ints{2, 0}, .broadcast_dimensions = Ints{0}}).size() == 0);
}

TEST_CASE("kernel: reshape, squeeze and expand_dims share the buffer") {
  Array x = make<double>(iota_values<double>(6), {2, 3});
  Array r = run(Primitive::reshape, {x}, {{3, 2}, DType::f64}, xjax::params::Reshape{.new_sizes = Ints{3, 2}});
  CHECK(values_of<double>(r) == iota_values<double>(6));
  CHECK(r.raw_data() == x.raw_data());
  Array e = run(Primitive::expand_dims, {x}, {{2, 1, 3}, DType::f64}, xjax::params::ExpandDims{.dimensions = Ints{1}});
  CHECK(values_of<double>(e) == iota_values<double>(6));
  Array q = run(Primitive::squeeze, {e}, {{2, 3}, DType::f64}, xjax::params::Squeeze{.dimensions = Ints{1}});
  CHECK(values_of<double>(q) == iota_values<double>(6));
  CHECK(q.shape() == Shape{2, 3});
  CHECK(x.shape() == Shape{2, 3});  // the input is untouched
}

template <class T> void check_transpose(const Shape& shape, const Ints& perm, std::uint64_t bits = 0) {
  std::vector<T> x = iota_values<T>(size_of(shape));
  if (bits != 0)  // integers whose bits are NaN payloads as floats: a transpose moves bits, never values
    for (auto& v : x) v = static_cast<T>(bits + static_cast<std::uint64_t>(v));
  Shape out_shape;
  for (auto d : perm) out_shape.push_back(shape[static_cast<std::size_t>(d)]);
  std::vector<T> got = values_of<T>(run(Primitive::transpose, {make(x, shape)},
                                        {out_shape, xjax::dtype_of_v<T>}, xjax::params::Transpose{.permutation = perm}));
  for (std::int64_t o = 0; o < size_of(out_shape); ++o) {
    const Ints oi = unravel(o, out_shape);
    Ints xi(shape.size());
    for (std::size_t i = 0; i < perm.size(); ++i) xi[static_cast<std::size_t>(perm[i])] = oi[i];
    CHECK(got[static_cast<std::size_t>(o)] == x[static_cast<std::size_t>(ravel(xi, shape))]);
  }
}

TEST_CASE("kernel: transpose") {
  check_transpose<float>({3, 4}, {1, 0});
  check_transpose<double>({2, 3, 4, 5}, {2, 0, 3, 1});
  check_transpose<std::int32_t>({2, 3, 4}, {0, 2, 1});
  check_transpose<std::int64_t>({2, 1, 4}, {1, 2, 0});
  check_transpose<std::uint32_t>({5}, {0});
  check_transpose<float>({3, 0, 2}, {2, 1, 0});
  check_transpose<float>({}, {});
  check_transpose<float>({37, 50}, {1, 0});              // tiled, with partial tiles
  check_transpose<double>({3, 20, 45}, {2, 0, 1});
  check_transpose<std::int32_t>({9, 40, 2}, {1, 0, 2});
  check_transpose<std::uint32_t>({33, 4, 65}, {2, 1, 0});
  // blocks transposed in registers (8x8 / 4x4 tiles of 32x32 ones) and their edges; signaling-NaN
  // and denormal bit patterns must arrive unchanged
  check_transpose<std::uint32_t>({67, 70}, {1, 0}, 0x7f800001u);
  check_transpose<std::uint32_t>({3, 41, 66}, {0, 2, 1});
  check_transpose<std::uint64_t>({45, 3, 38}, {2, 1, 0}, 0x7ff0000000000001ull);
  check_transpose<float>({64, 64}, {1, 0});
  Array b = make_bool({1, 0, 0, 1, 1, 0}, {2, 3});
  CHECK(values_of<U8>(run(Primitive::transpose, {b}, {{3, 2}, DType::bool_}, xjax::params::Transpose{.permutation = Ints{1, 0}})) ==
        std::vector<U8>{1, 1, 0, 1, 0, 0});
}

TEST_CASE("kernel: slice with and without strides") {
  Array x = make<std::int32_t>(iota_values<std::int32_t>(30), {5, 6});
  Params ps = xjax::params::Slice{.start_indices = Ints{1, 2}, .limit_indices = Ints{4, 6}, .strides = Ints{}};
  std::vector<std::int32_t> got = values_of<std::int32_t>(run(Primitive::slice, {x}, {{3, 4}, DType::i32}, ps));
  CHECK(got == std::vector<std::int32_t>{8, 9, 10, 11, 14, 15, 16, 17, 20, 21, 22, 23});
  ps = xjax::params::Slice{.start_indices = Ints{0, 1}, .limit_indices = Ints{5, 6}, .strides = Ints{2, 3}};
  got = values_of<std::int32_t>(run(Primitive::slice, {x}, {{3, 2}, DType::i32}, ps));
  CHECK(got == std::vector<std::int32_t>{1, 4, 13, 16, 25, 28});
  ps = xjax::params::Slice{.start_indices = Ints{2, 6}, .limit_indices = Ints{4, 6}, .strides = Ints{}};
  CHECK(run(Primitive::slice, {x}, {{2, 0}, DType::i32}, ps).size() == 0);
  Array b = make_bool({1, 0, 1, 1}, {4});
  ps = xjax::params::Slice{.start_indices = Ints{1}, .limit_indices = Ints{4}, .strides = Ints{2}};
  CHECK(values_of<U8>(run(Primitive::slice, {b}, {{2}, DType::bool_}, ps)) == std::vector<U8>{0, 1});
}

// Reference pad on a rank-2 array.
std::vector<double> pad_reference(const std::vector<double>& x, const Shape& shape, double value,
                                  const Ints& lo, const Ints& hi, const Ints& interior, Shape& out_shape) {
  out_shape.clear();
  for (std::size_t d = 0; d < 2; ++d)
    out_shape.push_back(lo[d] + hi[d] + shape[d] + std::max<std::int64_t>(shape[d] - 1, 0) * interior[d]);
  std::vector<double> out(static_cast<std::size_t>(size_of(out_shape)), value);
  for (std::int64_t i = 0; i < size_of(shape); ++i) {
    Ints xi = unravel(i, shape), oi(2);
    bool inside = true;
    for (std::size_t d = 0; d < 2; ++d) {
      oi[d] = lo[d] + xi[d] * (interior[d] + 1);
      inside = inside && oi[d] >= 0 && oi[d] < out_shape[d];
    }
    if (inside) out[static_cast<std::size_t>(ravel(oi, out_shape))] = x[static_cast<std::size_t>(i)];
  }
  return out;
}

TEST_CASE("kernel: pad with negative, positive and interior padding") {
  const Shape shape{3, 4};
  std::vector<double> x = iota_values<double>(12);
  struct PadCase { Ints lo, hi, interior; };
  const std::vector<PadCase> cases = {{{1, 2}, {0, 1}, {0, 0}},  {{0, 0}, {0, 0}, {1, 2}},
                                      {{-1, 1}, {2, -2}, {0, 1}}, {{-2, -3}, {-1, 0}, {2, 0}},
                                      {{2, -4}, {1, -5}, {1, 3}},  {{-5, 0}, {0, 0}, {1, 0}}};
  for (const PadCase& c : cases) {
    Shape out_shape;
    std::vector<double> want = pad_reference(x, shape, -1.5, c.lo, c.hi, c.interior, out_shape);
    Array out = run(Primitive::pad, {make(x, shape), make<double>({-1.5}, {})}, {out_shape, DType::f64},
                    xjax::params::Pad{.lo = c.lo, .hi = c.hi, .interior = c.interior});
    CHECK(values_of<double>(out) == want);
  }
  Array b = run(Primitive::pad, {make_bool({1, 1}, {2}), make_bool({0}, {})}, {{5}, DType::bool_},
                xjax::params::Pad{.lo = Ints{1}, .hi = Ints{1}, .interior = Ints{1}});
  CHECK(values_of<U8>(b) == std::vector<U8>{0, 1, 0, 1, 0});
  Array e = run(Primitive::pad, {make<float>({}, {0}), make<float>({7}, {})}, {{3}, DType::f32},
                xjax::params::Pad{.lo = Ints{1}, .hi = Ints{2}, .interior = Ints{4}});
  CHECK(values_of<float>(e) == std::vector<float>{7, 7, 7});
}

// A pad's padding is a fill (memset where every byte of the value is equal, doubling copies
// otherwise): runs of 1 to 5000 elements of 1, 2, 4 and 8 bytes, around the 4 KiB fill block,
// each element checked.
TEST_CASE("kernel: pad fills long runs with any padding value") {
  for (std::int64_t n : {1, 3, 511, 512, 513, 1023, 1024, 1025, 2047, 2049, 5000}) {
    INFO("n = " << n);
    const Shape out_shape{n + 2};
    const xjax::params::Pad ps{.lo = Ints{n}, .hi = Ints{0}, .interior = Ints{0}};
    auto check = [&](auto value, DType dtype) {
      using T = decltype(value);
      const std::vector<T> x = {T(1), T(2)};
      const std::vector<T> got = values_of<T>(run(Primitive::pad, {make<T>(x, {2}), make<T>({value}, {})}, {out_shape, dtype}, ps));
      std::size_t off = 0;
      for (std::int64_t i = 0; i < n; ++i) off += std::memcmp(&got[static_cast<std::size_t>(i)], &value, sizeof(T)) != 0;
      CHECK(off == 0);
      CHECK(got[static_cast<std::size_t>(n)] == T(1));
      CHECK(got[static_cast<std::size_t>(n + 1)] == T(2));
    };
    check(-2.25, DType::f64);
    check(0.0, DType::f64);
    check(1.5f, DType::f32);
    check(std::int32_t{0x01010101}, DType::i32);  // every byte equal: the memset
    check(std::int16_t{-3}, DType::i16);
    check(std::uint8_t{7}, DType::u8);
  }
}

TEST_CASE("kernel: dynamic_slice clamps its starts") {
  Array x = make<float>(iota_values<float>(20), {4, 5});
  auto slice_at = [&](Array s0, Array s1) {
    return values_of<float>(run(Primitive::dynamic_slice, {x, s0, s1}, {{2, 3}, DType::f32},
                                xjax::params::DynamicSlice{.slice_sizes = Ints{2, 3}}));
  };
  CHECK(slice_at(make<std::int32_t>({1}, {}), make<std::int32_t>({1}, {})) ==
        std::vector<float>{6, 7, 8, 11, 12, 13});
  CHECK(slice_at(make<std::int64_t>({9}, {}), make<std::int64_t>({-4}, {})) ==
        std::vector<float>{10, 11, 12, 15, 16, 17});
  CHECK(slice_at(make<std::int32_t>({-1}, {}), make<std::int32_t>({4}, {})) ==
        std::vector<float>{2, 3, 4, 7, 8, 9});
  Array b = make_bool({0, 1, 1}, {3});
  CHECK(values_of<U8>(run(Primitive::dynamic_slice, {b, make<std::int32_t>({1}, {})}, {{2}, DType::bool_},
                          xjax::params::DynamicSlice{.slice_sizes = Ints{2}})) == std::vector<U8>{1, 1});
}

TEST_CASE("kernel: dynamic_update_slice clamps its starts") {
  Array x = make<std::int64_t>(std::vector<std::int64_t>(12, 0), {3, 4});
  Array u = make<std::int64_t>({1, 2, 3, 4}, {2, 2});
  auto update_at = [&](std::int32_t s0, std::int32_t s1) {
    return values_of<std::int64_t>(run(Primitive::dynamic_update_slice,
                                       {x, u, make<std::int32_t>({s0}, {}), make<std::int32_t>({s1}, {})},
                                       {{3, 4}, DType::i64}));
  };
  CHECK(update_at(1, 1) == std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0});
  CHECK(update_at(5, -3) == std::vector<std::int64_t>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  CHECK(update_at(0, 9) == std::vector<std::int64_t>{0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0});
  CHECK(values_of<std::int64_t>(x) == std::vector<std::int64_t>(12, 0));  // input untouched
  Array f = run(Primitive::dynamic_update_slice, {make<float>({1, 2, 3}, {3}), make<float>({}, {0}),
                                                  make<std::int64_t>({1}, {})},
                {{3}, DType::f32});
  CHECK(values_of<float>(f) == std::vector<float>{1, 2, 3});
}

TEST_CASE("kernel: concatenate along each dimension") {
  Array a = make<float>({1, 2, 3, 4}, {2, 2});
  Array b = make<float>({5, 6}, {2, 1});
  Array e = make<float>({}, {2, 0});
  CHECK(values_of<float>(run(Primitive::concatenate, {a, b, e}, {{2, 3}, DType::f32}, xjax::params::Concatenate{.dimension = std::int64_t{1}})) ==
        std::vector<float>{1, 2, 5, 3, 4, 6});
  Array c = make<float>({7, 8}, {1, 2});
  CHECK(values_of<float>(run(Primitive::concatenate, {a, c}, {{3, 2}, DType::f32}, xjax::params::Concatenate{.dimension = std::int64_t{0}})) ==
        std::vector<float>{1, 2, 3, 4, 7, 8});
  Array i = make<std::int32_t>(iota_values<std::int32_t>(12), {2, 3, 2});
  Array j = make<std::int32_t>({-1, -2, -3, -4}, {2, 1, 2});
  CHECK(values_of<std::int32_t>(run(Primitive::concatenate, {j, i}, {{2, 4, 2}, DType::i32},
                                    xjax::params::Concatenate{.dimension = std::int64_t{1}})) ==
        std::vector<std::int32_t>{-1, -2, 0, 1, 2, 3, 4, 5, -3, -4, 6, 7, 8, 9, 10, 11});
  Array p = make_bool({1}, {1}), q = make_bool({0, 1}, {2});
  CHECK(values_of<U8>(run(Primitive::concatenate, {p, q}, {{3}, DType::bool_}, xjax::params::Concatenate{.dimension = std::int64_t{0}})) ==
        std::vector<U8>{1, 0, 1});
}

TEST_CASE("kernel: gather takes clamped, wrapped indices along an axis") {
  Array x = make<double>(iota_values<double>(12), {3, 4});
  Array idx = make<std::int32_t>({3, -1, 0, 7, -9, 1}, {2, 3});
  std::vector<double> got = values_of<double>(run(Primitive::gather, {x, idx}, {{3, 2, 3}, DType::f64},
                                                  xjax::params::Gather{.axis = std::int64_t{1}, .fill_or_drop = false}));
  const std::vector<std::int64_t> taken = {3, 3, 0, 3, 0, 1};  // -1 -> 3, 7 -> 3, -9 -> 0
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::size_t j = 0; j < 6; ++j)
      CHECK(got[static_cast<std::size_t>(r) * 6 + j] == static_cast<double>(r * 4 + taken[j]));
  Array rows = run(Primitive::gather, {x, make<std::int64_t>({2, 0}, {2})}, {{2, 4}, DType::f64},
                   xjax::params::Gather{.axis = std::int64_t{0}, .fill_or_drop = false});
  CHECK(values_of<double>(rows) == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3});
  Array scalar_index = run(Primitive::gather, {x, make<std::int32_t>({1}, {})}, {{4}, DType::f64},
                           xjax::params::Gather{.axis = std::int64_t{0}, .fill_or_drop = false});
  CHECK(values_of<double>(scalar_index) == std::vector<double>{4, 5, 6, 7});
  Array b = make_bool({1, 0, 0}, {3});
  CHECK(values_of<U8>(run(Primitive::gather, {b, make<std::int32_t>({0, 0, 2}, {3})}, {{3}, DType::bool_},
                          xjax::params::Gather{.axis = std::int64_t{0}, .fill_or_drop = false})) == std::vector<U8>{1, 1, 0});
  CHECK(run(Primitive::gather, {x, make<std::int32_t>({}, {0})}, {{3, 0}, DType::f64},
            xjax::params::Gather{.axis = std::int64_t{1}, .fill_or_drop = false}).size() == 0);
}

TEST_CASE("kernel: gather along the leading axis copies rows of every width (wrapped and clamped indices)") {
  const std::vector<std::int64_t> idx = {4, -1, 0, 9, -7, 2, 2, 1};
  auto wrapped = [](std::int64_t i, std::int64_t n) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n - 1); };
  for (std::int64_t width : {1, 2, 3, 5}) {
    CAPTURE(width);
    const std::int64_t n = 5;
    Array xf = make<float>(iota_values<float>(n * width), {n, width});
    Array xd = make<double>(iota_values<double>(n * width), {n, width});
    Array xi = make<std::int32_t>(iota_values<std::int32_t>(n * width), {n, width});
    Array ids = make<std::int64_t>(idx, {2, 4});
    auto out = [&](DType t) { return ShapedArray{{2, 4, width}, t}; };
    const xjax::params::Gather along0{.axis = std::int64_t{0}, .fill_or_drop = false};
    std::vector<float> gf = values_of<float>(run(Primitive::gather, {xf, ids}, out(DType::f32), along0));
    std::vector<double> gd = values_of<double>(run(Primitive::gather, {xd, ids}, out(DType::f64), along0));
    std::vector<std::int32_t> gi = values_of<std::int32_t>(run(Primitive::gather, {xi, ids}, out(DType::i32), along0));
    for (std::size_t j = 0; j < idx.size(); ++j)
      for (std::int64_t c = 0; c < width; ++c) {
        const std::int64_t want = wrapped(idx[j], n) * width + c;
        const std::size_t at = j * static_cast<std::size_t>(width) + static_cast<std::size_t>(c);
        CHECK(gf[at] == static_cast<float>(want));
        CHECK(gd[at] == static_cast<double>(want));
        CHECK(gi[at] == want);
      }
  }
}

template <class T> void check_scatter_add() {
  Array x = make<T>(iota_values<T>(6), {2, 3});
  Array idx = make<std::int32_t>({2, 0, 2, -1}, {4});
  Array upd = make<T>({1, 2, 3, 4, 10, 20, 30, 40}, {2, 4});
  std::vector<T> got = values_of<T>(run(Primitive::scatter_add, {x, idx, upd}, {{2, 3}, xjax::dtype_of_v<T>},
                                        xjax::params::Scatter{.axis = std::int64_t{1}, .fill_or_drop = false}));
  // row 0: [0,1,2] + col2 += 1+3+4, col0 += 2; row 1: [3,4,5] + col2 += 10+30+40, col0 += 20
  CHECK(got == std::vector<T>{2, 1, 10, 23, 4, 85});
}

TEST_CASE("kernel: scatter_add accumulates repeated indices") {
  check_scatter_add<float>();
  check_scatter_add<double>();
  check_scatter_add<std::int32_t>();
  check_scatter_add<std::int64_t>();
  check_scatter_add<std::uint32_t>();
  Array x = make<float>({0, 0, 0}, {3});
  Array got = run(Primitive::scatter_add, {x, make<std::int64_t>({5, 1}, {2}), make<float>({1, 2}, {2})},
                  {{3}, DType::f32}, xjax::params::Scatter{.axis = std::int64_t{0}, .fill_or_drop = false});
  CHECK(values_of<float>(got) == std::vector<float>{0, 2, 1});
  CHECK(values_of<float>(x) == std::vector<float>{0, 0, 0});
}

template <class T> void check_iota(const Shape& shape, std::int64_t dimension) {
  const DType dtype = xjax::dtype_of_v<T>;
  std::vector<T> got = values_of<T>(run(Primitive::iota, {}, {shape, dtype},
                                        xjax::params::Iota{.dtype = dtype, .shape = shape, .dimension = dimension}));
  REQUIRE(static_cast<std::int64_t>(got.size()) == size_of(shape));
  for (std::int64_t i = 0; i < size_of(shape); ++i)
    CHECK(got[static_cast<std::size_t>(i)] == static_cast<T>(unravel(i, shape)[static_cast<std::size_t>(dimension)]));
}

TEST_CASE("kernel: iota on every numeric dtype") {
  for (std::int64_t d = 0; d < 3; ++d) {
    check_iota<float>({2, 3, 4}, d);
    check_iota<double>({3, 1, 2}, d);
    check_iota<std::int32_t>({2, 3, 4}, d);
    check_iota<std::int64_t>({4, 2, 2}, d);
    check_iota<std::uint32_t>({2, 2, 3}, d);
    check_iota<float>({2, 0, 3}, d);
  }
  check_iota<std::int32_t>({5}, 0);
}

}  // namespace

TEST_CASE("kernels: f64 erf and erfc agree with the C library to an ulp or two (xsimd's were 70 ulp and 6e-9 off)") {
  std::vector<double> xs;
  for (double x = -6.0; x <= 27.0; x += 0.173) xs.push_back(x);
  xs.push_back(2.2001482789);
  xs.push_back(26.49108);
  const xjax::Array a = xjax::array<double>(xs, {static_cast<std::int64_t>(xs.size())});
  const auto erf_v = xjax::erf(a).to_vector<double>(), erfc_v = xjax::erfc(a).to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    CHECK(erf_v[i] == doctest::Approx(std::erf(xs[i])).epsilon(4e-16));
    CHECK(erfc_v[i] == doctest::Approx(std::erfc(xs[i])).epsilon(4e-16).scale(std::numeric_limits<double>::min()));
  }
  // and jitted (the fused chain's kernel)
  const auto fused = xjax::jit([](const xjax::Array& v) { return xjax::erfc(v * 1.0); })(a).to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(fused[i] == doctest::Approx(std::erfc(xs[i])).epsilon(4e-16).scale(std::numeric_limits<double>::min()));
}

TEST_CASE("kernel: a long float sum folds pairwise, its error growing with log n (twenty-eighth session's hunt: 0.37% off)") {
  // 4M copies of 1.0078125 (7 fraction bits): lane-by-lane accumulation lost the low bits once
  // each lane's sum passed 2^17; the exact sum is representable in f32.
  const std::int64_t n = 4'000'000;
  const xjax::Array x = xjax::full({n}, 1.0078125, xjax::f32);
  const double exact = 1.0078125 * static_cast<double>(n);
  CHECK(std::abs(xjax::sum(x).item<double>() - exact) <= 1e-6 * exact);
  CHECK(std::abs(xjax::mean(x).item<double>() - 1.0078125) <= 1e-6);
  // random values against a double loop: within a few ulps of the sum's magnitude times log2(n)
  std::vector<float> rv(static_cast<std::size_t>(n));
  std::uint32_t state = 7;
  for (float& v : rv) v = static_cast<float>((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f;
  const xjax::Array r = xjax::array<float>(rv, {n});
  double want = 0.0;
  for (float v : rv) want += v;
  CHECK(std::abs(xjax::sum(r).item<double>() - want) <= 32 * 0x1p-24 * want);
  // an odd length with a tail, and max still exact
  const xjax::Array odd = xjax::full({n + 13}, 0.1, xjax::f64);
  CHECK(std::abs(xjax::sum(odd).item<double>() - 0.1 * static_cast<double>(n + 13)) <= 1e-12 * static_cast<double>(n));
  CHECK(xjax::max(r).item<float>() == *std::max_element(rv.begin(), rv.end()));
  // a product stays linear: pairwise, factors near 1 rounded down systematically (1.2e-3 off at 4M)
  std::vector<float> near1(static_cast<std::size_t>(n));
  double exact_prod = 1.0;
  for (float& v : near1) {
    v = 1.0f + (static_cast<float>((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f) * 2e-3f;
    exact_prod *= v;
  }
  CHECK(std::abs(xjax::prod(xjax::array<float>(near1, {n})).item<double>() - exact_prod) <= 2e-4 * exact_prod);
}

TEST_CASE("kernels: floor / ceil keep the sign of a zero, f32 erfc is +0 far out, lgamma stays finite near its overflow (twenty-ninth session's hunt)") {
  // run under every kernel set (tests/meson.build): the baseline set's floor / ceil gave +0
  for (const xjax::DType dt : {xjax::f64, xjax::f32, xjax::bf16, xjax::f16}) {
    CAPTURE(xjax::dtype_name(dt));
    const xjax::Array x = xjax::astype(xjax::array<double>({-0.5, -0.0, -0.25, 0.5, -1.5}, {5}), dt);
    const std::vector<double> c = xjax::ceil(x).to_vector<double>(), f = xjax::floor(x).to_vector<double>();
    const std::vector<double> xs = x.to_vector<double>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CHECK(c[i] == std::ceil(xs[i]));
      CHECK(std::signbit(c[i]) == std::signbit(std::ceil(xs[i])));
      CHECK(f[i] == std::floor(xs[i]));
      CHECK(std::signbit(f[i]) == std::signbit(std::floor(xs[i])));
    }
    // the same through a jitted chain
    const std::vector<double> cj = xjax::jit([](const xjax::Array& v) { return xjax::ceil(v * 1.0); })(x).to_vector<double>();
    CHECK(std::signbit(cj[0]));
  }
  // erfc(x) >= 0: xsimd's float erfc gave -0 from x = 1.7e7 on
  for (const float v : {3e7f, 1e20f, std::numeric_limits<float>::infinity()}) {
    const float e = xjax::erfc(xjax::array<float>({v}, {1})).to_vector<float>()[0];
    CHECK(e == 0.0f);
    CHECK(!std::signbit(e));
  }
  // lgamma below FLT_MAX near x = 4.05e36 (the baseline set's (x - 1/2) ln x overflowed first)
  for (const float v : {4.0371e36f, 4.05e36f, 1e37f / 2.5f}) {
    const double want = std::lgamma(static_cast<double>(v));
    const double got = xjax::lgamma(xjax::array<float>({v}, {1})).to_vector<double>()[0];
    CHECK(std::isfinite(got));
    CHECK(got == doctest::Approx(want).epsilon(1e-6));
  }
  for (const double v : {2.5564e305, 2e305}) {
    const double got = xjax::lgamma(xjax::array<double>({v}, {1})).to_vector<double>()[0];
    CHECK(got == doctest::Approx(std::lgamma(v)).epsilon(1e-14));
  }
}
