// heat_adjoint: the gradient of a final-time misfit of a long implicit time integration, with
// respect to the initial condition and the diffusion coefficient: the adjoint method, written as
// reverse mode through a scan, with the binomial checkpoint schedule (revolve) keeping s carries
// instead of one per step.
//
// The 1-D heat equation u_t = κ u_xx on (0, 1), u = 0 at both ends, n interior points (h = 1 /
// (n + 1)), N implicit Euler steps of dt = t_N / N up to a fixed final time t_N:
//   M u_{k+1} = u_k,  M = I + dt κ K,  K = tridiag(-1, 2, -1) / h^2
// M is factored once (cholesky, outside the loop: κ is a parameter), every step is a cho_solve.
//   J(u0, κ) = 1/2 |u_N - d|^2
// Checks (exit status 1 on a mismatch): the gradient under binomial(s) equals the plain scan's and
// scan(checkpoint)'s; it agrees with central finite differences in κ and along a direction of u0;
// and with a hand-written discrete adjoint in double (tridiagonal solves by the Thomas algorithm,
// no xjax): λ_N = u_N - d, λ_k = M^-1 λ_{k+1}, dJ/du0 = λ_0, dJ/dκ = -Σ_k λ_k^T dt K u_{k+1}.
// Then it times the three ways and prints the carries each keeps (the plain scan's at large N is
// printed, not run, when it would not fit: --max-plain-steps).
//
//   heat_adjoint [--steps N] [--grid n] [--snapshots s] [--check-steps M] [--max-plain-steps P]
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace xj = xjax;

namespace {

struct Problem {
  std::int64_t n = 64;        // interior grid points
  double final_time = 0.02;   // t_N; dt = final_time / N (a diffusion length sqrt(κ t_N) of about 0.13)
  xj::Array target;           // d, f64[n]
};

// K = tridiag(-1, 2, -1) / h^2 as a dense f64[n, n].
xj::Array stiffness(std::int64_t n) {
  const double h = 1.0 / double(n + 1);
  const xj::Shape s{n, n};
  const xj::Array i = xj::iota(xj::i32, s, 0), j = xj::iota(xj::i32, s, 1);
  const xj::Array diag = xj::astype(i == j, xj::f64) * 2.0, off = xj::astype(xj::abs(i - j) == 1, xj::f64) * -1.0;
  return (diag + off) / (h * h);
}

// The plain scan, scan(checkpoint(step)) or the plain step under binomial(s).
enum class Schedule { plain, checkpointed, binomial };

xj::Array misfit(const xj::Array& u0, const xj::Array& kappa, const Problem& p, std::int64_t steps, Schedule schedule,
                 std::int64_t snapshots) {
  const double dt = p.final_time / double(steps);
  const xj::Array m = xj::eye(p.n, xj::f64) + stiffness(p.n) * (kappa * dt);
  const xj::Array l = xj::linalg::cholesky(m);
  auto step = [l](const xj::Array& u, const xj::None&) { return std::pair{xj::linalg::cho_solve(l, u), xj::None{}}; };
  xj::ScanOptions opts{.length = steps};
  if (schedule == Schedule::binomial) opts.checkpoints = xj::scan_checkpoints::binomial(snapshots);
  const xj::Array un = schedule == Schedule::checkpointed ? xj::scan(xj::checkpoint(step), u0, xj::None{}, opts).first
                                                          : xj::scan(step, u0, xj::None{}, opts).first;
  const xj::Array r = un - p.target;
  return xj::sum(r * r) * 0.5;
}

// ---- the hand-written discrete adjoint, in double --------------------------------------------

// x = M^-1 b for M = tridiag(off, diag, off) (Thomas algorithm).
std::vector<double> tridiagonal_solve(double diag, double off, const std::vector<double>& b) {
  const std::size_t n = b.size();
  std::vector<double> c(n), x(n);
  double denom = diag;
  x[0] = b[0] / denom;
  for (std::size_t i = 1; i < n; ++i) {
    c[i - 1] = off / denom;
    denom = diag - off * c[i - 1];
    x[i] = (b[i] - off * x[i - 1]) / denom;
  }
  for (std::size_t i = n - 1; i-- > 0;) x[i] -= c[i] * x[i + 1];
  return x;
}

struct Adjoint {
  std::vector<double> du0;
  double dkappa = 0;
};

Adjoint discrete_adjoint(const std::vector<double>& u0, double kappa, const std::vector<double>& d, double dt, std::int64_t steps) {
  const std::size_t n = u0.size();
  const double h2 = 1.0 / double((n + 1) * (n + 1));
  const double r = dt * kappa / h2;
  std::vector<std::vector<double>> u{u0};
  for (std::int64_t k = 0; k < steps; ++k) u.push_back(tridiagonal_solve(1 + 2 * r, -r, u.back()));
  std::vector<double> lambda(n);
  for (std::size_t i = 0; i < n; ++i) lambda[i] = u.back()[i] - d[i];
  Adjoint a;
  for (std::int64_t k = steps - 1; k >= 0; --k) {
    lambda = tridiagonal_solve(1 + 2 * r, -r, lambda);  // λ_k = M^-1 λ_{k+1} (M symmetric)
    const std::vector<double>& next = u[static_cast<std::size_t>(k + 1)];
    for (std::size_t i = 0; i < n; ++i) {  // -λ_k^T dt K u_{k+1}
      const double ku = (2 * next[i] - (i > 0 ? next[i - 1] : 0.0) - (i + 1 < n ? next[i + 1] : 0.0)) / h2;
      a.dkappa -= lambda[i] * dt * ku;
    }
  }
  a.du0 = lambda;
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int example_main(int argc, char** argv) {
  std::int64_t steps = 100000, check_steps = 400, snapshots = 20, max_plain_steps = 100000;
  Problem p;
  example_flags::Flags flags("heat_adjoint",
                             "usage: heat_adjoint [--steps N] [--grid n] [--snapshots s] [--check-steps M] [--max-plain-steps P]\n"
                             "  defaults: 100000 steps, grid 64, 20 snapshots, 400 check steps; the plain scan runs up to P = 100000 steps\n");
  flags.integer("--steps", steps, 1);
  flags.integer("--grid", p.n, 1);
  flags.integer("--snapshots", snapshots, 1);
  flags.integer("--check-steps", check_steps, 1);
  flags.integer("--max-plain-steps", max_plain_steps, 0);
  flags.parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "heat_adjoint: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };
  // u0: a bump; d: a wider, lower bump (what diffusion would make of it).
  const xj::Array x = (xj::astype(xj::iota(xj::i32, {p.n}), xj::f64) + 1.0) / double(p.n + 1);
  const xj::Array u0 = xj::exp(-(x - 0.4) * (x - 0.4) * 200.0);
  p.target = xj::exp(-(x - 0.5) * (x - 0.5) * 40.0) * 0.5;
  const xj::Array kappa = xj::scalar(0.8, xj::f64);

  // ---- checks, at --check-steps ------------------------------------------------------------------
  auto gradient = [&](std::int64_t n_steps, Schedule s) {
    return xj::grad([&](const xj::Array& u, const xj::Array& k) { return misfit(u, k, p, n_steps, s, snapshots); },
                    xj::argnums<0, 1>)(u0, kappa);
  };
  const auto [g_u0, g_kappa] = gradient(check_steps, Schedule::binomial);
  const auto [plain_u0, plain_kappa] = gradient(check_steps, Schedule::plain);
  const auto [ckpt_u0, ckpt_kappa] = gradient(check_steps, Schedule::checkpointed);
  auto max_diff = [](const xj::Array& a, const xj::Array& b) { return xj::max(xj::abs(a - b)).item<double>(); };
  const double u0_scale = xj::max(xj::abs(plain_u0)).item<double>();
  expect(max_diff(g_u0, plain_u0) <= 1e-12 * u0_scale && max_diff(g_kappa, plain_kappa) <= 1e-12 * std::abs(plain_kappa.item<double>()),
         "binomial(s) gives the plain scan's gradient");
  expect(max_diff(ckpt_u0, plain_u0) <= 1e-12 * u0_scale, "scan(checkpoint) gives the plain scan's gradient");

  const Adjoint adj = discrete_adjoint(u0.to_vector<double>(), 0.8, p.target.to_vector<double>(), p.final_time / double(check_steps), check_steps);
  const std::vector<double> gu = g_u0.to_vector<double>();
  double adj_err = 0;
  for (std::size_t i = 0; i < gu.size(); ++i) adj_err = std::max(adj_err, std::abs(gu[i] - adj.du0[i]));
  std::printf("%lld steps, grid %lld: dJ/dkappa %.10e (hand-written adjoint %.10e), max |dJ/du0 - adjoint's| %.2e (scale %.2e)\n",
              static_cast<long long>(check_steps), static_cast<long long>(p.n), g_kappa.item<double>(), adj.dkappa, adj_err, u0_scale);
  expect(std::abs(g_kappa.item<double>() - adj.dkappa) <= 1e-9 * std::abs(adj.dkappa), "dJ/dkappa agrees with the discrete adjoint");
  expect(adj_err <= 1e-10 * u0_scale, "dJ/du0 agrees with the discrete adjoint");

  // Central finite differences: in κ, and along a direction v of u0 (dJ/du0 . v).
  auto j_at = [&](const xj::Array& u, double k) { return misfit(u, xj::scalar(k, xj::f64), p, check_steps, Schedule::plain, 0).item<double>(); };
  const double hk = 1e-6;
  const double fd_kappa = (j_at(u0, 0.8 + hk) - j_at(u0, 0.8 - hk)) / (2 * hk);
  const xj::Array v = xj::sin(x * 7.0);
  const double hu = 1e-6;
  const double fd_dir = (j_at(u0 + v * hu, 0.8) - j_at(u0 - v * hu, 0.8)) / (2 * hu);
  const double ad_dir = xj::sum(g_u0 * v).item<double>();
  std::printf("finite differences: dJ/dkappa %.10e, dJ/du0 . v %.10e (grad: %.10e)\n", fd_kappa, fd_dir, ad_dir);
  expect(std::abs(fd_kappa - g_kappa.item<double>()) <= 1e-6 * (std::abs(fd_kappa) + 1e-12), "dJ/dkappa agrees with finite differences");
  expect(std::abs(fd_dir - ad_dir) <= 1e-6 * (std::abs(fd_dir) + 1e-12), "dJ/du0 agrees with finite differences");

  // ---- the long run: time and carries kept -------------------------------------------------------
  const xj::ScanScheduleStats stats = xj::scan_schedule_stats(steps, xj::scan_checkpoints::binomial(snapshots));
  const double carry_mib = double(p.n) * 8 / (1024.0 * 1024.0);
  std::printf("\n%lld steps, binomial(%lld): %lld advances (%.2f per step), at most %lld carries stored (%.3f MiB); "
              "one per step would be %.1f MiB\n",
              static_cast<long long>(steps), static_cast<long long>(snapshots), static_cast<long long>(stats.advances),
              double(stats.advances) / double(steps), static_cast<long long>(stats.peak_snapshots),
              double(stats.peak_snapshots) * carry_mib, double(steps) * carry_mib);
  auto timed = [&](Schedule s) {
    auto g = xj::jit(xj::grad([&](const xj::Array& u, const xj::Array& k) { return misfit(u, k, p, steps, s, snapshots); }, xj::argnums<0, 1>));
    (void)g(u0, kappa);  // trace and plan
    xj::reset_peak_memory();
    const std::int64_t live = xj::memory_stats().live_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    const auto [gu0, gk] = g(u0, kappa);
    const double t = seconds_since(t0);
    const double peak = double(xj::memory_stats().peak_bytes - live) / (1024.0 * 1024.0);
    return std::tuple{t, peak, gk.item<double>()};
  };
  const auto [t_binomial, peak_binomial, dk_binomial] = timed(Schedule::binomial);
  std::printf("binomial(%lld):       %.3f s, peak %.2f MiB above the inputs, dJ/dkappa %.10e\n", static_cast<long long>(snapshots),
              t_binomial, peak_binomial, dk_binomial);
  const auto [t_ckpt, peak_ckpt, dk_ckpt] = timed(Schedule::checkpointed);
  std::printf("scan(checkpoint):   %.3f s, peak %.2f MiB (one carry per step)\n", t_ckpt, peak_ckpt);
  expect(std::abs(dk_ckpt - dk_binomial) <= 1e-10 * std::abs(dk_ckpt), "binomial(s) and scan(checkpoint) agree on the long run");
  if (steps <= max_plain_steps) {
    const auto [t_plain, peak_plain, dk_plain] = timed(Schedule::plain);
    std::printf("plain scan:         %.3f s, peak %.2f MiB; binomial / plain time %.2f (issue 31's L2 target: advances / steps "
                "x 1.15 = %.2f)\n",
                t_plain, peak_plain, t_binomial / t_plain, double(stats.advances) / double(steps) * 1.15);
    expect(std::abs(dk_plain - dk_binomial) <= 1e-10 * std::abs(dk_plain), "binomial(s) and the plain scan agree on the long run");
  } else {
    std::printf("plain scan:         not run: it keeps every step's values, at least %.1f MiB at %lld steps (--max-plain-steps %lld)\n",
                double(steps) * carry_mib, static_cast<long long>(steps), static_cast<long long>(max_plain_steps));
  }
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return example_flags::guarded_main("heat_adjoint", example_main, argc, argv); }
