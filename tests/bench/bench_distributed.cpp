// xjax-bench-distributed: D1 of issue 16. The data-parallel gradient of the P3 residual MLP
// (scan of y += relu(y @ W1) @ W2) over the processes of an MPI run, against the same gradient of
// the whole batch on one process, in the same run:
//
//   mpirun -np 2 build/tests/bench/xjax-bench-distributed [--quick]
//
// One OpenBLAS thread per process. Each process takes batch / n rows; the jitted step computes
// the shard's gradient and pmean's it (one allreduce per weight). Then process 0 alone times the
// whole batch's gradient while the others wait. Reports both medians, the speedup and the
// parallel efficiency (speedup / n), and the bytes this process communicated per step (an
// allreduce of the gradients: exactly their bytes). See docs/distributed.md.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "xjax/xjax.hpp"

namespace xj = xjax;

namespace {

using Weights = std::pair<xj::Array, xj::Array>;

std::pair<xj::Array, xj::None> mlp_layer(const xj::Array& y, const Weights& w) {
  return {y + xj::matmul(xj::relu(xj::matmul(y, w.first)), w.second), xj::None{}};
}

/// sum(final^2) * scale, as a function of (weights, batch).
auto loss_scaled(double scale) {
  return [scale](const Weights& w, const xj::Array& y0) {
    xj::Array out = xj::scan(mlp_layer, y0, w).first;
    return xj::sum(out * out) * scale;
  };
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void barrier() { (void)xj::psum(xj::scalar(0.0, xj::f32)).item<float>(); }

}  // namespace

int main(int argc, char** argv) {
  xj::distributed::Session session(argc, argv);
  if (argc > 2 || (argc == 2 && std::string(argv[1]) != "--quick")) {  // a typo ran the full sizes
    if (xj::distributed::process_index() == 0) std::fprintf(stderr, "usage: xjax-bench-distributed [--quick]\n");
    return 2;
  }
  bool quick = argc > 1;
  openblas_set_num_threads(1);
  const int n = xj::distributed::process_count(), p = xj::distributed::process_index();
  const std::int64_t L = quick ? 4 : 16, d = quick ? 64 : 256, H = 4 * d, N = quick ? 256 : 2048;
  const int reps = 3;
  if (N % n != 0) xj::distributed::abort("the batch must split evenly over the processes");
  auto k = xj::random::split(xj::random::key(3), 3);
  Weights w{xj::random::normal(k[0], {L, d, H}) * static_cast<float>(1.0 / std::sqrt(double(d))),
            xj::random::normal(k[1], {L, H, d}) * static_cast<float>(0.1 / std::sqrt(double(H)))};
  xj::Array y = xj::random::normal(k[2], {N, d});
  const std::int64_t rows = N / n;
  xj::Array shard = xj::slice_in_dim(y, p * rows, (p + 1) * rows);
  const double scale = 1.0 / static_cast<double>(N);

  auto parallel = xj::jit([scale, n](const Weights& ws, const xj::Array& ys) {
    Weights g = xj::grad(loss_scaled(scale * n))(ws, ys);  // the shard's mean loss
    return Weights{xj::pmean(g.first), xj::pmean(g.second)};
  });
  auto single = xj::jit([scale](const Weights& ws, const xj::Array& ys) { return xj::grad(loss_scaled(scale))(ws, ys); });

  std::vector<double> t_par, t_one;
  Weights g_par, g_one;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (trace, plans)
    barrier();
    double t0 = now();
    g_par = parallel(w, shard);
    (void)g_par.first.raw_data();
    barrier();
    if (r >= 0) t_par.push_back(now() - t0);
  }
  xj::distributed::reset_communication_stats();
  (void)parallel(w, shard);
  auto comm = xj::distributed::communication_stats();
  barrier();
  if (p == 0)
    for (int r = -1; r < reps; ++r) {
      double t0 = now();
      g_one = single(w, y);
      if (r >= 0) t_one.push_back(now() - t0);
    }
  barrier();
  if (p == 0) {
    auto a = g_par.first.to_vector<float>(), b = g_one.first.to_vector<float>();
    double diff = 0, mag = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, double(std::abs(a[i] - b[i])));
      mag = std::max(mag, double(std::abs(b[i])));
    }
    double tp = median(t_par), t1 = median(t_one), speedup = t1 / tp;
    std::int64_t grad_bytes = (w.first.size() + w.second.size()) * 4;
    std::printf("xjax-bench-distributed (%s sizes: L=%lld d=%lld N=%lld, float32, 1 OpenBLAS thread per process)\n\n",
                quick ? "quick" : "full", static_cast<long long>(L), static_cast<long long>(d), static_cast<long long>(N));
    std::printf("| workload | processes | median s | speedup | efficiency | bytes communicated / step | gradient bytes |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| D1 data-parallel grad | %d | %.4f | %.2f | %.2f | %lld (%lld collectives) | %lld |\n", n, tp, speedup,
                speedup / n, static_cast<long long>(comm.bytes), static_cast<long long>(comm.collectives),
                static_cast<long long>(grad_bytes));
    std::printf("| D1 one process, whole batch | 1 | %.4f | 1.00 | 1.00 | 0 | %lld |\n", t1, static_cast<long long>(grad_bytes));
    std::printf("\ngradient difference (max abs / max magnitude): %.1e\n", diff / mag);
  }
  return 0;
}
