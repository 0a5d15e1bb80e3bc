// test_gradcheck.cpp: the numeric gradient-check suite (table in gradcheck_table.cpp).
// Every row is checked with xj::check_grads at order 2 (which checks order 1 first and recurses
// fwd-over-fwd, rev-over-fwd, fwd-over-rev and rev-over-rev), in f32 and f64; rows of
// non-differentiable ops also check that their jvp and vjp are exactly zero. A coverage test
// fails when a primitive of XJAX_FOR_EACH_PRIMITIVE has no row.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "gradcheck_table.hpp"

namespace xj = xjax;
namespace gc = xjax::gradcheck;

TEST_CASE("gradcheck: every primitive has a row") {
  std::vector<bool> covered(static_cast<std::size_t>(xj::num_primitives), false);
  for (const auto& r : gc::table())
    for (auto p : r.covers) covered[static_cast<std::size_t>(p)] = true;
#define XJAX_GRADCHECK_COVERED(name) \
  CHECK_MESSAGE(covered[static_cast<std::size_t>(xj::Primitive::name)], "no gradcheck row covers primitive " #name);
  XJAX_FOR_EACH_PRIMITIVE(XJAX_GRADCHECK_COVERED)
#undef XJAX_GRADCHECK_COVERED
}

TEST_CASE("gradcheck: row names are unique and each row's jaxpr holds the primitives it claims") {
  std::set<std::string> names;
  for (const auto& r : gc::table()) {
    INFO("row ", r.name);
    CHECK(names.insert(r.name).second);
    CHECK_FALSE(r.covers.empty());
    auto traced = gc::traced_primitives(r);
    for (auto p : r.covers) {
      INFO("primitive ", xj::primitive_name(p));
      CHECK(std::find(traced.begin(), traced.end(), p) != traced.end());
    }
  }
}

TEST_CASE("gradcheck: inputs are deterministic") {
  for (const auto& r : gc::table()) {
    auto a = r.inputs(xj::f64), b = r.inputs(xj::f64);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].to_vector<double>() == b[i].to_vector<double>());
  }
}

TEST_CASE("gradcheck: check_grads at orders 1 and 2, fwd and rev, f32 and f64, for every row") {
  for (const auto& r : gc::table()) {
    for (xj::DType d : gc::dtypes) {
      INFO("row ", r.name, " dtype ", std::string(xj::dtype_name(d)));
      if (r.kind != gc::Kind::blocked) {
        gc::Fn fn = r.fn;
        CHECK_NOTHROW(xj::check_grads([fn](const std::vector<xj::Array>& xs) { return fn(xs); }, std::tuple{r.inputs(d)},
                                      gc::options(d, r.max_order, r.modes)));
      }
      if (r.kind != gc::Kind::differentiable) CHECK(gc::max_abs_derivative(r, d) == 0.0);
    }
  }
}

TEST_CASE("gradcheck: a wrong derivative is caught") {
  // The suite's checks are not vacuous: stop_gradient(x) * x has AD derivative x, not 2x.
  auto f = [](const xj::Array& x) { return xj::stop_gradient(x) * x; };
  auto x = xj::array<double>({0.5, 1.5, -2.0}, {3});
  CHECK_THROWS_AS(xj::check_grads(f, std::tuple{x}, gc::options(xj::f64, 1, {xj::fwd})), xj::GradCheckError);
  CHECK_THROWS_AS(xj::check_grads(f, std::tuple{x}, gc::options(xj::f64, 1, {xj::rev})), xj::GradCheckError);
  auto x32 = xj::array<float>({0.5f, 1.5f, -2.0f}, {3});
  CHECK_THROWS_AS(xj::check_grads(f, std::tuple{x32}, gc::options(xj::f32, 1, {xj::fwd})), xj::GradCheckError);
}

TEST_CASE("check_grads: JAX's tolerances (the compared arrays' dtypes, times their size) and the largest discrepancy reported") {
  // f64 in, f32 out: JAX compares the f32 tangents with f32's 2e-3 (times 3 elements); the f32
  // difference quotient is off by about 7e-5 here, which f64's 1e-5 (the inputs' dtype) rejected.
  auto to_f32 = [](const xj::Array& v) { return xj::astype(xj::sin(v), xj::f32); };
  CHECK_NOTHROW(xj::check_grads(to_f32, std::tuple{xj::array<double>({0.5, 1.0, 1.5}, {3})}, {.order = 1}));
  // the bound scales with the size: an error of 2.5e-5 in one of 4 f64 elements passes (4e-5
  // allowed), and fails per element (1e-5)
  // (a tangent rule off by a constant delta in element 3, whatever the direction)
  auto off_by = [](double delta) {
    return xj::custom_jvp([](const xj::Array& v) { return v * 1.0; },
                          [delta](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                            return std::pair{std::get<0>(p) * 1.0, std::get<0>(t) + xj::array<double>({0.0, 0.0, 0.0, delta}, {4})};
                          });
  };
  const xj::Array ones4 = xj::array<double>({1.0, 1.0, 1.0, 1.0}, {4});
  const double delta = 2.5e-5;
  CHECK_NOTHROW(xj::check_grads(off_by(delta), std::tuple{ones4}, {.order = 1, .modes = {xj::fwd}}));
  CHECK_THROWS_AS(xj::check_grads(off_by(delta), std::tuple{ones4}, {.order = 1, .modes = {xj::fwd}, .per_element = true}),
                  xj::GradCheckError);
  // two elements wrong, the second by far more: the message names the second
  auto wrong = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                              [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                                const xj::Array v = std::get<0>(p);
                                return std::pair{xj::sin(v), std::get<0>(t) * xj::cos(v) * xj::array<double>({1.01, 1.0, 2.0}, {3})};
                              });
  try {
    xj::check_grads(wrong, std::tuple{xj::array<double>({0.1, 0.2, 0.3}, {3})}, {.order = 1, .modes = {xj::fwd}});
    FAIL("check_grads passed a wrong derivative");
  } catch (const xj::GradCheckError& e) {
    CHECK(std::string(e.what()).find("element 2") != std::string::npos);
  }
}

TEST_CASE("check_grads: an output infinite at both points differs by 0 (JAX's _safe_subtract); zero tolerances are numpy's defaults") {
  const xj::Array x = xj::array<double>({0.5, -1.3, 2.0, 3.0}, {4});
  const xj::Array mask = xj::array({true, false, true, false});
  CHECK_NOTHROW(xj::check_grads([mask](const xj::Array& a) { return xj::where(mask, a, -INFINITY); }, std::tuple{x}));
  // atol = rtol = 0: JAX passes neither to numpy's assert_allclose, whose rtol is then 1e-7
  CHECK_NOTHROW(xj::check_grads([](const xj::Array& a) { return a * 3.0; }, std::tuple{x}, {.order = 1, .atol = 0.0, .rtol = 0.0}));
  // (sin's central difference with eps = 1e-2 is off by about eps^2 / 6 = 2e-5 relative: past 1e-7)
  CHECK_THROWS_AS(xj::check_grads([](const xj::Array& a) { return xj::sin(a); }, std::tuple{x},
                                  {.order = 1, .atol = 0.0, .rtol = 0.0, .eps = 1e-2}),
                  xj::GradCheckError);
}

TEST_CASE("gradcheck: the batching oracle for every row (vmap against a loop, random in_axes)") {
  for (const auto& r : gc::table())
    for (xj::DType d : gc::dtypes)
      for (unsigned seed : {1u, 2u, 3u}) {
        gc::BatchingCheck b = gc::batching_check(r, d, seed);
        INFO("row ", r.name, " dtype ", std::string(xj::dtype_name(d)), " in_axes ", b.in_axes);
        CHECK(b.value_error <= gc::batching_tolerance(d));
        CHECK(b.grad_error <= gc::batching_tolerance(d));
      }
}
