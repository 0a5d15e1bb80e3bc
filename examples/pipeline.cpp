// pipeline: a deep layer stack split into stages, one per process, trained GPipe-style.
//
//   mpirun -np 2 build/examples/pipeline        (as root: add --allow-run-as-root)
//
// Process p holds layers [p L/n, (p+1) L/n) of a stack y = tanh(y @ W[i]) (a scan of a
// checkpointed layer). The batch is cut into micro-batches that flow through the stages: at tick
// t, stage p works on micro-batch t - p and hands its activations to stage p + 1 with xj::ppermute.
// Every process runs the same program (idle ticks compute values nobody uses, and masks, not C++
// branches, say which stage reads the input and which ticks count); the last stage adds up the
// loss. The gradient of each process's loss with respect to its own layers goes back
// through the transposed ppermutes (activations' cotangents flow from stage p + 1 to p), so each
// stage gets its part of the full model's gradient: checked here against the gradient of the
// whole stack on one process, to 1e-5 (relative). Started without mpirun, it is one stage.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace xj = xjax;

std::pair<xj::Array, xj::None> layer(const xj::Array& h, const xj::Array& w) { return {xj::tanh(xj::matmul(h, w)), xj::None{}}; }

// A run of layers: ws [k, d, d].
xj::Array stage(const xj::Array& ws, const xj::Array& h) { return xj::scan(xj::checkpoint(layer), h, ws).first; }

xj::Array micro(const xj::Array& a, std::int64_t m) { return xj::squeeze(xj::slice_in_dim(a, m, m + 1), {0}); }

int main(int argc, char** argv) {
  // every process reads the same arguments: a bad one ends them all before MPI starts
  example_flags::Flags("pipeline", "usage: mpirun -np N pipeline   (no flags; one process without mpirun)\n").parse(argc, argv);
  xj::distributed::Session session(argc, argv);
  const int n = xj::distributed::process_count(), p = xj::distributed::process_index();
  const std::int64_t layers = 8, d = 16, micro_batches = 4, rows = 8;
  if (layers % n != 0) xj::distributed::abort("the layers must split evenly over the processes");
  const std::int64_t per_stage = layers / n;

  auto k = xj::random::split(xj::random::key(7), 3);
  xj::Array w = xj::random::normal(k[0], {layers, d, d}, xj::f64) * (1.0 / std::sqrt(double(d)));
  xj::Array x = xj::random::normal(k[1], {micro_batches, rows, d}, xj::f64);
  xj::Array y = xj::random::normal(k[2], {micro_batches, rows, d}, xj::f64) * 0.5;
  xj::Array w_local = xj::slice_in_dim(w, p * per_stage, (p + 1) * per_stage);

  // Stage p sends to p + 1.
  std::vector<std::pair<int, int>> forward;
  for (int s = 0; s + 1 < n; ++s) forward.push_back({s, s + 1});

  // This process's share of the loss: nonzero on the last stage only. The program is the same on
  // every process (SPMD): which stage reads x, and which ticks count, are arrays (masks), not C++
  // branches on p, so that every process traces the same jaxpr and runs the same collectives,
  // forward and backward (docs/distributed.md).
  const xj::Array is_first = xj::scalar(p == 0 ? 1.0 : 0.0, xj::f64);
  auto local_loss = [&](const xj::Array& ws) {
    xj::Array received = xj::zeros({rows, d}, xj::f64), loss = xj::scalar(0.0, xj::f64);
    for (std::int64_t t = 0; t < micro_batches + n - 1; ++t) {
      std::int64_t m = t - p;  // the micro-batch this stage works on at tick t
      bool counts = p == n - 1 && m >= 0 && m < micro_batches;
      xj::Array in = xj::where(is_first > 0.5, micro(x, std::clamp<std::int64_t>(t, 0, micro_batches - 1)), received);
      xj::Array out = stage(ws, in);
      xj::Array term = xj::sum(xj::square(out - micro(y, std::clamp<std::int64_t>(m, 0, micro_batches - 1))));
      loss = loss + term * (counts ? 1.0 : 0.0);
      received = xj::ppermute(out, forward);
    }
    return loss;
  };
  auto [loss, grad] = xj::jit(xj::value_and_grad(local_loss))(w_local);
  double total = xj::psum(loss).item<double>();  // the loss of the whole model

  // The reference: the whole stack on this process alone.
  auto full_loss = [&](const xj::Array& all) {
    xj::Array l = xj::scalar(0.0, xj::f64);
    for (std::int64_t m = 0; m < micro_batches; ++m) l = l + xj::sum(xj::square(stage(all, micro(x, m)) - micro(y, m)));
    return l;
  };
  auto [want_loss, want_grad] = xj::value_and_grad(full_loss)(w);
  xj::Array want_local = xj::slice_in_dim(want_grad, p * per_stage, (p + 1) * per_stage);
  auto g = grad.to_vector<double>(), wg = want_local.to_vector<double>();
  double worst = std::abs(total - want_loss.item<double>()) / std::abs(want_loss.item<double>());
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(wg[i]));
    diff = std::max(diff, std::abs(g[i] - wg[i]));
  }
  worst = std::max(worst, diff / scale);
  double everyone = xj::pmax(xj::scalar(worst, xj::f64)).item<double>();
  if (p == 0)
    std::printf("%d stage(s) of %lld layers, %lld micro-batches: loss %.10f (one process: %.10f)\n"
                "largest difference of the stages' gradients from the whole stack's (relative to its largest entry): %.2e\n%s\n",
                n, static_cast<long long>(per_stage), static_cast<long long>(micro_batches), total,
                want_loss.item<double>(), everyone, everyone < 1e-5 ? "OK" : "FAILED");
  return everyone < 1e-5 ? 0 : 1;
}
