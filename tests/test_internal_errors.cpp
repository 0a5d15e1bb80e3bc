// test_internal_errors.cpp: a failure inside a pass (a broken invariant, which no user input
// should cause) surfaces as xj::InternalError naming the pass, never as a bare standard library
// exception; user errors stay what they are, and exceptions thrown by the user's own code (a
// custom_jvp rule, a custom_vjp bwd, a checkpoint policy) pass through unchanged. The malformed
// jaxprs are built with the internal API (transforms/ad.hpp), as a buggy rule would build them.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "../transforms/ad.hpp"
#include "../transforms/higher_order.hpp"
#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

const xj::ShapedArray f64_scalar{{}, xj::f64};

// (a) -> sin(b) + a, where b is defined nowhere: what a pass that lost a variable produces.
xj::ClosedJaxpr reads_undefined_variable() {
  auto j = std::make_shared<xj::Jaxpr>();
  xj::Var a(f64_scalar), b(f64_scalar), s(f64_scalar), out(f64_scalar);
  j->invars = {a};
  j->eqns.push_back(xj::Eqn{xj::Primitive::sin, {b}, {s}, {}, std::source_location::current()});
  j->eqns.push_back(xj::Eqn{xj::Primitive::add, {s, a}, {out}, {}, std::source_location::current()});
  j->outvars = {out};
  return xj::ClosedJaxpr{j, {}};
}

template <class F> std::string internal_error_of(F&& f) {
  try {
    f();
  } catch (const xj::InternalError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an InternalError: ") + e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("internal errors: a pass reading an undefined variable raises InternalError naming the pass") {
  xj::ClosedJaxpr bad = reads_undefined_variable();
  const std::string prefix = "internal error in xjax (this is a bug in xjax, please report it): ";
  std::string jvp = internal_error_of([&] { xj::detail::jvp_jaxpr(bad, {true}, true); });
  INFO(jvp);
  CHECK(jvp.rfind(prefix + "jvp: ", 0) == 0);
  std::string lin = internal_error_of([&] { xj::detail::linearize_jaxpr(bad, {true}); });
  INFO(lin);
  CHECK(lin.rfind(prefix + "jvp: ", 0) == 0);  // the innermost pass is named
  // eval_jaxpr checks the jaxpr it is given before its first plan (it may be built by hand): a
  // TypeError saying what is wrong, not an internal error
  CHECK_THROWS_WITH_AS(xj::eval_jaxpr(bad, std::vector<xj::Array>{xj::scalar(1.0, xj::f64)}),
                       doctest::Contains("used before definition"), xj::TypeError);
  // InternalError is an xj::Error, so `catch (const xj::Error&)` sees every xjax failure.
  CHECK_THROWS_AS(xj::detail::jvp_jaxpr(bad, {true}, true), xj::Error);
}

TEST_CASE("internal errors: dropping an input that is still read is caught where it happens") {
  auto j = std::make_shared<xj::Jaxpr>();
  xj::Var a(f64_scalar), out(f64_scalar);
  j->invars = {a};
  j->eqns.push_back(xj::Eqn{xj::Primitive::sin, {a}, {out}, {}, std::source_location::current()});
  j->outvars = {out};
  std::string msg = internal_error_of([&] { xj::detail::prune_invars(xj::ClosedJaxpr{j, {}}, {false}); });
  INFO(msg);
  CHECK(contains(msg, "prune_invars: an input of type f64[] is dropped but still read"));
}

TEST_CASE("internal errors: user errors and exceptions from user code are not converted") {
  xj::Array x = xj::scalar(0.5, xj::f64);
  // A user error stays its own type.
  CHECK_THROWS_AS(xj::grad([](const xj::Array& v) { return xj::sin(v * xj::ones({2}, xj::f64)); })(x), xj::TypeError);
  // A custom_vjp bwd that throws: its exception reaches the caller unchanged.
  auto bad_bwd = xj::custom_vjp([](const xj::Array& v) { return xj::sin(v); },
                                [](const xj::Array& v) { return std::pair{xj::sin(v), xj::cos(v)}; },
                                [](const xj::Array&, const xj::Array&) -> std::tuple<xj::Array> {
                                  throw std::out_of_range("the user's bwd failed");
                                });
  bool saw = false;
  try {
    xj::grad(bad_bwd)(x);
  } catch (const xj::Error&) {
    FAIL("converted to an xj::Error");
  } catch (const std::out_of_range& e) {
    saw = std::string(e.what()) == "the user's bwd failed";
  }
  CHECK(saw);
  // A custom_jvp rule that throws.
  auto bad_rule = xj::custom_jvp([](const xj::Array& v) { return xj::sin(v); },
                                 [](const std::tuple<xj::Array>&, const std::tuple<xj::Array>&) -> std::pair<xj::Array, xj::Array> {
                                   throw std::invalid_argument("the user's rule failed");
                                 });
  CHECK_THROWS_AS(xj::jvp(bad_rule, std::tuple{x}, std::tuple{x}), std::invalid_argument);
  CHECK_THROWS_WITH(xj::grad(bad_rule)(x), "the user's rule failed");
  // A checkpoint policy that throws something that is not a std::exception.
  xj::Policy bad_policy = [](const xj::Primitive&, std::span<const xj::ShapedArray>, const xj::Params&) -> bool {
    throw 42;
  };
  auto f = xj::checkpoint([](const xj::Array& v) { return xj::sin(xj::sin(v)); }, {.policy = bad_policy});
  CHECK_THROWS_AS(xj::grad(f)(x), int);
}

TEST_CASE("internal errors: a rule reading another primitive's parameter struct names both structs") {
  const xj::Params pad = xj::params::Pad{};
  const std::string msg = internal_error_of([&] { (void)pad.get<xj::params::DotGeneral>(); });
  INFO(msg);
  CHECK(contains(msg, "the equation holds params::Pad, a rule read params::DotGeneral"));
  const xj::Params none;
  CHECK(contains(internal_error_of([&] { (void)none.get<xj::params::Revolve>(); }), "holds params::None, a rule read params::Revolve"));
  xj::Params scan = xj::params::Scan{};
  CHECK(contains(internal_error_of([&] { (void)scan.get<xj::params::Cond>(); }), "holds params::Scan, a rule read params::Cond"));
  CHECK(scan.get_if<xj::params::Scan>() != nullptr);
}

TEST_CASE("params: an equation's parameters copy, move, assign and compare as the struct they hold") {
  // Params holds its struct in place (params.hpp); these are the value semantics a variant had.
  static_assert(std::is_nothrow_default_constructible_v<xj::Params> && std::is_nothrow_move_constructible_v<xj::Params> &&
                std::is_nothrow_move_assignable_v<xj::Params>);
  auto body = std::make_shared<const xj::ClosedJaxpr>(xj::make_jaxpr([](const xj::Array& v) { return xj::sin(v); })(xj::ones({2})));
  xj::params::Scan s{};  // value-initialized: the structs have no member initializers
  s.jaxpr = body;
  s.length = 3;
  xj::Params scan = s;
  CHECK(body.use_count() == 3);  // body, s, scan
  xj::Params copy = scan;
  CHECK(body.use_count() == 4);
  CHECK(copy == scan);
  CHECK(copy.get<xj::params::Scan>().length == 3);
  copy.get<xj::params::Scan>().length = 4;  // a copy, not a view
  CHECK(scan.get<xj::params::Scan>().length == 3);
  CHECK_FALSE(copy == scan);
  xj::Params moved = std::move(copy);
  CHECK(body.use_count() == 4);  // moved, not copied
  CHECK(moved.get<xj::params::Scan>().length == 4);
  // Assigning another struct destroys the one held: its jaxpr is released.
  moved = xj::params::Pad{};
  CHECK(body.use_count() == 3);
  CHECK(moved.get_if<xj::params::Scan>() == nullptr);
  CHECK(moved.get_if<xj::params::Pad>() != nullptr);
  CHECK_FALSE(moved == scan);
  moved = scan;
  CHECK(body.use_count() == 4);
  CHECK(moved == scan);
  const xj::Params& same = moved;
  moved = same;  // self-assignment keeps the struct
  CHECK(body.use_count() == 4);
  CHECK(moved.get<xj::params::Scan>().jaxpr == body);
  // Same struct, different members; different structs with no members.
  xj::params::Scan s2 = s;
  s2.reverse = true;
  CHECK_FALSE(xj::Params(s2) == scan);
  CHECK(xj::Params() == xj::Params(xj::params::None{}));
  CHECK_FALSE(xj::Params() == xj::Params(xj::params::Pad{}));
  CHECK(xj::Params().empty());
}
