// test_vmap.cpp: vmap (issue 13). Every batched result is checked against a plain loop over the
// batch members (f applied to each slice, stacked), never against vmap itself.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <xjax/xjax.hpp>

#include "internal.hpp"  // detail::bind1 for pad (no user op)
#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

/// Slice i of x along `axis`.
xj::Array member(const xj::Array& x, std::int64_t i, std::int64_t axis = 0) {
  return xj::squeeze(xj::slice_in_dim(x, i, i + 1, 1, axis), {axis});
}

/// Bit-identical arrays (same aval and values).
void check_equal(const xj::Array& got, const xj::Array& want) {
  REQUIRE(got.aval() == want.aval());
  CHECK(vec(got) == vec(want));
}

/// f applied to each member (slices along axis 0) and stacked along out_axis: the reference.
xj::Array loop(const std::function<xj::Array(const xj::Array&)>& f, const xj::Array& xs, std::int64_t axis = 0,
               std::int64_t out_axis = 0) {
  std::vector<xj::Array> ys;
  for (std::int64_t i = 0; i < xs.dim(axis); ++i) ys.push_back(f(member(xs, i, axis)));
  return xj::stack(ys, out_axis);
}

struct Mlp {
  BOOST_HANA_DEFINE_STRUCT(Mlp, (xj::Array, w1), (xj::Array, b1), (xj::Array, w2));
};

xj::Array mlp_loss(const Mlp& p, const xj::Array& x, const xj::Array& y) {
  xj::Array h = xj::tanh(xj::matmul(x, p.w1) + p.b1);
  return xj::sum(xj::square(xj::matmul(h, p.w2) - y));
}

}  // namespace

TEST_CASE("vmap: elementwise, matmul by unbatched weights, reductions and shape ops equal a loop") {
  xj::Array xs = randn({5, 3, 4}, 1);
  xj::Array w = randn({4, 2}, 2);
  auto f = [&](const xj::Array& x) {
    xj::Array h = xj::tanh(xj::matmul(x, w)) * 2.0 + xj::sin(x)[0][0];   // dot, broadcast, gather-free index
    xj::Array t = xj::transpose(h, {1, 0});                              // [2, 3]
    xj::Array r = xj::reshape(t, {6});
    return xj::concatenate({r, xj::sum(x, {1}), xj::max(x, {0})}) + xj::mean(x);
  };
  check_close(xj::vmap(f)(xs), loop(f, xs), 1e-12);
  // Batch axis 1 and 2 of the input, and output axis 1.
  check_close(xj::vmap(f, 1)(xj::transpose(xs, {1, 0, 2})), loop(f, xs), 1e-12);
  check_close(xj::vmap(f, -1)(xj::transpose(xs, {1, 2, 0})), loop(f, xs), 1e-12);
  check_close(xj::vmap(f, 0, 1)(xs), loop(f, xs, 0, 1), 1e-12);
}

TEST_CASE("vmap: the batch dim stays where it is through a chain of elementwise ops and a matmul") {
  // No transpose is needed when the batch is a free dim of the matmul's lhs.
  xj::Array w = randn({4, 4}, 3);
  auto f = [&](const xj::Array& x) { return xj::tanh(xj::matmul(xj::exp(x) + 1.0, w)); };
  auto j = xj::make_jaxpr(xj::vmap(f))(randn({8, 4}, 4));
  std::string s = str(j);
  INFO(s);
  CHECK(count(s, "transpose[") == 0);
  check_close(xj::vmap(f)(randn({8, 4}, 4)), loop(f, randn({8, 4}, 4)), 1e-12);
}

TEST_CASE("vmap: a batched broadcast puts the batch axis first, so it meets batch-0 operands without a transpose") {
  // Regression (fuzz seed 24102849): the rule put a broadcast scalar's batch axis last, so
  // s * v + v transposed between the broadcast and v, which split a fused bf16 chain (one more
  // rounding than the loop). JAX's rule puts it first.
  auto f = [](const xj::Array& s, const xj::Array& v) { return s * v + v; };
  xj::Array ss = randn({5}, 11), vs = randn({5, 3, 2}, 12);
  std::string printed = str(xj::make_jaxpr(xj::vmap(f))(ss, vs));
  INFO(printed);
  CHECK(count(printed, "transpose[") == 0);
  CHECK(count(printed, "broadcast_dimensions=(0,)") == 1);
  std::vector<xj::Array> members;
  for (std::int64_t i = 0; i < 5; ++i) members.push_back(f(member(ss, i), member(vs, i)));
  check_close(xj::vmap(f)(ss, vs), xj::stack(members), 1e-12);
  // The operand batched at a later axis: moved to the front first, the values unchanged.
  auto g = [](const xj::Array& r) { return xj::broadcast_to(r, {4, 3}); };
  xj::Array rs = randn({3, 6}, 13);  // six rows of 3, batched at axis 1
  std::vector<xj::Array> rows;
  for (std::int64_t i = 0; i < 6; ++i) rows.push_back(g(member(rs, i, 1)));
  check_close(xj::vmap(g, 1)(rs), xj::stack(rows), 1e-15);
  check_close(xj::vmap(g, 1, 2)(rs), xj::stack(rows, 2), 1e-15);
}

TEST_CASE("vmap: in_axes per argument (None, negative, pytrees) and axis_size") {
  xj::Array xs = randn({4, 3}, 5), y = randn({3}, 6), zs = randn({3, 4}, 7);
  auto f = [](const xj::Array& x, const xj::Array& y, const xj::Array& z) { return x * y + xj::exp(z); };
  std::vector<xj::Array> rows;
  for (std::int64_t i = 0; i < 4; ++i) rows.push_back(f(member(xs, i), y, member(zs, i, 1)));
  xj::Array want = xj::stack(rows);
  check_close(xj::vmap(f, std::tuple{0, xj::None{}, 1})(xs, y, zs), want, 1e-12);
  check_close(xj::vmap(f, std::tuple{0, xj::None{}, -1})(xs, y, zs), want, 1e-12);

  // A Hana struct argument covered by one int, a std::tuple argument with a per-element spec.
  Mlp p{randn({3, 5}, 8), randn({5}, 9), randn({5, 2}, 10)};
  xj::Array x = randn({6, 3}, 11), yy = randn({6, 2}, 12);
  auto per = xj::vmap(mlp_loss, std::tuple{xj::None{}, 0, 0})(p, x, yy);
  std::vector<double> loop_loss;
  for (std::int64_t i = 0; i < 6; ++i)
    loop_loss.push_back(mlp_loss(p, member(x, i), member(yy, i)).item<double>());
  check_values(per, loop_loss, 1e-12);
  auto g = [](const std::tuple<xj::Array, xj::Array>& t) { return std::get<0>(t) * std::get<1>(t); };
  xj::Array a = randn({4, 2}, 13), b = randn({2}, 14);
  // (std::make_tuple: `std::tuple{std::tuple{...}}` would copy the inner tuple, not nest it.)
  check_close(xj::vmap(g, std::make_tuple(std::tuple{0, xj::None{}}))(std::tuple{a, b}),
              loop([&](const xj::Array& r) { return r * b; }, a), 1e-12);

  // Nothing batched: axis_size says how many copies.
  xj::Array c = xj::vmap([](const xj::Array& v) { return v * 2.0; }, xj::None{}, 0, {.axis_size = 3})(y);
  check_equal(c, xj::stack({y * 2.0, y * 2.0, y * 2.0}));
}

TEST_CASE("vmap: errors name the arguments and sizes") {
  auto f = [](const xj::Array& x, const xj::Array& y) { return x + y; };
  std::string msg = message_of<xj::ShapeError>([&] { (void)xj::vmap(f)(xj::zeros({3, 2}), xj::zeros({4, 2})); });
  CHECK(contains(msg, "argument 0"));
  CHECK(contains(msg, "argument 1"));
  CHECK(contains(msg, "3"));
  CHECK(contains(msg, "4"));
  msg = message_of<xj::ShapeError>([&] { (void)xj::vmap(f, 2)(xj::zeros({3, 2}), xj::zeros({3, 2})); });
  CHECK(contains(msg, "argument 0"));
  CHECK(contains(msg, "out of range"));
  msg = message_of<xj::TypeError>([&] { (void)xj::vmap(f, std::tuple{0, 0, 0})(xj::zeros({3}), xj::zeros({3})); });
  CHECK(contains(msg, "3 entries for 2 arguments"));
  auto g = [](const std::tuple<xj::Array, xj::Array>& t) { return std::get<0>(t); };
  msg = message_of<xj::TypeError>(
      [&] { (void)xj::vmap(g, std::make_tuple(std::tuple{0, 0, 0}))(std::tuple{xj::zeros({3}), xj::zeros({3})}); });
  CHECK(contains(msg, "tree prefix"));
  msg = message_of<xj::ShapeError>([&] { (void)xj::vmap(f, xj::None{})(xj::zeros({3}), xj::zeros({3})); });
  CHECK(contains(msg, "axis_size"));
  msg = message_of<xj::TransformError>([&] { (void)xj::vmap(f, 0, xj::None{})(xj::zeros({3}), xj::zeros({3})); });
  CHECK(contains(msg, "out_axes"));
}

TEST_CASE("vmap(grad(f)): per-example gradients equal a loop of grad") {
  Mlp p{randn({3, 5}, 20), randn({5}, 21), randn({5, 2}, 22)};
  xj::Array x = randn({7, 1, 3}, 23), y = randn({7, 1, 2}, 24);
  auto per_example = xj::vmap(xj::grad(mlp_loss), std::tuple{xj::None{}, 0, 0})(p, x, y);
  for (std::int64_t i = 0; i < 7; ++i) {
    Mlp gi = xj::grad(mlp_loss)(p, member(x, i), member(y, i));
    check_close(member(per_example.w1, i), gi.w1, 1e-12);
    check_close(member(per_example.b1, i), gi.b1, 1e-12);
    check_close(member(per_example.w2, i), gi.w2, 1e-12);
  }
  // jit(vmap(grad)) gives the same.
  auto jitted = xj::jit(xj::vmap(xj::grad(mlp_loss), std::tuple{xj::None{}, 0, 0}));
  Mlp again = jitted(p, x, y);
  check_close(again.w1, per_example.w1, 1e-12);
}

TEST_CASE("grad of a function that uses vmap equals finite differences") {
  xj::Array w = randn({3, 3}, 30);
  auto f = [&](const xj::Array& v) {
    auto row = [&](const xj::Array& r) { return xj::sum(xj::sin(xj::matmul(r, v))) * xj::sum(r * r); };
    return xj::sum(xj::vmap(row)(w));
  };
  xj::Array v = randn({3, 2}, 31);
  auto want = fd_grad([&](const std::vector<double>& vv) { return f(f64v(vv, {3, 2})).item<double>(); }, vec(v));
  check_values(xj::grad(f)(v), want, 1e-6);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{v}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
}

TEST_CASE("vmap(vmap(f)) and vmap(jvp) equal loops") {
  xj::Array xs = randn({3, 4, 2}, 40);
  auto f = [](const xj::Array& x) { return xj::sum(xj::exp(x) * x); };
  xj::Array both = xj::vmap(xj::vmap(f))(xs);
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t k = 0; k < 4; ++k)
      CHECK(member(member(both, i), k).item<double>() == doctest::Approx(f(member(member(xs, i), k)).item<double>()).epsilon(1e-12));
  // The inner vmap over axis 1 of each member.
  xj::Array inner1 = xj::vmap(xj::vmap(f, 1))(xs);  // member [4, 2] batched on its axis 1 -> [3, 2]
  for (std::int64_t i = 0; i < 3; ++i) check_close(member(inner1, i), loop(f, member(xs, i), 1), 1e-12);

  auto tangent_of = [&](const xj::Array& x, const xj::Array& t) { return xj::jvp(f, std::tuple{x}, std::tuple{t}).second; };
  xj::Array ts = randn({3, 4, 2}, 41);
  xj::Array batched = xj::vmap(tangent_of)(xs, ts);
  for (std::int64_t i = 0; i < 3; ++i)
    check_close(member(batched, i), tangent_of(member(xs, i), member(ts, i)), 1e-12);
}

TEST_CASE("vmap: scan with batched xs, a carry made batched by the body (fixpoint), and grad") {
  xj::Array xs = randn({4, 6, 3}, 50);  // batch 4, scan length 6
  xj::Array c0 = randn({3}, 51);        // unbatched init: batched after one step
  auto f = [&](const xj::Array& x) {
    auto body = [](const xj::Array& c, const xj::Array& r) { return std::pair{xj::tanh(c * 0.9 + r), c * r}; };
    auto [c, ys] = xj::scan(body, c0, x);
    return xj::sum(c) + xj::sum(ys);
  };
  check_close(xj::vmap(f)(xs), loop(f, xs), 1e-12);
  auto gf = xj::grad(f);
  check_close(xj::vmap(gf)(xs), loop(gf, xs), 1e-12);
}

TEST_CASE("vmap: scan(checkpoint(layer, policy)) keeps its residuals (batched) and still recomputes") {
  namespace policies = xj::checkpoint_policies;
  auto layer = [](const xj::Array& h, const xj::Array& w) {
    xj::Array z = xj::checkpoint_name(xj::matmul(h, w), "pre");
    return std::pair{xj::tanh(z), xj::None{}};
  };
  auto stack = [&](const xj::Array& h, const xj::Array& ws) {
    auto block = xj::checkpoint(layer, {.policy = policies::save_only_these_names({"pre"})});
    return xj::sum(xj::scan(block, h, ws).first);
  };
  xj::Array ws = randn({3, 4, 4}, 60), hs = randn({5, 2, 4}, 61);
  auto batched = xj::vmap(stack, std::tuple{0, xj::None{}});  // h per member, the weights shared
  auto loss = [&](const xj::Array& w, const xj::Array& h) { return xj::sum(batched(h, w)); };
  auto loss_one = [&](const xj::Array& w, const xj::Array& h) { return stack(h, w); };
  auto res_b = xj::saved_residuals(loss, ws, hs);
  auto res_1 = xj::saved_residuals(loss_one, ws, member(hs, 0));
  REQUIRE(res_b.size() == res_1.size());
  for (std::size_t k = 0; k < res_1.size(); ++k) {
    // The same residuals: each either shared by the members (the weights) or with a batch dim of 5.
    INFO(res_b[k].description << " " << res_b[k].aval.str() << " vs " << res_1[k].description << " " << res_1[k].aval.str());
    bool same = res_b[k].aval == res_1[k].aval;
    bool batched = res_b[k].aval.size() == 5 * res_1[k].aval.size() && res_b[k].aval.ndim() == res_1[k].aval.ndim() + 1;
    CHECK((same || batched));
  }
  // Per step, the layer input and the saved 'pre' (stacked by the scan: [3 steps, 2, 4]) gain the
  // batch dim after the step axis; the shared weights stay as they are.
  auto avals = [](const std::vector<xj::Residual>& rs) {
    std::vector<std::string> out;
    for (const auto& r : rs) out.push_back(r.aval.str());
    std::sort(out.begin(), out.end());
    return out;
  };
  CHECK(avals(res_1) == std::vector<std::string>{"f64[3,2,4]", "f64[3,2,4]", "f64[3,4,4]"});
  CHECK(avals(res_b) == std::vector<std::string>{"f64[3,4,4]", "f64[3,5,2,4]", "f64[3,5,2,4]"});
  // The recompute runs: tanh is evaluated in the forward pass and again in the backward pass.
  xj::reset_eval_counts();
  auto g = xj::grad(loss)(ws, hs);
  CHECK(xj::eval_counts()["tanh"] >= 2 * 3);
  // And the values equal a loop of per-member gradients.
  xj::Array want = xj::zeros_like(ws);
  for (std::int64_t i = 0; i < 5; ++i) want = want + xj::grad(loss_one)(ws, member(hs, i));
  check_close(g, want, 1e-10);
}

TEST_CASE("vmap: cond with an unbatched and with a batched predicate; switch_") {
  xj::Array xs = randn({6, 3}, 70);
  auto f = [](const xj::Array& x) {
    return xj::cond(xj::sum(x) > 0.0, [](const xj::Array& a) { return xj::exp(a); }, [](const xj::Array& a) { return -a * 2.0; }, x);
  };
  check_close(xj::vmap(f)(xs), loop(f, xs), 1e-12);  // the predicate depends on the member
  xj::Array flag = xj::scalar(1.0, xj::f64);
  auto g = [&](const xj::Array& x) {
    return xj::cond(flag > 0.0, [](const xj::Array& a) { return xj::sin(a); }, [](const xj::Array& a) { return a; }, x);
  };
  check_close(xj::vmap(g)(xs), loop(g, xs), 1e-12);
  std::string s = str(xj::make_jaxpr(xj::vmap(g))(xs));
  CHECK(count(s, "cond[") == 1);  // an unbatched predicate stays a cond
  auto h = [](const xj::Array& x) {
    return xj::switch_(xj::astype(x[0] > 0.0, xj::i32) + xj::astype(x[1] > 0.0, xj::i32),
                       {[](const xj::Array& a) { return a; }, [](const xj::Array& a) { return a * a; },
                        [](const xj::Array& a) { return xj::cos(a); }},
                       x);
  };
  check_close(xj::vmap(h)(xs), loop(h, xs), 1e-12);
  check_close(xj::vmap(xj::grad([&](const xj::Array& x) { return xj::sum(f(x)); }))(xs),
              loop(xj::grad([&](const xj::Array& x) { return xj::sum(f(x)); }), xs), 1e-12);
}

TEST_CASE("vmap: while_loop whose members stop after different numbers of steps") {
  xj::Array xs = f64v({0.5, 3.0, 10.0, 40.0});
  auto f = [](const xj::Array& x) {
    auto state = xj::while_loop([](const std::pair<xj::Array, xj::Array>& s) { return s.first < 100.0; },
                                [](const std::pair<xj::Array, xj::Array>& s) {
                                  return std::pair{s.first * 2.0 + 1.0, s.second + 1.0};
                                },
                                std::pair{x, xj::scalar(0.0, xj::f64)});
    return state.first + state.second * 1000.0;
  };
  check_equal(xj::vmap(f)(xs), loop(f, xs));
  // fori_loop with concrete array bounds (a scan, as JAX's: their trip count is known).
  auto g = [](const xj::Array& x) {
    return xj::fori_loop(xj::scalar(0, xj::i32), xj::scalar(5, xj::i32),
                         [](const xj::Array&, const xj::Array& c) { return xj::sin(c) + 1.0; }, x);
  };
  check_close(xj::vmap(g)(xs), loop(g, xs), 1e-12);
}

TEST_CASE("vmap: custom_jvp and custom_vjp keep their rules under vmap and grad") {
  // Deliberately "wrong" rules, so a result that used the automatic derivative would differ.
  auto cj = xj::custom_jvp([](const xj::Array& x) { return xj::sin(x); },
                           [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
                             return std::pair{xj::sin(std::get<0>(p)), std::get<0>(t) * 3.0};
                           });
  auto cv = xj::custom_vjp([](const xj::Array& x) { return xj::sin(x); },
                           [](const xj::Array& x) { return std::pair{xj::sin(x), x}; },
                           [](const xj::Array& x, const xj::Array& ct) { return std::tuple{ct * x * 5.0}; });
  xj::Array xs = randn({4, 3}, 80);
  auto fj = [&](const xj::Array& x) { return xj::sum(cj(x)); };
  auto fv = [&](const xj::Array& x) { return xj::sum(cv(x)); };
  check_close(xj::vmap(cj)(xs), xj::sin(xs), 1e-12);
  check_close(xj::vmap(cv)(xs), xj::sin(xs), 1e-12);
  // vmap(grad): the rules' derivatives, 3 and 5 * x.
  xj::Array threes = xj::ones(xs.shape(), xj::f64) * 3.0;
  check_close(xj::vmap(xj::grad(fj))(xs), threes, 1e-12);
  check_close(xj::vmap(xj::grad(fv))(xs), xs * 5.0, 1e-12);
  // grad(vmap): the batched rules.
  auto sum_j = [&](const xj::Array& x) { return xj::sum(xj::vmap(fj)(x)); };
  auto sum_v = [&](const xj::Array& x) { return xj::sum(xj::vmap(fv)(x)); };
  check_close(xj::grad(sum_j)(xs), threes, 1e-12);
  check_close(xj::grad(sum_v)(xs), xs * 5.0, 1e-12);
}

TEST_CASE("vmap: custom_jvp and custom_vjp batch only their batched operands (an unbatched weight stays unbatched)") {
  // f(w, x) = tanh(x w) with rules that are its derivative scaled by 2 (so a result that used the
  // automatic derivative would differ), and that record the shapes they are traced at.
  std::vector<xj::Shape> seen;
  auto rule_jvp = [&](const std::tuple<xj::Array, xj::Array>& p, const std::tuple<xj::Array, xj::Array>& t) {
    const auto& [w, x] = p;
    const auto& [dw, dx] = t;
    seen.push_back(w.shape());
    xj::Array y = xj::tanh(xj::matmul(x, w));
    return std::pair{y, (1.0 - y * y) * (xj::matmul(dx, w) + xj::matmul(x, dw)) * 2.0};
  };
  auto cj = xj::custom_jvp([](const xj::Array& w, const xj::Array& x) { return xj::tanh(xj::matmul(x, w)); }, rule_jvp);
  auto cv = xj::custom_vjp([](const xj::Array& w, const xj::Array& x) { return xj::tanh(xj::matmul(x, w)); },
                           [&](const xj::Array& w, const xj::Array& x) {
                             seen.push_back(w.shape());
                             xj::Array y = xj::tanh(xj::matmul(x, w));
                             return std::pair{y, std::tuple{w, x, y}};
                           },
                           [&](const std::tuple<xj::Array, xj::Array, xj::Array>& res, const xj::Array& ct) {
                             const auto& [w, x, y] = res;
                             seen.push_back(w.shape());
                             xj::Array g = ct * (1.0 - y * y) * 2.0;
                             return std::tuple{xj::matmul(xj::transpose(x), g), xj::matmul(g, xj::transpose(w))};
                           });
  xj::Array w = randn({3, 2}, 81), xs = randn({5, 4, 3}, 82);  // 5 members of x: [4, 3]
  auto w_operand_shape = [](const xj::ClosedJaxpr& j, xj::Primitive p) {
    for (const auto& e : j->eqns)
      if (e.prim == p) return xj::atom_aval(e.inputs.at(0)).shape;
    return xj::Shape{-1};
  };
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    auto f = [&](const xj::Array& w, const xj::Array& x) { return which == 0 ? cj(w, x) : cv(w, x); };
    auto batched = xj::vmap(f, std::tuple{xj::None{}, 0});
    xj::Primitive prim = which == 0 ? xj::Primitive::custom_jvp_call : xj::Primitive::custom_vjp_call;
    // The call reads w itself, not w broadcast to the 5 members.
    CHECK(w_operand_shape(xj::make_jaxpr(batched)(w, xs), prim) == xj::Shape{3, 2});
    check_close(batched(w, xs), loop([&](const xj::Array& x) { return f(w, x); }, xs), 1e-12);
    // grad(vmap): w's cotangent is the sum over the members of theirs; x's is per member.
    auto total = [&](const xj::Array& w, const xj::Array& xs) { return xj::sum(batched(w, xs)); };
    seen.clear();
    auto [gw, gx] = xj::grad(total, xj::argnums<0, 1>)(w, xs);
    for (const auto& s : seen) CHECK(s == xj::Shape{3, 2});  // the rules ran at one member's shapes
    auto one = [&](const xj::Array& w, const xj::Array& x) { return xj::sum(f(w, x)); };
    xj::Array gw_sum = xj::zeros_like(w);
    std::vector<xj::Array> gxs;
    for (std::int64_t i = 0; i < 5; ++i) {
      auto [a, b] = xj::grad(one, xj::argnums<0, 1>)(w, member(xs, i));
      gw_sum = gw_sum + a;
      gxs.push_back(b);
    }
    check_close(gw, gw_sum, 1e-12);
    check_close(gx, xj::stack(gxs), 1e-12);
    // Independently: the rules' derivative is twice the true one, so twice finite differences.
    std::vector<double> fd(6);
    std::vector<double> wv = vec(w);
    for (std::size_t k = 0; k < 6; ++k) {
      auto at = [&](double h) {
        std::vector<double> v = wv;
        v[k] += h;
        double s = 0;
        for (std::int64_t i = 0; i < 5; ++i) s += xj::sum(xj::tanh(xj::matmul(member(xs, i), xj::array(v, {3, 2})))).item<double>();
        return s;
      };
      fd[k] = 2.0 * (at(1e-6) - at(-1e-6)) / 2e-6;
    }
    check_values(gw, fd, 1e-6);
    // vmap(grad): per-member gradients of w (batched out) with w itself unbatched in.
    auto per = xj::vmap(xj::grad(one, xj::argnums<0>), std::tuple{xj::None{}, 0});
    std::vector<xj::Array> gws;
    for (std::int64_t i = 0; i < 5; ++i) gws.push_back(xj::grad(one, xj::argnums<0>)(w, member(xs, i)));
    check_close(per(w, xs), xj::stack(gws), 1e-12);
    // jit of the batched function, and a vmap inside a vmap (w unbatched in both).
    check_close(xj::jit(batched)(w, xs), batched(w, xs), 1e-12);
    xj::Array xss = randn({2, 5, 4, 3}, 83);
    auto twice = xj::vmap(batched, std::tuple{xj::None{}, 0});
    check_close(twice(w, xss), xj::stack({batched(w, member(xss, 0)), batched(w, member(xss, 1))}), 1e-12);
  }
}

TEST_CASE("vmap: member-by-member fallbacks (batched dynamic_slice start, take with batched operand and indices, keys)") {
  xj::Array xs = randn({4, 6}, 90);
  xj::Array starts = xj::array<std::int32_t>({0, 2, 5, 1}, {4});
  auto f = [](const xj::Array& x, const xj::Array& s) { return xj::dynamic_slice(x, {s}, {3}); };
  std::vector<xj::Array> rows;
  for (std::int64_t i = 0; i < 4; ++i) rows.push_back(f(member(xs, i), member(starts, i)));
  check_equal(xj::vmap(f)(xs, starts), xj::stack(rows));
  xj::Array idx = xj::array<std::int32_t>({0, 5, 1, 2, 2, 3, 4, 0}, {4, 2});
  auto g = [](const xj::Array& x, const xj::Array& i) { return xj::take(x, i); };
  rows.clear();
  for (std::int64_t i = 0; i < 4; ++i) rows.push_back(g(member(xs, i), member(idx, i)));
  check_equal(xj::vmap(g)(xs, idx), xj::stack(rows));
  // Random numbers from a batch of keys: each member draws from its own key.
  xj::Array keys = xj::random::split(xj::random::key(7), 3);
  auto draw = [](const xj::Array& k) { return xj::random::uniform(k, {5}); };
  rows.clear();
  for (std::int64_t i = 0; i < 3; ++i) rows.push_back(draw(member(keys, i)));
  check_equal(xj::vmap(draw)(keys), xj::stack(rows));
}

TEST_CASE("vmap: batched window starts and batched take indices run as one take, equal to the loop") {
  // Starts out of range on both sides (clamped to [0, n - s]) and take indices negative and past
  // the end (counted from the end, then clamped), as the kernels treat them.
  xj::Array starts0 = xj::array<std::int32_t>({0, 3, -2, 9}, {4});
  xj::Array starts1 = xj::array<std::int32_t>({1, 0, 7, 2}, {4});
  xj::Array x = randn({5, 6}, 110);          // shared by the members
  xj::Array xs = randn({4, 5, 6}, 111);      // one per member
  xj::Array xs_axis1 = randn({5, 4, 6}, 112);  // one per member, batched along axis 1
  auto window = [](const xj::Array& x, const xj::Array& i, const xj::Array& j) { return xj::dynamic_slice(x, {i, j}, {2, 3}); };
  auto loop3 = [](auto f, auto x_of, const xj::Array& is, const xj::Array& js) {
    std::vector<xj::Array> rows;
    for (std::int64_t b = 0; b < is.dim(0); ++b) rows.push_back(f(x_of(b), member(is, b), member(js, b)));
    return xj::stack(rows);
  };
  auto shared = [&](std::int64_t) { return x; };
  auto own = [&](std::int64_t b) { return member(xs, b); };
  auto own1 = [&](std::int64_t b) { return member(xs_axis1, b, 1); };
  // dynamic_slice: x shared, x batched at 0 or 1; one start batched and the other not.
  check_equal(xj::vmap(window, std::tuple{xj::None{}, 0, 0})(x, starts0, starts1), loop3(window, shared, starts0, starts1));
  check_equal(xj::vmap(window, std::tuple{0, 0, 0})(xs, starts0, starts1), loop3(window, own, starts0, starts1));
  check_equal(xj::vmap(window, std::tuple{1, 0, 0})(xs_axis1, starts0, starts1), loop3(window, own1, starts0, starts1));
  xj::Array one_start = xj::scalar(4, xj::i32);
  auto fixed_j = [&](const xj::Array& x, const xj::Array& i) { return window(x, i, one_start); };
  std::vector<xj::Array> rows;
  for (std::int64_t b = 0; b < 4; ++b) rows.push_back(fixed_j(member(xs, b), member(starts0, b)));
  check_equal(xj::vmap(fixed_j)(xs, starts0), xj::stack(rows));
  // Indexing a shared table by a batched index (x[i]: a dynamic_slice of one row).
  auto row = [&](const xj::Array& i) { return x[i]; };
  rows.clear();
  for (std::int64_t b = 0; b < 4; ++b) rows.push_back(row(member(starts0, b)));
  check_equal(xj::vmap(row)(starts0), xj::stack(rows));
  // The batched form is one take, not a scan over the members.
  std::string printed = str(xj::make_jaxpr(xj::vmap(window, std::tuple{0, 0, 0}))(xs, starts0, starts1));
  CHECK(printed.find("scan") == std::string::npos);
  CHECK(printed.find("gather") != std::string::npos);

  // dynamic_update_slice: x and the update each shared or batched; integer and bool dtypes too.
  xj::Array u = randn({2, 3}, 113), us = randn({4, 2, 3}, 114);
  auto put = [](const xj::Array& x, const xj::Array& u, const xj::Array& i, const xj::Array& j) {
    return xj::dynamic_update_slice(x, u, {i, j});
  };
  auto loop_put = [&](auto x_of, auto u_of) {
    std::vector<xj::Array> out;
    for (std::int64_t b = 0; b < 4; ++b) out.push_back(put(x_of(b), u_of(b), member(starts0, b), member(starts1, b)));
    return xj::stack(out);
  };
  auto u_shared = [&](std::int64_t) { return u; };
  auto u_own = [&](std::int64_t b) { return member(us, b); };
  check_equal(xj::vmap(put, std::tuple{xj::None{}, xj::None{}, 0, 0})(x, u, starts0, starts1), loop_put(shared, u_shared));
  check_equal(xj::vmap(put, std::tuple{0, 0, 0, 0})(xs, us, starts0, starts1), loop_put(own, u_own));
  check_equal(xj::vmap(put, std::tuple{1, xj::None{}, 0, 0})(xs_axis1, u, starts0, starts1), loop_put(own1, u_shared));
  xj::Array xi = xj::astype(x * 10.0, xj::i32), ui = xj::astype(u * 10.0, xj::i32);
  xj::Array xbool = x > 0.0, ubool = u > 0.0;
  for (const auto& [xx, uu] : {std::pair{xi, ui}, std::pair{xbool, ubool}}) {
    std::vector<xj::Array> out;
    for (std::int64_t b = 0; b < 4; ++b) out.push_back(put(xx, uu, member(starts0, b), member(starts1, b)));
    check_equal(xj::vmap(put, std::tuple{xj::None{}, xj::None{}, 0, 0})(xx, uu, starts0, starts1), xj::stack(out));
  }

  // take with operand and indices both batched, along axes 0 and 1, indices of rank 2.
  xj::Array idx = xj::array<std::int32_t>({0, -1, 7, 2, -9, 3, 1, 1, 4, 0, 5, -2, 2, 2, 2, 3, 0, 6, -6, 1, 1, 0, 0, 0}, {4, 2, 3});
  for (std::int64_t axis : {0, 1}) {
    CAPTURE(axis);
    auto g = [axis](const xj::Array& x, const xj::Array& i) { return xj::take(x, i, axis); };
    rows.clear();
    for (std::int64_t b = 0; b < 4; ++b) rows.push_back(g(member(xs, b), member(idx, b)));
    check_equal(xj::vmap(g)(xs, idx), xj::stack(rows));
    rows.clear();
    for (std::int64_t b = 0; b < 4; ++b) rows.push_back(g(member(xs_axis1, b, 1), member(idx, b)));
    check_equal(xj::vmap(g, std::tuple{1, 0}, 2)(xs_axis1, idx), xj::stack(rows, 2));
  }

  // Gradients through the batched forms: vmap(grad) and grad(vmap) against loops of grad.
  auto loss = [&](const xj::Array& x, const xj::Array& u, const xj::Array& i, const xj::Array& j) {
    xj::Array y = put(x, u * u, j, i);  // the update's window at (j, i)
    return xj::sum(xj::sin(window(y, i, j)) * xj::take(y, xj::astype(i, xj::i32) - 2, 1)[0]);
  };
  auto per = xj::vmap(xj::grad(loss, xj::argnums<0, 1>), std::tuple{0, 0, 0, 0})(xs, us, starts0, starts1);
  std::vector<xj::Array> gx, gu;
  for (std::int64_t b = 0; b < 4; ++b) {
    auto [a, c] = xj::grad(loss, xj::argnums<0, 1>)(member(xs, b), member(us, b), member(starts0, b), member(starts1, b));
    gx.push_back(a);
    gu.push_back(c);
  }
  check_close(std::get<0>(per), xj::stack(gx), 1e-12);
  check_close(std::get<1>(per), xj::stack(gu), 1e-12);
  auto total = [&](const xj::Array& x, const xj::Array& u) {
    return xj::sum(xj::vmap(loss, std::tuple{xj::None{}, 0, 0, 0})(x, u, starts0, starts1));
  };
  auto [tx, tu] = xj::grad(total, xj::argnums<0, 1>)(x, us);
  xj::Array want_x = xj::zeros_like(x);
  gu.clear();
  for (std::int64_t b = 0; b < 4; ++b) {
    auto [a, c] = xj::grad(loss, xj::argnums<0, 1>)(x, member(us, b), member(starts0, b), member(starts1, b));
    want_x = want_x + a;
    gu.push_back(c);
  }
  check_close(tx, want_x, 1e-12);
  check_close(tu, xj::stack(gu), 1e-12);
}

TEST_CASE("vmap: per-example gradients of an embedding lookup scatter rows at once (scatter_add with batched indices)") {
  // loss(table, tokens, c) = sum(take(table, tokens) * c): d/dtable adds c[j] to row tokens[j]
  // (negative tokens count from the end, others clamp). Checked against plain C++ sums.
  const std::int64_t rows = 6, width = 3, examples = 4, per = 5;
  xj::Array table = randn({rows, width}, 120);
  xj::Array tokens = xj::array<std::int32_t>({0, 5, 5, -1, 2, 1, 9, 0, 3, 3, -7, 4, 4, 4, 0, 2, 2, 1, 1, 5}, {examples, per});
  xj::Array c = randn({examples, per, width}, 121);
  auto loss = [](const xj::Array& table, const xj::Array& tok, const xj::Array& c) { return xj::sum(xj::take(table, tok, 0) * c); };
  auto per_example = xj::jit(xj::vmap(xj::grad(loss), std::tuple{xj::None{}, 0, 0}));
  xj::Array got = per_example(table, tokens, c);
  REQUIRE(got.shape() == xj::Shape{examples, rows, width});
  std::vector<std::int32_t> tv = tokens.to_vector<std::int32_t>();
  std::vector<double> cv = vec(c), want(static_cast<std::size_t>(examples * rows * width), 0.0);
  for (std::int64_t b = 0; b < examples; ++b)
    for (std::int64_t j = 0; j < per; ++j) {
      std::int64_t r = tv[static_cast<std::size_t>(b * per + j)];
      r = std::clamp<std::int64_t>(r < 0 ? r + rows : r, 0, rows - 1);
      for (std::int64_t w = 0; w < width; ++w)
        want[static_cast<std::size_t>((b * rows + r) * width + w)] += cv[static_cast<std::size_t>((b * per + j) * width + w)];
    }
  check_values(got, want, 1e-12);
  std::string printed = str(xj::make_jaxpr(xj::vmap(xj::grad(loss), std::tuple{xj::None{}, 0, 0}))(table, tokens, c));
  CHECK(printed.find("scatter_add") != std::string::npos);
  CHECK(printed.find("scan") == std::string::npos);
  // Along axis 1 with a batched operand: the gradient of take(x, tok, 1) for each member's own x.
  xj::Array xs = randn({examples, width, rows}, 122);
  auto loss1 = [](const xj::Array& x, const xj::Array& tok, const xj::Array& c) {
    return xj::sum(xj::sin(xj::take(x, tok, 1)) * xj::transpose(c));
  };
  xj::Array got1 = xj::vmap(xj::grad(loss1))(xs, tokens, c);
  std::vector<xj::Array> loop1;
  for (std::int64_t b = 0; b < examples; ++b) loop1.push_back(xj::grad(loss1)(member(xs, b), member(tokens, b), member(c, b)));
  check_close(got1, xj::stack(loop1), 1e-12);
}

TEST_CASE("vmap over a batch of keys hashes with one key per member (no loop), equal to the loop") {
  xj::Array keys = xj::random::split(xj::random::key(11), 5);  // u32[5, 2]
  auto draw = [](const xj::Array& k) { return xj::random::normal(k, {3, 2}, xj::f64); };
  auto loop_keys = [&](const std::function<xj::Array(const xj::Array&)>& f, const xj::Array& ks) {
    std::vector<xj::Array> out;
    for (std::int64_t b = 0; b < ks.dim(0); ++b) out.push_back(f(member(ks, b)));
    return xj::stack(out);
  };
  check_equal(xj::vmap(draw)(keys), loop_keys(draw, keys));
  check_equal(xj::jit(xj::vmap(draw))(keys), loop_keys(draw, keys));
  CHECK(str(xj::make_jaxpr(xj::vmap(draw))(keys)).find("scan") == std::string::npos);
  // Keys along axis 1, and split / fold_in / uniform of each member's key.
  check_equal(xj::vmap(draw, 1)(xj::transpose(keys)), loop_keys(draw, keys));
  auto splits = [](const xj::Array& k) { return xj::random::split(k, 3); };
  check_equal(xj::vmap(splits)(keys), loop_keys(splits, keys));
  auto folded = [](const xj::Array& k) { return xj::random::uniform(xj::random::fold_in(k, 7u), {4}); };
  check_equal(xj::vmap(folded)(keys), loop_keys(folded, keys));
  // A batch of batches of keys (vmap of vmap).
  xj::Array grid = xj::reshape(xj::random::split(xj::random::key(12), 6), {2, 3, 2});
  std::vector<xj::Array> rows;
  for (std::int64_t i = 0; i < 2; ++i) rows.push_back(loop_keys(draw, member(grid, i)));
  check_equal(xj::vmap(xj::vmap(draw))(grid), xj::stack(rows));
  // Shared keys with their own batch (inner vmap over keys) and counters batched by an outer vmap
  // (fold_in of a batched value): each (value, key) pair hashes as in the loop.
  xj::Array data = xj::array<std::uint32_t>({3u, 9u, 4u, 1u}, {4});
  auto per_value = [&](const xj::Array& d) {
    return xj::vmap([&](const xj::Array& k) { return xj::random::bits(xj::random::fold_in(k, d), {2}); })(keys);
  };
  rows.clear();
  for (std::int64_t i = 0; i < 4; ++i) {
    xj::Array d = member(data, i);
    rows.push_back(loop_keys([&](const xj::Array& k) { return xj::random::bits(xj::random::fold_in(k, d), {2}); }, keys));
  }
  check_equal(xj::vmap(per_value)(data), xj::stack(rows));
}

TEST_CASE("vmap: dynamic_update_slice of whole rows at batched positions equals the loop") {
  // Per-member positions in a buffer: x [10, 8] per member, updates of 3 rows (or of all 10, or of
  // short rows, which loop) at starts out of range on both sides (clamped to [0, n - s]).
  xj::Array starts = xj::array<std::int32_t>({0, 4, -3, 9, 7}, {5});
  xj::Array zero = xj::scalar(0, xj::i32);
  xj::Array x = randn({10, 8}, 130), xs = randn({5, 10, 8}, 131);
  xj::Array u = randn({3, 8}, 132), us = randn({5, 3, 8}, 133);
  auto put = [&](const xj::Array& x, const xj::Array& u, const xj::Array& i) { return xj::dynamic_update_slice(x, u, {i, zero}); };
  auto loop_put = [&](auto x_of, auto u_of, const xj::Array& is) {
    std::vector<xj::Array> out;
    for (std::int64_t b = 0; b < is.dim(0); ++b) out.push_back(put(x_of(b), u_of(b), member(is, b)));
    return xj::stack(out);
  };
  auto x_shared = [&](std::int64_t) { return x; };
  auto x_own = [&](std::int64_t b) { return member(xs, b); };
  auto u_shared = [&](std::int64_t) { return u; };
  auto u_own = [&](std::int64_t b) { return member(us, b); };
  check_equal(xj::vmap(put, std::tuple{0, 0, 0})(xs, us, starts), loop_put(x_own, u_own, starts));
  check_equal(xj::vmap(put, std::tuple{xj::None{}, 0, 0})(x, us, starts), loop_put(x_shared, u_own, starts));
  check_equal(xj::vmap(put, std::tuple{0, xj::None{}, 0})(xs, u, starts), loop_put(x_own, u_shared, starts));
  check_equal(xj::jit(xj::vmap(put, std::tuple{xj::None{}, xj::None{}, 0}))(x, u, starts), loop_put(x_shared, u_shared, starts));
  // The narrow axis in the middle, members batched along axis 1, integer values.
  xj::Array x3 = xj::astype(randn({4, 5, 10, 8}, 134) * 100.0, xj::i32), u3 = xj::astype(randn({4, 2, 8}, 135) * 100.0, xj::i32);
  auto put3 = [&](const xj::Array& x, const xj::Array& u, const xj::Array& i) {
    return xj::dynamic_update_slice(x, u, {zero, i, zero});  // x [4, 10, 8] per member, u [4, 2, 8]
  };
  std::vector<xj::Array> rows;
  for (std::int64_t b = 0; b < 5; ++b) rows.push_back(put3(member(x3, b, 1), u3, member(starts, b)));
  check_equal(xj::vmap(put3, std::tuple{1, xj::None{}, 0})(x3, u3, starts), xj::stack(rows));
  // Short rows and a window as large as the operand.
  xj::Array xn = randn({5, 10, 2}, 136), un = randn({5, 3, 2}, 137), uf = randn({5, 10, 8}, 138);
  rows.clear();
  for (std::int64_t b = 0; b < 5; ++b) rows.push_back(put(member(xn, b), member(un, b), member(starts, b)));
  check_equal(xj::vmap(put)(xn, un, starts), xj::stack(rows));
  rows.clear();
  for (std::int64_t b = 0; b < 5; ++b) rows.push_back(put(member(xs, b), member(uf, b), member(starts, b)));
  check_equal(xj::vmap(put)(xs, uf, starts), xj::stack(rows));
  // Gradients: vmap(grad) and grad(vmap) against loops of grad.
  auto loss = [&](const xj::Array& x, const xj::Array& u, const xj::Array& i) { return xj::sum(xj::sin(put(x * x, u * 3.0, i))); };
  auto per = xj::vmap(xj::grad(loss, xj::argnums<0, 1>))(xs, us, starts);
  std::vector<xj::Array> gx, gu;
  for (std::int64_t b = 0; b < 5; ++b) {
    auto [g0, g1] = xj::grad(loss, xj::argnums<0, 1>)(member(xs, b), member(us, b), member(starts, b));
    gx.push_back(g0);
    gu.push_back(g1);
  }
  check_close(std::get<0>(per), xj::stack(gx), 1e-12);
  check_close(std::get<1>(per), xj::stack(gu), 1e-12);
  auto total = [&](const xj::Array& x, const xj::Array& u) { return xj::sum(xj::vmap(loss, std::tuple{xj::None{}, xj::None{}, 0})(x, u, starts)); };
  auto [tx, tu] = xj::grad(total, xj::argnums<0, 1>)(x, u);
  xj::Array wx = xj::zeros_like(x), wu = xj::zeros_like(u);
  for (std::int64_t b = 0; b < 5; ++b) {
    auto [g0, g1] = xj::grad(loss, xj::argnums<0, 1>)(x, u, member(starts, b));
    wx = wx + g0;
    wu = wu + g1;
  }
  check_close(tx, wx, 1e-12);
  check_close(tu, wu, 1e-12);
}

TEST_CASE("vmap: pad with a batched padding value (x batched or shared; negative and interior padding) equals the loop") {
  const xj::params::Pad ps{.lo = {-1, 2}, .hi = {1, -2}, .interior = {1, 2}};
  auto pad = [ps](const xj::Array& x, const xj::Array& v) { return xj::detail::bind1(xj::Primitive::pad, {x, v}, ps); };
  xj::Array xs = randn({4, 3, 5}, 140), x = randn({3, 5}, 141), vs = randn({4}, 142);
  std::vector<xj::Array> own, shared;
  for (std::int64_t b = 0; b < 4; ++b) {
    own.push_back(pad(member(xs, b), member(vs, b)));
    shared.push_back(pad(x, member(vs, b)));
  }
  check_equal(xj::vmap(pad)(xs, vs), xj::stack(own));
  check_equal(xj::vmap(pad, std::tuple{2, 0})(xj::transpose(xs, {1, 2, 0}), vs), xj::stack(own));
  check_equal(xj::vmap(pad, std::tuple{xj::None{}, 0})(x, vs), xj::stack(shared));
  check_equal(xj::jit(xj::vmap(pad, std::tuple{xj::None{}, 0}))(x, vs), xj::stack(shared));
  // Integer elements, and per-member gradients (the padding value's is the sum of the cotangent
  // where it was written).
  xj::Array xi = xj::astype(xs * 100.0, xj::i32), vi = xj::astype(vs * 100.0, xj::i32);
  std::vector<xj::Array> ints;
  for (std::int64_t b = 0; b < 4; ++b) ints.push_back(pad(member(xi, b), member(vi, b)));
  check_equal(xj::vmap(pad)(xi, vi), xj::stack(ints));
  auto loss = [&](const xj::Array& x, const xj::Array& v) { return xj::sum(xj::sin(pad(x * x, v * 3.0))); };
  auto [gx, gv] = xj::vmap(xj::grad(loss, xj::argnums<0, 1>))(xs, vs);
  for (std::int64_t b = 0; b < 4; ++b) {
    auto [wx, wv] = xj::grad(loss, xj::argnums<0, 1>)(member(xs, b), member(vs, b));
    check_close(member(gx, b), wx, 1e-12);
    check_close(member(gv, b), wv, 1e-12);
  }
}

TEST_CASE("jacfwd, jacrev and hessian equal their definitions (one batched evaluation each)") {
  auto f = [](const xj::Array& x) { return xj::tanh(xj::matmul(xj::reshape(x, {2, 3}), xj::ones({3, 2}, xj::f64)) * x[0]); };
  xj::Array x = randn({6}, 100);
  xj::Array jf = xj::jacfwd(f)(x), jr = xj::jacrev(f)(x);
  CHECK(jf.shape() == xj::Shape{2, 2, 6});
  auto want = fd_jacobian(f, vec(x));
  check_values(jf, want, 1e-6);
  check_values(jr, want, 1e-6);
  auto s = [](const xj::Array& x) { return xj::sum(xj::exp(x)) * xj::sum(x * x); };
  xj::Array h = xj::hessian(s)(x);
  std::vector<double> v = vec(x), hw(36);
  double e = 0, q = 0;
  for (double a : v) { e += std::exp(a); q += a * a; }
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t k = 0; k < 6; ++k)
      hw[i * 6 + k] = (i == k ? std::exp(v[i]) * q + 2 * e : 0) + 2 * v[k] * std::exp(v[i]) + 2 * v[i] * std::exp(v[k]);
  check_values(h, hw, 1e-9);
  // jacfwd(jacrev(f)) is the hessian too.
  check_close(xj::jacfwd(xj::jacrev(s))(x), h, 1e-9);
}

TEST_CASE("jacfwd and jacrev skip the product with the identity basis (one matmul fewer), same values") {
  const std::int64_t d = 5;
  xj::Array w1 = xj::random::normal(xj::random::key(1), {d, d}, xj::f64), w2 = xj::random::normal(xj::random::key(2), {d, d}, xj::f64);
  xj::Array x = xj::random::normal(xj::random::key(3), {d}, xj::f64);
  auto f = [&](const xj::Array& v) { return xj::matmul(w2, xj::tanh(xj::matmul(w1, v))); };
  // J = W2 diag(1 - tanh^2(W1 x)) W1, written out.
  auto a = vec(w1), b = vec(w2), xv = vec(x);
  std::vector<double> s(d), want(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) {
    double z = 0;
    for (std::int64_t k = 0; k < d; ++k) z += a[i * d + k] * xv[k];
    s[i] = 1 - std::tanh(z) * std::tanh(z);
  }
  for (std::int64_t r = 0; r < d; ++r)
    for (std::int64_t c = 0; c < d; ++c)
      for (std::int64_t i = 0; i < d; ++i) want[r * d + c] += b[r * d + i] * s[i] * a[i * d + c];
  for (bool rev : {false, true}) {
    INFO("jacrev: ", rev);
    xj::reset_eval_counts();
    xj::Array j = rev ? xj::jacrev(f)(x) : xj::jacfwd(f)(x);
    check_values(j, want, 1e-12);
    // Two matmuls for the value, one batched for the Jacobian (the other is by the identity).
    CHECK(xj::eval_counts()["dot_general"] == 3);
  }
}
