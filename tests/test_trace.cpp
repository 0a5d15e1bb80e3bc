// test_trace.cpp: tracing into jaxprs, closure conversion, escaped tracers, eval_jaxpr round trips,
// typecheck, pytrees through make_jaxpr, and tracing on several threads.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

xj::Array eval_single(const xj::ClosedJaxpr& j, std::vector<xj::Array> args) {
  auto outs = xj::eval_jaxpr(j, args);
  REQUIRE(outs.size() == 1);
  return outs[0];
}

}  // namespace

// ---- closure conversion -----------------------------------------------------------------------

TEST_CASE("trace: a captured concrete array becomes a const, shared when used twice") {
  xj::Array w = xj::array<float>({1, 2, 3}, {3});
  auto f = [w](const xj::Array& x) { return x * w + w; };
  auto j = xj::make_jaxpr(f)(xj::zeros({3}));
  CHECK(j->constvars.size() == 1);
  REQUIRE(j.consts.size() == 1);
  CHECK(j.consts[0].raw_data() == w.raw_data());  // the same buffer (no copy), a handle of its own
  CHECK(j.consts[0].is_concrete());
  xj::Array x = xj::array<float>({4, 5, 6}, {3});
  CHECK(eval_single(j, {x}).to_vector<float>() == std::vector<float>{5, 12, 21});
}

TEST_CASE("trace: a captured rank-0 array is a literal, not a const") {
  xj::Array s = xj::scalar(2.0);
  auto j = xj::make_jaxpr([s](const xj::Array& x) { return xj::mul(x, s); })(xj::scalar(0.0));
  CHECK(j->constvars.empty());
  CHECK(j.consts.empty());
  REQUIRE(j->eqns.size() == 1);
  CHECK(std::holds_alternative<xj::Literal>(j->eqns[0].inputs[1]));
}

TEST_CASE("trace: a tracer of an enclosing trace becomes an explicit const input of the inner jaxpr") {
  xj::ClosedJaxpr inner_seen;
  auto outer_fn = [&](const xj::Array& x) {
    // The inner function captures the outer tracer x (twice) and uses it with its own input.
    auto inner = xj::make_jaxpr([x](const xj::Array& y) { return xj::sin(y) * x + x; })(xj::zeros({3}));
    inner_seen = inner;
    CHECK(inner->invars.size() == 1);
    CHECK(inner->constvars.size() == 1);  // x, lifted once
    REQUIRE(inner.consts.size() == 1);
    CHECK(inner.consts[0].is_tracer());
    CHECK(inner.consts[0].impl() == x.impl());
    // Applying the inner jaxpr inside the outer trace inlines it, reading x from the consts.
    std::vector<xj::Array> args{xj::cos(x)};
    return xj::eval_jaxpr(inner, args).at(0);
  };
  auto outer = xj::make_jaxpr(outer_fn)(xj::zeros({3}));
  CHECK(str(inner_seen) ==
        "{ lambda a:f32[3]; b:f32[3]. let\n"
        "    c:f32[3] = sin b\n"
        "    d:f32[3] = mul c a\n"
        "    e:f32[3] = add d a\n"
        "  in (e,) }");
  CHECK(outer->constvars.empty());
  CHECK(str(outer) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = cos a\n"
        "    c:f32[3] = sin b\n"
        "    d:f32[3] = mul c a\n"
        "    e:f32[3] = add d a\n"
        "  in (e,) }");
  xj::typecheck(*outer.jaxpr);
  xj::typecheck(*inner_seen.jaxpr);

  // eval works and agrees with the math.
  std::vector<float> xs{0.1f, -0.7f, 2.0f};
  xj::Array x = xj::array<float>(xs, {3});
  auto got = eval_single(outer, {x}).to_vector<float>();
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(got[i] == doctest::Approx(std::sin(std::cos(xs[i])) * xs[i] + xs[i]).epsilon(1e-6));
}

TEST_CASE("trace: the inner jaxpr with a lifted tracer evaluates with a concrete const") {
  // Replace the (dead) tracer const of an inner jaxpr by a concrete value: the lifted input
  // behaves like any other input.
  xj::ClosedJaxpr inner_seen;
  (void)xj::make_jaxpr([&](const xj::Array& x) {
    inner_seen = xj::make_jaxpr([x](const xj::Array& y) { return y - x; })(xj::zeros({2}));
    return x;
  })(xj::zeros({2}));
  REQUIRE(inner_seen->constvars.size() == 1);
  xj::ClosedJaxpr concrete{inner_seen.jaxpr, {xj::array<float>({10, 20}, {2})}};
  CHECK(eval_single(concrete, {xj::array<float>({1, 2}, {2})}).to_vector<float>() == std::vector<float>{-9, -18});
}

TEST_CASE("trace: three levels: the middle trace lifts the outer tracer, the inner lifts both") {
  xj::ClosedJaxpr inner_seen, middle_seen;
  auto outer = xj::make_jaxpr([&](const xj::Array& x) {
    middle_seen = xj::make_jaxpr([&, x](const xj::Array& y) {
      inner_seen = xj::make_jaxpr([x, y](const xj::Array& z) { return z * x * y; })(xj::zeros({2}));
      std::vector<xj::Array> a{y};
      return xj::eval_jaxpr(inner_seen, a).at(0);
    })(xj::zeros({2}));
    std::vector<xj::Array> a{x};
    return xj::eval_jaxpr(middle_seen, a).at(0);
  })(xj::zeros({2}));
  CHECK(inner_seen->constvars.size() == 2);
  CHECK(middle_seen->constvars.size() == 1);
  CHECK(outer->constvars.empty());
  auto got = eval_single(outer, {xj::array<float>({2, 3}, {2})}).to_vector<float>();
  CHECK(got == std::vector<float>{8, 27});  // x * x * x
}

// ---- escaped tracers --------------------------------------------------------------------------

TEST_CASE("trace: a tracer that leaks out of make_jaxpr raises TracerError naming where it was made") {
  xj::Array leaked;
  auto j = xj::make_jaxpr([&](const xj::Array& x) {
    leaked = xj::sin(x);  // stored outside the traced function
    return leaked;
  })(xj::zeros({3}));
  REQUIRE(leaked.is_tracer());
  CHECK_FALSE(leaked.is_concrete());
  CHECK(leaked.aval() == xj::ShapedArray{{3}, xj::f32});  // the aval stays readable

  auto check_message = [](const std::string& msg) {
    CHECK(msg.find("created at") != std::string::npos);
    CHECK(msg.find("test_trace.cpp") != std::string::npos);
    CHECK(msg.find("f32[3]") != std::string::npos);
  };
  // Used eagerly later.
  CHECK_THROWS_AS(xj::cos(leaked), xj::TracerError);
  try {
    (void)xj::cos(leaked);
  } catch (const xj::TracerError& e) {
    check_message(e.what());
  }
  // Used in another, later trace.
  CHECK_THROWS_AS(xj::make_jaxpr([&](const xj::Array& x) { return x + leaked; })(xj::zeros({3})),
                  xj::TracerError);
  try {
    (void)xj::make_jaxpr([&](const xj::Array& x) { return x + leaked; })(xj::zeros({3}));
  } catch (const xj::TracerError& e) {
    check_message(e.what());
  }
  // Its value is demanded.
  CHECK_THROWS_AS((void)leaked.to_vector<float>(), xj::TracerError);
  try {
    (void)leaked.to_vector<float>();
  } catch (const xj::TracerError& e) {
    check_message(e.what());
  }
  // The jaxpr itself is fine.
  CHECK(eval_single(j, {xj::zeros({3})}).to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("trace: grad's leaked input tracer names the grad template in the installed header as where it was made") {
  // grad's type-independent part is compiled in the library (detail::GradCall); the tracers'
  // location must still be taken in the header, as vjp's is, not in a library source file.
  xj::Array leaked;
  auto g = xj::grad([&](const xj::Array& x) {
    leaked = x;
    return xj::sum(x);
  });
  (void)g(xj::ones({2}));
  REQUIRE(leaked.is_tracer());
  std::string msg;
  try {
    (void)xj::cos(leaked);
  } catch (const xj::TracerError& e) {
    msg = e.what();
  }
  CHECK(msg.find("created at") != std::string::npos);
  CHECK(msg.find("xjax/transforms.hpp") != std::string::npos);
  CHECK(msg.find("api.cpp") == std::string::npos);
}

TEST_CASE("trace: a concrete value demanded of a tracer inside the trace raises TracerError") {
  CHECK_THROWS_AS(xj::make_jaxpr([](const xj::Array& x) {
                    if (x.item<float>() > 0) return xj::sin(x);
                    return x;
                  })(xj::scalar(1.0)),
                  xj::TracerError);
}

TEST_CASE("trace: a tracer of a finished inner trace used in the outer trace raises TracerError") {
  CHECK_THROWS_AS(xj::make_jaxpr([](const xj::Array& x) {
                    xj::Array inner_leak;
                    (void)xj::make_jaxpr([&](const xj::Array& y) {
                      inner_leak = xj::exp(y);
                      return y;
                    })(xj::zeros({2}));
                    return x + inner_leak;
                  })(xj::zeros({2})),
                  xj::TracerError);
}

TEST_CASE("trace: an empty Array passed to an operation is an error, not a crash") {
  xj::Array empty;
  CHECK_FALSE(empty.valid());
  CHECK_THROWS_AS(xj::sin(empty), xj::Error);
  CHECK_THROWS_AS(xj::make_jaxpr([&](const xj::Array& x) { return xj::add(x, empty); })(xj::zeros({1})),
                  xj::Error);
}

// ---- eval_jaxpr round trips -------------------------------------------------------------------

TEST_CASE("trace: eval_jaxpr of a traced jaxpr equals the eager result") {
  auto f = [](const xj::Array& x, const xj::Array& w, const xj::Array& b) {
    xj::Array h = xj::tanh(xj::matmul(x, w) + b);
    return xj::sum(xj::softmax(h, -1) * 3.0f, {1}) + xj::mean(xj::exp(-xj::square(h)));
  };
  xj::Array x = xj::array<float>({0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}, {2, 3});
  xj::Array w = xj::array<float>({1, 2, 3, 4, -1, -2, -3, -4, 0.5f, 0.25f, 0.125f, 0}, {3, 4});
  xj::Array b = xj::array<float>({0.1f, 0.2f, 0.3f, 0.4f}, {4});
  xj::Array eager = f(x, w, b);
  auto j = xj::make_jaxpr(f)(x, w, b);
  CHECK(j->invars.size() == 3);
  xj::typecheck(*j.jaxpr);
  check_close(eval_single(j, {x, w, b}), eager, 1e-6);

  // Tracing at other values gives the same jaxpr; evaluating at other values agrees with eager.
  xj::Array x2 = xj::array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  check_close(eval_single(j, {x2, w, b}), f(x2, w, b), 1e-6);
}

TEST_CASE("trace: eval_jaxpr with integer, bool and shape ops") {
  auto f = [](const xj::Array& x, const xj::Array& i) {
    xj::Array y = xj::reshape(xj::transpose(x), {-1});
    xj::Array picked = xj::take(y, i);
    return std::make_tuple(picked, xj::astype(picked > 2.0, xj::i32), xj::argmax(x, 1));
  };
  xj::Array x = xj::array<float>({1, 5, 2, 4, 3, 0}, {2, 3});
  xj::Array i = xj::array<std::int32_t>({0, -1, 3}, {3});
  auto eager = f(x, i);
  auto j = xj::make_jaxpr(f)(x, i);
  std::vector<xj::Array> args{x, i};
  auto outs = xj::eval_jaxpr(j, args);
  REQUIRE(outs.size() == 3);
  check_close(outs[0], std::get<0>(eager), 1e-6);
  check_close(outs[1], std::get<1>(eager), 1e-6);
  check_close(outs[2], std::get<2>(eager), 1e-6);
  CHECK(outs[0].to_vector<float>() == std::vector<float>{1, 0, 3});  // x.T.ravel() = 1 4 5 3 2 0
  CHECK(outs[2].to_vector<int>() == std::vector<int>{1, 0});
}

TEST_CASE("trace: eval_jaxpr checks its arguments") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  CHECK_THROWS_AS(eval_single(j, {xj::zeros({4})}), xj::TypeError);
  CHECK_THROWS_AS(eval_single(j, {xj::zeros({3}, xj::f64)}), xj::TypeError);
  CHECK_THROWS_AS(xj::eval_jaxpr(j, std::vector<xj::Array>{}), xj::TypeError);
  xj::ClosedJaxpr missing_consts{
      xj::make_jaxpr([w = xj::ones({3})](const xj::Array& x) { return x * w; })(xj::zeros({3})).jaxpr, {}};
  CHECK_THROWS_AS(eval_single(missing_consts, {xj::zeros({3})}), xj::TypeError);
  // A const of the wrong shape: an error, not a kernel reading past its end (raw plans read
  // operands by pointer).
  xj::ClosedJaxpr wrong_const{missing_consts.jaxpr, {xj::ones({2})}};
  CHECK_THROWS_AS(eval_single(wrong_const, {xj::zeros({3})}), xj::TypeError);
}

TEST_CASE("trace: identity and pass-through outputs") {
  auto j = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) { return std::make_pair(y, x); })(
      xj::zeros({2}), xj::zeros({3}));
  CHECK(j->eqns.empty());
  std::vector<xj::Array> args{xj::ones({2}), xj::full({3}, 7.0)};
  auto outs = xj::eval_jaxpr(j, args);
  CHECK(outs[0].to_vector<float>() == std::vector<float>{7, 7, 7});
  CHECK(outs[1].to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("trace: eval_jaxpr inside a trace inlines the equations") {
  auto inner = xj::make_jaxpr([](const xj::Array& x) { return xj::exp(xj::sin(x)); })(xj::zeros({3}));
  auto outer = xj::make_jaxpr([&](const xj::Array& x) {
    std::vector<xj::Array> a{x};
    auto once = xj::eval_jaxpr(inner, a);
    return xj::eval_jaxpr(inner, once).at(0);
  })(xj::zeros({3}));
  std::string s = str(outer);
  CHECK(count(s, "= sin") == 2);
  CHECK(count(s, "= exp") == 2);
  CHECK(outer->eqns.size() == 4);
}

// ---- typecheck --------------------------------------------------------------------------------

TEST_CASE("trace: typecheck accepts traced jaxprs") {
  auto j = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) {
    return xj::concatenate({xj::matmul(x, y), xj::relu(x)}, 1);
  })(xj::zeros({2, 2}), xj::zeros({2, 2}));
  CHECK_NOTHROW(xj::typecheck(*j.jaxpr));
}

TEST_CASE("trace: typecheck rejects a hand-corrupted jaxpr with TypeError") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::cos(xj::sin(x)); })(xj::zeros({3}));
  REQUIRE(j->eqns.size() == 2);

  SUBCASE("an output whose type is not what the shape rule gives") {
    xj::Jaxpr bad = *j.jaxpr;
    xj::Var wrong(xj::ShapedArray{{4}, xj::f32});
    bad.eqns[1].outputs[0] = wrong;
    bad.outvars[0] = wrong;
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
    try {
      xj::typecheck(bad);
    } catch (const xj::TypeError& e) {
      std::string msg = e.what();
      CHECK(msg.find("cos") != std::string::npos);
      CHECK(msg.find("f32[4]") != std::string::npos);
      CHECK(msg.find("test_trace.cpp") != std::string::npos);
    }
  }
  SUBCASE("a variable used before its definition") {
    xj::Jaxpr bad = *j.jaxpr;
    std::swap(bad.eqns[0], bad.eqns[1]);
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
  }
  SUBCASE("an output variable never defined") {
    xj::Jaxpr bad = *j.jaxpr;
    bad.outvars[0] = xj::Var(xj::ShapedArray{{3}, xj::f32});
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
  }
  SUBCASE("a variable defined twice") {
    xj::Jaxpr bad = *j.jaxpr;
    bad.eqns[1].outputs[0] = bad.eqns[0].outputs[0];
    bad.outvars[0] = bad.eqns[0].outputs[0];
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
  }
  SUBCASE("an operand with the wrong dtype for the primitive") {
    xj::Jaxpr bad = *j.jaxpr;
    xj::Var int_in(xj::ShapedArray{{3}, xj::i32});
    bad.invars[0] = int_in;
    bad.eqns[0].inputs[0] = int_in;
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
  }
  SUBCASE("a literal of rank > 0") {
    xj::Jaxpr bad = *j.jaxpr;
    bad.eqns[0].inputs[0] = xj::Literal{xj::zeros({3})};
    CHECK_THROWS_AS(xj::typecheck(bad), xj::TypeError);
  }
  SUBCASE("a corrupted sub-jaxpr in a parameter") {
    xj::Jaxpr bad_inner = *j.jaxpr;
    std::swap(bad_inner.eqns[0], bad_inner.eqns[1]);
    xj::Jaxpr outer;
    xj::Var a(xj::ShapedArray{{3}, xj::f32}), b(xj::ShapedArray{{3}, xj::f32});
    outer.invars = {a};
    xj::params::Checkpoint ps{.jaxpr = std::make_shared<const xj::ClosedJaxpr>(
                                  xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(bad_inner), {}}),
                              .policy = nullptr,
                              .prevent_cse = true,
                              .differentiated = false};
    outer.eqns.push_back(xj::Eqn{xj::Primitive::checkpoint, {a}, {b}, ps, std::source_location::current()});
    outer.outvars = {b};
    CHECK_THROWS_AS(xj::typecheck(outer), xj::TypeError);
    ps.jaxpr = std::make_shared<const xj::ClosedJaxpr>(j);
    outer.eqns[0].params = ps;
    CHECK_NOTHROW(xj::typecheck(outer));
  }
  SUBCASE("parameters of another primitive's struct") {
    xj::Jaxpr bad = *j.jaxpr;
    bad.eqns[0].params = xj::params::Reduce{.axes = {0}};
    std::string msg = message_of<xj::TypeError>([&] { xj::typecheck(bad); });
    CHECK(contains(msg, "params::Reduce"));
    CHECK(contains(msg, "test_trace.cpp"));
  }
}

// ---- pytrees ----------------------------------------------------------------------------------

namespace {

struct Layer {
  BOOST_HANA_DEFINE_STRUCT(Layer, (xj::Array, w), (xj::Array, b));
};

struct Model {
  BOOST_HANA_DEFINE_STRUCT(Model, (Layer, first), (std::vector<Layer>, rest), (xj::None, nothing));
};

}  // namespace

TEST_CASE("trace: tree_flatten / tree_unflatten / tree_map over every container kind") {
  xj::Array a = xj::scalar(1.0), b = xj::scalar(2.0), c = xj::scalar(3.0), d = xj::scalar(4.0);
  using Tree = std::tuple<xj::Array, std::pair<xj::Array, xj::None>, std::vector<xj::Array>,
                          std::array<xj::Array, 1>, std::map<std::string, xj::Array>>;
  Tree t{a, {b, xj::None{}}, {c}, {{d}}, {{"z", xj::scalar(5.0)}, {"y", xj::scalar(6.0)}}};
  auto [leaves, def] = xj::tree_flatten(t);
  REQUIRE(leaves.size() == 6);
  CHECK(def.num_leaves() == 6);
  // Maps flatten in key order.
  std::vector<float> vals;
  for (const auto& l : leaves) vals.push_back(l.item<float>());
  CHECK(vals == std::vector<float>{1, 2, 3, 4, 6, 5});
  CHECK(def.str() == "(*, (*, None), (*), (*), (y: *, z: *))");

  Tree back = xj::tree_unflatten<Tree>(def, leaves);
  CHECK(std::get<0>(back).impl() == a.impl());
  CHECK(std::get<1>(back).first.impl() == b.impl());
  CHECK(std::get<2>(back).size() == 1);
  CHECK(std::get<4>(back).at("z").item<float>() == 5);

  Tree doubled = xj::tree_map([](const xj::Array& x) { return x * 2.0; }, t);
  auto [dl, dd] = xj::tree_flatten(doubled);
  CHECK(dd == def);
  std::vector<float> dv;
  for (const auto& l : dl) dv.push_back(l.item<float>());
  CHECK(dv == std::vector<float>{2, 4, 6, 8, 12, 10});

  // A different structure is a different TreeDef.
  auto [l2, def2] = xj::tree_flatten(std::vector<xj::Array>{a, b});
  CHECK_FALSE(def2 == def);
  CHECK(l2.size() == 2);
  // The wrong number of leaves is an error.
  CHECK_THROWS_AS(xj::tree_unflatten<Tree>(def, std::vector<xj::Array>{a}), xj::Error);
}

TEST_CASE("trace: hana structs and None are pytrees") {
  Model m{Layer{xj::ones({2, 3}), xj::zeros({3})}, {Layer{xj::ones({3, 1}), xj::zeros({1})}}, {}};
  auto [leaves, def] = xj::tree_flatten(m);
  CHECK(leaves.size() == 4);
  // Struct members are named in the structure (maps and structs are matched by key, issue 33).
  CHECK(def.str() == "(first: (w: *, b: *), rest: ((w: *, b: *)), nothing: None)");
  CHECK(xj::detail::child_key(def, 1) == ".rest");
  CHECK(xj::detail::child_key(def.children[1], 0) == "[0]");
  Model back = xj::tree_unflatten<Model>(def, leaves);
  CHECK(back.first.w.impl() == m.first.w.impl());
  CHECK(back.rest.at(0).b.impl() == m.rest.at(0).b.impl());
  Model neg = xj::tree_map([](const xj::Array& x) { return -x; }, m);
  CHECK(neg.first.w.to_vector<float>() == std::vector<float>(6, -1.0f));
}

TEST_CASE("trace: pytrees in and out of make_jaxpr") {
  SUBCASE("tuple and pair") {
    auto f = [](const std::tuple<xj::Array, xj::Array>& t, const xj::Array& z) {
      return std::make_pair(std::get<0>(t) + std::get<1>(t), z);
    };
    auto j = xj::make_jaxpr(f)(std::make_tuple(xj::zeros({2}), xj::zeros({2})), xj::zeros({}, xj::i32));
    CHECK(str(j) == "{ lambda ; a:f32[2] b:f32[2] c:i32[]. let d:f32[2] = add a b in (d, c) }");
  }
  SUBCASE("vector and std::array") {
    auto f = [](const std::vector<xj::Array>& v, const std::array<xj::Array, 2>& a) {
      return std::vector<xj::Array>{v[0] * a[0], v[1] * a[1], v[2]};
    };
    auto j = xj::make_jaxpr(f)(std::vector<xj::Array>{xj::zeros({1}), xj::zeros({2}), xj::zeros({3})},
                               std::array<xj::Array, 2>{xj::zeros({1}), xj::zeros({2})});
    CHECK(j->invars.size() == 5);
    CHECK(j->outvars.size() == 3);
    CHECK(j.out_avals()[2] == xj::ShapedArray{{3}, xj::f32});
    std::vector<xj::Array> args{xj::full({1}, 2), xj::full({2}, 3), xj::full({3}, 4), xj::full({1}, 5),
                                xj::full({2}, 6)};
    auto outs = xj::eval_jaxpr(j, args);
    CHECK(outs[0].to_vector<float>() == std::vector<float>{10});
    CHECK(outs[1].to_vector<float>() == std::vector<float>{18, 18});
    CHECK(outs[2].to_vector<float>() == std::vector<float>{4, 4, 4});
  }
  SUBCASE("map (leaves in key order)") {
    auto f = [](const std::map<std::string, xj::Array>& p) {
      return std::map<std::string, xj::Array>{{"out", p.at("w") - p.at("b")}};
    };
    auto j = xj::make_jaxpr(f)(std::map<std::string, xj::Array>{{"w", xj::zeros({2})}, {"b", xj::zeros({2}, xj::f32)}});
    // "b" sorts before "w": a is b, b is w.
    CHECK(str(j) == "{ lambda ; a:f32[2] b:f32[2]. let c:f32[2] = sub b a in (c,) }");
  }
  SUBCASE("hana struct and None") {
    auto f = [](const Layer& l, const xj::Array& x, xj::None) {
      return std::make_pair(xj::matmul(x, l.w) + l.b, xj::None{});
    };
    Layer l{xj::zeros({3, 2}), xj::zeros({2})};
    auto j = xj::make_jaxpr(f)(l, xj::zeros({4, 3}), xj::None{});
    CHECK(j->invars.size() == 3);
    CHECK(j->outvars.size() == 1);
    CHECK(j.out_avals()[0] == xj::ShapedArray{{4, 2}, xj::f32});
    xj::typecheck(*j.jaxpr);
  }
  SUBCASE("generic lambda") {
    auto j = xj::make_jaxpr([](auto x, auto y) { return x * y; })(xj::zeros({2}), xj::zeros({2}));
    CHECK(str(j) == "{ lambda ; a:f32[2] b:f32[2]. let c:f32[2] = mul a b in (c,) }");
  }
}

// ---- threads ----------------------------------------------------------------------------------

TEST_CASE("trace: tracing and evaluation on two threads at once") {
  constexpr int iters = 200;
  std::atomic<int> failures{0};
  std::atomic<int> done{0};
  auto worker = [&](int id) {
    try {
      for (int it = 0; it < iters; ++it) {
        const float k = static_cast<float>(id + 1);
        xj::Array w = xj::full({4}, k);  // captured const, different per thread
        auto f = [w, id](const xj::Array& x) {
          // The two threads trace different structures.
          xj::Array y = id == 0 ? xj::sin(x) * w : xj::exp(x) + w;
          auto inner = xj::make_jaxpr([y](const xj::Array& z) { return z * y; })(xj::zeros({4}));
          std::vector<xj::Array> a{x};
          return xj::eval_jaxpr(inner, a).at(0);
        };
        std::vector<float> xs{0.0f, 0.5f, 1.0f, static_cast<float>(it % 7)};
        xj::Array x = xj::array<float>(xs, {4});
        auto j = xj::make_jaxpr(f)(x);
        if (j->constvars.size() != 1 || j->eqns.size() != 3) ++failures;
        std::vector<xj::Array> args{x};
        auto got = xj::eval_jaxpr(j, args).at(0).to_vector<float>();
        auto eager = f(x).to_vector<float>();
        for (std::size_t i = 0; i < 4; ++i) {
          float y = id == 0 ? std::sin(xs[i]) * k : std::exp(xs[i]) + k;
          float want = xs[i] * y;
          if (std::abs(got[i] - want) > 1e-5f * (1 + std::abs(want))) ++failures;
          if (std::abs(eager[i] - want) > 1e-5f * (1 + std::abs(want))) ++failures;
        }
        ++done;
      }
    } catch (...) {
      failures += 1000;
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  CHECK(failures.load() == 0);
  CHECK(done.load() == 2 * iters);
}

TEST_CASE("trace: a trace on one thread does not capture eager ops on another") {
  std::atomic<bool> other_ok{false};
  auto j = xj::make_jaxpr([&](const xj::Array& x) {
    std::thread t([&] {
      // No trace is active on this thread: this runs eagerly.
      xj::Array y = xj::sin(xj::zeros({2}));
      other_ok = y.is_concrete() && y.to_vector<float>() == std::vector<float>{0, 0};
    });
    t.join();
    return xj::cos(x);
  })(xj::zeros({2}));
  CHECK(other_ok.load());
  CHECK(j->eqns.size() == 1);
}

TEST_CASE("eval_jaxpr checks a hand-built jaxpr before running it; a ClosedJaxpr without a jaxpr is an Error") {
  // A neg whose output claims f32[100] of an f32[3] input read past the input's buffer (ASan: a
  // heap-buffer-overflow); a slice reading [0, 7) of 3 elements returned garbage past them.
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::cos(xj::sin(x)); })(xj::zeros({3}));
  xj::Jaxpr bad = *j.jaxpr;
  xj::Var wrong(xj::ShapedArray{{100}, xj::f32});
  bad.eqns[1].outputs[0] = wrong;
  bad.outvars[0] = wrong;
  const xj::ClosedJaxpr closed{std::make_shared<const xj::Jaxpr>(bad), {}};
  const std::vector<xj::Array> args{xj::ones({3})};
  CHECK_THROWS_AS((void)xj::eval_jaxpr(closed, args), xj::TypeError);
  auto s = xj::make_jaxpr([](const xj::Array& x) { return xj::slice(x, {0}, {2}); })(xj::zeros({3}));
  xj::Jaxpr long_slice = *s.jaxpr;
  REQUIRE(long_slice.eqns.size() == 1);
  long_slice.eqns[0].params = xj::params::Slice{{0}, {7}, {1}};
  xj::Var seven(xj::ShapedArray{{7}, xj::f32});
  long_slice.eqns[0].outputs[0] = seven;
  long_slice.outvars[0] = seven;
  CHECK_THROWS_AS((void)xj::eval_jaxpr(xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(long_slice), {}}, args), xj::Error);
  // the same jaxpr unchanged still runs
  CHECK(xj::eval_jaxpr(j, args)[0].to_vector<float>() == std::vector<float>(3, std::cos(std::sin(1.0f))));
  const xj::ClosedJaxpr empty;
  CHECK_THROWS_AS((void)xj::eval_jaxpr(empty, {}), xj::Error);
  CHECK_THROWS_AS((void)empty.str(), xj::Error);
  CHECK_THROWS_AS((void)empty.in_avals(), xj::Error);
  CHECK_THROWS_AS(xj::prepare(empty), xj::Error);
}

TEST_CASE("shape rules: a result past 2^63 - 1 elements is a ShapeError (concatenate wrapped to 5 elements); an empty vmap of huge examples computes") {
  const auto four_halves = [](const xj::Array& a, const xj::Array& o) {
    const xj::Array b = xj::broadcast_to(a, {std::int64_t{1} << 62});
    return xj::concatenate({b, b, b, b, o});
  };
  CHECK_THROWS_AS((void)xj::make_jaxpr(four_halves)(xj::zeros({1}), xj::ones({5})), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::jit(four_halves)(xj::zeros({1}), xj::ones({5})), xj::ShapeError);
  // a convolution whose dilated output has more than 2^63 - 1 elements: a ShapeError when it is
  // computed (it built an 8 TiB index table first: std::bad_alloc)
  CHECK_THROWS_AS((void)xj::conv_general_dilated(xj::zeros({1, 1, 2, 2}), xj::zeros({1, 1, 1, 1}), {1, 1}, {{0, 0}, {0, 0}},
                                                 {std::int64_t{1} << 40, std::int64_t{1} << 40}),
                  xj::ShapeError);
  // an empty batch of examples too large to hold: vmap traces the example's shape (JAX computes it)
  const xj::Array examples = xj::zeros({0, std::int64_t{1} << 62, 4}, xj::f32);
  CHECK(xj::vmap([](const xj::Array& e) { return xj::sum(xj::sin(e)); })(examples).shape() == xj::Shape{0});
}

TEST_CASE("tree_unflatten into a type that reads more leaves than the structure's child holds is an Error, not a read past the leaves") {
  // (vector of one leaf, empty vector) has one leaf, as a pair of two Arrays reads two: the
  // second read the front of an empty span
  const auto [leaves, def] = xj::tree_flatten(std::pair{std::vector<xj::Array>{xj::ones({2})}, std::vector<xj::Array>{}});
  REQUIRE(leaves.size() == 1);
  using TwoArrays = std::pair<xj::Array, xj::Array>;
  CHECK_THROWS_AS((void)xj::tree_unflatten<TwoArrays>(def, leaves), xj::Error);
}

TEST_CASE("eval_jaxpr's check reaches bodies: consts that are not their constvars' types, empty Vars and empty bodies are TypeErrors; prepare checks too") {
  // a scan body x + c with c: f32[4] given a const of f32[1] read past its one element
  const xj::Array ones4 = xj::ones({4});
  auto body_of = [&](const xj::Array& c_value) {
    xj::ClosedJaxpr body = xj::make_jaxpr([&](const xj::Array& carry, const xj::Array&) {
      return std::pair{carry + ones4, carry};
    })(xj::zeros({4}), xj::zeros({4}));
    REQUIRE(body.consts.size() == 1);
    body.consts[0] = c_value;
    return body;
  };
  const xj::ClosedJaxpr short_const = body_of(xj::ones({1}));
  const xj::params::Scan ps{.jaxpr = std::make_shared<const xj::ClosedJaxpr>(short_const), .length = 3, .reverse = false, .unroll = 1,
                            .num_consts = 0, .num_carry = 1, .snapshots = 0};
  CHECK_THROWS_AS(xj::typecheck(xj::Jaxpr{{}, {}, {xj::Eqn{xj::Primitive::scan, {}, {}, ps, {}}}, {}}), xj::TypeError);
  // an empty Var as an output
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  xj::Jaxpr with_empty = *j.jaxpr;
  with_empty.outvars[0] = xj::Var();
  CHECK_THROWS_AS((void)xj::eval_jaxpr(xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(with_empty), {}}, std::vector<xj::Array>{xj::ones({3})}),
                  xj::TypeError);
  // prepare (public) checks before it plans: a slice past its operand is refused there too
  auto s = xj::make_jaxpr([](const xj::Array& x) { return xj::slice(x, {0}, {2}); })(xj::zeros({3}));
  xj::Jaxpr long_slice = *s.jaxpr;
  long_slice.eqns[0].params = xj::params::Slice{{0}, {7}, {1}};
  xj::Var seven(xj::ShapedArray{{7}, xj::f32});
  long_slice.eqns[0].outputs[0] = seven;
  long_slice.outvars[0] = seven;
  CHECK_THROWS_AS(xj::prepare(xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(long_slice), {}}), xj::Error);
}
