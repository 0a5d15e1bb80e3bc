// data_parallel: data-parallel training of a residual MLP stack across processes.
//
//   mpirun -np 2 build/examples/data_parallel        (as root: add --allow-run-as-root)
//
// Every process holds the same weights and a shard of the batch. The jitted training step takes
// the gradient of the shard's mean loss and averages it over the processes with xj::pmean (an
// MPI allreduce inside the step's jaxpr), so every process applies the same update: the
// gradient of the full batch. To show it, every process also trains a copy on the full batch
// without communicating, and the two loss trajectories must agree to 1e-5 (relative). Started
// without mpirun, it runs as one process (the shard is the whole batch).
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>
#include <vector>

namespace xj = xjax;

struct Weights {
  BOOST_HANA_DEFINE_STRUCT(Weights, (xj::Array, w1), (xj::Array, w2));
};

// One residual layer y + relu(y @ W1) @ W2, checkpointed: its hidden activation is recomputed in
// the backward pass.
std::pair<xj::Array, xj::None> layer(const xj::Array& y, const std::pair<xj::Array, xj::Array>& w) {
  return {y + xj::matmul(xj::relu(xj::matmul(y, w.first)), w.second), xj::None{}};
}

xj::Array mean_loss(const Weights& p, const xj::Array& x, const xj::Array& y) {
  xj::Array out = xj::scan(xj::checkpoint(layer), x, std::pair{p.w1, p.w2}).first;
  return xj::mean(xj::square(out - y));
}

Weights sgd(const Weights& p, const Weights& g, double lr) { return {p.w1 - g.w1 * lr, p.w2 - g.w2 * lr}; }

int main(int argc, char** argv) {
  // every process reads the same arguments: a bad one ends them all before MPI starts
  example_flags::Flags("data_parallel", "usage: mpirun -np N data_parallel   (no flags; one process without mpirun)\n").parse(argc, argv);
  xj::distributed::Session session(argc, argv);  // aborts the whole run if an exception escapes
  const int n = xj::distributed::process_count(), me = xj::distributed::process_index();
  const std::int64_t layers = 4, d = 16, hidden = 32, batch = 64, steps = 20;
  const double lr = 0.05;

  // The same data and initial weights on every process (same keys); each takes its rows.
  auto k = xj::random::split(xj::random::key(42), 4);
  Weights p{xj::random::normal(k[0], {layers, d, hidden}, xj::f64) * (0.5 / std::sqrt(double(d))),
            xj::random::normal(k[1], {layers, hidden, d}, xj::f64) * (0.5 / std::sqrt(double(hidden)))};
  xj::Array x = xj::random::normal(k[2], {batch, d}, xj::f64);
  xj::Array y = xj::sin(xj::matmul(x, xj::random::normal(k[3], {d, d}, xj::f64) * 0.3));
  if (batch % n != 0) xj::distributed::abort("the batch must split evenly over the processes");
  const std::int64_t rows = batch / n;
  xj::Array x_shard = xj::slice_in_dim(x, me * rows, (me + 1) * rows);
  xj::Array y_shard = xj::slice_in_dim(y, me * rows, (me + 1) * rows);

  // The data-parallel step: the shard's gradient, averaged over the processes.
  auto step = xj::jit([lr](const Weights& w, const xj::Array& xs, const xj::Array& ys) {
    auto [loss, g] = xj::value_and_grad(mean_loss)(w, xs, ys);
    return std::pair{xj::pmean(loss), sgd(w, xj::pmean(g), lr)};
  });
  // The reference: the full batch on this process alone.
  auto full_step = xj::jit([lr](const Weights& w, const xj::Array& xs, const xj::Array& ys) {
    auto [loss, g] = xj::value_and_grad(mean_loss)(w, xs, ys);
    return std::pair{loss, sgd(w, g, lr)};
  });

  Weights parallel = p, single = p;
  double worst = 0;
  for (std::int64_t s = 0; s < steps; ++s) {
    auto [l_par, next_par] = step(parallel, x_shard, y_shard);
    auto [l_one, next_one] = full_step(single, x, y);
    double a = l_par.item<double>(), b = l_one.item<double>();
    worst = std::max(worst, std::abs(a - b) / std::abs(b));
    if (me == 0 && (s % 5 == 0 || s == steps - 1))
      std::printf("step %2lld  loss %.8f  (single process, full batch: %.8f)\n", static_cast<long long>(s), a, b);
    parallel = next_par;
    single = next_one;
  }
  // The final weights agree too, and every process holds the same ones.
  auto max_rel = [](const xj::Array& u, const xj::Array& v) {
    auto du = u.to_vector<double>(), dv = v.to_vector<double>();
    double m = 0;
    for (std::size_t i = 0; i < du.size(); ++i) m = std::max(m, std::abs(du[i] - dv[i]) / (1e-12 + std::abs(dv[i])));
    return m;
  };
  worst = std::max({worst, max_rel(parallel.w1, single.w1), max_rel(parallel.w2, single.w2)});
  // max over processes minus min over processes: exactly 0 when every process holds the same bits
  double spread = xj::max(xj::pmax(parallel.w1) + xj::pmax(-parallel.w1)).item<double>();
  bool ok = worst < 1e-5 && spread == 0.0;
  int failures = static_cast<int>(xj::psum(xj::scalar(ok ? 0 : 1, xj::i32)).item<std::int32_t>());
  if (me == 0)
    std::printf("%d process(es); largest relative difference from single-process training: %.2e; weights %s\n%s\n", n,
                worst, spread == 0.0 ? "identical on every process" : "DIFFER between processes",
                failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
