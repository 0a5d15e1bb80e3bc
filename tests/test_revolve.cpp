// test_revolve.cpp: checkpoint schedules for reverse mode through loops: scan's binomial schedule
// (scan_checkpoints::binomial, Griewank and Walther's revolve) and while_loop's online one. The
// schedule's cost is checked against revolve's closed form and an independent dynamic program;
// gradients against the unscheduled scan (a different code path) and finite differences; body
// executions with eval_counts; memory with memory_stats.
#include <algorithm>
#include <cmath>
#include <map>

#include "../transforms/ad.hpp"  // detail::linearize_jaxpr: to reach the revolve equations
#include "internal.hpp"          // detail::abstract_eval
#include "test_util.hpp"

namespace {
using namespace test_util;

// beta(s, r) = C(s + r, s), with beta(s, -1) = 0.
std::int64_t beta(std::int64_t s, std::int64_t r) {
  if (r < 0) return 0;
  double b = 1;
  for (std::int64_t k = 1; k <= r; ++k) b = b * static_cast<double>(s + k) / static_cast<double>(k);
  return static_cast<std::int64_t>(std::llround(b));
}

// The statement of revolve's minimum: r with beta(s, r - 1) < l <= beta(s, r), then
// t(l, s) = r l - beta(s + 1, r - 1).
std::int64_t revolve_t(std::int64_t l, std::int64_t s) {
  std::int64_t r = 0;
  while (!(beta(s, r - 1) < l && l <= beta(s, r))) ++r;
  return r * l - beta(s + 1, r - 1);
}

// The optimum by dynamic programming over the first advance m: reversing l steps from a held
// carry with c more slots costs min over m of m + cost(l - m, c - 1) + cost(m, c).
std::int64_t dp_optimum(std::int64_t l, std::int64_t c, std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>& memo) {
  if (l <= 1) return 0;
  if (c == 0) return l * (l - 1) / 2;
  auto key = std::pair{l, c};
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  std::int64_t best = l * l;
  for (std::int64_t m = 1; m < l; ++m) best = std::min(best, m + dp_optimum(l - m, c - 1, memo) + dp_optimum(m, c, memo));
  return memo[key] = best;
}

double max_rel(const xj::Array& a, const xj::Array& b) {
  auto x = vec(a), y = vec(b);
  REQUIRE(x.size() == y.size());
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    scale = std::max(scale, std::abs(y[i]));
    err = std::max(err, std::abs(x[i] - y[i]));
  }
  return err / std::max(scale, 1e-300);
}

xj::Array randn_seed_first(std::uint32_t seed, xj::Shape shape, xj::DType d, double scale = 1.0) {
  return xj::astype(xj::random::normal(xj::random::key(seed), std::move(shape)) * scale, d);
}

// A scan whose body holds exactly one sin: c' = sin(c * w).
xj::Array sin_chain(const xj::Array& w, const xj::Array& c0, std::int64_t l, xj::ScanCheckpoints cp) {
  auto body = [&w](const xj::Array& c, const xj::None&) { return std::pair{xj::sin(c * w), xj::None{}}; };
  return xj::sum(xj::scan(body, c0, xj::None{}, {.length = l, .checkpoints = cp}).first);
}

}  // namespace

TEST_CASE("revolve: the binomial schedule's advances are revolve's t(l, s) and the dynamic-programming optimum") {
  CHECK(revolve_t(1000, 10) == 3636);
  CHECK(xj::scan_schedule_stats(1000, xj::scan_checkpoints::binomial(10)).advances == 3636);
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> memo;
  for (std::int64_t l = 1; l <= 70; ++l)
    for (std::int64_t s = 1; s <= 7; ++s) {
      INFO("l = ", l, ", s = ", s);
      auto st = xj::scan_schedule_stats(l, xj::scan_checkpoints::binomial(s));
      CHECK(st.advances == revolve_t(l, s));
      CHECK(st.advances == dp_optimum(l, s - 1, memo));  // s counts the held initial carry
      CHECK(st.taped_steps == l);
      CHECK(st.forward_steps == st.advances + l);
      CHECK(st.peak_snapshots <= s);
    }
  for (std::int64_t s : {5, 10, 32, 100}) {
    auto st = xj::scan_schedule_stats(1000, xj::scan_checkpoints::binomial(s));
    CHECK(st.advances == revolve_t(1000, s));
    CHECK(st.peak_snapshots == s);
  }
  auto all = xj::scan_schedule_stats(1000, xj::scan_checkpoints::all());
  CHECK(all.advances == 0);
  CHECK(all.peak_snapshots == 1000);
}

TEST_CASE("revolve: options are checked") {
  CHECK_THROWS_AS(xj::scan_checkpoints::binomial(0), xj::Error);
  CHECK_THROWS_AS(xj::scan_checkpoints::online(-1), xj::Error);
  xj::Array c = xj::zeros({2});
  CHECK_THROWS_WITH_AS(sin_chain(c, c, 3, xj::scan_checkpoints::online(2)), doctest::Contains("binomial"), xj::Error);
  auto cond = [](const xj::Array& x) { return xj::sum(x) < 1.0; };
  auto body = [](const xj::Array& x) { return x + 1.0; };
  CHECK_THROWS_WITH_AS(xj::while_loop(cond, body, c, {.checkpoints = xj::scan_checkpoints::binomial(2)}),
                       doctest::Contains("online"), xj::Error);
}

TEST_CASE("revolve: grad through binomial(s) runs the body's forward at most t(l, s) + l times, with the unscheduled gradient") {
  xj::Array w = xj::array<double>({0.9, 1.1, -0.7}, {3});
  xj::Array c0 = xj::array<double>({0.3, -0.5, 0.8}, {3});
  for (std::int64_t l : {1, 2, 7, 64, 1000}) {
    auto want = xj::grad([l](const xj::Array& w, const xj::Array& c) { return sin_chain(w, c, l, xj::scan_checkpoints::all()); },
                         xj::argnums_tuple<0, 1>)(w, c0);
    for (std::int64_t s : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, std::int64_t{10}, l}) {
      INFO("l = ", l, ", s = ", s);
      auto cp = xj::scan_checkpoints::binomial(s);
      auto g = xj::grad([&](const xj::Array& w, const xj::Array& c) { return sin_chain(w, c, l, cp); }, xj::argnums_tuple<0, 1>);
      xj::reset_eval_counts();
      auto [gw, gc] = g(w, c0);
      std::int64_t sins = xj::eval_counts()["sin"];
      // Counted: every execution of the body's sin, forward and backward; t(l, s) advances plus
      // one taped run per step.
      CHECK(sins <= revolve_t(l, s) + l);
      CHECK(sins == xj::scan_schedule_stats(l, cp).forward_steps);
      CHECK(max_rel(gw, std::get<0>(want)) < 1e-12);
      CHECK(max_rel(gc, std::get<1>(want)) < 1e-12);
    }
  }
}

TEST_CASE("revolve: gradients equal the unscheduled scan's on a relu stack, in f32 and f64") {
  for (xj::DType d : {xj::f32, xj::f64}) {
    const std::int64_t L = 37, N = 5, D = 6;
    xj::Array ws = randn_seed_first(1, {L, D, D}, d, 0.5), bs = randn_seed_first(2, {L, D}, d, 0.1), x = randn_seed_first(3, {N, D}, d);
    auto loss = [&](xj::ScanCheckpoints cp) {
      return [cp](const xj::Array& ws, const xj::Array& bs, const xj::Array& x) {
        auto layer = [](const xj::Array& h, const std::pair<xj::Array, xj::Array>& wb) {
          return std::pair{xj::relu(xj::matmul(h, wb.first) + wb.second), xj::None{}};
        };
        auto [h, ys] = xj::scan(layer, x, std::pair{ws, bs}, {.checkpoints = cp});
        return xj::sum(h * h);
      };
    };
    auto want = xj::grad(loss(xj::scan_checkpoints::all()), xj::argnums_tuple<0, 1, 2>)(ws, bs, x);
    for (std::int64_t s : {1, 3, 8, 100}) {
      INFO("dtype ", xj::dtype_name(d), " s = ", s);
      auto got = xj::grad(loss(xj::scan_checkpoints::binomial(s)), xj::argnums_tuple<0, 1, 2>)(ws, bs, x);
      double tol = d == xj::f64 ? 1e-12 : 1e-6;
      CHECK(max_rel(std::get<0>(got), std::get<0>(want)) < tol);
      CHECK(max_rel(std::get<1>(got), std::get<1>(want)) < tol);
      CHECK(max_rel(std::get<2>(got), std::get<2>(want)) < tol);
    }
  }
}

TEST_CASE("revolve: a checkpointed residual MLP body with save_only_these_names, reversed scan, ys and a loop-invariant const") {
  const std::int64_t L = 12, N = 4, D = 5;
  xj::Array ws = randn_seed_first(4, {L, D, D}, xj::f64, 0.4), w_shared = randn_seed_first(5, {D, D}, xj::f64, 0.3), x = randn_seed_first(6, {N, D}, xj::f64);
  for (bool reverse : {false, true}) {
    auto loss = [&](xj::ScanCheckpoints cp) {
      return [cp, reverse](const xj::Array& ws, const xj::Array& w_shared, const xj::Array& x) {
        auto block = xj::checkpoint(
            [w_shared](const xj::Array& h, const xj::Array& w) {
              xj::Array a = xj::checkpoint_name(xj::tanh(xj::matmul(h, w)), "a");
              return h + xj::matmul(a, w_shared);
            },
            {.policy = xj::checkpoint_policies::save_only_these_names({"a"})});
        auto layer = [&](const xj::Array& h, const xj::Array& w) {
          xj::Array h2 = block(h, w);
          return std::pair{h2, xj::sum(xj::sin(h2), {1})};  // a y output per step
        };
        auto [h, ys] = xj::scan(layer, x, ws, {.reverse = reverse, .checkpoints = cp});
        return xj::sum(h * h) + xj::sum(ys * ys);
      };
    };
    auto want = xj::grad(loss(xj::scan_checkpoints::all()), xj::argnums_tuple<0, 1, 2>)(ws, w_shared, x);
    for (std::int64_t s : {1, 2, 4}) {
      INFO("reverse ", reverse, " s = ", s);
      auto got = xj::grad(loss(xj::scan_checkpoints::binomial(s)), xj::argnums_tuple<0, 1, 2>)(ws, w_shared, x);
      CHECK(max_rel(std::get<0>(got), std::get<0>(want)) < 1e-12);
      CHECK(max_rel(std::get<1>(got), std::get<1>(want)) < 1e-12);
      CHECK(max_rel(std::get<2>(got), std::get<2>(want)) < 1e-12);
    }
  }
}

TEST_CASE("revolve: check_grads at orders 1 and 2 through a binomial scan") {
  xj::Array ws = randn_seed_first(7, {7, 3}, xj::f64, 0.5), c0 = randn_seed_first(8, {3}, xj::f64);
  auto f = [](const xj::Array& ws, const xj::Array& c0) {
    auto body = [](const xj::Array& c, const xj::Array& w) { return std::pair{xj::sin(c * w) + 0.5 * c, xj::cos(c)}; };
    auto [c, ys] = xj::scan(body, c0, ws, {.checkpoints = xj::scan_checkpoints::binomial(2)});
    return xj::sum(c * c) + xj::sum(ys);
  };
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{ws, c0}, {.order = 1}));
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{ws, c0}, {.order = 2}));
}

TEST_CASE("revolve: jit, vmap, grad of grad and a checkpoint around the whole scan agree with the unscheduled scan") {
  xj::Array ws = randn_seed_first(9, {9, 3}, xj::f64, 0.5), c0 = randn_seed_first(10, {3}, xj::f64);
  auto make = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& ws, const xj::Array& c0) {
      auto body = [](const xj::Array& c, const xj::Array& w) { return std::pair{xj::tanh(c * w + 0.1), xj::None{}}; };
      return xj::sum(xj::sin(xj::scan(body, c0, ws, {.checkpoints = cp}).first));
    };
  };
  auto plain = make(xj::scan_checkpoints::all()), sched = make(xj::scan_checkpoints::binomial(3));
  auto want = xj::grad(plain, xj::argnums_tuple<0, 1>)(ws, c0);
  auto got_jit = xj::jit(xj::grad(sched, xj::argnums_tuple<0, 1>))(ws, c0);
  CHECK(max_rel(std::get<0>(got_jit), std::get<0>(want)) < 1e-12);
  CHECK(max_rel(std::get<1>(got_jit), std::get<1>(want)) < 1e-12);
  auto got_ckpt = xj::grad(xj::checkpoint(sched), xj::argnums_tuple<0, 1>)(ws, c0);
  CHECK(max_rel(std::get<0>(got_ckpt), std::get<0>(want)) < 1e-12);
  // grad of grad: the gradient of the sum of the first gradient.
  auto gg = [](auto f) {
    return xj::grad([f](const xj::Array& ws, const xj::Array& c0) { return xj::sum(xj::grad(f)(ws, c0)); },
                    xj::argnums_tuple<0, 1>);
  };
  auto hw = gg(plain)(ws, c0), hs = gg(sched)(ws, c0);
  CHECK(max_rel(std::get<0>(hs), std::get<0>(hw)) < 1e-10);
  CHECK(max_rel(std::get<1>(hs), std::get<1>(hw)) < 1e-10);
  // vmap of the scheduled gradient over a batch of initial carries, against a loop.
  xj::Array cs = randn_seed_first(11, {4, 3}, xj::f64);
  auto g1 = [&](const xj::Array& c) { return xj::grad(sched, xj::argnums_tuple<0>)(ws, c); };
  xj::Array batched = xj::vmap([&](const xj::Array& c) { return std::get<0>(g1(c)); })(cs);
  for (std::int64_t i = 0; i < 4; ++i) CHECK(max_rel(batched[i], std::get<0>(xj::grad(plain, xj::argnums_tuple<0>)(ws, cs[i]))) < 1e-12);
  // grad of a vmapped scheduled scan.
  auto vloss = [&](xj::ScanCheckpoints cp) {
    return [cp, make](const xj::Array& ws, const xj::Array& cs) {
      auto f = make(cp);
      return xj::sum(xj::vmap([&](const xj::Array& c) { return f(ws, c); })(cs));
    };
  };
  auto vw = xj::grad(vloss(xj::scan_checkpoints::all()), xj::argnums_tuple<0>)(ws, cs);
  auto vs = xj::grad(vloss(xj::scan_checkpoints::binomial(2)), xj::argnums_tuple<0>)(ws, cs);
  CHECK(max_rel(std::get<0>(vs), std::get<0>(vw)) < 1e-12);
}

TEST_CASE("revolve: the gradient of a 1000-step scan with binomial(10) holds at most s + 4 carries beyond one step's needs") {
  const std::int64_t N = 128, D = 64, L = 1000;
  xj::Array w = randn_seed_first(12, {D, D}, xj::f32, 0.1), h0 = randn_seed_first(13, {N, D}, xj::f32);
  const std::int64_t carry_bytes = N * D * 4;
  auto loss = [](std::int64_t l, bool ckpt_body, xj::ScanCheckpoints cp) {
    return [=](const xj::Array& w, const xj::Array& h0) {
      auto layer = [&w](const xj::Array& h) { return xj::tanh(xj::matmul(h, w)); };
      std::function<xj::Array(const xj::Array&)> f = layer;
      if (ckpt_body) f = xj::checkpoint(layer);
      auto body = [&f](const xj::Array& h, const xj::None&) { return std::pair{f(h), xj::None{}}; };
      return xj::sum(xj::scan(body, h0, xj::None{}, {.length = l, .checkpoints = cp}).first);
    };
  };
  auto peak_of = [&](auto f) {
    auto g = xj::grad(f, xj::argnums_tuple<0, 1>);
    (void)g(w, h0);  // warm up
    xj::reset_peak_memory();
    std::int64_t before = xj::memory_stats().live_bytes;
    auto r = g(w, h0);
    return xj::memory_stats().peak_bytes - before;
  };
  // One step's working set plus the gradients: the same gradient for a scan of one step.
  std::int64_t one_step = peak_of(loss(1, false, xj::scan_checkpoints::all()));
  std::int64_t binomial = peak_of(loss(L, false, xj::scan_checkpoints::binomial(10)));
  std::int64_t per_step = peak_of(loss(L, true, xj::scan_checkpoints::all()));
  MESSAGE("carry ", carry_bytes, " B; one step ", one_step, " B; binomial(10) ", binomial, " B; scan(checkpoint) ", per_step, " B");
  CHECK(binomial <= (10 + 4) * carry_bytes + one_step);
  CHECK((per_step - one_step) >= 50 * (binomial - one_step));
}

namespace {
// The bound docs/checkpointing.md states for online(s) on a loop that ran n steps: the body's
// forward runs at most (r + 2) n times, r the least integer with C(floor(s/2) + 1 + r, r) >= D,
// D = n when s <= 2, else ceil(2 n / ceil(s/2)) (the longest segment between stored carries).
std::int64_t online_bound(std::int64_t n, std::int64_t s) {
  const std::int64_t cf = (s + 1) / 2, free = s / 2;
  const std::int64_t d = cf < 2 ? n : (2 * n + cf - 1) / cf;
  std::int64_t r = 0;
  while (beta(free + 1, r) < d) ++r;
  return (r + 2) * n;
}

// x <- 0.99 x + 0.005 sin(a x) while |x|^2 > threshold (|x| shrinks by 0.9965 per step at least).
struct Decay {
  double threshold;
  xj::Array operator()(const xj::Array& a, const xj::Array& x0, xj::ScanCheckpoints cp) const {
    double thr = threshold;
    auto cond = [thr](const xj::Array& x) { return xj::sum(x * x) > thr; };
    auto body = [&a](const xj::Array& x) { return 0.99 * x + 0.005 * xj::sin(a * x); };
    return xj::sum(xj::while_loop(cond, body, x0, {.checkpoints = cp}));
  }
  std::int64_t trips(const xj::Array& a, const xj::Array& x0) const {
    double thr = threshold;
    using C = std::pair<xj::Array, xj::Array>;
    auto cond = [thr](const C& c) { return xj::where(c.first < 10000.0, xj::sum(c.second * c.second), 0.0) > thr; };
    auto body = [&a](const C& c) { return C{c.first + 1.0, 0.99 * c.second + 0.005 * xj::sin(a * c.second)}; };
    return static_cast<std::int64_t>(xj::while_loop(cond, body, C{xj::scalar(0.0, xj::f64), x0}).first.item<double>());
  }
  xj::Array as_scan(const xj::Array& a, const xj::Array& x0, std::int64_t n) const {
    auto body = [&a](const xj::Array& x, const xj::None&) { return std::pair{0.99 * x + 0.005 * xj::sin(a * x), xj::None{}}; };
    return xj::sum(xj::scan(body, x0, xj::None{}, {.length = n}).first);
  }
};
}  // namespace

TEST_CASE("revolve: grad of while_loop with online(s) equals grad of the scan of its true trip count") {
  xj::Array a = xj::array<double>({1.3, -0.4, 0.9}, {3});
  xj::Array x0 = xj::array<double>({0.6, -0.5, 0.55}, {3});
  for (double thr : {1.0, 0.91, 0.9, 0.85, 0.5, 1e-2, 1e-5, 2e-16}) {
    Decay f{thr};
    const std::int64_t n = f.trips(a, x0);
    auto want = xj::grad([&](const xj::Array& a, const xj::Array& x0) { return f.as_scan(a, x0, n); }, xj::argnums_tuple<0, 1>)(a, x0);
    for (std::int64_t s : {1, 2, 5, 10}) {
      if (s == 1 && n > 300) continue;  // quadratic: every step recomputed from the start
      INFO("threshold ", thr, " trips ", n, " s = ", s);
      auto cp = xj::scan_checkpoints::online(s);
      auto g = xj::grad([&](const xj::Array& a, const xj::Array& x0) { return f(a, x0, cp); }, xj::argnums_tuple<0, 1>);
      xj::reset_eval_counts();
      auto got = g(a, x0);
      auto st = xj::scan_schedule_stats(n, cp);
      CHECK(xj::eval_counts()["sin"] == st.forward_steps);
      CHECK(st.forward_steps <= online_bound(n, s));
      CHECK(st.peak_snapshots <= s);
      CHECK(max_rel(std::get<0>(got), std::get<0>(want)) < 1e-12);
      CHECK(max_rel(std::get<1>(got), std::get<1>(want)) < 1e-12);
    }
    MESSAGE("trips ", n, ": online(10) runs the body ", xj::scan_schedule_stats(n, xj::scan_checkpoints::online(10)).forward_steps,
            " times; binomial(10) with the length known ", xj::scan_schedule_stats(n, xj::scan_checkpoints::binomial(10)).forward_steps);
  }
}

TEST_CASE("revolve: a while_loop's online reverse mode under jit; without the option grad stays an error") {
  xj::Array a = xj::array<double>({1.3, -0.4, 0.9}, {3});
  xj::Array x0 = xj::array<double>({0.6, -0.5, 0.55}, {3});
  Decay f{1e-3};
  const std::int64_t n = f.trips(a, x0);
  auto want = xj::grad([&](const xj::Array& a) { return f.as_scan(a, x0, n); })(a);
  auto got = xj::jit(xj::grad([&](const xj::Array& a) { return f(a, x0, xj::scan_checkpoints::online(4)); }))(a);
  CHECK(max_rel(got, want) < 1e-12);
  CHECK_THROWS_AS(xj::grad([&](const xj::Array& a) { return f(a, x0, xj::scan_checkpoints::all()); })(a), xj::TransformError);
  // Differentiating the online reverse mode again is a clear error, not a wrong number.
  auto gg = [&](const xj::Array& a) { return xj::sum(xj::grad([&](const xj::Array& b) { return f(b, x0, xj::scan_checkpoints::online(4)); })(a)); };
  CHECK_THROWS_AS(xj::grad(gg)(a), xj::TransformError);
}

TEST_CASE("revolve: schedules of any length and snapshot count are generated without deep recursion or O(l) memory") {
  // A regression: the recursive builder overflowed the stack for s and l around 60000.
  auto st = xj::scan_schedule_stats(100000, xj::scan_checkpoints::binomial(100000));
  CHECK(st.advances == 99999);
  CHECK(st.peak_snapshots <= 100000);
  CHECK(xj::scan_schedule_stats(1000000, xj::scan_checkpoints::binomial(10)).advances == revolve_t(1000000, 10));
  // Online placement is O(1) per step but for its doublings.
  auto on = xj::scan_schedule_stats(200000, xj::scan_checkpoints::online(100000));
  CHECK(on.peak_snapshots <= 100000);
  CHECK(on.forward_steps <= online_bound(200000, 100000));
}

TEST_CASE("revolve: a short while_loop with a large online(s) allocates about s / 2 carries, not s") {
  const std::int64_t n = 32768;  // a 128 KiB carry
  xj::Array x0 = xj::ones({n}), a = xj::full({n}, 0.5);
  const std::int64_t carry = n * 4;
  auto f = [&](const xj::Array& a) {
    auto cond = [](const xj::Array& x) { return xj::sum(x) > 0.25 * 32768; };  // two trips
    auto body = [&a](const xj::Array& x) { return x * a; };
    return xj::sum(xj::while_loop(cond, body, x0, {.checkpoints = xj::scan_checkpoints::online(64)}));
  };
  auto g = xj::grad(f);
  (void)g(a);
  xj::reset_peak_memory();
  std::int64_t before = xj::memory_stats().live_bytes;
  xj::Array got = g(a);
  std::int64_t peak = xj::memory_stats().peak_bytes - before;
  MESSAGE("peak ", peak / carry, " carries");
  CHECK(peak <= (32 + 10) * carry);
  // d/da sum(x0 * a * a) = 2 a x0.
  CHECK(max_rel(got, 2.0 * a * x0) < 1e-6);
}


TEST_CASE("revolve: the shape rules of revolve_fwd, online_fwd, revolve_lin and revolve_bwd reject wrong operands") {
  using xj::Primitive;
  auto lin_of = [](const xj::ClosedJaxpr& j) {
    xj::detail::AdModeScope reverse(xj::detail::AdMode::reverse);
    return xj::detail::linearize_jaxpr(j, std::vector<bool>(j->invars.size(), true));
  };
  auto find = [](const xj::ClosedJaxpr& j, Primitive p) -> const xj::Eqn& {
    for (const auto& e : j->eqns)
      if (e.prim == p) return e;
    FAIL("no equation of ", xj::primitive_name(p));
    return j->eqns.front();
  };
  auto check = [](const xj::Eqn& e) {
    std::vector<xj::ShapedArray> in;
    for (const auto& a : e.inputs) in.push_back(xj::atom_aval(a));
    auto out = xj::detail::abstract_eval(e.prim, in, e.params);  // the recorded operands pass
    REQUIRE(out.size() == e.outputs.size());
    for (std::size_t k = 0; k < out.size(); ++k) CHECK(out[k] == e.outputs[k].aval());
    in.pop_back();
    CHECK_THROWS_AS(xj::detail::abstract_eval(e.prim, in, e.params), xj::TypeError);
  };
  auto scan_f = [](const xj::Array& w, const xj::Array& c0) {
    auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{xj::sin(c * x), xj::cos(c)}; };
    auto [c, ys] = xj::scan(body, c0, w, {.checkpoints = xj::scan_checkpoints::binomial(2)});
    return xj::sum(c) + xj::sum(ys);
  };
  auto ls = lin_of(xj::make_jaxpr(scan_f)(xj::zeros({5, 3}), xj::zeros({3})));
  check(find(ls.pe.known, Primitive::revolve_fwd));
  check(find(ls.pe.staged, Primitive::revolve_lin));
  std::vector<bool> linear_in(ls.pe.num_res, false);
  linear_in.resize(ls.pe.staged->invars.size(), true);
  xj::ClosedJaxpr transposed = xj::detail::transpose_jaxpr(ls.pe.staged, linear_in);
  check(find(transposed, Primitive::revolve_bwd));
  auto while_f = [](const xj::Array& x0) {
    auto cond = [](const xj::Array& x) { return xj::sum(x) > 1.0; };
    auto body = [](const xj::Array& x) { return 0.5 * xj::sin(x); };
    return xj::sum(xj::while_loop(cond, body, x0, {.checkpoints = xj::scan_checkpoints::online(3)}));
  };
  auto lw = lin_of(xj::make_jaxpr(while_f)(xj::zeros({3})));
  check(find(lw.pe.known, Primitive::online_fwd));
  check(find(lw.pe.staged, Primitive::revolve_lin));
}

TEST_CASE("revolve: a loop-invariant value the body reads only in dead code is not kept (fuzz seed 363901)") {
  // revolve_fwd / online_fwd and revolve_lin took every const of the body as an operand, so w (an
  // intermediate of the forward pass) and its tangent's residual exp(x) were kept where the plain
  // loop's DCE drops them.
  const xj::Array x0 = xj::array<double>({0.4, -1.1, 0.9}, {3});
  auto kept_w = [](const std::vector<xj::Residual>& rs) {
    return std::count_if(rs.begin(), rs.end(), [](const xj::Residual& r) { return r.description.starts_with("output of exp from"); });
  };
  auto scanned = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& xs) {
      const xj::Array w = xj::exp(xs);  // its derivative's residual is exp(xs) itself
      auto body = [&](const xj::Array& c, const xj::Array& x) {
        const xj::Array unused = xj::expm1(w) * 0.5;
        (void)unused;
        return std::pair{xj::tanh(c * x), xj::None{}};
      };
      return xj::sum(xj::scan(body, xs, xs, {.checkpoints = cp}).first);
    };
  };
  CHECK(kept_w(xj::saved_residuals(scanned(xj::scan_checkpoints::binomial(2)), x0)) == 0);
  CHECK(max_rel(xj::grad(scanned(xj::scan_checkpoints::binomial(2)))(x0), xj::grad(scanned(xj::scan_checkpoints::all()))(x0)) < 1e-14);
  auto looped = [](const xj::Array& x) {
    const xj::Array w = xj::exp(x);
    auto cond = [](const xj::Array& c) { return xj::sum(c * c) > 1e-2; };
    auto body = [&](const xj::Array& c) {
      const xj::Array unused = xj::expm1(w);
      (void)unused;
      return 0.5 * xj::sin(c);
    };
    return xj::sum(xj::while_loop(cond, body, x, {.checkpoints = xj::scan_checkpoints::online(2)}));
  };
  CHECK(kept_w(xj::saved_residuals(looped, x0)) == 0);
  // d/dx of the loop: each step multiplies by 0.5 cos(c); checked against central differences
  const xj::Array g = xj::grad(looped)(x0);
  for (std::int64_t i = 0; i < 3; ++i) {
    auto at = [&](double h) {
      std::vector<double> v = x0.to_vector<double>();
      v[static_cast<std::size_t>(i)] += h;
      return looped(xj::array<double>(v, {3})).item<double>();
    };
    CHECK(std::abs(g.to_vector<double>()[static_cast<std::size_t>(i)] - (at(1e-6) - at(-1e-6)) / 2e-6) < 1e-6);
  }
}

// A ys output whose tangent nothing reads (a per-step value the loss takes through
// stop_gradient): the staged walk of partial evaluation prunes the plain scan's tangent of it and
// the residuals only that tangent reads (cos(c) of sin(c)), and revolve_lin's and revolve_fwd's
// DCE rules do the same for the schedule; where no step-dependent residual is left the schedule
// becomes a plain scan, keeping no snapshots (fuzz seeds 400172, 401028 had found the plain scan
// pruned and the schedule not: the walk excluded scans until these rules existed).
TEST_CASE("revolve: a ys output without a tangent keeps no residuals, under binomial(s) as under the plain scan") {
  const xj::Array x0 = xj::array<double>({0.4, -1.1, 0.9, 0.3, -0.2, 0.7}, {6});
  auto bytes = [](const std::vector<xj::Residual>& rs) {
    std::int64_t b = 0;
    for (const auto& r : rs) b += static_cast<std::int64_t>(r.aval.nbytes());
    return b;
  };
  for (bool nonlinear_carry : {true, false}) {
    CAPTURE(nonlinear_carry);
    // with_ys false: the same loop without the ys output, what the residuals should then be
    auto scanned = [nonlinear_carry](xj::ScanCheckpoints cp, bool with_ys = true) {
      return [cp, nonlinear_carry, with_ys](const xj::Array& xs) {
        auto step = [&](const xj::Array& c, const xj::Array& x) { return nonlinear_carry ? xj::tanh(c * x) + x : c + 2.0 * x; };
        const xj::Array c0 = xj::array<double>({0.25}, {1})[0];
        if (!with_ys)
          return xj::scan([&](const xj::Array& c, const xj::Array& x) { return std::pair{step(c, x), xj::None{}}; }, c0, xs,
                          {.checkpoints = cp})
              .first;
        auto body = [&](const xj::Array& c, const xj::Array& x) { return std::pair{step(c, x), xj::sin(c) * 3.0}; };
        auto [c, ys] = xj::scan(body, c0, xs, {.checkpoints = cp});
        return c + xj::sum(xj::stop_gradient(ys));
      };
    };
    for (xj::ScanCheckpoints cp : {xj::scan_checkpoints::all(), xj::scan_checkpoints::binomial(2)})
      CHECK(bytes(xj::saved_residuals(scanned(cp), x0)) == bytes(xj::saved_residuals(scanned(cp, false), x0)));
    const std::int64_t plain = bytes(xj::saved_residuals(scanned(xj::scan_checkpoints::all()), x0));
    const std::int64_t scheduled = bytes(xj::saved_residuals(scanned(xj::scan_checkpoints::binomial(2)), x0));
    CHECK(scheduled <= plain);
    if (!nonlinear_carry) CHECK(scheduled == 0);  // nothing per step: no snapshots either
    // the gradient: d c_final / d xs (stop_gradient's term has none), against central
    // differences of the carry's recurrence as a plain loop in double
    const auto f = scanned(xj::scan_checkpoints::binomial(2));
    const xj::Array g = xj::grad(f)(x0), g_plain = xj::grad(scanned(xj::scan_checkpoints::all()))(x0);
    CHECK(max_rel(g, g_plain) < 1e-14);
    for (std::size_t i = 0; i < 6; ++i) {
      auto at = [&](double h) {
        std::vector<double> v = x0.to_vector<double>();
        v[i] += h;
        double c = 0.25;
        for (double x : v) c = nonlinear_carry ? std::tanh(c * x) + x : c + 2.0 * x;
        return c;
      };
      CHECK(std::abs(g.to_vector<double>()[i] - (at(1e-6) - at(-1e-6)) / 2e-6) < 1e-6);
    }
    // and under jit
    CHECK(max_rel(xj::jit(xj::grad(f))(x0), g_plain) < 1e-14);
  }
  // A body whose only per-step residual is its x (c' = c + x * x), and a one-step loop: the plain
  // scan keeps nothing a replay would save, so the schedule is the plain scan (it had kept s
  // snapshots of c, f64[100]: 1656 bytes against 48; a review of the thirty-sixth session).
  const auto sum_of_squares = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& xs) {
      const xj::Array c0 = xj::full({100}, 0.25, xj::f64);
      auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{c + x * x, xj::None{}}; };
      return xj::sum(xj::scan(body, c0, xs, {.checkpoints = cp}).first);
    };
  };
  CHECK(bytes(xj::saved_residuals(sum_of_squares(xj::scan_checkpoints::binomial(2)), x0)) ==
        bytes(xj::saved_residuals(sum_of_squares(xj::scan_checkpoints::all()), x0)));
  CHECK(max_rel(xj::grad(sum_of_squares(xj::scan_checkpoints::binomial(2)))(x0), 200.0 * x0) < 1e-14);  // d/dx 100 x^2
  const xj::Array one = xj::array<double>({0.4}, {1});
  const auto one_step = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& xs) {
      auto body = [](const xj::Array& c, const xj::Array& x) { return std::pair{xj::sin(c * x) + x, xj::None{}}; };
      return xj::scan(body, xj::array<double>({0.25}, {1})[0], xs, {.checkpoints = cp}).first;
    };
  };
  CHECK(bytes(xj::saved_residuals(one_step(xj::scan_checkpoints::binomial(2)), one)) ==
        bytes(xj::saved_residuals(one_step(xj::scan_checkpoints::all()), one)));
  CHECK(std::abs(xj::grad(one_step(xj::scan_checkpoints::binomial(2)))(one).to_vector<double>()[0] - (std::cos(0.1) * 0.25 + 1.0)) < 1e-14);
}

// A carry whose tangent nothing needs and no residual reads (b, which the loss takes through
// stop_gradient) is not snapshot: revolve_fwd stores only the carries a replay needs, those the
// per-step residuals read and, a fixpoint, those their next values read (c, which a reads). It
// had stored every known carry (b f64[100]: 1600 bytes of snapshots under binomial(2) where the
// plain scan keeps about 200; the thirty-sixth session's open cost).
TEST_CASE("revolve: a carry no replay reads is not snapshot, and one a needed carry reads is") {
  const xj::Array x0 = xj::array<double>({0.4, -1.1, 0.9, 0.3, -0.2, 0.7}, {6});
  auto bytes = [](const std::vector<xj::Residual>& rs) {
    std::int64_t b = 0;
    for (const auto& r : rs) b += static_cast<std::int64_t>(r.aval.nbytes());
    return b;
  };
  auto step = [](double a, double c, double x) { return std::pair{std::tanh(a * c * x) + x, 0.9 * c + 0.01}; };
  auto scanned = [](xj::ScanCheckpoints cp) {
    return [cp](const xj::Array& xs) {
      auto body = [](const std::tuple<xj::Array, xj::Array, xj::Array>& abc, const xj::Array& x) {
        const auto& [a, b, c] = abc;
        return std::pair{std::tuple{xj::tanh(a * c * x) + x, b * xj::cos(a), c * 0.9 + 0.01}, xj::None{}};
      };
      const std::tuple init{xj::array<double>({0.25}, {1})[0], xj::full({100}, 0.5, xj::f64), xj::array<double>({1.5}, {1})[0]};
      auto [a, b, c] = xj::scan(body, init, xs, {.checkpoints = cp}).first;
      return a + xj::sum(xj::stop_gradient(b));
    };
  };
  const auto plain = scanned(xj::scan_checkpoints::all()), scheduled = scanned(xj::scan_checkpoints::binomial(2));
  const std::vector<xj::Residual> kept = xj::saved_residuals(scheduled, x0);
  for (const auto& r : kept) CHECK_MESSAGE(r.aval.size() < 100, r.aval.str(), " ", r.description);  // no snapshot of b
  CHECK(bytes(kept) <= bytes(xj::saved_residuals(plain, x0)));
  // d a_final / d xs against central differences of the recurrence as a plain loop in double
  const xj::Array g = xj::grad(scheduled)(x0);
  CHECK(max_rel(g, xj::grad(plain)(x0)) < 1e-14);
  for (std::size_t i = 0; i < 6; ++i) {
    auto at = [&](double h) {
      std::vector<double> v = x0.to_vector<double>();
      v[i] += h;
      double a = 0.25, c = 1.5;
      for (double x : v) std::tie(a, c) = step(a, c, x);
      return a;
    };
    CHECK(std::abs(g.to_vector<double>()[i] - (at(1e-6) - at(-1e-6)) / 2e-6) < 1e-6);
  }
  // under jit, vmap and forward-over-reverse (the rules that expand revolve_fwd into a plain scan)
  CHECK(max_rel(xj::jit(xj::grad(scheduled))(x0), g) < 1e-14);
  const xj::Array rows = xj::stack({x0, x0 * 0.5});
  CHECK(max_rel(xj::vmap(xj::grad(scheduled))(rows), xj::vmap(xj::grad(plain))(rows)) < 1e-14);
  const xj::Array dir = xj::ones_like(x0);
  const auto [g_s, hv_s] = xj::jvp(xj::grad(scheduled), std::tuple{x0}, std::tuple{dir});
  const auto [g_p, hv_p] = xj::jvp(xj::grad(plain), std::tuple{x0}, std::tuple{dir});
  CHECK(max_rel(g_s, g) < 1e-14);
  CHECK(max_rel(hv_s, hv_p) < 1e-12);
}

// A replayed step computes the carries and residuals only: the forward sweep computed the ys
// once (the backward sweep had rerun each step whole and dropped its ys: an RNN's readout once
// more per replayed step; a helper's hunt of the thirty-seventh session: log1p ran 199 times
// against the plain scan's 100, and 99 against 0 where the loss reads no ys).
TEST_CASE("revolve: the backward sweep's replays do not compute the ys") {
  const std::int64_t steps = 20;
  const xj::Array xs = xj::reshape(xj::arange(steps * 3, xj::f64) * 0.01, {steps, 3});
  const xj::Array c0 = xj::array<double>({0.3, -0.2, 0.5}, {3}), w0 = xj::array<double>({0.7, 1.1, -0.4}, {3});
  for (bool loss_reads_ys : {true, false}) {
    CAPTURE(loss_reads_ys);
    auto loss = [&](xj::ScanCheckpoints cp) {
      return [&, cp](const xj::Array& w) {
        auto body = [&](const xj::Array& c, const xj::Array& x) { return std::pair{xj::sin(c * w + x), xj::log1p(c * c) * 2.0}; };
        auto [c, ys] = xj::scan(body, c0, xs, {.checkpoints = cp});
        return loss_reads_ys ? xj::sum(c) + xj::sum(ys) : xj::sum(c);
      };
    };
    auto log1p_runs = [&](xj::ScanCheckpoints cp) {
      const auto f = xj::value_and_grad(loss(cp));
      (void)f(w0);
      xj::reset_eval_counts();
      (void)f(w0);
      const auto counts = xj::eval_counts();
      return counts.count("log1p") ? counts.at("log1p") : 0;
    };
    CHECK(log1p_runs(xj::scan_checkpoints::binomial(3)) == (loss_reads_ys ? steps : 0));
    CHECK(log1p_runs(xj::scan_checkpoints::all()) == (loss_reads_ys ? steps : 0));
    const auto [v, g] = xj::value_and_grad(loss(xj::scan_checkpoints::binomial(3)))(w0);
    const auto [v_plain, g_plain] = xj::value_and_grad(loss(xj::scan_checkpoints::all()))(w0);
    CHECK(max_rel(v, v_plain) < 1e-15);
    CHECK(max_rel(g, g_plain) < 1e-13);
    // d loss / d w against central differences of the recurrence as a plain loop in double
    for (std::size_t i = 0; i < 3; ++i) {
      auto at = [&](double h) {
        std::vector<double> w = w0.to_vector<double>(), c = c0.to_vector<double>(), x = xs.to_vector<double>();
        w[i] += h;
        double total = 0;
        for (std::int64_t t = 0; t < steps; ++t)
          for (std::size_t k = 0; k < 3; ++k) {
            if (loss_reads_ys) total += 2.0 * std::log1p(c[k] * c[k]);
            c[k] = std::sin(c[k] * w[k] + x[static_cast<std::size_t>(t) * 3 + k]);
          }
        for (double ck : c) total += ck;
        return total;
      };
      CHECK(std::abs(g.to_vector<double>()[i] - (at(1e-6) - at(-1e-6)) / 2e-6) < 1e-6);
    }
  }
}

// vmap of a while_loop with a batched predicate steps every member until all are done, keeping
// the finished members' carries; reverse mode (online(s)) must not send a finished member's zero
// cotangent through the body evaluated at its frozen carry, where 0 * (an infinite derivative)
// is NaN (member 1 never enters the loop: sqrt(0.1 - 0.2) in its frozen step; its gradient was
// NaN; a helper's hunt of the thirty-seventh session).
TEST_CASE("revolve: the gradient of a vmapped while_loop takes nothing from the finished members' frozen steps") {
  auto f = [](const xj::Array& x) {
    return xj::while_loop([](const xj::Array& c) { return c > 1.0; }, [](const xj::Array& c) { return xj::sqrt(c - 0.2) - 1.0; },
                          x, {.checkpoints = xj::scan_checkpoints::online(3)});
  };
  const xj::Array xs = xj::array<double>({16.0, 0.1, 3.0}, {3});
  // the derivative as a plain loop in double: the product of 1 / (2 sqrt(c - 0.2)) over the steps
  std::vector<double> expected;
  for (double c : xs.to_vector<double>()) {
    double d = 1.0;
    while (c > 1.0) d *= 1.0 / (2.0 * std::sqrt(c - 0.2)), c = std::sqrt(c - 0.2) - 1.0;
    expected.push_back(d);
  }
  auto total = [&](const xj::Array& x) { return xj::sum(xj::vmap(f)(x)); };
  for (const xj::Array& g : {xj::grad(total)(xs), xj::jit(xj::grad(total))(xs)})
    for (std::size_t i = 0; i < 3; ++i) CHECK(g.to_vector<double>()[i] == doctest::Approx(expected[i]).epsilon(1e-13));
  // forward mode agrees
  const auto [v, t] = xj::jvp(xj::vmap(f), std::tuple{xs}, std::tuple{xj::ones_like(xs)});
  for (std::size_t i = 0; i < 3; ++i) CHECK(t.to_vector<double>()[i] == doctest::Approx(expected[i]).epsilon(1e-13));
}

// online(s) stores only the carries a replay needs, as binomial(s) does: a dead carry b beside the
// differentiated x and the counter the cond reads (i, which no residual reads) is stepped by the
// forward sweep and never stored (it kept capacity() copies of b: 9.6 MB for an f64[100000]
// against the plain scan's 4.9 KB; a helper's hunt of the thirty-seventh session).
TEST_CASE("revolve: online(s) snapshots only the carries its replays need") {
  using C = std::tuple<xj::Array, xj::Array, xj::Array>;
  const xj::Array a = xj::array<double>({0.5, -0.3, 0.8}, {3}), x0 = xj::array<double>({0.2, -0.4, 0.6}, {3});
  const xj::Array b0 = xj::full({1000}, 0.25, xj::f64);
  auto body = [&a](const C& c) {
    const auto& [i, x, b] = c;
    return C{i + 1, 0.9 * x + 0.1 * xj::sin(a * x), 0.5 * b + 0.1 * xj::sin(b)};
  };
  auto looped = [&](const xj::Array& x) {
    const C r = xj::while_loop([](const C& c) { return std::get<0>(c) < 20; }, body, C{xj::scalar(0, xj::i32), x, b0},
                               {.checkpoints = xj::scan_checkpoints::online(4)});
    return xj::sum(std::get<1>(r));
  };
  for (const auto& r : xj::saved_residuals(looped, x0)) CHECK_MESSAGE(r.aval.size() < 1000, r.aval.str(), " ", r.description);
  // d sum(x_20) / d x0 against central differences of the recurrence as a plain loop in double
  const xj::Array g = xj::grad(looped)(x0);
  for (std::size_t k = 0; k < 3; ++k) {
    auto at = [&](double h) {
      double x = x0.to_vector<double>()[k] + h;
      for (int t = 0; t < 20; ++t) x = 0.9 * x + 0.1 * std::sin(a.to_vector<double>()[k] * x);
      return x;
    };
    CHECK(g.to_vector<double>()[k] == doctest::Approx((at(1e-6) - at(-1e-6)) / 2e-6).epsilon(1e-7));
  }
  CHECK(max_rel(xj::jit(xj::grad(looped))(x0), g) < 1e-14);
}

// A residual computed from the step's x and a weight alone, larger than the x (c' = c cos(w x),
// w f64[100], x a scalar: cos(w x) per step), keeps the schedule with its carries stored; the
// plain scan would keep it per step (a review of the thirty-seventh session: 800,000 bytes for
// 1000 steps under binomial(4), where storing carries keeps 12,800).
TEST_CASE("revolve: residuals of the x alone that are larger than the x keep the schedule") {
  const xj::Array xs = xj::arange(60, xj::f64) * 0.01, w = xj::arange(100, xj::f64) * 0.01, c0 = xj::ones({100}, xj::f64);
  auto loss = [&](xj::ScanCheckpoints cp) {
    return [&, cp](const xj::Array& c) {
      auto body = [&](const xj::Array& carry, const xj::Array& x) { return std::pair{carry * xj::cos(w * x), xj::None{}}; };
      return xj::sum(xj::scan(body, c, xs, {.checkpoints = cp}).first);
    };
  };
  auto bytes = [](const std::vector<xj::Residual>& rs) {
    std::int64_t b = 0;
    for (const auto& r : rs) b += static_cast<std::int64_t>(r.aval.nbytes());
    return b;
  };
  const std::int64_t plain = bytes(xj::saved_residuals(loss(xj::scan_checkpoints::all()), c0));
  const std::int64_t scheduled = bytes(xj::saved_residuals(loss(xj::scan_checkpoints::binomial(4)), c0));
  CHECK(plain >= 60 * 800);
  CHECK(scheduled <= 7 * 800);  // four stored carries, the last step's residuals and the xs, not one per step
  // an x leaf the step never reads does not count as what the residuals cost no more than (it
  // made the schedule the plain scan: a second review)
  const xj::Array frames = xj::ones({60, 200}, xj::f64);
  auto with_frames = [&](const xj::Array& c) {
    auto body = [&](const xj::Array& carry, const std::tuple<xj::Array, xj::Array>& x) {
      return std::pair{carry * xj::cos(w * std::get<0>(x)), xj::None{}};
    };
    return xj::sum(xj::scan(body, c, std::tuple{xs, frames}, {.checkpoints = xj::scan_checkpoints::binomial(4)}).first);
  };
  for (const auto& r : xj::saved_residuals(with_frames, c0)) CHECK_MESSAGE(r.aval.size() < 60 * 100, r.aval.str(), " ", r.description);  // nor the frames
  CHECK(max_rel(xj::grad(with_frames)(c0), xj::grad(loss(xj::scan_checkpoints::all()))(c0)) < 1e-14);
  // d sum(c_T) / d c0 = prod_t cos(w x_t), a plain loop in double
  const xj::Array g = xj::grad(loss(xj::scan_checkpoints::binomial(4)))(c0);
  for (std::size_t k = 0; k < 100; k += 9) {
    double want = 1.0;
    for (int t = 0; t < 60; ++t) want *= std::cos(0.01 * static_cast<double>(k) * 0.01 * t);
    CHECK(g.to_vector<double>()[k] == doctest::Approx(want).epsilon(1e-13));
  }
}
