// test_trust2.cpp: regression tests for issue 33 (trust, round 2): pytree specs and structures
// matched by key, not by position (vmap's in_axes / out_axes, jvp and linearize tangents, custom
// rules' outputs, tree_map over several trees, loop carries and branches); a binomial(s) scan
// keeps its loop-invariant operands by reference; forward-over-reverse of an online(s) while_loop.
// Values are checked against plain loops or closed forms, never against the code path under test.
#include <cmath>
#include <map>
#include <string>
#include <variant>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

using Dict = std::map<std::string, xj::Array>;

struct Layer {
  BOOST_HANA_DEFINE_STRUCT(Layer, (xj::Array, w), (xj::Array, b));
};

/// Row i of x.
xj::Array row(const xj::Array& x, std::int64_t i) { return x[i]; }

std::int64_t residual_bytes(const std::vector<xj::Residual>& rs) {
  std::int64_t n = 0;
  for (const auto& r : rs) n += static_cast<std::int64_t>(r.aval.nbytes());
  return n;
}

}  // namespace

// ---- 1. vmap's in_axes and out_axes match maps by key ----------------------------------------

TEST_CASE("trust2: vmap in_axes {b: 0, z: None} for a map {a, b} is an error naming the keys, not a batch of a") {
  // The repro: the spec's keys were dropped and its entries matched by position, so leaf
  // `a` was batched instead of `b`.
  xj::Array a = randn({3}, 1), b = randn({4, 3}, 2);
  auto f = [](const Dict& d) { return d.at("a") * d.at("b"); };
  using Spec = std::map<std::string, std::optional<int>>;
  std::string msg = message_of<xj::TypeError>([&] {
    (void)xj::vmap(f, std::make_tuple(Spec{{"b", 0}, {"z", std::nullopt}}))(Dict{{"a", a}, {"b", b}});
  });
  CHECK(contains(msg, "in_axes[0]"));
  CHECK(contains(msg, "'z'"));
  CHECK(contains(msg, "'a'"));
  msg = message_of<xj::TypeError>([&] { (void)xj::vmap(f, std::make_tuple(Spec{{"a", 0}, {"c", 0}}))(Dict{{"a", b}, {"b", b}}); });
  CHECK(contains(msg, "'c'"));
  // A subset of the keys is not a prefix either (JAX's rule).
  CHECK_THROWS_AS(xj::vmap(f, std::make_tuple(Spec{{"b", 0}}))(Dict{{"a", a}, {"b", b}}), xj::TypeError);
  // A positional spec for a map is an error: its order is not the user's to rely on.
  CHECK_THROWS_AS(xj::vmap(f, std::make_tuple(std::vector<std::optional<int>>{std::nullopt, 0}))(Dict{{"a", a}, {"b", b}}),
                  xj::TypeError);
  // The right spec batches b and shares a: checked against a loop.
  xj::Array got = xj::vmap(f, std::make_tuple(Spec{{"a", std::nullopt}, {"b", 0}}))(Dict{{"a", a}, {"b", b}});
  std::vector<xj::Array> want;
  for (std::int64_t i = 0; i < 4; ++i) want.push_back(a * row(b, i));
  check_close(got, xj::stack(want), 1e-15);
}

TEST_CASE("trust2: vmap map specs match by key at every depth, with prefixes and None subtrees") {
  using Nested = std::map<std::string, Dict>;
  using Entry = std::variant<int, xj::None, std::map<std::string, std::optional<int>>>;
  xj::Array p = randn({5, 2}, 3), q = randn({2, 5}, 4), r = randn({2}, 5);
  Nested arg{{"zeta", Dict{{"y", p}, {"x", q}}}, {"alpha", Dict{{"k", r}}}};
  auto f = [](const Nested& d) { return d.at("zeta").at("y") * 2.0 + d.at("zeta").at("x") - d.at("alpha").at("k"); };
  // zeta: y batched on 0, x on 1; alpha: a whole subtree shared (None covers it).
  std::map<std::string, Entry> spec{{"zeta", std::map<std::string, std::optional<int>>{{"y", 0}, {"x", 1}}}, {"alpha", xj::None{}}};
  xj::Array got = xj::vmap(f, std::make_tuple(spec))(arg);
  std::vector<xj::Array> want;
  for (std::int64_t i = 0; i < 5; ++i) want.push_back(row(p, i) * 2.0 + xj::transpose(q, {1, 0})[i] - r);
  check_close(got, xj::stack(want), 1e-15);
  // A wrong key one level down names its path.
  std::map<std::string, Entry> bad{{"zeta", std::map<std::string, std::optional<int>>{{"y", 0}, {"w", 1}}}, {"alpha", xj::None{}}};
  std::string msg = message_of<xj::TypeError>([&] { (void)xj::vmap(f, std::make_tuple(bad))(arg); });
  CHECK(contains(msg, "in_axes[0]['zeta']"));
  CHECK(contains(msg, "'w'"));
  // out_axes: a map output gets a map spec, matched by key.
  auto g = [](const xj::Array& x) { return Dict{{"b", x * 2.0}, {"a", xj::sum(x)}}; };
  xj::Array xs = randn({3, 4}, 6);
  Dict out = xj::vmap(g, 0, std::map<std::string, int>{{"a", 0}, {"b", 1}})(xs);
  CHECK(out.at("a").shape() == xj::Shape{3});
  CHECK(out.at("b").shape() == xj::Shape{4, 3});
  check_close(out.at("b"), xj::transpose(xs * 2.0, {1, 0}), 1e-15);
  CHECK_THROWS_AS(xj::vmap(g, 0, std::map<std::string, int>{{"a", 0}, {"c", 1}})(xs), xj::TypeError);
}

TEST_CASE("trust2: a map spec matches a struct by member name; a positional one by declaration order") {
  xj::Array w = randn({4, 3, 2}, 7), b = randn({2}, 8), x = randn({3}, 9);
  auto f = [](const Layer& l, const xj::Array& x) { return xj::matmul(x, l.w) + l.b; };
  // Keys in another order than the members: matched by name.
  auto by_name = xj::vmap(f, std::make_tuple(std::map<std::string, std::optional<int>>{{"b", std::nullopt}, {"w", 0}}, xj::None{}));
  auto by_position = xj::vmap(f, std::make_tuple(std::make_tuple(0, xj::None{}), xj::None{}));
  std::vector<xj::Array> want;
  for (std::int64_t i = 0; i < 4; ++i) want.push_back(xj::matmul(x, row(w, i)) + b);
  check_close(by_name(Layer{w, b}, x), xj::stack(want), 1e-14);
  check_close(by_position(Layer{w, b}, x), xj::stack(want), 1e-14);
  std::string msg = message_of<xj::TypeError>([&] {
    (void)xj::vmap(f, std::make_tuple(std::map<std::string, int>{{"w", 0}, {"bias", 0}}, xj::None{}))(Layer{w, b}, x);
  });
  CHECK(contains(msg, "'bias'"));
}

// ---- every other place two structures meet -----------------------------------------------------

TEST_CASE("trust2: jvp and linearize reject tangents whose map keys differ from the primals'") {
  auto f = [](const Dict& d) { return xj::sin(d.at("a")) * d.at("b"); };
  xj::Array a = randn({3}, 10), b = randn({3}, 11);
  std::string msg = message_of<xj::Error>(
      [&] { (void)xj::jvp(f, std::tuple{Dict{{"a", a}, {"b", b}}}, std::tuple{Dict{{"a", a}, {"c", b}}}); });
  CHECK(contains(msg, "[0]"));
  CHECK(contains(msg, "c"));
  auto [y, lin] = xj::linearize(f, Dict{{"a", a}, {"b", b}});
  CHECK_THROWS_AS(lin(Dict{{"b", a}, {"c", b}}), xj::Error);
  // Same keys: the tangent of a is the one named "a" (closed form).
  auto [y2, t] = xj::jvp(f, std::tuple{Dict{{"a", a}, {"b", b}}}, std::tuple{Dict{{"a", xj::ones_like(a)}, {"b", xj::zeros_like(b)}}});
  check_close(t, xj::cos(a) * b, 1e-15);
  check_close(lin(Dict{{"a", xj::ones_like(a)}, {"b", xj::zeros_like(b)}}), xj::cos(a) * b, 1e-15);
}

TEST_CASE("trust2: custom_vjp's bwd and custom_jvp's rule must return their arguments' and output's structures") {
  auto f = [](const Dict& d) { return d.at("a") * d.at("b"); };
  auto fwd = [](const Dict& d) { return std::pair{d.at("a") * d.at("b"), d}; };
  // The cotangent map names "c" instead of "b": an error, not b's cotangent taken by position.
  auto cv = xj::custom_vjp(f, fwd, [](const Dict& d, const xj::Array& ct) {
    return std::tuple{Dict{{"a", ct * d.at("b")}, {"c", ct * d.at("a")}}};
  });
  xj::Array a = randn({3}, 12), b = randn({3}, 13);
  std::string msg = message_of<xj::Error>([&] { (void)xj::grad([&](const Dict& d) { return xj::sum(cv(d)); })(Dict{{"a", a}, {"b", b}}); });
  CHECK(contains(msg, "custom_vjp"));
  CHECK(contains(msg, "[0]"));
  auto cj = xj::custom_jvp([](const xj::Array& x) { return Dict{{"s", xj::sin(x)}}; },
                           [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                             return std::pair{Dict{{"s", xj::sin(std::get<0>(p))}},
                                              Dict{{"t", xj::cos(std::get<0>(p)) * std::get<0>(t)}}};
                           });
  msg = message_of<xj::Error>([&] { (void)xj::jvp([&](const xj::Array& x) { return cj(x).at("s"); }, std::tuple{a}, std::tuple{b}); });
  CHECK(contains(msg, "custom_jvp"));
  CHECK(contains(msg, "{s}"));
  CHECK(contains(msg, "{t}"));
}

TEST_CASE("trust2: tree_map over several trees matches maps by key and names the first difference") {
  Dict x{{"a", xj::ones({2})}, {"b", xj::ones({2}) * 2.0}}, y{{"a", xj::ones({2}) * 10.0}, {"b", xj::ones({2}) * 20.0}};
  Dict s = xj::tree_map([](const xj::Array& u, const xj::Array& v) { return u + v; }, x, y);
  CHECK(s.at("a").to_vector<float>() == std::vector<float>{11, 11});
  CHECK(s.at("b").to_vector<float>() == std::vector<float>{22, 22});
  Dict z{{"a", xj::ones({2})}, {"c", xj::ones({2})}};
  std::string msg = message_of<xj::Error>([&] { (void)xj::tree_map([](const xj::Array& u, const xj::Array& v) { return u + v; }, x, z); });
  CHECK(contains(msg, "tree_map"));
  CHECK(contains(msg, "{a, b}"));
  CHECK(contains(msg, "{a, c}"));
  // Structs: by member name in the key path.
  Layer l{xj::ones({2}), xj::ones({3})};
  Layer m = xj::tree_map([](const xj::Array& u, const xj::Array& v) { return u * v; }, l, l);
  CHECK(m.b.shape() == xj::Shape{3});
}

TEST_CASE("trust2: scan, while_loop and cond name the key path where structures differ") {
  auto body = [](const Dict& c, const xj::None&) { return std::pair{Dict{{"a", c.at("a")}, {"c", c.at("b")}}, xj::None{}}; };
  Dict init{{"a", xj::ones({2})}, {"b", xj::ones({2})}};
  std::string msg = message_of<xj::TypeError>([&] { (void)xj::scan(body, init, xj::None{}, {.length = 2}); });
  CHECK(contains(msg, "carry"));
  CHECK(contains(msg, "{a, b}"));
  CHECK(contains(msg, "{a, c}"));
  msg = message_of<xj::TypeError>([&] {
    (void)xj::cond(xj::scalar(1, xj::bool_), [](const xj::Array& x) { return Dict{{"a", x}}; },
                   [](const xj::Array& x) { return Dict{{"b", x}}; }, xj::ones({2}));
  });
  CHECK(contains(msg, "{a}"));
  CHECK(contains(msg, "{b}"));
}

// ---- 2. binomial(s) keeps loop invariants by reference ---------------------------------------

TEST_CASE("trust2: a binomial(s) scan keeps its loop-invariant weight once, as the plain scan does") {
  // The repro: a 1024x1024 f64 weight read by every step. The schedule's residuals are s
  // carries, the last step's working set and the weight once (from the argument).
  const std::int64_t d = 1024, L = 16, s = 3;
  xj::Array w = randn({d, d}, 14, xj::f64) * (1.0 / 32.0), x0 = randn({2, d}, 15, xj::f64);
  auto loss = [L](xj::ScanCheckpoints cp) {
    return [cp, L](const xj::Array& w, const xj::Array& x0) {
      auto body = [&w](const xj::Array& c, const xj::None&) { return std::pair{xj::tanh(xj::matmul(c, w)), xj::None{}}; };
      return xj::sum(xj::scan(body, x0, xj::None{}, {.length = L, .checkpoints = cp}).first);
    };
  };
  auto plain = xj::saved_residuals(loss(xj::scan_checkpoints::all()), w, x0);
  auto sched = xj::saved_residuals(loss(xj::scan_checkpoints::binomial(s)), w, x0);
  const xj::ShapedArray weight = w.aval();
  auto count_weight = [&](const std::vector<xj::Residual>& rs) {
    int n = 0;
    for (const auto& r : rs) n += r.aval == weight ? 1 : 0;
    return n;
  };
  CHECK(count_weight(plain) == 1);
  CHECK(count_weight(sched) == 1);
  for (const auto& r : sched)
    if (r.aval == weight) CHECK(contains(r.description, "argument 0"));
  // Bytes: the weight, s snapshots of the carry, one step's residuals (tanh's output, a carry):
  // below the weight plus (s + 2) carries plus the inputs' carry.
  const std::int64_t carry = static_cast<std::int64_t>(x0.aval().nbytes());
  CHECK(residual_bytes(sched) <= static_cast<std::int64_t>(weight.nbytes()) + (s + 3) * carry);
  // And the memory really spent by the vjp's forward pass: not a second weight.
  xj::reset_peak_memory();
  const auto before = xj::memory_stats().live_bytes;
  auto [y, pull] = xj::vjp(loss(xj::scan_checkpoints::binomial(s)), w, x0);
  const auto held = xj::memory_stats().live_bytes - before;
  CHECK(held < static_cast<std::int64_t>(weight.nbytes()) / 2);  // w itself is the caller's
  // The gradient is still right: the unscheduled scan's (a different code path).
  auto [y2, pull2] = xj::vjp(loss(xj::scan_checkpoints::all()), w, x0);
  auto g = pull(xj::scalar(1.0, xj::f64));
  auto g2 = pull2(xj::scalar(1.0, xj::f64));
  check_close(std::get<0>(g), std::get<0>(g2), 1e-12);
  check_close(std::get<1>(g), std::get<1>(g2), 1e-12);
}

TEST_CASE("trust2: a binomial(s) scan computes a value of loop invariants alone once, before the loop (as the plain scan)") {
  // The body reads w * 0.5 (a value of the const alone): the plain scan hoists it before the
  // loop; the schedule kept the last step's copy as an output of revolve_fwd besides (fuzzer
  // seed 2002163: a custom_vjp's residual of a const; seeds 86, 292, 1322 with the fix disabled).
  const std::int64_t d = 64, L = 8;
  xj::Array w = randn({d, d}, 16, xj::f64) * (1.0 / 8.0), x0 = randn({2, d}, 17, xj::f64);
  auto loss = [L](xj::ScanCheckpoints cp) {
    return [cp, L](const xj::Array& w, const xj::Array& x0) {
      auto body = [&w](const xj::Array& c, const xj::None&) { return std::pair{xj::tanh(xj::matmul(c, w * 0.5)), xj::None{}}; };
      return xj::sum(xj::scan(body, x0, xj::None{}, {.length = L, .checkpoints = cp}).first);
    };
  };
  auto sched = xj::saved_residuals(loss(xj::scan_checkpoints::binomial(2)), w, x0);
  int hoisted = 0;
  for (const auto& r : sched)
    if (r.aval == w.aval()) {
      CHECK_FALSE(contains(r.description, "revolve_fwd"));  // no last-step copy
      hoisted += contains(r.description, "output of mul") ? 1 : 0;
    }
  // w * 0.5 once, computed before the loop (besides w itself, which the recomputing steps read).
  CHECK(hoisted == 1);
  auto g = xj::grad(loss(xj::scan_checkpoints::binomial(2)), xj::argnums_tuple<0, 1>)(w, x0);
  auto want = xj::grad(loss(xj::scan_checkpoints::all()), xj::argnums_tuple<0, 1>)(w, x0);
  check_close(std::get<0>(g), std::get<0>(want), 1e-12);
  check_close(std::get<1>(g), std::get<1>(want), 1e-12);
}

TEST_CASE("trust2: a binomial(s) scan whose steps need no residual stores no carries (fuzzer seed 3009108)") {
  // c' = 0.5 c + w: the tangent step needs nothing from the forward one, so the backward sweep
  // never replays a step; the schedule kept s snapshots of the carry anyway.
  xj::Array w = randn({256}, 18, xj::f64), x0 = randn({256}, 19, xj::f64);
  auto loss = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& w, const xj::Array& x0) {
      auto body = [&w](const xj::Array& c, const xj::None&) { return std::pair{c * 0.5 + w, xj::None{}}; };
      return xj::sum(xj::scan(body, x0, xj::None{}, {.length = 10, .checkpoints = cp}).first);
    };
  };
  auto plain = xj::saved_residuals(loss(xj::scan_checkpoints::all()), w, x0);
  auto sched = xj::saved_residuals(loss(xj::scan_checkpoints::binomial(3)), w, x0);
  CHECK(residual_bytes(sched) == residual_bytes(plain));
  auto g = xj::grad(loss(xj::scan_checkpoints::binomial(3)), xj::argnums_tuple<0, 1>)(w, x0);
  // Closed form: d/dw sum(c_10) = sum_{k<10} 0.5^k per element, d/dx0 = 0.5^10.
  double dw = 0;
  for (int k = 0; k < 10; ++k) dw += std::pow(0.5, k);
  check_close(std::get<0>(g), xj::ones({256}, xj::f64) * dw, 1e-14);
  check_close(std::get<1>(g), xj::ones({256}, xj::f64) * std::pow(0.5, 10), 1e-14);
}

// ---- the online(s) lead: forward over reverse --------------------------------------------------

TEST_CASE("trust2: forward over reverse of an online(s) while_loop: exact where no tangent reaches the loop, else an error") {
  auto cp = xj::scan_checkpoints::online(3);
  // A loop of 5 steps of c' = 0.5 c + sin(c) w on a carry (i, c).
  auto loop = [cp](const xj::Array& c0, const xj::Array& w) {
    using C = std::pair<xj::Array, xj::Array>;
    auto cond = [](const C& ic) { return ic.first < 5.0; };
    auto body = [&w](const C& ic) { return C{ic.first + 1.0, 0.5 * ic.second + xj::sin(ic.second) * w}; };
    return xj::while_loop(cond, body, C{xj::scalar(0.0, xj::f64), c0}, {.checkpoints = cp}).second;
  };
  xj::Array c0 = xj::array<double>({0.3, -0.2}, {2}), w = xj::array<double>({0.7, 0.4}, {2});
  xj::Array y = xj::array<double>({0.5, 1.5}, {2}), t = xj::array<double>({1.0, -2.0}, {2});
  // f(c0, y) = sum(loop(c0, w)) + sum(y^3): the Hessian-vector product along (0, t) never
  // reaches the loop's reverse sweep (its tangent is 0 there). The direction is a symbolic zero
  // for c0 only through jvp of a function of y alone, so write it so:
  auto g_y = [&](const xj::Array& yy) {
    return std::get<1>(xj::grad([&](const xj::Array& c, const xj::Array& v) { return xj::sum(loop(c, w)) + xj::sum(v * v * v); },
                                xj::argnums_tuple<0, 1>)(c0, yy));
  };
  auto [gy, hvp] = xj::jvp(g_y, std::tuple{y}, std::tuple{t});
  check_close(gy, 3.0 * y * y, 1e-14);   // d/dy sum(y^3) = 3 y^2
  check_close(hvp, 6.0 * y * t, 1e-14);  // its derivative along t: 6 y t
  // Along c0 the tangent reaches the loop: the documented TransformError, not a wrong number.
  auto g_c = [&](const xj::Array& c) { return xj::grad([&](const xj::Array& cc) { return xj::sum(loop(cc, w)); })(c); };
  CHECK_THROWS_AS(xj::jvp(g_c, std::tuple{c0}, std::tuple{t}), xj::TransformError);
  CHECK_THROWS_AS(xj::hessian([&](const xj::Array& c) { return xj::sum(loop(c, w)); })(c0), xj::TransformError);
}

TEST_CASE("trust2: jit keys a map argument by its exact keys (a key holding ': *, ' is not two keys)") {
  // The cache key printed the structure as text: {"x": a, "y: *, z": b} and {"x: *, y": a, "z": b}
  // both read "(x: *, y: *, z: *)" with two f32[2] leaves, and shared a trace: the second call ran
  // the first one's program.
  int traces = 0;
  auto f = xj::jit([&traces](const Dict& d) {
    ++traces;
    xj::Array s = xj::zeros({2});
    double position = 1;
    for (const auto& [k, v] : d) s = s + v * (static_cast<double>(k.size()) * position++);
    return s;
  });
  xj::Array one = xj::ones({2});
  check_close(f(Dict{{"x", one}, {"y: *, z", one}}), one * (1.0 * 1 + 7.0 * 2), 1e-15);
  check_close(f(Dict{{"x: *, y", one}, {"z", one}}), one * (7.0 * 1 + 1.0 * 2), 1e-15);
  CHECK(traces == 2);
}
