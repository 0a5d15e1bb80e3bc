// test_transform_memo.cpp: the memo of transformed programs (transforms/transform_memo.cpp). A
// grad or Jacobian object traces on every call and reuses its transformed program when the traced
// structure is the same; these tests check that reuse never shows an old value (captured arrays,
// literals, flags, custom rules, policies, threads) and that the memo is in fact used. Derivatives
// are checked against ones written out with <cmath>.
#include <cmath>
#include <thread>

#include "higher_order.hpp"
#include "test_util.hpp"
#include "xjax/transforms.hpp"

namespace xj = xjax;
namespace xd = xjax::detail;
using namespace test_util;

namespace {

// cos(x) * w elementwise: the gradient of sum(sin(x) * w).
std::vector<double> cos_times(const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> out;
  for (std::size_t i = 0; i < x.size(); ++i) out.push_back(std::cos(x[i]) * w[i]);
  return out;
}

// The memo's hit count after calling eval_grad on f traced afresh at x.
std::int64_t hits_after(xd::TransformMemo& memo, const std::function<xj::Array(const xj::Array&)>& f, const xj::Array& x) {
  xj::ClosedJaxpr traced = xj::make_jaxpr(f)(x);
  std::vector<xj::Array> args{x};
  xd::eval_grad(&memo, traced, args, {true}, false, false);
  return xd::transform_memo_hits(memo);
}

}  // namespace

TEST_CASE("memo: grad: the same structure is transformed once; anything else is transformed again") {
  namespace pol = xj::checkpoint_policies;
  xj::Array x = f64v({0.5, -1.0, 2.0});
  auto plain = [](const xj::Array& y) { return xj::sum(xj::sin(y) * 3.0); };
  auto memo = xd::new_transform_memo();
  CHECK(hits_after(*memo, plain, x) == 0);
  CHECK(hits_after(*memo, plain, x) == 1);                    // traced again: same structure
  CHECK(hits_after(*memo, plain, f64v({7.0, 8.0, 9.0})) == 2);  // other values, same types
  CHECK(hits_after(*memo, [](const xj::Array& y) { return xj::sum(xj::sin(y) * 4.0); }, x) == 2);  // literal
  CHECK(hits_after(*memo, plain, f64v({1.0, 2.0})) == 2);                                      // shape
  CHECK(hits_after(*memo, plain, xj::astype(x, xj::f32)) == 2);                                // dtype

  auto custom = xj::custom_vjp([](const xj::Array& y) { return y * y; },
                               [](const xj::Array& y) { return std::pair{y * y, y}; },
                               [](const xj::Array& y, const xj::Array& ct) { return std::tuple{2.0 * y * ct}; });
  auto with_custom = [&](const xj::Array& y) { return xj::sum(custom(y)); };
  auto memo2 = xd::new_transform_memo();
  CHECK(hits_after(*memo2, with_custom, x) == 0);
  CHECK(hits_after(*memo2, with_custom, x) == 0);  // a custom rule is compared by identity only

  auto block = [](const xj::Array& y) { return xj::sin(xj::sin(y)); };
  auto ckpt = [&](std::optional<xj::Policy> p) {
    return [=](const xj::Array& y) { return xj::sum(xj::checkpoint(block, {.policy = p})(y)); };
  };
  auto memo3 = xd::new_transform_memo();
  CHECK(hits_after(*memo3, ckpt(std::nullopt), x) == 0);
  CHECK(hits_after(*memo3, ckpt(std::nullopt), x) == 1);        // no policy
  CHECK(hits_after(*memo3, ckpt(pol::dots_saveable), x) == 1);  // another policy: another program
  CHECK(hits_after(*memo3, ckpt(pol::dots_saveable), x) == 2);  // a built-in policy is known
  CHECK(hits_after(*memo3, ckpt(pol::save_only_these_names({"a"})), x) == 2);
  CHECK(hits_after(*memo3, ckpt(pol::save_only_these_names({"a"})), x) == 2);  // its names: identity only
}

TEST_CASE("memo: grad: the library's custom_jvp composites (relu, softmax, gelu ...) are remembered") {
  // Their rules are made by the library, known by what they compute (name, axis, location):
  // a program using them is transformed once, not on every call (since relu, softmax, gelu and
  // softplus became custom_jvp functions, every grad without jit of a network re-transformed).
  xj::Array x = f64v({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {2, 3});
  using Fn = std::function<xj::Array(const xj::Array&)>;
  const std::vector<Fn> fns = {
      [](const xj::Array& y) { return xj::sum(xj::relu(y) * y); },
      [](const xj::Array& y) { return xj::sum(xj::softmax(y, 0) * y); },
      [](const xj::Array& y) { return xj::sum(xj::log_softmax(y, 1) * y); },
      [](const xj::Array& y) { return xj::sum(xj::gelu(y) * y); },
      [](const xj::Array& y) { return xj::sum(xj::gelu(y, false) * y); },
      [](const xj::Array& y) { return xj::sum(xj::softplus(y) * y); },
      [](const xj::Array& y) { return xj::sum(xj::vmap([](const xj::Array& r) { return xj::softmax(r); })(y) * y); },
  };
  for (std::size_t i = 0; i < fns.size(); ++i) {
    CAPTURE(i);
    auto memo = xd::new_transform_memo();
    CHECK(hits_after(*memo, fns[i], x) == 0);
    CHECK(hits_after(*memo, fns[i], x) == 1);
    CHECK(hits_after(*memo, fns[i], f64v({1.0, 2.0, 3.0, -4.0, 5.0, -6.0}, {2, 3})) == 2);
  }
}

TEST_CASE("memo: grad: softmax along another axis is another program (its rule reads the axis)") {
  // d/dx sum(w * softmax(x)) = y (w - sum(y w)) along the axis, y = softmax(x): written with loops.
  const std::vector<double> xv = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, wv = {1.0, -2.0, 0.5, 3.0, 0.25, -1.0};
  auto expected = [&](std::int64_t axis) {
    std::vector<double> g(6);
    for (int outer = 0; outer < (axis == 0 ? 3 : 2); ++outer) {
      auto at = [&](int k) { return axis == 0 ? k * 3 + outer : outer * 3 + k; };
      const int n = axis == 0 ? 2 : 3;
      double m = -1e300, z = 0, yw = 0;
      for (int k = 0; k < n; ++k) m = std::max(m, xv[static_cast<std::size_t>(at(k))]);
      for (int k = 0; k < n; ++k) z += std::exp(xv[static_cast<std::size_t>(at(k))] - m);
      for (int k = 0; k < n; ++k) yw += std::exp(xv[static_cast<std::size_t>(at(k))] - m) / z * wv[static_cast<std::size_t>(at(k))];
      for (int k = 0; k < n; ++k) {
        const auto j = static_cast<std::size_t>(at(k));
        g[j] = std::exp(xv[j] - m) / z * (wv[j] - yw);
      }
    }
    return g;
  };
  std::int64_t axis = 0;
  xj::Array w = f64v(wv, {2, 3});
  auto g = xj::grad([&](const xj::Array& y) { return xj::sum(xj::softmax(y, axis) * w); });
  for (std::int64_t a : {0, 1, 0, 1}) {
    axis = a;
    check_values(g(f64v(xv, {2, 3})), expected(a), 1e-14);
  }
}

TEST_CASE("memo: grad: a captured array's new values are used (consts are inputs, not part of the program)") {
  std::vector<double> wv = {2.0, -1.0, 0.5};
  xj::Array w = f64v(wv);
  auto g = xj::grad([&w](const xj::Array& x) { return xj::sum(xj::sin(x) * w); });
  xj::Array x = f64v({0.3, 1.1, -2.0});
  std::vector<double> xv = {0.3, 1.1, -2.0};
  check_values(g(x), cos_times(xv, wv), 1e-15);
  for (double scale : {3.0, -0.25, 0.0}) {
    std::vector<double> w2 = {scale, 2 * scale, -scale};
    w = f64v(w2);
    check_values(g(x), cos_times(xv, w2), 1e-15);
  }
}

TEST_CASE("memo: grad: a captured flag or scalar that changes the program is seen") {
  bool cube = false;
  double s = 2.0;
  auto f = [&](const xj::Array& x) { return xj::sum(cube ? x * x * x * s : x * x * s); };
  auto g = xj::grad(f);
  auto vg = xj::value_and_grad(f);
  xj::Array x = f64v({1.5, -2.0});
  check_values(g(x), {2 * 1.5 * 2.0, 2 * -2.0 * 2.0}, 1e-15);
  cube = true;
  check_values(g(x), {3 * 1.5 * 1.5 * 2.0, 3 * 4.0 * 2.0}, 1e-15);
  s = -1.0;  // a literal in the program
  check_values(g(x), {3 * 1.5 * 1.5 * -1.0, 3 * 4.0 * -1.0}, 1e-15);
  auto [value, grads] = vg(x);
  CHECK(value.item<double>() == -(1.5 * 1.5 * 1.5 - 8.0));
  check_values(grads, {3 * 1.5 * 1.5 * -1.0, 3 * 4.0 * -1.0}, 1e-15);
}

TEST_CASE("memo: grad: a weakly typed literal and a strong one of the same value are different programs") {
  // Review finding (2026-12-05): the memo keyed a literal by its dtype and bytes only, so a program
  // whose literal is weakly typed reused the transformed program of a strong one; evaluated inside
  // a trace, that gave the strong literal's promotion (f16 * strong f64 -> f64, weak -> f16).
  const xj::Array x16 = xj::astype(xj::array<float>({1.f, 2.f}, {2}), xj::f16);
  const xj::Array weak2 = xj::jit([](const xj::Array& k) { return k * 1.0; })(2.0);  // a weak f64 2.0
  const xj::Array strong2 = xj::scalar(2.0, xj::f64);
  bool use_weak = false;
  auto f = [&](const xj::Array& a) { return std::pair{xj::sum(a * a), (use_weak ? weak2 : strong2) * 3.0}; };
  auto g = xj::grad(f, {.has_aux = true});
  auto times_aux = [&] { return xj::jit([&](const xj::Array& a) { return a * g(a).second; })(x16); };
  CHECK(times_aux().dtype() == xj::f64);
  use_weak = true;
  const xj::Array y = times_aux();
  CHECK(y.dtype() == xj::f16);
  CHECK(xj::astype(y, xj::f64).to_vector<double>() == std::vector<double>{6.0, 12.0});
}

TEST_CASE("memo: grad: a custom_vjp rule reading changed state is called again") {
  double slope = 2.0;
  auto custom = xj::custom_vjp([](const xj::Array& y) { return y * y; },
                               [](const xj::Array& y) { return std::pair{y * y, y}; },
                               [&slope](const xj::Array& y, const xj::Array& ct) { return std::tuple{slope * y * ct}; });
  auto g = xj::grad([&](const xj::Array& y) { return xj::sum(custom(y)); });
  xj::Array x = f64v({1.0, -3.0});
  check_values(g(x), {2.0, -6.0}, 1e-15);
  slope = 5.0;
  check_values(g(x), {5.0, -15.0}, 1e-15);
}

TEST_CASE("memo: grad: one grad object called from several threads at once") {
  std::vector<double> wv = {1.5, -0.5, 2.0, 0.25};
  xj::Array w = f64v(wv);
  auto g = xj::grad([w](const xj::Array& x) { return xj::sum(xj::sin(x) * w); });
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::vector<double> xv = {0.1 * t, 0.2 * i, -0.3 * t, 0.05 * (t + i)};
        std::vector<double> want = cos_times(xv, wv);
        std::vector<double> got = g(f64v(xv)).to_vector<double>();
        for (std::size_t k = 0; k < got.size(); ++k)
          if (std::abs(got[k] - want[k]) > 1e-15) ++bad[static_cast<std::size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) CHECK(b == 0);
}

TEST_CASE("memo: grad: more structures than it keeps, then the first again") {
  auto g = xj::grad([](const xj::Array& x) { return xj::sum(xj::sin(x)); });
  for (int round = 0; round < 2; ++round)
    for (std::int64_t n = 1; n <= 12; ++n) {
      std::vector<double> xv;
      for (std::int64_t i = 0; i < n; ++i) xv.push_back(0.1 * static_cast<double>(i) - 0.4);
      check_values(g(f64v(xv)), cos_times(xv, std::vector<double>(xv.size(), 1.0)), 1e-15);
    }
}

TEST_CASE("memo: jacrev, jacfwd and hessian see a captured array's new values; the program is reused") {
  std::vector<double> wv = {2.0, -1.0, 0.5};
  xj::Array w = f64v(wv);
  auto f = [&w](const xj::Array& x) { return xj::sin(x) * w; };  // J = diag(cos(x) w)
  auto jr = xj::jacrev(f);
  auto jf = xj::jacfwd(f);
  auto h = xj::hessian([&w](const xj::Array& x) { return xj::sum(xj::sin(x) * w); });  // diag(-sin(x) w)
  std::vector<double> xv = {0.3, 1.1, -2.0};
  xj::Array x = f64v(xv);
  auto diag = [](const std::vector<double>& d) {
    std::vector<double> m(d.size() * d.size(), 0.0);
    for (std::size_t i = 0; i < d.size(); ++i) m[i * d.size() + i] = d[i];
    return m;
  };
  auto minus_sin_times = [&](const std::vector<double>& ww) {
    std::vector<double> out;
    for (std::size_t i = 0; i < xv.size(); ++i) out.push_back(-std::sin(xv[i]) * ww[i]);
    return out;
  };
  for (double scale : {1.0, -3.0, 0.0}) {
    std::vector<double> w2 = {scale * wv[0], scale * wv[1], scale * wv[2]};
    w = f64v(w2);
    check_values(jr(x), diag(cos_times(xv, w2)), 1e-15);
    check_values(jf(x), diag(cos_times(xv, w2)), 1e-15);
    check_values(h(x), diag(minus_sin_times(w2)), 1e-14);
  }
  // The same program through a memo of our own: the second trace reuses the first's program.
  auto memo = xd::new_transform_memo();
  for (int k = 0; k < 2; ++k)
    for (bool forward : {false, true}) {
      xd::JacobianCall c(xd::flatten_args(x), {0}, forward);
      c.run(memo.get(), xd::flat_fn<decltype(f), xj::Array>(f, c.fa.defs, &c.out_def));
      check_values(c.blocks.at(0), diag(cos_times(xv, {0, 0, 0})), 1e-15);
    }
  CHECK(xd::transform_memo_hits(*memo) == 2);  // jacrev and jacfwd each once: tags keep them apart
}

TEST_CASE("memo: a grad object moved from still works (without its memo)") {
  auto g = xj::grad([](const xj::Array& x) { return xj::sum(xj::sin(x)); });
  auto g2 = std::move(g);
  std::vector<double> xv = {0.5, -1.5};
  check_values(g2(f64v(xv)), cos_times(xv, {1.0, 1.0}), 1e-15);
  check_values(g(f64v(xv)), cos_times(xv, {1.0, 1.0}), 1e-15);  // NOLINT(bugprone-use-after-move)
  auto jr = xj::jacrev([](const xj::Array& x) { return xj::sin(x); });
  auto jr2 = std::move(jr);
  check_values(jr(f64v({0.5})), {std::cos(0.5)}, 1e-15);  // NOLINT(bugprone-use-after-move)
  check_values(jr2(f64v({0.5})), {std::cos(0.5)}, 1e-15);
}
