// test_sort.cpp: sort (one operand and several with num_keys), argsort and top_k against
// std::stable_sort in double: every axis, stability, JAX's total order (-0 equals 0, NaN last),
// integers and bool, top_k's tie order; derivatives move with the permutation; vmap and jit.
#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <random>
#include <limits>
#include <numeric>

#include "test_util.hpp"

namespace xj = xjax;
using test_util::contains;
using test_util::vec;

namespace {

/// Line `o`, `j` of a row-major [outer, n, inner] array.
std::vector<double> line(const std::vector<double>& v, std::int64_t o, std::int64_t j, std::int64_t n, std::int64_t inner) {
  std::vector<double> r;
  for (std::int64_t i = 0; i < n; ++i) r.push_back(v[static_cast<std::size_t>((o * n + i) * inner + j)]);
  return r;
}

/// JAX's total order: NaN after everything, -0 equal to 0.
bool before(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

/// The stable ascending order of `key`.
std::vector<std::int64_t> order_of(const std::vector<double>& key) {
  std::vector<std::int64_t> p(key.size());
  std::iota(p.begin(), p.end(), 0);
  std::stable_sort(p.begin(), p.end(), [&](std::int64_t a, std::int64_t b) { return before(key[std::size_t(a)], key[std::size_t(b)]); });
  return p;
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); }

}  // namespace

TEST_CASE("sort and argsort: every axis of a 3-D array against std::stable_sort, f32 / f64 / i32") {
  const xj::Shape shape{3, 5, 4};
  std::vector<double> v(60);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::floor(4 * std::sin(1.9 * static_cast<double>(i)));  // many ties
  for (xj::DType dtype : {xj::f64, xj::f32, xj::i32})
    for (std::int64_t axis : {0, 1, 2, -1}) {
      INFO(dtype << " axis " << axis);
      const xj::Array x = xj::astype(test_util::f64v(v, shape), dtype);
      const auto a = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
      std::int64_t outer = 1, inner = 1;
      for (std::size_t d = 0; d < a; ++d) outer *= shape[d];
      for (std::size_t d = a + 1; d < 3; ++d) inner *= shape[d];
      const std::int64_t n = shape[a];
      const auto sorted = vec(xj::sort(x, axis));
      const auto order = vec(xj::argsort(x, axis));
      CHECK(xj::argsort(x, axis).dtype() == xj::i32);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < inner; ++j) {
          const auto want = order_of(line(v, o, j, n, inner));
          const auto got_order = line(order, o, j, n, inner), got = line(sorted, o, j, n, inner), orig = line(v, o, j, n, inner);
          for (std::size_t i = 0; i < want.size(); ++i) {
            CHECK(got_order[i] == static_cast<double>(want[i]));  // stable: ties keep their order
            CHECK(got[i] == orig[static_cast<std::size_t>(want[i])]);
          }
        }
    }
}

TEST_CASE("sort: JAX's total order (-0 = 0 in a stable order, NaN last), bool, several operands with num_keys") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v{0.0, nan, -0.0, -inf, 1.0, -nan, inf, -1.0, 0.0};
  const auto got = vec(xj::sort(test_util::f64v(v)));
  const auto want = order_of(v);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(same_value(got[i], v[static_cast<std::size_t>(want[i])]));
  CHECK(std::isnan(got[7]));
  CHECK(std::isnan(got[8]));
  CHECK(std::signbit(got[2]) == false);  // 0.0 came before -0.0 in x: it stays first
  CHECK(std::signbit(got[3]) == true);
  const xj::Array b = xj::astype(xj::array<std::int32_t>({1, 0, 1, 0}, {4}), xj::bool_);
  CHECK(xj::sort(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1, 1});
  // Two keys: by the first, then the second; a third operand carried along.
  const xj::Array k1 = xj::array<std::int32_t>({2, 1, 2, 1, 0}, {5});
  const xj::Array k2 = test_util::f64v({0.5, 3.0, -1.0, 3.0, 9.0});
  const xj::Array payload = xj::array<std::int32_t>({10, 11, 12, 13, 14}, {5});
  const auto out = xj::sort(std::vector<xj::Array>{k1, k2, payload}, 0, 2);
  CHECK(out.size() == 3);
  CHECK(out[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 1, 2, 2});
  CHECK(vec(out[1]) == std::vector<double>{9.0, 3.0, 3.0, -1.0, 0.5});
  CHECK(out[2].to_vector<std::int64_t>() == std::vector<std::int64_t>{14, 11, 13, 12, 10});
  // With one key the second operand does not break ties: the stable order decides.
  CHECK(xj::sort(std::vector<xj::Array>{k1, payload}, 0, 1)[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{14, 11, 13, 10, 12});
  CHECK(contains(test_util::message_of<xj::Error>([&] { (void)xj::sort(std::vector<xj::Array>{k1, k2}, 0, 3); }), "num_keys"));
  CHECK(contains(test_util::message_of<xj::Error>([&] { (void)xj::sort(std::vector<xj::Array>{k1, test_util::f64v({1.0})}, 0, 1); }), "shape"));
  CHECK(xj::sort(xj::zeros({0, 3}, xj::f32), 0).shape() == xj::Shape{0, 3});
}

TEST_CASE("top_k: the k largest along the last axis, descending, ties with the lower index first; integers without overflow") {
  const xj::Array x = test_util::f64v({3.0, 1.0, 3.0, 7.0, -2.0, 7.0, 0.5, 1.0}, {2, 4});
  auto [values, indices] = xj::top_k(x, 3);
  CHECK(values.shape() == xj::Shape{2, 3});
  CHECK(vec(values) == std::vector<double>{7.0, 3.0, 3.0, 7.0, 1.0, 0.5});
  CHECK(indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 0, 2, 1, 3, 2});
  CHECK(indices.dtype() == xj::i32);
  const xj::Array ints = xj::array<std::int32_t>({INT_MIN, 5, INT_MAX, 5, -1}, {5});
  auto [iv, ii] = xj::top_k(ints, 5);
  CHECK(iv.to_vector<std::int64_t>() == std::vector<std::int64_t>{INT_MAX, 5, 5, -1, INT_MIN});
  CHECK(ii.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 1, 3, 4, 0});
  CHECK(xj::top_k(x, 0).first.shape() == xj::Shape{2, 0});
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::top_k(x, 5); }), "top_k"));
}

TEST_CASE("top_k against a full stable sort in double, NaN first (as XLA), vmap with the batch at the last axis") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // NaN counts as the largest; -0 equals 0 (index order); the reference: a stable sort of
  // positions by descending value in that order, in double.
  const std::vector<double> v{0.5, nan, -0.0, 2.0, 0.0, nan, 2.0, -1.0};
  auto [values, indices] = xj::top_k(test_util::f64v(v), 5);
  CHECK(indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 5, 3, 6, 0});
  const auto got = vec(values);
  CHECK((std::isnan(got[0]) && std::isnan(got[1]) && got[2] == 2.0 && got[3] == 2.0 && got[4] == 0.5));
  // Random rows of 200 with repeated values, every k: the first k of std::stable_sort's order.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 20);
  std::vector<double> big(3 * 200);
  for (auto& e : big) e = small(rng) * 0.5;
  const xj::Array x = test_util::f64v(big, {3, 200});
  for (std::int64_t k : {1, 7, 100, 200}) {
    auto [tv, ti] = xj::top_k(x, k);
    const auto ids = ti.to_vector<std::int64_t>();
    for (std::int64_t r = 0; r < 3; ++r) {
      std::vector<std::int64_t> order(200);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t i, std::int64_t j) { return big[r * 200 + i] > big[r * 200 + j]; });
      for (std::int64_t c = 0; c < k; ++c) CHECK(ids[r * k + c] == order[c]);
    }
  }
  // vmap: the batch at the last axis moves (top_k works along the last axis), elsewhere it stays.
  const xj::Array y = test_util::randn({4, 6}, 9);
  test_util::check_close(xj::vmap([](const xj::Array& c) { return xj::top_k(c, 3).first; }, {1})(y),
                         xj::top_k(xj::matrix_transpose(y), 3).first, 1e-15);
  test_util::check_close(xj::vmap([](const xj::Array& r) { return xj::top_k(r, 2).first; }, {0})(y), xj::top_k(y, 2).first, 1e-15);
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::top_k(xj::scalar(1.0), 1); }), "rank >= 1"));
}

TEST_CASE("sort's derivatives move with the elements; vmap and jit agree with the eager sort") {
  const xj::Array x = test_util::f64v({0.3, -1.2, 2.5, 0.7, -0.1, 1.9}, {2, 3});
  const xj::Array w = test_util::f64v({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  // d/dx sum(w * sort(x, 1)): each x gets the weight of the position it lands in.
  const auto g = vec(xj::grad([&](const xj::Array& v) { return xj::sum(w * xj::sort(v, 1)); })(x));
  CHECK(g == std::vector<double>{2.0, 1.0, 3.0, 5.0, 4.0, 6.0});
  auto [value, tangent] = xj::jvp([](const xj::Array& v) { return xj::sort(v, 0); }, std::tuple{x}, std::tuple{w});
  CHECK(vec(tangent) == std::vector<double>{1.0, 2.0, 6.0, 4.0, 5.0, 3.0});
  // top_k's values: the gradient lands on the chosen elements only.
  const auto gt = vec(xj::grad([](const xj::Array& v) { return xj::sum(xj::top_k(v, 2).first); })(x));
  CHECK(gt == std::vector<double>{1.0, 0.0, 1.0, 1.0, 0.0, 1.0});
  // vmap over the rows (batch at 0 and at 1) and jit: as the eager sort.
  test_util::check_close(xj::vmap([](const xj::Array& r) { return xj::sort(r); }, {0})(x), xj::sort(x, 1), 1e-15);
  test_util::check_close(xj::vmap([](const xj::Array& c) { return xj::sort(c); }, {1})(x), xj::matrix_transpose(xj::sort(x, 0)), 1e-15);
  test_util::check_close(xj::jit([](const xj::Array& v) { return xj::sort(v, 1); })(x), xj::sort(x, 1), 1e-15);
}
