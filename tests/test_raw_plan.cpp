// test_raw_plan.cpp: raw plans (src/raw_plan.hpp), which scans run on raw memory. Each scan
// gives the Array executor's results bit for bit (same kernels, different bookkeeping) and the
// values of a plain C++ loop; values with disjoint lifetimes share workspace; a raw scan makes
// no buffer per iteration; bodies that run sub-jaxprs keep the Array executor. Top-level plans of
// small values run raw too (an unrolled stack under jit), sharing passed-through inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <xjax/xjax.hpp>

#include "internal.hpp"
#include "raw_plan.hpp"
#include "plan.hpp"
#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

void check_same_bytes(const xj::Array& a, const xj::Array& b) {
  REQUIRE(a.aval() == b.aval());
  CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.aval().nbytes())) == 0);
}

// f's results with raw scans and with the Array executor, compared byte for byte.
template <class F> std::vector<xj::Array> same_both_ways(F f) {
  std::vector<xj::Array> raw = f();
  std::vector<xj::Array> arrays;
  {
    xj::detail::RawPlansOff off;
    arrays = f();
  }
  REQUIRE(raw.size() == arrays.size());
  for (std::size_t i = 0; i < raw.size(); ++i) check_same_bytes(raw[i], arrays[i]);
  return raw;
}

xj::Array ramp(xj::Shape shape, float scale, float shift = 0.0f) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 7) % 13) - shift;
  return xj::array<float>(v, shape);
}

// The scan body of a layer stack: the carry as a residual y, a bool mask y, the carry twice (as
// the next carry's input and as a y), a scalar literal y, an unread product and a closed-over
// constant.
const xj::Array kBias = ramp({4}, 0.01f, 0.02f);

std::pair<std::pair<xj::Array, xj::Array>, std::tuple<xj::Array, xj::Array, xj::Array, xj::Array>> layer(
    const std::pair<xj::Array, xj::Array>& carry, const xj::Array& w) {
  const auto& [h, count] = carry;
  xj::Array z = xj::matmul(h, w) + kBias;
  xj::Array mask = z > 0.0f;
  (void)xj::matmul(w, w);  // unread
  xj::Array next = xj::where(mask, z, z * 0.1f);
  return {{next, count + 1.0f}, {h, mask, count, xj::scalar(2.5)}};
}

}  // namespace

TEST_CASE("raw scan: a layer stack gives the Array executor's bytes and a plain loop's values") {
  const std::int64_t L = 7;
  xj::Array ws = ramp({L, 4, 4}, 0.1f, 0.5f), h0 = ramp({3, 4}, 0.2f, 0.6f);
  for (std::int64_t unroll : {1, 3, 7}) {
    for (bool reverse : {false, true}) {
      CAPTURE(unroll);
      CAPTURE(reverse);
      auto outs = same_both_ways([&] {
        auto [carry, ys] = xj::scan(layer, std::pair{h0, xj::scalar(0.0)}, ws, {.reverse = reverse, .unroll = unroll});
        auto [res, mask, count, lit] = ys;
        return std::vector<xj::Array>{carry.first, carry.second, res, mask, count, lit};
      });
      // The plain loop.
      std::vector<float> h = h0.to_vector<float>(), w = ws.to_vector<float>(), bias = kBias.to_vector<float>();
      std::vector<float> res = outs[2].to_vector<float>(), count = outs[4].to_vector<float>(), lit = outs[5].to_vector<float>();
      std::vector<std::uint8_t> mask(static_cast<std::size_t>(outs[3].aval().nbytes()));
      std::memcpy(mask.data(), outs[3].raw_data(), mask.size());
      for (std::int64_t s = 0; s < L; ++s) {
        const auto l = static_cast<std::size_t>(reverse ? L - 1 - s : s);
        CHECK(count[l] == static_cast<float>(s));
        CHECK(lit[l] == 2.5f);
        std::vector<float> next(12);
        for (std::size_t i = 0; i < 3; ++i)
          for (std::size_t j = 0; j < 4; ++j) {
            CHECK(res[l * 12 + i * 4 + j] == doctest::Approx(h[i * 4 + j]).epsilon(1e-5));
            float z = bias[j];
            for (std::size_t k = 0; k < 4; ++k) z += h[i * 4 + k] * w[l * 16 + k * 4 + j];
            CHECK(mask[l * 12 + i * 4 + j] == (z > 0.0f ? 1 : 0));
            next[i * 4 + j] = z > 0.0f ? z : z * 0.1f;
          }
        h = next;
      }
      auto final_h = outs[0].to_vector<float>();
      for (std::size_t i = 0; i < h.size(); ++i) CHECK(final_h[i] == doctest::Approx(h[i]).epsilon(1e-5));
      CHECK(outs[1].item<float>() == static_cast<float>(L));
    }
  }
}

TEST_CASE("raw scan: gradients of a scan and of a checkpointed scan match the Array executor's bytes") {
  xj::Array ws = ramp({9, 8, 8}, 0.05f, 0.3f), h0 = ramp({2, 8}, 0.3f, 1.0f);
  for (bool ckpt : {false, true}) {
    CAPTURE(ckpt);
    auto loss = [ckpt](const xj::Array& w, const xj::Array& h) {
      auto body = [](const xj::Array& c, const xj::Array& wl) { return std::pair{xj::tanh(xj::matmul(c, wl)), xj::None{}}; };
      xj::Array out = ckpt ? xj::scan(xj::checkpoint(body), h, w).first : xj::scan(body, h, w).first;
      return xj::sum(out * out);
    };
    auto g = same_both_ways([&] {
      auto [gw, gh] = xj::grad(loss, xj::argnums<0, 1>)(ws, h0);
      return std::vector<xj::Array>{gw, gh};
    });
    // Against finite differences, at a few entries of each.
    auto fd = [&](int which, std::size_t at) {
      auto bump = [&](const xj::Array& a, float d) {
        auto v = a.to_vector<float>();
        v[at] += d;
        return xj::array<float>(v, a.shape());
      };
      const float e = 1e-2f;
      xj::Array p = which == 0 ? loss(bump(ws, e), h0) : loss(ws, bump(h0, e));
      xj::Array m = which == 0 ? loss(bump(ws, -e), h0) : loss(ws, bump(h0, -e));
      return (p.item<float>() - m.item<float>()) / (2 * e);
    };
    for (std::size_t at : {0u, 77u, 300u, 575u}) CHECK(g[0].to_vector<float>()[at] == doctest::Approx(fd(0, at)).epsilon(2e-2));
    for (std::size_t at : {0u, 9u, 15u}) CHECK(g[1].to_vector<float>()[at] == doctest::Approx(fd(1, at)).epsilon(2e-2));
  }
}

TEST_CASE("raw scan: integer products, reductions and copied layouts run their Array kernels on views") {
  std::vector<std::int32_t> iv(5 * 3 * 3);
  for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<std::int32_t>(i % 5) - 2;
  xj::Array ims = xj::array<std::int32_t>(iv, {5, 3, 3});
  xj::Array fs = ramp({5, 3, 2, 4}, 0.1f, 0.4f);
  auto body = [](const std::pair<xj::Array, xj::Array>& c, const std::pair<xj::Array, xj::Array>& x) {
    xj::Array ic = xj::matmul(c.first, x.first);  // integer dot: no IntoKernel
    // A batched product of operands stored with their batch dim in the middle: copied layouts.
    xj::Array prod = xj::dot_general(x.second, x.second, {2}, {2}, {1}, {1});
    xj::Array s = xj::sum(prod, {1, 2}) + c.second;  // reduce_sum: no IntoKernel
    return std::pair{std::pair{ic, s}, prod};
  };
  std::vector<std::int32_t> eye{1, 0, 0, 0, 1, 0, 0, 0, 1};
  auto outs = same_both_ways([&] {
    auto [carry, ys] = xj::scan(body, std::pair{xj::array<std::int32_t>(eye, {3, 3}), xj::zeros({2}, xj::f32)}, std::pair{ims, fs},
                                {.unroll = 2});
    return std::vector<xj::Array>{carry.first, carry.second, ys};
  });
  // The integer carry is the product of the five matrices, in order.
  std::vector<std::int64_t> p{1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (std::size_t l = 0; l < 5; ++l) {
    std::vector<std::int64_t> q(9, 0);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 3; ++k) q[i * 3 + j] += p[i * 3 + k] * iv[l * 9 + k * 3 + j];
    p = q;
  }
  auto got = outs[0].to_vector<std::int64_t>();
  for (std::size_t i = 0; i < 9; ++i) CHECK(got[i] == p[i]);
}

TEST_CASE("raw plan: values whose lifetimes do not overlap share workspace") {
  auto chain = [](const xj::Array& x, const xj::Array& w) {
    xj::Array y = x;
    for (int i = 0; i < 6; ++i) y = xj::matmul(y, w);
    return y;
  };
  xj::Array x = ramp({16, 16}, 0.01f), w = ramp({16, 16}, 0.02f);
  xj::ClosedJaxpr cj = xj::make_jaxpr(chain)(x, w);
  auto plan = xj::detail::make_plan(*cj.jaxpr);
  REQUIRE(plan->raw);
  // Five 1 KiB intermediates, each read only by the next product: two places suffice.
  CHECK(plan->raw->workspace_bytes == 2 * 1024);
  CHECK(plan->raw->steps.size() == 6);
}

TEST_CASE("raw plan: a fused chain after a product works in the product's place") {
  auto f = [](const xj::Array& h, const xj::Array& w) { return xj::matmul(xj::relu(xj::matmul(h, w)) * 2.0f, w); };
  xj::Array h = ramp({8, 16}, 0.1f, 0.6f), w = ramp({16, 16}, 0.05f, 0.3f);
  xj::ClosedJaxpr cj = xj::make_jaxpr(f)(h, w);
  auto plan = xj::detail::make_plan(*cj.jaxpr);
  REQUIRE(plan->raw);
  const auto& raw = *plan->raw;
  REQUIRE(raw.steps.size() == 3);  // product, fused relu and scale, product
  const auto& product = raw.values[raw.outs(raw.steps[0])[0]];
  const auto& scaled = raw.values[raw.outs(raw.steps[1])[0]];
  CHECK(product.place == xj::detail::RawPlan::Place::workspace);
  CHECK(scaled.place == xj::detail::RawPlan::Place::workspace);
  CHECK(scaled.index == product.index);
  CHECK(raw.workspace_bytes == 8 * 16 * 4);
  // The same body in a scan: the Array executor's bytes.
  xj::Array ws = ramp({5, 16, 16}, 0.05f, 0.3f);
  same_both_ways([&] {
    auto [c, ys] = xj::scan([&](const xj::Array& c, const xj::Array& wl) { return std::pair{f(c, wl), c}; }, h, ws);
    return std::vector<xj::Array>{c, ys};
  });
}

TEST_CASE("raw plan: a reshape of a value dying there takes its place and moves nothing; one read later is copied") {
  // h = x w reshaped into heads (read by nothing else: renamed), then squeezed after a product;
  // g = 2x w read again after its reshape (copied).
  auto f = [](const xj::Array& x, const xj::Array& w) {
    const xj::Array heads = xj::reshape(xj::matmul(x, w), {8, 2, 8});
    const xj::Array g = xj::matmul(x * 2.0f, w);
    const xj::Array g3 = xj::reshape(g, {1, 8, 16});
    const xj::Array one = xj::squeeze(xj::matmul(g3, xj::transpose(w, {1, 0})), {0});
    return std::pair{xj::sum(heads, {2}) + 1.0f, one + xj::sum(g)};
  };
  xj::Array x = ramp({8, 16}, 0.1f, 0.6f), w = ramp({16, 16}, 0.05f, 0.3f);
  xj::ClosedJaxpr cj = xj::make_jaxpr([&](const xj::Array& a, const xj::Array& b) {
    auto [p, q] = f(a, b);
    return std::vector<xj::Array>{p, q};
  })(x, w);
  auto plan = xj::detail::make_plan(*cj.jaxpr);
  REQUIRE(plan->raw);
  const auto& raw = *plan->raw;
  std::size_t renamed = 0, copied = 0;
  for (std::size_t i = 0; i < raw.steps.size(); ++i) {
    const auto& st = raw.steps[i];
    if (st.counted.size() != 1 || (st.counted[0] != xj::Primitive::reshape && st.counted[0] != xj::Primitive::squeeze)) continue;
    const auto& in = raw.values[raw.ins(st)[0]];
    const auto& out = raw.values[raw.outs(st)[0]];
    if (in.place == out.place && in.index == out.index) ++renamed;
    else ++copied;
  }
  CHECK(renamed == 2);  // heads' reshape and the squeeze
  CHECK(copied == 1);   // g3: g is read again
  // In a scan: the Array executor's bytes, and a plain loop's values.
  xj::Array ws = ramp({3, 16, 16}, 0.05f, 0.3f);
  auto got = same_both_ways([&] {
    auto [c, ys] = xj::scan([&](const xj::Array& c, const xj::Array& wl) {
      auto [p, q] = f(c, wl);
      return std::pair{q * 0.01f + c, p};
    }, x, ws);
    return std::vector<xj::Array>{c, ys};
  });
  xj::Array c = x;  // the loop, op by op
  std::vector<xj::Array> ys;
  for (std::int64_t l = 0; l < 3; ++l) {
    auto [p, q] = f(c, ws[l]);
    ys.push_back(p);
    c = q * 0.01f + c;
  }
  auto close = [](const xj::Array& a, const xj::Array& b) {
    REQUIRE(a.shape() == b.shape());
    const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
    for (std::size_t i = 0; i < va.size(); ++i) CHECK(std::abs(va[i] - vb[i]) <= 1e-5f * (1.0f + std::abs(vb[i])));
  };
  close(got[0], c);
  close(got[1], xj::stack(ys, 0));
}

TEST_CASE("raw plan: a reshape of an input or output reads its bytes; a value renamed into an output is computed there") {
  // xr: the input x reshaped and x read again (the bytes of x, no copy); a2: a fused value that
  // dies at its reshape into an output (computed in the output); v: two renames into an output
  // (both placed there); a: read again after its reshape (copied, workspace).
  auto f = [](const xj::Array& x, const xj::Array& w) {
    const xj::Array xr = xj::reshape(x, {16, 8});
    const xj::Array a = xj::matmul(x, w);
    const xj::Array out1 = xj::reshape(a * 2.0f + 1.0f, {2, 4, 16});
    const xj::Array out2 = xj::expand_dims(xj::reshape(xj::tanh(a), {128}), 0);
    const xj::Array ar = xj::reshape(a, {16, 8});
    return std::vector<xj::Array>{out1, out2, xr * 3.0f + xj::sum(a) + ar};
  };
  xj::Array x = ramp({8, 16}, 0.1f, 0.6f), w = ramp({16, 16}, 0.05f, 0.3f);
  xj::ClosedJaxpr cj = xj::make_jaxpr(f)(x, w);
  auto plan = xj::detail::make_plan(*cj.jaxpr);
  REQUIRE(plan->raw);
  const auto& raw = *plan->raw;
  using Place = xj::detail::RawPlan::Place;
  std::map<Place, int> renamed;
  int copied = 0;
  for (const auto& st : raw.steps) {
    if (st.counted.size() != 1 || (st.counted[0] != xj::Primitive::reshape && st.counted[0] != xj::Primitive::expand_dims)) continue;
    const auto& in = raw.values[raw.ins(st)[0]];
    const auto& out = raw.values[raw.outs(st)[0]];
    if (in.place == out.place && in.index == out.index) ++renamed[in.place];
    else ++copied;
  }
  CHECK(renamed[Place::input] == 1);   // xr
  CHECK(renamed[Place::output] == 3);  // out1's reshape, out2's two
  CHECK(copied == 1);                  // ar
  // Values: the top-level raw run against the Array executor, and against the ops one by one.
  auto both = same_both_ways([&] { return xj::eval_jaxpr(cj, std::vector<xj::Array>{x, w}); });
  const auto a = xj::matmul(x, w).to_vector<float>();
  const auto xv = x.to_vector<float>();
  double total = 0;
  for (float e : a) total += e;
  const auto o1 = both[0].to_vector<float>(), o2 = both[1].to_vector<float>(), o3 = both[2].to_vector<float>();
  REQUIRE(o1.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(o1[i] == doctest::Approx(a[i] * 2.0f + 1.0f).epsilon(1e-6));
    CHECK(o2[i] == doctest::Approx(std::tanh(a[i])).epsilon(1e-6));
    CHECK(o3[i] == doctest::Approx(xv[i] * 3.0 + total + a[i]).epsilon(1e-5));
  }
  // The same body in a scan (its plan runs raw per iteration): the Array executor's bytes.
  xj::Array ws = ramp({3, 16, 16}, 0.05f, 0.3f);
  same_both_ways([&] {
    auto [c, ys] = xj::scan([&](const xj::Array& c, const xj::Array& wl) {
      auto r = f(c, wl);
      return std::pair{xj::reshape(r[1], {8, 16}) + c, r[0]};
    }, x, ws);
    return std::vector<xj::Array>{c, ys};
  });
}

TEST_CASE("raw plan: a reshape of an input output twice is its own array of its shape") {
  // r is output twice (copied after the steps); its bytes are the input's, its shape is not.
  auto f = xj::jit([](const xj::Array& a) {
    const xj::Array r = xj::reshape(a, {3, 4});
    return std::vector<xj::Array>{r, r, a * 2.0f};
  });
  const xj::Array x = ramp({12}, 0.5f);
  const auto out = f(x);
  REQUIRE(out.size() == 3);
  for (int k = 0; k < 2; ++k) {
    CHECK(out[static_cast<std::size_t>(k)].shape() == xj::Shape{3, 4});
    CHECK(out[static_cast<std::size_t>(k)].to_vector<float>() == x.to_vector<float>());
  }
}

TEST_CASE("raw plan: transpose, slice, rev, broadcast_in_dim and concatenate write into place; values against loops") {
  // x (4, 6): t = x^T, s = x[1:4:2, ::3] (strided), r = rev(x, 1), b = broadcast of row 0 to
  // (3, 6) via a (6,) slice, c = concatenate(x, t^T * 2) along 1; each step an IntoKernel.
  auto f = [](const xj::Array& x) {
    const xj::Array t = xj::transpose(x, {1, 0});
    const xj::Array s = xj::slice(x, {1, 0}, {4, 6}, {2, 3});
    const xj::Array r = xj::flip(x, 1);
    const xj::Array row = xj::reshape(xj::slice(x, {0, 0}, {1, 6}), {6});
    const xj::Array b = xj::broadcast_in_dim(row, {3, 6}, {1});
    const xj::Array c = xj::concatenate({x, xj::transpose(t * 2.0f, {1, 0})}, 1);
    return std::vector<xj::Array>{t, s, r, b, c};
  };
  const xj::Array x = ramp({4, 6}, 0.25f, 1.0f);
  xj::ClosedJaxpr cj = xj::make_jaxpr(f)(x);
  auto plan = xj::detail::make_plan(*cj.jaxpr);
  REQUIRE(plan->raw);
  std::map<xj::Primitive, int> into;
  for (const auto& st : plan->raw->steps)
    if (st.into && st.counted.size() == 1) ++into[st.counted[0]];
  CHECK(into[xj::Primitive::transpose] == 2);
  CHECK(into[xj::Primitive::slice] == 2);
  CHECK(into[xj::Primitive::rev] == 1);
  CHECK(into[xj::Primitive::broadcast_in_dim] == 1);
  CHECK(into[xj::Primitive::concatenate] == 1);
  const auto out = same_both_ways([&] { return xj::eval_jaxpr(cj, std::vector<xj::Array>{x}); });
  const auto xv = x.to_vector<float>();
  auto at = [&](std::int64_t i, std::int64_t j) { return xv[static_cast<std::size_t>(i * 6 + j)]; };
  const auto t = out[0].to_vector<float>(), sl = out[1].to_vector<float>(), r = out[2].to_vector<float>();
  const auto b = out[3].to_vector<float>(), c = out[4].to_vector<float>();
  REQUIRE((out[1].shape() == xj::Shape{2, 2} && out[4].shape() == xj::Shape{4, 12}));
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 6; ++j) {
      CHECK(t[static_cast<std::size_t>(j * 4 + i)] == at(i, j));
      CHECK(r[static_cast<std::size_t>(i * 6 + j)] == at(i, 5 - j));
      CHECK(c[static_cast<std::size_t>(i * 12 + j)] == at(i, j));
      CHECK(c[static_cast<std::size_t>(i * 12 + 6 + j)] == at(i, j) * 2.0f);
      if (i < 3) CHECK(b[static_cast<std::size_t>(i * 6 + j)] == at(0, j));
    }
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 2; ++j) CHECK(sl[static_cast<std::size_t>(i * 2 + j)] == at(1 + 2 * i, 3 * j));
}

namespace {

// Buffers made by run() once its plans exist (a first call builds them).
template <class Run> std::int64_t buffers_made(Run run) {
  (void)run();
  const auto before = xj::memory_stats().allocations;
  auto result = run();
  return xj::memory_stats().allocations - before;
}

// loop(n) runs a loop of n iterations: on raw plans 100 iterations make as many buffers as 5;
// the Array executor makes buffers per iteration.
template <class Loop> void check_no_buffer_per_iteration(Loop loop) {
  CHECK(buffers_made([&] { return loop(100); }) == buffers_made([&] { return loop(5); }));
  xj::detail::RawPlansOff off;
  CHECK(buffers_made([&] { return loop(100); }) > buffers_made([&] { return loop(5); }));
}

}  // namespace

TEST_CASE("raw scan: no buffer is made per iteration") {
  auto body = [](const xj::Array& h, const xj::Array& w) { return std::pair{xj::relu(xj::matmul(h, w)), h}; };
  xj::Array h0 = ramp({4, 8}, 0.1f, 0.3f), ws100 = ramp({100, 8, 8}, 0.05f, 0.2f), ws5 = ramp({5, 8, 8}, 0.05f, 0.2f);
  check_no_buffer_per_iteration([&](int n) { return xj::scan(body, h0, n == 100 ? ws100 : ws5); });
}

TEST_CASE("raw scan: eval_counts count each primitive once per iteration, as the Array executor does") {
  auto body = [](const xj::Array& h, const xj::Array& w) { return std::pair{xj::tanh(xj::matmul(h, w)) * 0.5f, xj::None{}}; };
  xj::Array h0 = ramp({4, 8}, 0.1f), ws = ramp({6, 8, 8}, 0.05f);
  auto counts = [&] {
    xj::reset_eval_counts();
    (void)xj::scan(body, h0, ws);
    return xj::eval_counts();
  };
  auto raw = counts();
  std::map<std::string, std::int64_t> arrays;
  {
    xj::detail::RawPlansOff off;
    arrays = counts();
  }
  CHECK(raw == arrays);
  CHECK(raw["dot_general"] == 6);
}

TEST_CASE("raw plan: a body that runs sub-jaxprs (a nested scan) keeps the Array executor and its values") {
  auto inner = [](const xj::Array& c, const xj::Array& x) { return std::pair{c * x + 1.0f, xj::None{}}; };
  auto outer = [&](const xj::Array& c, const xj::Array& xs) { return std::pair{xj::scan(inner, c, xs).first, c}; };
  xj::Array xss = ramp({3, 4, 2}, 0.25f, 0.5f);
  xj::ClosedJaxpr cj = xj::make_jaxpr([&](const xj::Array& c) { return outer(c, xss[0]).first; })(xj::zeros({2}, xj::f32));
  CHECK_FALSE(xj::detail::make_plan(*cj.jaxpr)->raw);
  auto outs = same_both_ways([&] {
    auto [c, ys] = xj::scan(outer, xj::zeros({2}, xj::f32), xss);
    return std::vector<xj::Array>{c, ys};
  });
  std::vector<float> x = xss.to_vector<float>(), c{0.0f, 0.0f};
  for (std::size_t l = 0; l < 3; ++l)
    for (std::size_t s = 0; s < 4; ++s)
      for (std::size_t j = 0; j < 2; ++j) c[j] = c[j] * x[l * 8 + s * 2 + j] + 1.0f;
  auto got = outs[0].to_vector<float>();
  CHECK(got[0] == doctest::Approx(c[0]));
  CHECK(got[1] == doctest::Approx(c[1]));
}

TEST_CASE("raw while loop: the Array executor's bytes and a plain loop's values, for 0 to 9 iterations") {
  // Newton steps toward sqrt(a), elementwise, until the step count reaches the bound; the
  // carry also passes a constant through unchanged.
  xj::Array a = ramp({5}, 0.5f, -1.0f);
  for (int bound : {0, 1, 9}) {
    CAPTURE(bound);
    using Carry = std::tuple<xj::Array, xj::Array, xj::Array>;
    auto cond = [bound](const Carry& c) { return std::get<0>(c) < static_cast<double>(bound); };
    auto body = [&a](const Carry& c) {
      const auto& [i, x, same] = c;
      return Carry{i + 1.0, (x + a / x) * 0.5, same};
    };
    auto outs = same_both_ways([&] {
      auto [i, x, same] = xj::while_loop(cond, body, Carry{xj::scalar(0.0), xj::full({5}, 1.0), xj::full({2}, 7.0)});
      return std::vector<xj::Array>{i, x, same};
    });
    std::vector<float> x(5, 1.0f), av = a.to_vector<float>();
    for (int i = 0; i < bound; ++i)
      for (std::size_t j = 0; j < 5; ++j) x[j] = (x[j] + av[j] / x[j]) * 0.5f;
    CHECK(outs[0].item<float>() == static_cast<float>(bound));
    auto got = outs[1].to_vector<float>();
    for (std::size_t j = 0; j < 5; ++j) CHECK(got[j] == doctest::Approx(x[j]).epsilon(1e-6));
    CHECK(outs[2].to_vector<float>() == std::vector<float>{7.0f, 7.0f});
  }
}

TEST_CASE("raw while loop: no buffer is made per iteration") {
  xj::Array x0 = xj::full({8}, 0.5);
  check_no_buffer_per_iteration([&](int n) {
    return xj::fori_loop(0, n, [](const xj::Array&, const xj::Array& x) { return xj::tanh(x) * 1.5 + 0.1; }, x0);
  });
}

namespace {

// A scan body the shape rules would reject: add c c, then integer_pow with a negative exponent on
// i32, which the kernel rejects when it runs (review finding: the raw executor counted a failing
// iteration's earlier steps differently, and skipped the check for zero elements).
std::shared_ptr<const xj::ClosedJaxpr> failing_body(const xj::Shape& shape) {
  auto j = std::make_shared<xj::Jaxpr>();
  xj::ShapedArray aval{shape, xj::i32};
  xj::Var c(aval), a(aval), b(aval);
  j->invars = {c};
  j->eqns.push_back({xj::Primitive::add, {c, c}, {a}, {}, {}});
  j->eqns.push_back({xj::Primitive::integer_pow, {a}, {b}, xj::params::IntegerPow{.y = -1}, {}});
  j->outvars = {b};
  return std::make_shared<const xj::ClosedJaxpr>(xj::ClosedJaxpr{j, {}});
}

// What scanning the failing body 3 times over a carry of `shape` throws, and the counts after.
std::pair<std::string, std::map<std::string, std::int64_t>> failing_scan(const xj::Shape& shape) {
  xj::reset_eval_counts();
  std::string what = "nothing thrown";
  try {
    (void)xj::detail::bind(xj::Primitive::scan, std::vector<xj::Array>{xj::zeros(shape, xj::i32)},
                           xj::params::Scan{.jaxpr = failing_body(shape), .length = 3, .reverse = false, .unroll = 1,
                                            .num_consts = 0, .num_carry = 1, .snapshots = 0});
  } catch (const xj::Error& e) {
    what = e.what();
  }
  return {what, xj::eval_counts()};
}

}  // namespace

TEST_CASE("raw scan: a kernel that throws mid-iteration leaves the Array executor's error and counts") {
  for (std::int64_t n : {3, 0}) {
    CAPTURE(n);
    auto raw = failing_scan({n});
    decltype(raw) arrays;
    {
      xj::detail::RawPlansOff off;
      arrays = failing_scan({n});
    }
    CHECK(raw.first.find("negative exponent") != std::string::npos);
    CHECK(raw.first == arrays.first);
    CHECK(raw.second == arrays.second);
  }
}

// ---- top-level plans ----------------------------------------------------------------------------

namespace {

// An unrolled stack of small relu layers (a jitted network written without scan).
xj::Array unrolled_stack(const std::vector<xj::Array>& ws, const xj::Array& x) {
  xj::Array y = x;
  for (const auto& w : ws) y = xj::relu(xj::matmul(y, w) + 0.05f);
  return xj::sum(y * y);
}

std::vector<xj::Array> stack_weights(int layers) {
  std::vector<xj::Array> ws;
  for (int i = 0; i < layers; ++i) ws.push_back(ramp({8, 8}, 0.04f, 0.2f + 0.01f * static_cast<float>(i)));
  return ws;
}

}  // namespace

TEST_CASE("raw top level: an unrolled stack's jit and gradient give the Array executor's bytes and finite differences") {
  auto ws = stack_weights(6);
  xj::Array x = ramp({4, 8}, 0.3f, 1.0f);
  // The gradient's plan is small, so a top-level run takes the raw plan.
  xj::ClosedJaxpr cj = xj::make_jaxpr(xj::grad(unrolled_stack, xj::argnums<0, 1>))(ws, x);
  auto plan = xj::detail::plan_of(cj.jaxpr);
  REQUIRE(plan->raw);
  CHECK(xj::detail::raw_at_top_level(*plan->raw));
  auto g = same_both_ways([&] {
    auto [gw, gx] = xj::jit(xj::grad(unrolled_stack, xj::argnums<0, 1>))(ws, x);
    gw.push_back(gx);
    gw.push_back(xj::jit(unrolled_stack)(ws, x));
    return gw;
  });
  // The value against a plain loop, the gradient against central differences.
  std::vector<float> y = x.to_vector<float>();
  for (const auto& w : ws) {
    auto wv = w.to_vector<float>();
    std::vector<float> next(y.size(), 0.0f);
    for (std::size_t r = 0; r < 4; ++r)
      for (std::size_t c = 0; c < 8; ++c) {
        float acc = 0;
        for (std::size_t k = 0; k < 8; ++k) acc += y[r * 8 + k] * wv[k * 8 + c];
        next[r * 8 + c] = std::max(acc + 0.05f, 0.0f);
      }
    y = next;
  }
  float loss = 0;
  for (float v : y) loss += v * v;
  CHECK(g.back().item<float>() == doctest::Approx(loss).epsilon(1e-5));
  auto fd = [&](std::size_t layer, std::size_t at) {
    auto bumped = [&](float d) {
      auto b = ws;
      auto v = b[layer].to_vector<float>();
      v[at] += d;
      b[layer] = xj::array<float>(v, {8, 8});
      return unrolled_stack(b, x).item<float>();
    };
    return (bumped(1e-2f) - bumped(-1e-2f)) / 2e-2f;
  };
  for (std::size_t layer : {0u, 3u, 5u})
    for (std::size_t at : {0u, 27u, 63u}) {
      CAPTURE(layer);
      CAPTURE(at);
      CHECK(g[layer].to_vector<float>()[at] == doctest::Approx(fd(layer, at)).epsilon(2e-2).scale(1e-2));
    }
}

TEST_CASE("raw top level: a passed-through input is shared; a value output twice and a literal are arrays of their own") {
  auto f = [](const xj::Array& x) {
    xj::Array z = xj::exp(x) * 2.0f;
    return std::tuple{x, z, z, xj::stop_gradient(x), xj::scalar(2.5)};
  };
  xj::Array x = ramp({3, 5}, 0.1f, 0.4f);
  auto run = [&] {
    auto [a, z1, z2, s, lit] = xj::jit(f)(x);
    CHECK(a.raw_data() == x.raw_data());
    CHECK(s.raw_data() == x.raw_data());
    return std::vector<xj::Array>{a, z1, z2, s, lit};
  };
  auto outs = same_both_ways(run);
  CHECK(outs[1].raw_data() != outs[2].raw_data());  // raw: each output its own array
  auto xv = x.to_vector<float>();
  auto z1 = outs[1].to_vector<float>(), z2 = outs[2].to_vector<float>();
  CHECK(outs[4].item<double>() == 2.5);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    CHECK(z1[i] == doctest::Approx(2.0f * std::exp(xv[i])));
    CHECK(z2[i] == z1[i]);
  }
}

TEST_CASE("raw scan: a carry renamed by a fused stop_gradient is read from the input and copied once") {
  // The fused chain writes nothing for the rename (a discarded output); the next carry is copied
  // from the current one, and a reader of the renamed value reads the current carry.
  auto body = [](const xj::Array& c, const xj::Array& x) {
    xj::Array kept = xj::stop_gradient(c);
    return std::pair{kept, std::pair{xj::exp(c) * 2.0f + x, kept * 3.0f}};
  };
  xj::Array c0 = ramp({2, 3}, 0.1f, 0.2f), xs = ramp({4, 2, 3}, 0.05f);
  {  // the body's raw plan has the discarded rename
    xj::ClosedJaxpr cj = xj::make_jaxpr(body)(c0, ramp({2, 3}, 0.05f));
    auto plan = xj::detail::plan_of(cj.jaxpr);
    REQUIRE(plan->raw);
    const auto& values = plan->raw->values;
    CHECK(std::any_of(values.begin(), values.end(),
                      [](const auto& v) { return v.place == xj::detail::RawPlan::Place::discard; }));
  }
  auto outs = same_both_ways([&] {
    auto [c, ys] = xj::jit([&](const xj::Array& a, const xj::Array& b) { return xj::scan(body, a, b); })(c0, xs);
    return std::vector<xj::Array>{c, ys.first, ys.second};
  });
  check_same_bytes(outs[0], c0);
  auto cv = c0.to_vector<float>(), xv = xs.to_vector<float>();
  auto y1 = outs[1].to_vector<float>(), y2 = outs[2].to_vector<float>();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    CHECK(y1[i] == doctest::Approx(2.0f * std::exp(cv[i % 6]) + xv[i]));
    CHECK(y2[i] == doctest::Approx(3.0f * cv[i % 6]));
  }
}

TEST_CASE("raw top level: plans of large values are not taken raw") {
  auto chain = [](const xj::Array& x) { return xj::sin(xj::matmul(x, x)) * 2.0f; };
  for (std::int64_t n : {8, 512}) {
    CAPTURE(n);
    xj::ClosedJaxpr cj = xj::make_jaxpr(chain)(xj::ones({n, n}));
    auto plan = xj::detail::plan_of(cj.jaxpr);
    REQUIRE(plan->raw);
    CHECK(xj::detail::raw_at_top_level(*plan->raw) == (n == 8));
    xj::detail::RawPlansOff off;
    CHECK_FALSE(xj::detail::raw_at_top_level(*plan->raw));
  }
}

TEST_CASE("raw top level: concurrent calls of one jitted function each get their own workspace") {
  auto ws = stack_weights(4);
  xj::Array x = ramp({4, 8}, 0.3f, 1.0f);
  auto g = xj::jit(xj::grad(unrolled_stack));
  const std::vector<xj::Array> want = g(ws, x);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::vector<xj::Array> got = g(ws, x);
        for (std::size_t k = 0; k < want.size(); ++k)
          if (std::memcmp(got[k].raw_data(), want[k].raw_data(), want[k].aval().nbytes()) != 0) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("raw top level: a kernel that throws leaves the Array executor's error and counts") {
  for (std::int64_t n : {3, 0}) {
    CAPTURE(n);
    auto body = failing_body({n});
    auto plan = xj::detail::plan_of(body->jaxpr);
    REQUIRE(plan->raw);
    REQUIRE(xj::detail::raw_at_top_level(*plan->raw));
    auto run = [&] {
      xj::reset_eval_counts();
      std::string what = "nothing thrown";
      try {
        (void)xj::eval_jaxpr(*body, std::vector<xj::Array>{xj::zeros({n}, xj::i32)});
      } catch (const xj::Error& e) {
        what = e.what();
      }
      return std::pair{what, xj::eval_counts()};
    };
    auto raw = run();
    decltype(raw) arrays;
    {
      xj::detail::RawPlansOff off;
      arrays = run();
    }
    CHECK(raw.first.find("negative exponent") != std::string::npos);
    CHECK(raw.first == arrays.first);
    CHECK(raw.second == arrays.second);
  }
}

TEST_CASE("raw plan: a literal replaced in place by an equal one keeps the plan and its bytes") {
  // Review finding: the raw plan kept the literal's buffer address only; the plan table keeps a
  // plan for a jaxpr whose literals are replaced by equal ones, and the old buffer was reused.
  xj::Array x = xj::array<float>({1, 2, 3, 4}, {4});
  std::shared_ptr<xj::Jaxpr> p;
  {
    auto cj = xj::make_jaxpr([](const xj::Array& a) { return a * 3.0 + 1.0; })(x);
    p = std::make_shared<xj::Jaxpr>(*cj.jaxpr);
  }
  xj::ClosedJaxpr cp{p, {}};
  std::vector<xj::Array> args{x};
  CHECK(xj::eval_jaxpr(cp, args)[0].to_vector<float>() == std::vector<float>{4, 7, 10, 13});
  for (auto& e : p->eqns)
    for (auto& in : e.inputs)
      if (auto* l = std::get_if<xj::Literal>(&in)) {
        xj::Array old = l->value;
        l->value = xj::detail::array_from_bytes(old.raw_data(), old.aval());
      }
  xj::release_arena_memory();   // the replaced literals' buffers, if nothing holds them, go back
  std::vector<xj::Array> reuse;  // to the system (a use after free for the sanitizers) and are
  for (int i = 0; i < 64; ++i) reuse.push_back(xj::full({}, 1000.0 + i));  // taken again here
  CHECK(xj::eval_jaxpr(cp, args)[0].to_vector<float>() == std::vector<float>{4, 7, 10, 13});
}
