// test_util.hpp: helpers shared by the test files (printing jaxprs, building and comparing arrays).
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xjax/xjax.hpp>

namespace test_util {

namespace xj = xjax;

inline std::string str(const xj::ClosedJaxpr& j) {
  std::ostringstream os;
  os << j;
  return os.str();
}

inline std::string str(const xj::Jaxpr& j) {
  std::ostringstream os;
  os << j;
  return os.str();
}

/// Occurrences of `what` in `s` (JAX's RematTest counts " sin " in the printed jaxpr).
inline std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

inline std::vector<double> vec(const xj::Array& x) { return x.to_vector<double>(); }

inline xj::Array f64v(std::vector<double> v, xj::Shape shape) { return xj::array<double>(v, std::move(shape)); }
inline xj::Array f64v(std::vector<double> v) {
  auto n = static_cast<std::int64_t>(v.size());
  return xj::array<double>(v, {n});
}

/// Element i of `got` within tol (relative, and absolute near 0) of want[i].
inline void check_values(const xj::Array& got, const std::vector<double>& want, double tol = 1e-9) {
  auto g = vec(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == doctest::Approx(want[i]).epsilon(tol).scale(1.0));
  }
}

/// Same aval, and every element within tol (check_values).
inline void check_close(const xj::Array& got, const xj::Array& want, double tol = 1e-9) {
  REQUIRE(got.aval() == want.aval());
  check_values(got, vec(want), tol);
}

/// Whether `what` occurs in `s` (error messages).
inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

/// Whether this run has xjax's buffer arena turned off (XJAX_ARENA_BYTES=0, CI's sanitizer stage):
/// then every buffer goes to the system and nothing is reused.
inline bool arena_off() {
  const char* cap = std::getenv("XJAX_ARENA_BYTES");
  return cap != nullptr && std::string(cap) == "0";
}

/// The message of the error of type E that f throws (a test failure if it throws something else
/// or nothing).
template <class E, class F> std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw the wrong type: " << e.what());
    return {};
  }
  FAIL("did not throw");
  return {};
}

/// Normally distributed values (fixed seed), as an array of `dtype`.
inline xj::Array randn(const xj::Shape& shape, unsigned seed, xj::DType dtype = xj::f64, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(xj::shape_size(shape)));
  for (auto& e : v) e = scale * normal(rng);
  return xj::astype(f64v(v, shape), dtype);
}

/// Central finite differences of a scalar function of plain doubles.
inline std::vector<double> fd_grad(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
                            double eps = 1e-5) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + eps;
    double fp = f(x);
    x[i] = x0 - eps;
    double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

/// Central finite-difference Jacobian (row-major, out x in) of an xjax function evaluated
/// concretely (no transform involved) on a f64 vector.
inline std::vector<double> fd_jacobian(const std::function<xj::Array(const xj::Array&)>& f, const std::vector<double>& x,
                                double eps = 1e-6) {
  std::size_t n = x.size();
  std::size_t m = static_cast<std::size_t>(f(f64v(x)).size());
  std::vector<double> jac(m * n);
  for (std::size_t i = 0; i < n; ++i) {
    auto xp = x, xm = x;
    xp[i] += eps;
    xm[i] -= eps;
    auto fp = vec(f(f64v(xp))), fm = vec(f(f64v(xm)));
    for (std::size_t k = 0; k < m; ++k) jac[k * n + i] = (fp[k] - fm[k]) / (2 * eps);
  }
  return jac;
}

}  // namespace test_util
