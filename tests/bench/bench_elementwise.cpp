// K2 (issue 28): each elementwise primitive's vectorized kernel against a plain scalar loop of
// the C library's function (Boost.Math's where <cmath> has none: digamma, erf_inv) on the same
// 1M f32 inputs, one thread. xjax's time is one eager primitive including its output's
// allocation; the loop writes into a preallocated vector. Issue 28's target: at least 2x faster
// than the loop (ratio <= 0.5) for the f32 transcendental ops.
#include <boost/math/special_functions/digamma.hpp>
#include <boost/math/special_functions/erf.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "xjax/xjax.hpp"

namespace {

namespace xj = xjax;

/// One op: its xjax spelling, the scalar function and the interval its inputs are drawn from.
struct Op {
  std::string name;
  std::function<xj::Array(const xj::Array&, const xj::Array&)> xjax;
  std::function<float(float, float)> scalar;
  float lo, hi;
};

std::vector<float> uniform(std::int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = u(rng);
  return v;
}

std::vector<Op> ops() {
  using A = const xj::Array&;
  auto unary = [](std::string name, xj::Array (*f)(A, std::source_location), float (*g)(float), float lo, float hi) {
    return Op{std::move(name), [f](A x, A) { return f(x, std::source_location::current()); }, [g](float x, float) { return g(x); }, lo, hi};
  };
  auto binary = [](std::string name, xj::Array (*f)(A, A, std::source_location), float (*g)(float, float), float lo, float hi) {
    return Op{std::move(name), [f](A x, A y) { return f(x, y, std::source_location::current()); }, g, lo, hi};
  };
  return {
      unary("exp", xj::exp, std::exp, -5, 5),
      unary("log", xj::log, std::log, 0.1f, 10),
      unary("tanh", xj::tanh, std::tanh, -3, 3),
      unary("sin", xj::sin, std::sin, -3, 3),
      unary("asin", xj::asin, std::asin, -0.95f, 0.95f),
      unary("atan", xj::atan, std::atan, -5, 5),
      unary("sinh", xj::sinh, std::sinh, -3, 3),
      unary("acosh", xj::acosh, std::acosh, 1.05f, 5),
      unary("atanh", xj::atanh, std::atanh, -0.95f, 0.95f),
      unary("erf", xj::erf, std::erf, -3, 3),
      unary("erfc", xj::erfc, std::erfc, -3, 3),
      unary("cbrt", xj::cbrt, std::cbrt, -5, 5),
      unary("exp2", xj::exp2, std::exp2, -5, 5),
      unary("log2", xj::log2, std::log2, 0.1f, 10),
      unary("lgamma", xj::lgamma, std::lgamma, 0.1f, 10),
      Op{"digamma", [](A x, A) { return xj::digamma(x); }, [](float x, float) { return boost::math::digamma(x); }, 0.1f, 10},
      Op{"erf_inv", [](A x, A) { return xj::erf_inv(x); }, [](float x, float) { return boost::math::erf_inv(x); }, -0.95f, 0.95f},
      unary("floor", xj::floor, std::floor, -5, 5),
      binary("atan2", xj::atan2, std::atan2, -3, 3),
      binary("pow", xj::pow, std::pow, 0.5f, 2),
      binary("rem", xj::rem, std::fmod, 0.5f, 5),
      binary("nextafter", xj::nextafter, std::nextafter, -3, 3),
  };
}

}  // namespace

namespace bench {

void bench_elementwise(std::vector<Row>& rows, std::int64_t n, int reps) {
  for (const Op& op : ops()) {
    const std::vector<float> a = uniform(n, op.lo, op.hi, 91), b = uniform(n, op.lo, op.hi, 92);
    const xj::Array x = xj::array<float>(a, {n}), y = xj::array<float>(b, {n});
    std::vector<float> want(a.size());
    xj::Array got;
    const double xt = median_seconds([&] { got = op.xjax(x, y); }, reps);
    const double rt = median_seconds([&] {
      for (std::size_t i = 0; i < a.size(); ++i) want[i] = op.scalar(a[i], b[i]);
    }, reps);
    const std::vector<float> g = got.to_vector<float>();
    const double err = rel_err(g.data(), want.data(), n);
    const std::string what = fmt("%.0f f32 elements", double(n));
    rows.push_back({"K2", op.name, "xjax", xt, xt / rt, 0, 0, 0, what + fmt("; max |xjax - loop| / max |loop| %.1e", err)});
    rows.push_back({"K2", op.name, "scalar loop", rt, 1.0, 0, 0, 0, what});
  }
}

}  // namespace bench
