// test_passes.cpp: the jaxpr -> jaxpr passes the planner runs before it plans (src/passes.hpp):
// fold_transposes and inline_calls, each on its own. Each keeps the signature (the same
// invars and constvars), removes what it should and nothing else, and keeps the values, which are
// checked against plain loops in double.
// Also dce (the pass every transformation runs): what it drops and that it returns the jaxpr
// itself when nothing is dead.
#include <algorithm>
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include <xjax/xjax.hpp>

#include "passes.hpp"
#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

std::size_t count_eqns(const xj::Jaxpr& j, xj::Primitive p) {
  std::size_t n = 0;
  for (const auto& e : j.eqns) n += e.prim == p;
  return n;
}

const xj::Eqn& only(const xj::Jaxpr& j, xj::Primitive p) {
  for (const auto& e : j.eqns)
    if (e.prim == p) return e;
  FAIL("no such equation");
  throw;
}

xj::Array run_jaxpr(const xj::Jaxpr& j, const std::vector<xj::Array>& args) {
  return xj::eval_jaxpr(xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(j), {}}, args).at(0);
}

bool same_vars(const std::vector<xj::Var>& a, const std::vector<xj::Var>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].id() != b[i].id()) return false;
  return true;
}

// a^T b for a [k, m] and b [k, n], in double.
std::vector<double> at_b(const std::vector<double>& a, const std::vector<double>& b, int k, int m, int n) {
  std::vector<double> out(static_cast<std::size_t>(m * n), 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) out[static_cast<std::size_t>(i * n + j)] += a[static_cast<std::size_t>(p * m + i)] * b[static_cast<std::size_t>(p * n + j)];
  return out;
}

}  // namespace

TEST_CASE("passes: fold_transposes makes the dot read the transpose's operand, with its dims mapped") {
  xj::Array a = xj::random::normal(xj::random::key(1), {5, 4}, xj::f64);
  xj::Array b = xj::random::normal(xj::random::key(2), {5, 3}, xj::f64);
  auto j = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) { return xj::matmul(xj::transpose(x), y); })(a, b);
  REQUIRE(count_eqns(*j.jaxpr, xj::Primitive::transpose) == 1);
  const xj::Jaxpr folded = xjax::detail::fold_transposes(*j.jaxpr);
  CHECK(count_eqns(folded, xj::Primitive::transpose) == 0);
  CHECK(same_vars(folded.invars, j.jaxpr->invars));
  const xj::Eqn& dot = only(folded, xj::Primitive::dot_general);
  CHECK(std::get<xj::Var>(dot.inputs[0]).id() == j.jaxpr->invars[0].id());  // reads x itself
  const auto& dn = dot.params.get<xj::params::DotGeneral>();
  CHECK(dn.lhs_contracting == std::vector<std::int64_t>{0});  // x's axis 0 is contracted
  const auto want = at_b(a.to_vector<double>(), b.to_vector<double>(), 5, 4, 3);
  const auto got = run_jaxpr(folded, {a, b}).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

// Review findings: the pass walked each add's chain again for every add of it (a 20000-add
// chain that does not tile took 355 s to plan), recursively (100000 adds overflowed the stack),
// and read every equation's first output (an equation with none, a scan of None, crashed).
// Chains of pads of one element into [n], summed one after the other: traced, not run.
TEST_CASE("passes: concatenate_padded_sums on 100000-add chains, tiling or not, and beside equations without outputs") {
  constexpr std::int64_t n = 100000;
  auto chain = [](std::int64_t first) {
    return [first](const xj::Array& v) {
      const xj::Array zero = xj::zeros({}, xj::f32);
      xj::Array total = xj::pad(v, zero, {first}, {n - 1 - first});
      for (std::int64_t i = first + 1; i < n; ++i) total = total + xj::pad(v, zero, {i}, {n - 1 - i});
      return total;
    };
  };
  const xj::Array v = xj::ones({1}, xj::f32);
  const auto tiling = xj::make_jaxpr(chain(0))(v), short_of_it = xj::make_jaxpr(chain(1))(v);
  const xj::Jaxpr joined = xjax::detail::concatenate_padded_sums(*tiling.jaxpr);
  REQUIRE(joined.eqns.size() == 1);
  CHECK(joined.eqns[0].prim == xj::Primitive::concatenate);
  CHECK(joined.eqns[0].inputs.size() == static_cast<std::size_t>(n));
  const xj::Jaxpr kept = xjax::detail::concatenate_padded_sums(*short_of_it.jaxpr);
  CHECK(kept.eqns.size() == short_of_it.jaxpr->eqns.size());
  CHECK(count_eqns(kept, xj::Primitive::concatenate) == 0);
  // a scan whose carry and outputs are None: an equation with no outputs, beside a sum that tiles
  auto body = [](const xj::Array& c, const xj::Array& x) {
    (void)xj::scan([](const xj::None&, const xj::Array&) { return std::make_pair(xj::None{}, xj::None{}); }, xj::None{}, x);
    const xj::Array zero = xj::zeros({}, x.dtype());
    return std::make_pair(c + (xj::pad(x, zero, {0}, {3}) + xj::pad(x * 2.0f, zero, {3}, {0})), xj::None{});
  };
  const xj::Array xs = xj::reshape(xj::arange(6, xj::f32), {2, 3});
  const auto [c, ys] = xj::scan(body, xj::zeros({6}, xj::f32), xs);
  CHECK(c.to_vector<float>() == std::vector<float>{3, 5, 7, 6, 10, 14});
}

TEST_CASE("passes: fold_transposes keeps a transpose that something else reads, or whose fold would reorder the output") {
  xj::Array a = xj::random::normal(xj::random::key(3), {5, 4}, xj::f64);
  xj::Array b = xj::random::normal(xj::random::key(4), {5, 3}, xj::f64);
  auto also_read = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) {
    xj::Array t = xj::transpose(x);
    return xj::matmul(t, y) + xj::sum(t);
  })(a, b);
  const xj::Jaxpr f1 = xjax::detail::fold_transposes(*also_read.jaxpr);
  CHECK(count_eqns(f1, xj::Primitive::transpose) == 1);  // the sum still reads it
  CHECK(std::get<xj::Var>(only(f1, xj::Primitive::dot_general).inputs[0]).id() == also_read.jaxpr->invars[0].id());
  xj::Array c = xj::random::normal(xj::random::key(5), {3, 2, 4}, xj::f64);
  xj::Array m = xj::random::normal(xj::random::key(6), {4, 6}, xj::f64);
  auto reordered = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) {
    return xj::dot_general(xj::transpose(x, {1, 0, 2}), y, xj::Axes{2}, xj::Axes{0});
  })(c, m);
  const xj::Jaxpr f2 = xjax::detail::fold_transposes(*reordered.jaxpr);
  CHECK(count_eqns(f2, xj::Primitive::transpose) == 1);
  CHECK(run_jaxpr(f2, {c, m}).to_vector<double>() == run_jaxpr(*reordered.jaxpr, {c, m}).to_vector<double>());
}

TEST_CASE("passes: inline_calls replaces each checkpoint by its body, renamed per inlining, and lists them") {
  auto block = xj::checkpoint([](const xj::Array& x) { return xj::sin(xj::sin(x)) * 2.0; });
  auto nested = xj::checkpoint([&](const xj::Array& x) { return block(x) - 0.5; });
  auto f = [&](const xj::Array& x) { return block(x) + block(x * 3.0) * nested(x + 1.0); };
  xj::Array x = xj::random::normal(xj::random::key(7), {6}, xj::f64);
  auto j = xj::make_jaxpr(f)(x);
  REQUIRE(count_eqns(*j.jaxpr, xj::Primitive::checkpoint) == 3);
  CHECK(xjax::detail::has_inlinable_call(*j.jaxpr));
  std::vector<xj::Primitive> inlined;
  const xj::Jaxpr flat = xjax::detail::inline_calls(*j.jaxpr, &inlined);
  CHECK(count_eqns(flat, xj::Primitive::checkpoint) == 0);
  CHECK(inlined.size() == 4);  // block twice, nested, and block inside nested
  CHECK(count_eqns(flat, xj::Primitive::sin) == 6);
  CHECK(same_vars(flat.invars, j.jaxpr->invars));
  CHECK_FALSE(xjax::detail::has_inlinable_call(flat));
  std::set<std::uint64_t> defined;  // each inlining defines its own variables
  for (const auto& e : flat.eqns)
    for (const auto& o : e.outputs) CHECK(defined.insert(o.id()).second);
  const auto xs = x.to_vector<double>();
  const auto got = run_jaxpr(flat, {x}).to_vector<double>();
  REQUIRE(got.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto plain = [](double v) { return std::sin(std::sin(v)) * 2.0; };
    const double want = plain(xs[i]) + plain(xs[i] * 3.0) * (plain(xs[i] + 1.0) - 0.5);
    CHECK(got[i] == doctest::Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("passes: inline_calls leaves a jaxpr without inlinable checkpoints as it is") {
  auto identity = xj::checkpoint([](const xj::Array& x) { return x; });  // an empty body: nothing to inline
  xj::Array x = xj::random::normal(xj::random::key(8), {3}, xj::f64);
  auto j = xj::make_jaxpr([&](const xj::Array& v) { return identity(xj::exp(v)); })(x);
  CHECK_FALSE(xjax::detail::has_inlinable_call(*j.jaxpr));
  std::vector<xj::Primitive> inlined;
  const xj::Jaxpr same = xjax::detail::inline_calls(*j.jaxpr, &inlined);
  CHECK(inlined.empty());
  CHECK(str(same) == str(*j.jaxpr));
}

TEST_CASE("passes: inline_calls also inlines custom_jvp_call and custom_vjp_call (their meaning is their jaxpr)") {
  auto square_vjp = xj::custom_vjp([](const xj::Array& x) { return x * x; },
                                   [](const xj::Array& x) { return std::pair{x * x, x}; },
                                   [](const xj::Array& x, const xj::Array& ct) { return std::tuple{ct * x * 2.0}; });
  auto f = [&](const xj::Array& x) { return xj::relu(x) * 3.0 + square_vjp(xj::gelu(x)); };
  xj::Array x = xj::random::normal(xj::random::key(9), {7}, xj::f64);
  auto j = xj::make_jaxpr(f)(x);
  REQUIRE(count_eqns(*j.jaxpr, xj::Primitive::custom_jvp_call) == 2);  // relu, gelu
  REQUIRE(count_eqns(*j.jaxpr, xj::Primitive::custom_vjp_call) == 1);
  CHECK(xjax::detail::has_inlinable_call(*j.jaxpr));
  std::vector<xj::Primitive> inlined;
  const xj::Jaxpr flat = xjax::detail::inline_calls(*j.jaxpr, &inlined);
  CHECK(count_eqns(flat, xj::Primitive::custom_jvp_call) == 0);
  CHECK(count_eqns(flat, xj::Primitive::custom_vjp_call) == 0);
  CHECK(std::count(inlined.begin(), inlined.end(), xj::Primitive::custom_jvp_call) == 2);
  CHECK(std::count(inlined.begin(), inlined.end(), xj::Primitive::custom_vjp_call) == 1);
  const auto xs = x.to_vector<double>();
  const auto got = run_jaxpr(flat, {x}).to_vector<double>();
  REQUIRE(got.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    const double gelu = 0.5 * v * (1.0 + std::tanh(u));
    CHECK(got[i] == doctest::Approx(std::max(v, 0.0) * 3.0 + gelu * gelu).epsilon(1e-12));
  }
  // jit runs the inlined equations (relu fused with its neighbours) and still counts each call
  auto jf = xj::jit(f);
  (void)jf(x);
  xj::reset_eval_counts();
  const auto jitted = jf(x).to_vector<double>();
  CHECK(xj::eval_counts()["custom_jvp_call"] == 2);
  CHECK(xj::eval_counts()["custom_vjp_call"] == 1);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(jitted[i] == doctest::Approx(got[i]).epsilon(1e-12));
}

TEST_CASE("cse: merges equal literals' equations, but never a weakly typed literal's with a strong one's") {
  // Regression (fuzz seed 1921608): a gradient's strong zeros had been merged into the user's weak
  // 0.0, and the gradient came back weakly typed where the jaxpr was evaluated inside a trace.
  const xj::ShapedArray aval{{3}, xj::f32};
  const xj::Array strong = xj::scalar(0.0, xj::f32), weak = xjax::detail::weakly_typed(strong);
  auto zeros_eqn = [&](const xj::Array& literal, const xj::Var& out) {
    return xj::Eqn{xj::Primitive::broadcast_in_dim, {xj::Literal{literal}}, {out},
                   xj::params::BroadcastInDim{.shape = {3}, .broadcast_dimensions = {}}, {}};
  };
  auto j = std::make_shared<xj::Jaxpr>();
  const xj::Var w(aval), s1(aval), s2(aval), w2(aval);
  j->eqns = {zeros_eqn(weak, w), zeros_eqn(strong, s1), zeros_eqn(strong, s2), zeros_eqn(weak, w2)};
  j->outvars = {w, s1, s2, w2};
  const xj::ClosedJaxpr merged = xjax::detail::cse(xj::ClosedJaxpr{j, {}});
  REQUIRE(merged.jaxpr->eqns.size() == 2);
  const auto& outs = merged.jaxpr->outvars;
  CHECK(std::get<xj::Var>(outs[2]) == std::get<xj::Var>(outs[1]));
  CHECK(std::get<xj::Var>(outs[3]) == std::get<xj::Var>(outs[0]));
  CHECK(!(std::get<xj::Var>(outs[1]) == std::get<xj::Var>(outs[0])));
}

TEST_CASE("dce: drops what no used output needs, returns the jaxpr itself when nothing is dead") {
  const xj::Array x = xj::random::normal(xj::random::key(3), {5}, xj::f64);
  const xj::Array c = xj::random::normal(xj::random::key(4), {5}, xj::f64);
  // Two outputs, sin(x) * c and exp(x); c is the jaxpr's one const.
  auto j = xj::make_jaxpr([&](const xj::Array& a) { return std::tuple{xj::sin(a) * c, xj::exp(a)}; })(x);
  REQUIRE(j.jaxpr->constvars.size() == 1);
  const std::size_t n = j.jaxpr->eqns.size();
  std::vector<bool> used_in;
  // Nothing dead: the same shared jaxpr, not a copy, every input read.
  const xj::ClosedJaxpr all = xjax::detail::dce(j, {true, true}, &used_in);
  CHECK(all.jaxpr == j.jaxpr);
  CHECK(used_in == std::vector<bool>{true});
  // exp(x) unused: a new jaxpr without it; the original is untouched.
  const xj::ClosedJaxpr first = xjax::detail::dce(j, {true, false}, &used_in);
  CHECK(first.jaxpr != j.jaxpr);
  CHECK(j.jaxpr->eqns.size() == n);
  CHECK(count_eqns(*first.jaxpr, xj::Primitive::exp) == 0);
  CHECK(count_eqns(*first.jaxpr, xj::Primitive::sin) == 1);
  CHECK(first.jaxpr->outvars.size() == 1);
  CHECK(first.consts.size() == 1);
  xj::typecheck(*first.jaxpr);
  const auto got = xj::eval_jaxpr(first, std::vector<xj::Array>{x}).at(0).to_vector<double>();
  const auto xs = x.to_vector<double>(), cs = c.to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(got[i] == doctest::Approx(std::sin(xs[i]) * cs[i]).epsilon(1e-15));
  // Only exp(x) used: the const (and sin, mul) go.
  const xj::ClosedJaxpr second = xjax::detail::dce(j, {false, true}, &used_in);
  CHECK(second.consts.empty());
  CHECK(second.jaxpr->constvars.empty());
  CHECK(count_eqns(*second.jaxpr, xj::Primitive::sin) == 0);
  CHECK(count_eqns(*second.jaxpr, xj::Primitive::exp) == 1);
  CHECK(used_in == std::vector<bool>{true});
  // No output used: no equation, x not read.
  const xj::ClosedJaxpr none = xjax::detail::dce(j, {false, false}, &used_in);
  CHECK(none.jaxpr->eqns.empty());
  CHECK(used_in == std::vector<bool>{false});
}
