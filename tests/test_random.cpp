// test_random.cpp: xj::random and the threefry2x32 primitive: Random123 known answers, JAX's
// values for key/split/bits/uniform (jax_threefry_partitionable=False), determinism eagerly, in a
// jaxpr and under autodiff, distribution statistics, dropout gradients, errors.
#include <algorithm>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include <xjax/xjax.hpp>

#include "internal.hpp"

namespace xj = xjax;

namespace {

using U32 = std::vector<std::uint32_t>;

U32 words(const xj::Array& a) {
  REQUIRE(a.is_concrete());
  REQUIRE(a.dtype() == xj::u32);
  return a.to_vector<std::uint32_t>();
}

// Exact element values (float and double convert to double exactly).
std::vector<double> values(const xj::Array& a) {
  REQUIRE(a.is_concrete());
  return a.to_vector<double>();
}

xj::Array threefry(const xj::Array& key, const xj::Array& counters) {
  return xj::detail::bind1(xj::Primitive::threefry2x32, {key, counters});
}

xj::Array u32v(const U32& v, xj::Shape s) { return xj::array<std::uint32_t>(v, std::move(s)); }

// Runs f eagerly and through eval_jaxpr(make_jaxpr(f)) on the same arguments.
template <class F, class... A> std::pair<xj::Array, xj::Array> eager_and_jaxpr(F f, const A&... args) {
  xj::Array eager = f(args...);
  xj::ClosedJaxpr j = xj::make_jaxpr(f)(args...);
  auto out = xj::eval_jaxpr(j, std::vector<xj::Array>{args...});
  REQUIRE(out.size() == 1);
  return {eager, out[0]};
}

struct Moments {
  double mean, var, lo, hi;
};
Moments moments(const std::vector<double>& v) {
  double s = 0, lo = v[0], hi = v[0];
  for (double x : v) {
    s += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double mean = s / static_cast<double>(v.size());
  double q = 0;
  for (double x : v) q += (x - mean) * (x - mean);
  return {mean, q / static_cast<double>(v.size()), lo, hi};
}

}  // namespace

TEST_CASE("random: threefry2x32 matches Random123's known answers (20 rounds)") {
  struct Kat {
    U32 key, ctr, out;
  };
  // Random123 kat_vectors, threefry2x32 20: counter, key -> output
  const Kat kats[] = {
      {{0x00000000u, 0x00000000u}, {0x00000000u, 0x00000000u}, {0x6b200159u, 0x99ba4efeu}},
      {{0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}, {0x1cb996fcu, 0xbb002be7u}},
      {{0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}, {0xc4923a9cu, 0x483df7a0u}},
  };
  for (const auto& k : kats) {
    CAPTURE(k.key[0]);
    CHECK(words(threefry(u32v(k.key, {2}), u32v(k.ctr, {1, 2}))) == k.out);
    CHECK(words(threefry(u32v(k.key, {2}), u32v(k.ctr, {2}))) == k.out);
  }

  // Every counter pair of a batched array is hashed independently, in place.
  xj::Array key = u32v({0x13198a2eu, 0x03707344u}, {2});
  U32 ctr = {0u, 0u, 0x243f6a88u, 0x85a308d3u, 7u, 9u, 0xffffffffu, 1u, 5u, 5u, 0u, 1u};
  U32 batched = words(threefry(key, u32v(ctr, {2, 3, 2})));
  REQUIRE(batched.size() == 12);
  for (std::size_t i = 0; i < 6; ++i) {
    U32 one = words(threefry(key, u32v({ctr[2 * i], ctr[2 * i + 1]}, {2})));
    CHECK(batched[2 * i] == one[0]);
    CHECK(batched[2 * i + 1] == one[1]);
  }
  CHECK(batched[2] == 0xc4923a9cu);
  CHECK(batched[3] == 0x483df7a0u);

  // Traced: the primitive records and evaluates to the same words.
  auto [eager, traced] = eager_and_jaxpr([](const xj::Array& k, const xj::Array& c) { return threefry(k, c); },
                                         key, u32v(ctr, {6, 2}));
  CHECK(words(eager) == words(traced));
  CHECK(words(threefry(key, xj::zeros({0, 2}, xj::u32))).empty());
}


TEST_CASE("random: threefry2x32 with one key per leading index of the counters (the form vmap over keys uses)") {
  // Keys u32[3, 2] and counters u32[3, 2, 2]: row j of the counters is hashed with key j; the
  // known answers of Random123 for two of the keys, the others against one-key calls.
  U32 keys = {0x00000000u, 0x00000000u, 0x13198a2eu, 0x03707344u, 0xffffffffu, 0xffffffffu};
  U32 ctr = {0u, 0u, 5u, 6u, 0x243f6a88u, 0x85a308d3u, 1u, 2u, 0xffffffffu, 0xffffffffu, 3u, 4u};
  U32 got = words(threefry(u32v(keys, {3, 2}), u32v(ctr, {3, 2, 2})));
  REQUIRE(got.size() == 12);
  CHECK(got[0] == 0x6b200159u);
  CHECK(got[1] == 0x99ba4efeu);
  CHECK(got[4] == 0xc4923a9cu);
  CHECK(got[5] == 0x483df7a0u);
  CHECK(got[8] == 0x1cb996fcu);
  CHECK(got[9] == 0xbb002be7u);
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t i = 0; i < 2; ++i) {
      std::size_t at = (j * 2 + i) * 2;
      U32 one = words(threefry(u32v({keys[2 * j], keys[2 * j + 1]}, {2}), u32v({ctr[at], ctr[at + 1]}, {2})));
      CHECK(got[at] == one[0]);
      CHECK(got[at + 1] == one[1]);
    }
  // The keys' leading dims must be the counters' leading dims.
  CHECK_THROWS_AS(threefry(u32v(keys, {3, 2}), u32v(ctr, {2, 3, 2})), xj::ShapeError);
  CHECK_THROWS_AS(threefry(u32v(keys, {3, 2}), u32v({1u, 2u}, {2})), xj::ShapeError);
  CHECK_THROWS_AS(threefry(u32v({1u, 2u, 3u}, {3}), u32v(ctr, {6, 2})), xj::ShapeError);

  // vmap over counters with such keys shared: the counters' batch axis goes past the keys'
  // leading dims wherever it was (axis 0, or the trailing pair axis), as in a loop.
  xj::Array k3 = u32v(keys, {3, 2});
  xj::Array cs = xj::astype(xj::reshape(xj::arange(4 * 3 * 2, xj::i32), {4, 3, 2}), xj::u32);  // 4 members of [3, 2]
  std::vector<xj::Array> rows;
  for (std::int64_t b = 0; b < 4; ++b) rows.push_back(threefry(k3, xj::squeeze(xj::slice_in_dim(cs, b, b + 1), {0})));
  xj::Array want = xj::stack(rows);
  auto hash = [&](const xj::Array& c) { return threefry(k3, c); };
  CHECK(words(xj::vmap(hash)(cs)) == words(want));
  CHECK(words(xj::vmap(hash, 2)(xj::transpose(cs, {1, 2, 0}))) == words(want));
}
TEST_CASE("random: key, split, fold_in, bits and uniform reproduce JAX's values") {
  CHECK(words(xj::random::key(0)) == U32{0u, 0u});
  CHECK(words(xj::random::key(42)) == U32{0u, 42u});
  CHECK(words(xj::random::key(0x123456789abcdef0ull)) == U32{0x12345678u, 0x9abcdef0u});

  const xj::Array k0 = xj::random::key(0);
  // jax.random.split(jax.random.PRNGKey(0)) with jax_threefry_partitionable=False
  xj::Array s = xj::random::split(k0);
  CHECK(s.shape() == xj::Shape{2, 2});
  CHECK(words(s) == U32{4146024105u, 967050713u, 2718843009u, 1272950319u});
  // jax.random.bits(key(0), (4,)) and (3,) (odd: the counters are padded with one 0)
  CHECK(words(xj::random::bits(k0, {4})) == U32{4146024105u, 967050713u, 2718843009u, 1272950319u});
  CHECK(words(xj::random::bits(k0, {3})) == U32{4146024105u, 1351547692u, 2718843009u});
  CHECK(words(xj::random::bits(k0, {})) == U32{1797259609u});
  CHECK(words(xj::random::bits(xj::random::key(1), {})) == U32{507451445u});
  CHECK(xj::random::bits(k0, {2, 3}).shape() == xj::Shape{2, 3});
  // fold_in(key, d) hashes the counter (0, d)
  CHECK(words(xj::random::fold_in(k0, 0)) == U32{1797259609u, 2579123966u});
  CHECK(words(xj::random::fold_in(k0, 1)) == U32{928981903u, 3453687069u});
  CHECK(words(xj::random::fold_in(k0, 2)) == U32{4146024105u, 2718843009u});
  CHECK(words(xj::random::fold_in(k0, xj::scalar(2, xj::i32))) == U32{4146024105u, 2718843009u});
  // uniform(key(0)) = 0.41845703: the top 23 bits of 1797259609 as a mantissa
  xj::Array u = xj::random::uniform(k0);
  CHECK(u.dtype() == xj::f32);
  CHECK(u.shape() == xj::Shape{});
  CHECK(u.item<float>() == static_cast<float>((1797259609u >> 9) * std::ldexp(1.0, -23)));
  CHECK(u.item<float>() == doctest::Approx(0.41845703).epsilon(1e-7));
}

TEST_CASE("random: f32 and f64 uniform are exact functions of the random words") {
  const xj::Array k = xj::random::key(7);
  U32 w = words(xj::random::bits(k, {5}));
  auto u32 = values(xj::random::uniform(k, {5}));
  for (std::size_t i = 0; i < 5; ++i) CHECK(u32[i] == static_cast<double>(w[i] >> 9) * std::ldexp(1.0, -23));

  // f64: 52 bits of (hi << 32 | lo) with hi from the first half of 2n words, lo from the second
  U32 w2 = words(xj::random::bits(k, {10}));
  xj::Array u = xj::random::uniform(k, {5}, xj::f64);
  CHECK(u.dtype() == xj::f64);
  auto u64 = values(u);
  for (std::size_t i = 0; i < 5; ++i) {
    const std::uint64_t m = ((static_cast<std::uint64_t>(w2[i]) << 32) | w2[5 + i]) >> 12;
    CHECK(u64[i] == static_cast<double>(m) * std::ldexp(1.0, -52));
  }

  // f64 statistics over 100k samples
  auto big = values(xj::random::uniform(xj::random::key(3), {100000}, xj::f64));
  Moments m = moments(big);
  CHECK(m.lo >= 0.0);
  CHECK(m.hi < 1.0);
  CHECK(m.mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(m.var == doctest::Approx(1.0 / 12).epsilon(0.02));
  // the low bits vary too (not merely f32 values widened)
  int fine = 0;
  for (double x : big) fine += static_cast<double>(static_cast<float>(x)) != x;
  CHECK(fine > 99000);
}

TEST_CASE("random: the same key gives the same numbers, eagerly and through a jaxpr") {
  const xj::Array k = xj::random::key(1234);
  CHECK(words(xj::random::bits(k, {17})) == words(xj::random::bits(k, {17})));
  CHECK(values(xj::random::normal(k, {9})) == values(xj::random::normal(k, {9})));

  auto check_same = [](const std::pair<xj::Array, xj::Array>& p) {
    REQUIRE(p.first.is_concrete());
    REQUIRE(p.second.is_concrete());
    CHECK(p.first.aval() == p.second.aval());
    CHECK(values(p.first) == values(p.second));
  };
  // key as an argument of the traced function (a tracer)
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::bits(key, {5, 3}); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::split(key, 5); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::fold_in(key, 99u); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::uniform(key, {4, 7}); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::uniform(key, {3}, xj::f64, -2, 5); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::normal(key, {3, 5}); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::normal(key, {4}, xj::f64); }, k));
  check_same(eager_and_jaxpr([](const xj::Array& key) { return xj::random::bernoulli(key, 0.3, {11}); }, k));
  // traced fold_in data and a traced probability
  check_same(eager_and_jaxpr(
      [](const xj::Array& key, const xj::Array& d) { return xj::random::bits(xj::random::fold_in(key, d), {3}); }, k,
      xj::scalar(5, xj::i32)));
  check_same(eager_and_jaxpr(
      [](const xj::Array& key, const xj::Array& p) { return xj::random::bernoulli(key, p, {2, 3}); }, k,
      xj::array<float>({0.1f, 0.5f, 0.9f})));
  // key captured by the traced function (a const of the jaxpr)
  check_same(eager_and_jaxpr([k](const xj::Array& x) { return x * xj::random::normal(k, {4}); }, xj::ones({4})));

  // The jaxpr really contains the primitive (no concrete shortcut).
  xj::ClosedJaxpr j = xj::make_jaxpr([](const xj::Array& key) { return xj::random::uniform(key, {8}); })(k);
  CHECK(j.str().find("threefry2x32") != std::string::npos);
}

TEST_CASE("random: split keys differ from each other and from their parent") {
  const xj::Array k = xj::random::key(0);
  xj::Array keys = xj::random::split(k, 6);
  CHECK(keys.shape() == xj::Shape{6, 2});
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen{{0u, 0u}};
  U32 w = words(keys);
  for (std::size_t i = 0; i < 6; ++i) seen.insert({w[2 * i], w[2 * i + 1]});
  CHECK(seen.size() == 7);
  // a key row is usable as a key, and the streams differ
  U32 a = words(xj::random::bits(keys[0], {8})), b = words(xj::random::bits(keys[1], {8}));
  CHECK(a != b);
  CHECK(a != words(xj::random::bits(k, {8})));
  CHECK(words(xj::random::fold_in(k, 1)) != words(xj::random::fold_in(k, 2)));
  CHECK(xj::random::split(k, 0).shape() == xj::Shape{0, 2});
  CHECK(xj::random::split(k, 1).shape() == xj::Shape{1, 2});
}

TEST_CASE("random: uniform is in range with mean 1/2 and variance 1/12") {
  auto v = values(xj::random::uniform(xj::random::key(0), {100000}));
  Moments m = moments(v);
  CHECK(m.lo >= 0.0);
  CHECK(m.hi < 1.0);
  CHECK(m.mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(m.var == doctest::Approx(1.0 / 12).epsilon(0.02));
  std::set<double> distinct(v.begin(), v.end());
  CHECK(distinct.size() > 99000);

  auto w = values(xj::random::uniform(xj::random::key(1), {250, 400}, xj::f32, -2.0, 3.0));
  Moments mw = moments(w);
  CHECK(mw.lo >= -2.0);
  CHECK(mw.hi < 3.0);
  CHECK(mw.mean == doctest::Approx(0.5).epsilon(0.02));
  CHECK(mw.var == doctest::Approx(25.0 / 12).epsilon(0.02));
}

TEST_CASE("random: normal has mean 0 and standard deviation 1") {
  for (xj::DType dt : {xj::f32, xj::f64}) {
    CAPTURE(xj::dtype_name(dt));
    xj::Array z = xj::random::normal(xj::random::key(5), {100001}, dt);
    CHECK(z.dtype() == dt);
    auto v = values(z);
    Moments m = moments(v);
    CHECK(std::abs(m.mean) < 0.01);
    CHECK(std::sqrt(m.var) == doctest::Approx(1.0).epsilon(0.01));
    int within1 = 0, within2 = 0;
    int finite = 0;
    double m4 = 0;
    for (double x : v) {
      within1 += std::abs(x) < 1.0;
      within2 += std::abs(x) < 2.0;
      finite += std::isfinite(x);
      m4 += x * x * x * x;
    }
    CHECK(finite == static_cast<int>(v.size()));
    const double n = static_cast<double>(v.size());
    CHECK(within1 / n == doctest::Approx(0.682689).epsilon(0.01));
    CHECK(within2 / n == doctest::Approx(0.954500).epsilon(0.005));
    CHECK(m4 / n == doctest::Approx(3.0).epsilon(0.05));  // kurtosis of a Gaussian
  }
  // odd sizes and shapes
  CHECK(xj::random::normal(xj::random::key(5), {3, 5}).shape() == xj::Shape{3, 5});
  CHECK(xj::random::normal(xj::random::key(5)).shape() == xj::Shape{});
}

TEST_CASE("random: bernoulli is true with frequency p") {
  for (double p : {0.0, 0.3, 0.7, 1.0}) {
    CAPTURE(p);
    xj::Array b = xj::random::bernoulli(xj::random::key(9), p, {100000});
    CHECK(b.dtype() == xj::bool_);
    auto v = values(b);
    double freq = 0;
    for (double x : v) freq += x;
    freq /= static_cast<double>(v.size());
    CHECK(std::abs(freq - p) < 0.01);
  }
  // per-element probabilities, broadcast along the leading axis
  xj::Array p = xj::array<float>({0.1f, 0.5f, 0.9f});
  auto v = values(xj::random::bernoulli(xj::random::key(2), p, {30000, 3}));
  double f[3] = {0, 0, 0};
  for (std::size_t i = 0; i < v.size(); ++i) f[i % 3] += v[i];
  CHECK(std::abs(f[0] / 30000 - 0.1) < 0.015);
  CHECK(std::abs(f[1] / 30000 - 0.5) < 0.015);
  CHECK(std::abs(f[2] / 30000 - 0.9) < 0.015);
}

TEST_CASE("random: dropout gradients use the same mask as the forward pass") {
  const xj::Shape shape{64, 32};
  const xj::Array x = xj::random::normal(xj::random::key(11), shape);
  const xj::Array k = xj::random::key(12);
  auto dropout_loss = [](const xj::Array& xs, const xj::Array& key) {
    xj::Array keep = xj::random::bernoulli(key, 0.7, xs.shape());
    return xj::sum(xj::where(keep, xs / 0.7, 0.0) * xs);
  };

  // expected: d/dx sum(mask * x^2 / 0.7) = 2 mask x / 0.7
  auto mask = values(xj::random::bernoulli(k, 0.7, shape));
  auto xv = values(x);
  std::vector<double> want(xv.size());
  int kept = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    want[i] = mask[i] != 0 ? 2 * xv[i] / 0.7 : 0.0;
    kept += mask[i] != 0;
  }
  CHECK(kept > 0);
  CHECK(kept < static_cast<int>(xv.size()));

  auto check_grad = [&](const xj::Array& g) {
    REQUIRE(g.shape() == shape);
    auto gv = values(g);
    for (std::size_t i = 0; i < gv.size(); ++i) {
      INFO("element " << i);
      CHECK(gv[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  };
  // key passed in (a traced integer input of the differentiated function)
  xj::Array g = xj::grad(dropout_loss)(x, k);
  check_grad(g);
  // key captured by the function
  check_grad(xj::grad([k, &dropout_loss](const xj::Array& xs) { return dropout_loss(xs, k); })(x));
  // vjp: the forward value equals the eager value bit for bit; the cotangent gives the gradient
  auto [out, f_vjp] = xj::vjp(dropout_loss, x, k);
  CHECK(out.item<float>() == dropout_loss(x, k).item<float>());
  auto cts = f_vjp(xj::ones({}));
  check_grad(std::get<0>(cts));
  CHECK(values(std::get<0>(cts)) == values(g));
  // jvp: the mask has zero tangent; the primal equals the eager value
  auto [primal, tangent] = xj::jvp(dropout_loss, std::tuple{x, k}, std::tuple{xj::ones(shape), xj::zeros({2}, xj::u32)});
  CHECK(primal.item<float>() == dropout_loss(x, k).item<float>());
  double dir = 0;
  for (double w : want) dir += w;
  CHECK(tangent.item<double>() == doctest::Approx(dir).epsilon(1e-5));
}

TEST_CASE("random: invalid keys, dtypes and shapes are rejected") {
  const xj::Array k = xj::random::key(0);
  CHECK_THROWS_AS(xj::random::bits(xj::zeros({2}), {3}), xj::TypeError);
  CHECK_THROWS_AS(xj::random::bits(xj::zeros({3}, xj::u32), {3}), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::split(xj::random::split(k, 2), 2), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::split(k, -1), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::uniform(k, {3}, xj::i32), xj::TypeError);
  CHECK_THROWS_AS(xj::random::normal(k, {3}, xj::u32), xj::TypeError);
  CHECK_THROWS_AS(xj::random::bits(k, {-1}), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::bits(k, {1 << 20, 1 << 20}), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::bernoulli(k, xj::array<float>({0.1f, 0.2f}), {3}), xj::ShapeError);
  CHECK_THROWS_AS(xj::random::fold_in(k, xj::scalar(1.0)), xj::TypeError);
  CHECK_THROWS_WITH_AS(xj::random::uniform(xj::zeros({2}), {3}),
                       doctest::Contains("xj::random::uniform (at "), xj::TypeError);
  CHECK_THROWS_AS(threefry(k, xj::zeros({3}, xj::u32)), xj::ShapeError);
}

TEST_CASE("random: bf16 / f16 uniform draws the same numbers eagerly and under jit; huge spans spread; fold_in of any integer (review findings)") {
  // The affine map was two bf16 operations: rounded twice eagerly, once in a fused chain.
  const xj::Array k = xj::random::key(2024);
  for (const xj::DType dt : {xj::bf16, xj::f16}) {
    auto f = [dt](const xj::Array& key) { return xj::random::uniform(key, {1000}, dt, -1.7, 3.3); };
    const auto eager = xj::astype(f(k), xj::f64).to_vector<double>(), jitted = xj::astype(xj::jit(f)(k), xj::f64).to_vector<double>();
    CHECK(eager == jitted);
    // Each draw is the f32 map of the same unit draw rounded once (oracle: the unit draws in f32).
    const auto unit = xj::astype(xj::random::uniform(k, {1000}, dt), xj::f64).to_vector<double>();
    const auto rounded = [dt](double v) { return xj::astype(xj::scalar(v, xj::f64), dt).item<double>(); };
    const auto lo = static_cast<float>(rounded(-1.7)), span = static_cast<float>(rounded(3.3)) - lo;  // minval, maxval in the dtype
    for (std::size_t i = 0; i < 1000; i += 97) {
      const float product = static_cast<float>(unit[i]) * span;  // in f32, each operation rounded
      CHECK(eager[i] == rounded(static_cast<double>(product + lo)));
    }
  }
  // A span past f32's range (every draw was 3e38 clamped below maxval): spread over the range,
  // and f16's [-60000, 60000) too.
  const auto big = xj::random::uniform(k, {4000}, xj::f32, -3e38, 3e38).to_vector<float>();
  const double mean = std::accumulate(big.begin(), big.end(), 0.0) / 4000.0;
  CHECK(std::abs(mean) < 0.05 * 3e38);  // |mean| ~ 3e38 / sqrt(3 * 4000) ~ 2.7e36 expected
  CHECK(*std::min_element(big.begin(), big.end()) < -2.9e38f);
  CHECK(*std::max_element(big.begin(), big.end()) > 2.9e38f);
  const auto half = xj::astype(xj::random::uniform(k, {4000}, xj::f16, -60000, 60000), xj::f64).to_vector<double>();
  CHECK(*std::min_element(half.begin(), half.end()) < -50000);
  CHECK(*std::max_element(half.begin(), half.end()) > 50000);
  CHECK(std::none_of(half.begin(), half.end(), [](double v) { return std::isnan(v) || std::isinf(v); }));
  CHECK_THROWS_AS(xj::random::uniform(k, {2}, xj::f32, 0.0, INFINITY), xj::Error);
  CHECK_THROWS_AS(xj::random::uniform(k, {2}, xj::f16, 0.0, 1e6), xj::Error);  // past f16's range
  // fold_in: any integer width or bool, as JAX's jnp.uint32(data).
  const auto want = xj::random::fold_in(k, 5u).to_vector<std::uint32_t>();
  for (const xj::DType dt : {xj::u8, xj::i8, xj::i16, xj::u16, xj::u64, xj::i64})
    CHECK(xj::random::fold_in(k, xj::astype(xj::scalar(5, xj::i32), dt)).to_vector<std::uint32_t>() == want);
  CHECK(xj::random::fold_in(k, xj::scalar(1, xj::bool_)).to_vector<std::uint32_t>() == xj::random::fold_in(k, 1u).to_vector<std::uint32_t>());
}
