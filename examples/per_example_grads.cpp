// per_example_grads: the gradient of every example's loss at once, with vmap(grad(loss)).
//
// Differential privacy, influence functions and gradient-noise diagnostics need one gradient per
// example, not the gradient of the mean. `xj::vmap(xj::grad(loss), {None, 0, 0})` maps the
// gradient over the examples (axis 0 of x and y) with the parameters shared (None): one batched
// computation instead of a loop. This program computes the per-example gradient norms both ways,
// checks that they agree, and prints the time of each.
//
// Usage: per_example_grads [--batch N] [--width D] [--repeats R]
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

namespace xj = xjax;

struct Mlp {
  BOOST_HANA_DEFINE_STRUCT(Mlp, (xj::Array, w1), (xj::Array, b1), (xj::Array, w2), (xj::Array, b2));
};

// The loss of one example: x [d], y [1].
xj::Array loss(const Mlp& p, const xj::Array& x, const xj::Array& y) {
  xj::Array h = xj::tanh(xj::matmul(x, p.w1) + p.b1);
  xj::Array out = xj::matmul(h, p.w2) + p.b2;
  return xj::sum(xj::square(out - y));
}

// sqrt of the sum of squares of every leaf of g, per example (leaves batched along axis 0).
std::vector<double> norms(const Mlp& g) {
  auto [leaves, def] = xj::tree_flatten(g);
  std::int64_t n = leaves[0].dim(0);
  std::vector<double> sq(static_cast<std::size_t>(n), 0.0);
  for (const auto& leaf : leaves) {
    xj::Array rows = xj::reshape(leaf, {n, leaf.size() / n});
    auto s = xj::sum(rows * rows, {1}).to_vector<double>();
    for (std::size_t i = 0; i < sq.size(); ++i) sq[i] += s[i];
  }
  for (auto& v : sq) v = std::sqrt(v);
  return sq;
}

double norm_of(const Mlp& g) {
  auto [leaves, def] = xj::tree_flatten(g);
  double s = 0;
  for (const auto& leaf : leaves) s += xj::sum(leaf * leaf).item<double>();
  return std::sqrt(s);
}

int example_main(int argc, char** argv) {
  std::int64_t batch = 64, width = 64;
  int repeats = 3;
  example_flags::Flags flags("per_example_grads",
                             "usage: per_example_grads [--batch N] [--width D] [--repeats R]   (defaults: 64 examples, width 64, 3 repeats)\n");
  flags.integer("--batch", batch, 1);
  flags.integer("--width", width, 1);
  flags.integer("--repeats", repeats, 1);
  flags.parse(argc, argv);
  auto k = xj::random::split(xj::random::key(0), 4);
  auto scale = 1.0 / std::sqrt(static_cast<double>(width));
  Mlp p{xj::random::normal(k[0], {width, width}, xj::f64) * scale, xj::zeros({width}, xj::f64),
        xj::random::normal(k[1], {width, 1}, xj::f64) * scale, xj::zeros({1}, xj::f64)};
  xj::Array x = xj::random::normal(k[2], {batch, width}, xj::f64);
  xj::Array y = xj::random::normal(k[3], {batch, 1}, xj::f64);

  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // Batched: parameters shared (None), examples along axis 0 of x and y; jit traces once.
  auto per_example = xj::jit(xj::vmap(xj::grad(loss), std::tuple{xj::None{}, 0, 0}));
  std::vector<double> batched = norms(per_example(p, x, y));  // warm-up (traces, plans)
  auto t0 = Clock::now();
  for (int r = 0; r < repeats; ++r) batched = norms(per_example(p, x, y));
  double t_vmap = seconds(t0) / repeats;

  // The loop: one jitted gradient per example.
  auto one = xj::jit(xj::grad(loss));
  auto row = [](const xj::Array& a, std::int64_t i) { return xj::squeeze(xj::slice_in_dim(a, i, i + 1), {0}); };
  std::vector<double> looped(static_cast<std::size_t>(batch));
  (void)one(p, row(x, 0), row(y, 0));  // warm-up
  t0 = Clock::now();
  for (int r = 0; r < repeats; ++r)
    for (std::int64_t i = 0; i < batch; ++i) looped[static_cast<std::size_t>(i)] = norm_of(one(p, row(x, i), row(y, i)));
  double t_loop = seconds(t0) / repeats;

  double worst = 0;
  for (std::size_t i = 0; i < looped.size(); ++i) worst = std::max(worst, std::abs(batched[i] - looped[i]) / looped[i]);
  std::printf("per-example gradient norms of a %lld-wide MLP, %lld examples\n", static_cast<long long>(width),
              static_cast<long long>(batch));
  std::printf("  first norms:");
  for (std::size_t i = 0; i < std::min<std::size_t>(3, batched.size()); ++i) std::printf(" %.6f", batched[i]);
  std::printf("\n");
  std::printf("  vmap(grad): %.3f ms   loop of grad: %.3f ms   (%.1fx)\n", t_vmap * 1e3, t_loop * 1e3, t_loop / t_vmap);
  std::printf("  largest relative difference between the two: %.2e\n", worst);
  if (!(worst < 1e-10)) {
    std::printf("FAILED: the batched norms differ from the loop's\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("per_example_grads", example_main, argc, argv); }
