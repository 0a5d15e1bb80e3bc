// test_scatter.cpp: xj::at (JAX's x.at[idx]) and the scatter primitives against plain loops in
// double: negative indices, out-of-range updates dropped (or clamped under IndexMode::clip),
// repeated indices (combined; set keeps the last), several index arrays over leading axes, NaN in
// min / max, integer and bool dtypes, errors; derivatives against finite differences
// (check_grads) including repeated indices and zero factors for mul, the tie rule of min / max
// against its closed form, and vmap with batched indices against member-by-member results.
#include <algorithm>
#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace xj = xjax;
using test_util::vec;

namespace {

enum class How { set, add, mul, min, max };

/// x ([n, w] row-major) with updates u ([m, w]) combined into rows idx (negative counted from the
/// end; outside [0, n): dropped, or clamped when clip), in order, in the arithmetic of T.
template <class T = double>
std::vector<double> reference(std::vector<double> xd, std::int64_t n, std::int64_t w, const std::vector<std::int64_t>& idx,
                              const std::vector<double>& u, How how, bool clip = false) {
  std::vector<T> x(xd.begin(), xd.end());
  for (std::size_t j = 0; j < idx.size(); ++j) {
    std::int64_t i = idx[j] < 0 ? idx[j] + n : idx[j];
    if (clip) i = std::clamp<std::int64_t>(i, 0, n - 1);
    if (i < 0 || i >= n) continue;
    for (std::int64_t k = 0; k < w; ++k) {
      T& d = x[static_cast<std::size_t>(i * w + k)];
      const auto v = static_cast<T>(u[j * static_cast<std::size_t>(w) + static_cast<std::size_t>(k)]);
      switch (how) {
        case How::set: d = v; break;
        case How::add: d += v; break;
        case How::mul: d *= v; break;
        case How::min: d = (std::isnan(d) || std::isnan(v)) ? T(NAN) : std::min(d, v); break;
        case How::max: d = (std::isnan(d) || std::isnan(v)) ? T(NAN) : std::max(d, v); break;
      }
    }
  }
  return {x.begin(), x.end()};
}

xj::Array apply(const xj::At& at, How how, const xj::Array& u, xj::IndexMode mode = xj::IndexMode::drop) {
  switch (how) {
    case How::set: return at.set(u, mode);
    case How::add: return at.add(u, mode);
    case How::mul: return at.mul(u, mode);
    case How::min: return at.min(u, mode);
    case How::max: return at.max(u, mode);
  }
  return {};
}

void check_same_values(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else CHECK(got[i] == want[i]);
  }
}

xj::Array i32s(const std::vector<std::int32_t>& v, xj::Shape s) { return xj::array<std::int32_t>(v, std::move(s)); }

}  // namespace

TEST_CASE("at: set / add / mul / min / max along the first axis against loops (negative, repeated, dropped, clamped)") {
  const std::int64_t n = 5, w = 3;
  const xj::Array x = test_util::randn({n, w}, 1);
  const std::vector<std::int64_t> idx{1, -1, 7, 1, -6, 0, 4, -2};  // 7 and -6 are outside
  const auto m = static_cast<std::int64_t>(idx.size());
  const xj::Array u = test_util::randn({m, w}, 2);
  const xj::Array ids = xj::array<std::int64_t>(idx, {m});
  for (How how : {How::set, How::add, How::mul, How::min, How::max}) {
    CAPTURE(static_cast<int>(how));
    check_same_values(vec(apply(xj::at(x, ids), how, u)), reference(vec(x), n, w, idx, vec(u), how));
    check_same_values(vec(apply(xj::at(x, ids), how, u, xj::IndexMode::clip)), reference(vec(x), n, w, idx, vec(u), how, true));
    // f32 and i32 operands, i32 indices.
    const xj::Array xf = xj::astype(x, xj::f32), uf = xj::astype(u, xj::f32);
    check_same_values(vec(apply(xj::at(xf, xj::astype(ids, xj::i32)), how, uf)), reference<float>(vec(xf), n, w, idx, vec(uf), how));
    const xj::Array xi = xj::astype(x * 4.0, xj::i32), ui = xj::astype(u * 4.0, xj::i32);
    check_same_values(vec(apply(xj::at(xi, ids), how, ui)), reference(vec(xi), n, w, idx, vec(ui), how));
  }
  // x itself is unchanged; set with repeated indices keeps the last update (row 1: update 3).
  CHECK(vec(x) == vec(test_util::randn({n, w}, 1)));
  const auto set = vec(xj::at(x, ids).set(u));
  for (std::int64_t k = 0; k < w; ++k) CHECK(set[static_cast<std::size_t>(w + k)] == vec(u)[static_cast<std::size_t>(3 * w + k)]);
}

TEST_CASE("at: one index per leading axis, broadcast together; an update outside any axis is dropped") {
  const xj::Array x = test_util::randn({3, 4, 2}, 3);
  const xj::Array i = i32s({0, 2, -1, 3, 1}, {5}), j = i32s({1, -1, 0, 2, 9}, {5});  // (3, 2) and (1, 9) are outside
  const xj::Array u = test_util::randn({5, 2}, 4);
  // The same as the first-axis form on x viewed as [12, 2] with flat rows i * 4 + j.
  std::vector<std::int64_t> flat;
  const std::vector<std::int64_t> iv{0, 2, -1, 3, 1}, jv{1, -1, 0, 2, 9};
  for (std::size_t k = 0; k < iv.size(); ++k) {
    const std::int64_t a = iv[k] < 0 ? iv[k] + 3 : iv[k], b = jv[k] < 0 ? jv[k] + 4 : jv[k];
    flat.push_back(a >= 0 && a < 3 && b >= 0 && b < 4 ? a * 4 + b : 100);
  }
  check_same_values(vec(xj::at(x, {i, j}).add(u)), reference(vec(x), 12, 2, flat, vec(u), How::add));
  check_same_values(vec(xj::at(x, {i, j}).set(u)), reference(vec(x), 12, 2, flat, vec(u), How::set));
  // get clamps each index: (3, 2) reads (2, 2), (1, 9) reads (1, 3).
  const auto got = vec(xj::at(x, {i, j}).get());
  const auto xv = vec(x);
  const std::vector<std::int64_t> read{0 * 4 + 1, 2 * 4 + 3, 2 * 4 + 0, 2 * 4 + 2, 1 * 4 + 3};
  for (std::size_t k = 0; k < read.size(); ++k)
    for (std::size_t c = 0; c < 2; ++c) CHECK(got[k * 2 + c] == xv[static_cast<std::size_t>(read[k]) * 2 + c]);
  // Broadcast indices: a column of rows against a row of columns selects a [2, 3] block.
  const xj::Array rows = i32s({0, 2}, {2, 1}), cols = i32s({3, 0, 1}, {1, 3});
  const xj::Array block = xj::at(x, {rows, cols}).get();
  CHECK(block.shape() == xj::Shape{2, 3, 2});
  CHECK(vec(block)[(1 * 3 + 0) * 2 + 1] == xv[(2 * 4 + 3) * 2 + 1]);
  // A scalar update broadcasts; an int index; a C++ number takes x's dtype.
  const auto filled = vec(xj::at(x, {rows, cols}).set(7.0));
  CHECK(filled[(2 * 4 + 1) * 2] == 7.0);
  CHECK(filled[(1 * 4 + 1) * 2] == xv[(1 * 4 + 1) * 2]);
  CHECK(vec(xj::at(x, 1).get()) == vec(xj::reshape(xj::slice(x, {1, 0, 0}, {2, 4, 2}), {4, 2})));
  CHECK(xj::at(xj::astype(x, xj::f32), 0).add(1).dtype() == xj::f32);
}

TEST_CASE("at: min / max propagate NaN, bool set, empty updates") {
  const double nan = std::nan("");
  const xj::Array x = test_util::f64v({1.0, nan, 3.0, 4.0});
  const xj::Array ids = i32s({0, 2, 3}, {3});
  check_same_values(vec(xj::at(x, ids).min(test_util::f64v({nan, 2.0, 5.0}))), {nan, nan, 2.0, 4.0});
  check_same_values(vec(xj::at(x, ids).max(test_util::f64v({0.0, 2.0, 5.0}))), {1.0, nan, 3.0, 5.0});
  const xj::Array b = xj::astype(i32s({0, 0, 1}, {3}), xj::bool_);
  const xj::Array set_b = xj::at(b, i32s({0, 2}, {2})).set(xj::astype(i32s({1, 0}, {2}), xj::bool_));
  CHECK(set_b.dtype() == xj::bool_);
  CHECK(vec(set_b) == std::vector<double>{1, 0, 0});
  check_same_values(vec(xj::at(x, i32s({}, {0})).add(test_util::f64v({}, {0}))), vec(x));
}

TEST_CASE("at: errors name the operation and the operands") {
  const xj::Array x = test_util::randn({3, 2}, 5);
  CHECK(test_util::contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::at(x, {i32s({0}, {1}), i32s({0}, {1}), i32s({0}, {1})}).get(); }),
                            "3 indices for an array of rank 2"));
  CHECK(test_util::contains(test_util::message_of<xj::TypeError>([&] { (void)xj::at(x, test_util::f64v({0.0})).get(); }),
                            "indices must be integers, got f64"));
  CHECK_THROWS_AS((void)xj::at(x, i32s({0, 1}, {2})).set(test_util::randn({3, 2}, 6)), xj::ShapeError);
}

TEST_CASE("at: add / mul / min / max of bool arrays are or / and / and / or, as lax's scatters (review finding: a TypeError)") {
  // Against loops over the same indices in plain C++ (repeated index 0 included).
  const std::vector<int> x0{0, 1, 0, 1}, idx{0, 3, 0, 2}, upd{1, 0, 0, 1};
  const xj::Array x = xj::astype(i32s(x0, {4}), xj::bool_), u = xj::astype(i32s(upd, {4}), xj::bool_);
  const xj::Array ids = i32s(idx, {4});
  const auto loop = [&](auto combine) {
    std::vector<double> r(x0.begin(), x0.end());
    for (std::size_t j = 0; j < idx.size(); ++j) r[static_cast<std::size_t>(idx[j])] = combine(r[static_cast<std::size_t>(idx[j])] != 0, upd[j] != 0);
    return r;
  };
  const auto check_bool = [](const xj::Array& got, const std::vector<double>& want) {
    CHECK(got.dtype() == xj::bool_);
    CHECK(vec(got) == want);
  };
  check_bool(xj::at(x, ids).add(u), loop([](bool d, bool v) { return d || v; }));
  check_bool(xj::at(x, ids).mul(u), loop([](bool d, bool v) { return d && v; }));
  check_bool(xj::at(x, ids).min(u), loop([](bool d, bool v) { return d && v; }));
  check_bool(xj::at(x, ids).max(u), loop([](bool d, bool v) { return d || v; }));
  check_bool(xj::jit([&](const xj::Array& a) { return xj::at(a, ids).add(u); })(x), loop([](bool d, bool v) { return d || v; }));
}

TEST_CASE("at: derivatives against finite differences (repeated indices, zero factors, dropped updates)") {
  const xj::Array x = test_util::randn({4, 3}, 7);
  const xj::Array u = test_util::randn({5, 3}, 8);
  const xj::Array ids = i32s({2, 0, 2, -9, 2}, {5});  // three updates on row 2, one dropped
  const xj::CheckGradsOptions opts{.order = 2, .modes = {xj::fwd, xj::rev}, .atol = {}, .rtol = {}, .eps = {}};
  xj::check_grads([&](const xj::Array& a, const xj::Array& v) { return xj::sum(xj::sin(xj::at(a, ids).set(v))); }, std::tuple{x, u}, opts);
  xj::check_grads([&](const xj::Array& a, const xj::Array& v) { return xj::sin(xj::at(a, ids).add(v)); }, std::tuple{x, u}, opts);
  xj::check_grads([&](const xj::Array& a, const xj::Array& v) { return xj::at(a, ids).mul(v); }, std::tuple{x, u}, opts);
  // Separated values: no ties, where min and max are differentiable.
  const xj::Array spread_u = u * 3.0 + 0.1;
  xj::check_grads([&](const xj::Array& a, const xj::Array& v) { return xj::at(a, ids).min(v); }, std::tuple{x, spread_u}, opts);
  xj::check_grads([&](const xj::Array& a, const xj::Array& v) { return xj::at(a, ids).max(v); }, std::tuple{x, spread_u}, opts);
  // mul with zero factors among repeated updates: d/du_j of x * prod u is x * (product of the others).
  const xj::Array xs = test_util::f64v({2.0, 3.0}), us = test_util::f64v({0.0, 5.0, 0.0, 4.0, 7.0});
  const xj::Array rows = i32s({0, 0, 1, 1, 1}, {5});
  auto gu = xj::grad([&](const xj::Array& v) { return xj::sum(xj::at(xs, rows).mul(v)); })(us);
  // row 0: 2 * 0 * 5 -> d/du0 = 2 * 5, d/du1 = 0; row 1: 3 * 0 * 4 * 7 -> d/du2 = 84, others 0.
  CHECK(vec(gu) == std::vector<double>{10.0, 0.0, 84.0, 0.0, 0.0});
  // Several index arrays, through jit.
  const xj::Array i = i32s({0, 3, 1}, {3}), j = i32s({2, 0, -1}, {3});
  xj::check_grads(xj::jit([&](const xj::Array& a, const xj::Array& v) { return xj::at(a, {i, j}).add(v * v); }),
                  std::tuple{x, test_util::randn({3}, 9)}, opts);
}

TEST_CASE("at: min / max split the derivative evenly among the values that tie for the result") {
  const xj::Array x = test_util::f64v({1.0, 2.0}), u = test_util::f64v({1.0, 1.0, 0.5}), rows = i32s({0, 0, 1}, {3});
  // row 0: x and two updates all equal 1 -> each gets 1/3; row 1: max(2, 0.5) = x's.
  auto [gx, gu] = xj::grad([&](const xj::Array& a, const xj::Array& v) { return xj::sum(xj::at(a, rows).max(v)); },
                           xj::argnums<0, 1>)(x, u);
  test_util::check_values(gx, {1.0 / 3, 1.0}, 1e-15);
  test_util::check_values(gu, {1.0 / 3, 1.0 / 3, 0.0}, 1e-15);
}

TEST_CASE("at: vmap with batched indices, operands and updates equals member-by-member results") {
  const xj::Array x = test_util::randn({3, 4, 2}, 10);
  const xj::Array u = test_util::randn({3, 2, 2}, 11);
  const xj::Array ids = i32s({1, 1, -1, 5, 0, 2}, {3, 2});  // member 1: 5 outside (dropped or clamped)
  for (How how : {How::set, How::add, How::mul, How::min, How::max})
    for (xj::IndexMode mode : {xj::IndexMode::drop, xj::IndexMode::clip}) {
      CAPTURE(static_cast<int>(how));
      auto one = [&](const xj::Array& a, const xj::Array& i, const xj::Array& v) { return apply(xj::at(a, i), how, v, mode); };
      const xj::Array batched = xj::vmap(one)(x, ids, u);
      for (std::int64_t b = 0; b < 3; ++b) {
        auto member = [&](const xj::Array& a) { return xj::squeeze(xj::slice_in_dim(a, b, b + 1, 1, 0), {0}); };
        check_same_values(vec(member(batched)), vec(one(member(x), member(ids), member(u))));
      }
      // Shared operand, batched indices only.
      const xj::Array x0 = xj::reshape(xj::slice_in_dim(x, 0, 1, 1, 0), {4, 2});
      const xj::Array shared = xj::vmap([&](const xj::Array& i, const xj::Array& v) { return one(x0, i, v); })(ids, u);
      check_same_values(vec(xj::slice_in_dim(shared, 2, 3, 1, 0)),
                 vec(one(x0, xj::reshape(xj::slice_in_dim(ids, 2, 3, 1, 0), {2}), xj::reshape(xj::slice_in_dim(u, 2, 3, 1, 0), {2, 2}))));
    }
  // get with batched indices.
  const xj::Array got = xj::vmap([](const xj::Array& a, const xj::Array& i) { return xj::at(a, i).get(); })(x, ids);
  const auto xv = vec(x);
  CHECK(vec(got)[(1 * 2 + 1) * 2] == xv[(1 * 4 + 3) * 2]);  // member 1, index 5 clamped to 3
}

TEST_CASE("at: the jaxpr shows the scatter with its mode; meshgrid") {
  const std::string text = test_util::str(xj::make_jaxpr([](const xj::Array& a, const xj::Array& v) {
    return xj::at(a, i32s({0, 2}, {2})).add(v);
  })(test_util::randn({3}, 12), test_util::randn({2}, 13)));
  CHECK(test_util::contains(text, "scatter_add[axis=0 fill_or_drop=True]"));
  const auto xy = xj::meshgrid({test_util::f64v({1, 2, 3}), test_util::f64v({4, 5})});
  CHECK(xy[0].shape() == xj::Shape{2, 3});
  CHECK(vec(xy[0]) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(vec(xy[1]) == std::vector<double>{4, 4, 4, 5, 5, 5});
  const auto ij = xj::meshgrid({test_util::f64v({1, 2, 3}), test_util::f64v({4, 5})}, "ij");
  CHECK(ij[0].shape() == xj::Shape{3, 2});
  CHECK(vec(ij[1]) == std::vector<double>{4, 5, 4, 5, 4, 5});
  CHECK_THROWS_AS(xj::meshgrid({test_util::randn({2, 2}, 1)}), xj::ShapeError);
}

TEST_CASE("at: regressions from review: NaN in min / max derivatives, an int index near INT64_MAX") {
  const double nan = std::nan("");
  const xj::Array x = test_util::f64v({nan, 1.0, 2.0}), rows = i32s({1}, {1});
  // An element no update touches keeps dx even when it is NaN; a NaN result takes the tangent of
  // the NaN that made it.
  for (bool use_max : {true, false}) {
    auto f = [&](const xj::Array& a) { return use_max ? xj::at(a, rows).max(test_util::f64v({5.0})) : xj::at(a, rows).min(test_util::f64v({5.0})); };
    auto [y, t] = xj::jvp(f, std::tuple{x}, std::tuple{test_util::f64v({1.0, 1.0, 1.0})});
    CHECK(vec(t) == std::vector<double>{1.0, use_max ? 0.0 : 1.0, 1.0});
    CHECK(vec(xj::grad([&](const xj::Array& a) { return xj::sum(f(a)); })(x)) == std::vector<double>{1.0, use_max ? 0.0 : 1.0, 1.0});
  }
  auto g = [&](const xj::Array& v) { return xj::at(test_util::f64v({0.0, 1.0, 2.0}), rows).max(v); };
  auto [y2, t2] = xj::jvp(g, std::tuple{test_util::f64v({nan})}, std::tuple{test_util::f64v({1.0})});
  CHECK(std::isnan(vec(y2)[1]));
  CHECK(vec(t2) == std::vector<double>{0.0, 1.0, 0.0});
  // A C++ index beyond 2^53 stays exact (it went through a double: INT64_MAX became INT64_MIN).
  const xj::Array xi = xj::array<std::int32_t>({1, 2, 3, 4}, {4});
  constexpr auto big = std::numeric_limits<std::int64_t>::max();
  CHECK(vec(xj::at(xi, big).get()) == std::vector<double>{4});
  CHECK(vec(xj::at(xi, big).set(100.0, xj::IndexMode::clip)) == std::vector<double>{1, 2, 3, 100});
  CHECK(vec(xj::at(xi, big).set(100.0)) == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("at: the second derivative of mul at a subnormal update is exact (fuzz seed 312124)") {
  // y = x with rows 1 and 0 multiplied by u: sum(y) is linear in u, so its Hessian is zero. The
  // product of the other updates is q / u; its derivative was NaN where u^2 underflows.
  const xj::Array x = test_util::f64v({1.0, 1.0, 1.0}), rows = i32s({1, 0}, {2});
  auto f = [&](const xj::Array& u) { return xj::sum(xj::at(x, rows).mul(u)); };
  for (double s : {1e-310, std::numeric_limits<double>::denorm_min(), 0.0, 2.0}) {
    const xj::Array u = test_util::f64v({s, s});
    CHECK(vec(xj::grad(f)(u)) == std::vector<double>{1.0, 1.0});
    auto [g, h] = xj::jvp(xj::grad(f), std::tuple{u}, std::tuple{test_util::f64v({1.0, -1.0})});
    CHECK(vec(h) == std::vector<double>{0.0, 0.0});
  }
}

TEST_CASE("at: reading from an empty axis raises, as jnp's IndexError (twenty-eighth session's hunt: get read zeros); updating it with an array of indices does nothing") {
  const xj::Array e = xj::zeros({0, 2});
  const xj::Array idx = xj::array<std::int32_t>({0, 1});
  CHECK_THROWS_AS((void)xj::at(e, idx).get(), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::at(e, 0).get(), xj::ShapeError);
  CHECK_THROWS_AS((void)xj::at(e, 0).set(1.0), xj::ShapeError);  // a scalar index: jnp's IndexError
  // an array of indices updates nothing there (JAX's scatter drops them; diff review: it raised)
  CHECK(xj::at(e, idx).set(1.0).shape() == xj::Shape{0, 2});
  CHECK(xj::at(e, idx).add(1.0, xj::IndexMode::clip).shape() == xj::Shape{0, 2});
  CHECK_THROWS_AS((void)xj::at(xj::zeros({2, 0}), {idx, idx}).get(), xj::ShapeError);
  // no index at all reads nothing: fine
  CHECK(xj::at(e, xj::zeros({0}, xj::i32)).get().shape() == xj::Shape{0, 2});
  // a non-empty axis still clamps (and drops) as before
  CHECK(xj::at(xj::array<float>({1.f, 2.f}), 5).get().item<float>() == 2.f);
}

TEST_CASE("API.md's index spellings: x[integer array] gathers rows, at(x, {1, 2}) and at(x, std::tuple{...}) index leading axes, bool arrays") {
  // oracle: numpy's m[[2, 0, -1]] and m[1, 2] written out by hand from m = arange(12).reshape(4, 3)
  const xj::Array m = xj::reshape(xj::arange(12, xj::f64), {4, 3});
  const xj::Array rows = m[xj::array<std::int32_t>({2, 0, -1}, {3})];
  CHECK(rows.shape() == xj::Shape{3, 3});
  CHECK(rows.to_vector<double>() == std::vector<double>{6, 7, 8, 0, 1, 2, 9, 10, 11});
  CHECK(xj::jit([](const xj::Array& x, const xj::Array& i) { return x[i]; })(m, xj::array<std::int64_t>({3, 1}, {2})).to_vector<double>() ==
        std::vector<double>{9, 10, 11, 3, 4, 5});
  // the gradient of a row gather scatters back, repeated rows adding
  const xj::Array g = xj::grad([](const xj::Array& x) { return xj::sum(x[xj::array<std::int32_t>({1, 1}, {2})]); })(m);
  CHECK(g.to_vector<double>() == std::vector<double>{0, 0, 0, 2, 2, 2, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_AS((void)m[xj::array<bool>({true, false, true, false}, {4})], xj::TypeError);
  CHECK(xj::at(m, {1, 2}).get().item<double>() == 5.0);
  CHECK(xj::at(m, std::tuple{xj::scalar(3, xj::i32), 0}).set(-1.0).to_vector<double>()[9] == -1.0);
  CHECK(xj::at(m, std::tuple{1, 2}).add(10.0).to_vector<double>()[5] == 15.0);
  // an unsigned 64-bit index past 2^63 clamps, as a u64 index array does (it wrapped negative)
  const xj::Array v = xj::arange(5, xj::f32);
  CHECK(xj::at(v, std::tuple{~std::uint64_t{0} - 1}).get().item<float>() == 4.0f);
  CHECK(v[xj::array<std::uint64_t>({~std::uint64_t{0} - 1}, {1})].to_vector<float>() == std::vector<float>{4.0f});
  // bool arrays from C++ bools
  const xj::Array mask = xj::array({true, false, true});
  CHECK(mask.dtype() == xj::bool_);
  CHECK(mask.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0, 1});
  CHECK(xj::array<bool>(std::vector<bool>{false, true}, {2}).to_vector<bool>() == std::vector<bool>{false, true});
}
