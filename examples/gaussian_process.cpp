// gaussian_process: the log marginal likelihood of a Gaussian process and its gradient with
// respect to the kernel's hyperparameters, through cholesky, cho_solve and slogdet, then a few
// Adam steps that raise it.
//
// Data: y = sin(3 x) + 0.1 noise at 40 points of [-2, 2]. Kernel: k(x, x') = s^2 exp(-(x - x')^2
// / (2 l^2)) plus noise^2 on the diagonal, the hyperparameters θ = (log s, log l, log noise).
//   log p(y | θ) = -1/2 y^T K^-1 y - 1/2 log|K| - n/2 log 2π
// The gradient is checked two ways: central finite differences of the likelihood, and the closed
// form d/dθ_i = 1/2 tr((α α^T - K^-1) dK/dθ_i), α = K^-1 y, written with inv and hand-derived
// dK/dθ_i (a path that never differentiates a factorization). Exits non-zero on a mismatch.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

namespace xj = xjax;
namespace linalg = xjax::linalg;

namespace {

struct Data {
  xj::Array x, y;  // f64[n]
};

Data make_data(std::int64_t n) {
  const xj::Array x = xj::astype(xj::iota(xj::i32, {n}), xj::f64) * (4.0 / double(n - 1)) - 2.0;
  const xj::Array noise = xj::astype(xj::random::normal(xj::random::key(7), {n}), xj::f64);
  return {x, xj::sin(x * 3.0) + noise * 0.1};
}

// Squared distances (x_i - x_j)^2.
xj::Array squared_distances(const xj::Array& x) {
  const xj::Array d = xj::expand_dims(x, 1) - xj::expand_dims(x, 0);
  return d * d;
}

// K(θ) for θ = (log s, log l, log noise).
xj::Array kernel_matrix(const xj::Array& theta, const xj::Array& x) {
  const xj::Array s2 = xj::exp(theta[0] * 2.0), l2 = xj::exp(theta[1] * 2.0), noise2 = xj::exp(theta[2] * 2.0);
  return s2 * xj::exp(-squared_distances(x) / (l2 * 2.0)) + xj::eye(x.dim(0), xj::f64) * noise2;
}

xj::Array log_marginal_likelihood(const xj::Array& theta, const Data& d) {
  const xj::Array k = kernel_matrix(theta, d.x);
  const xj::Array alpha = linalg::cho_solve(linalg::cholesky(k), d.y);  // K^-1 y
  const xj::Array logdet = linalg::slogdet(k).second;
  const double n = double(d.x.dim(0));
  return xj::sum(d.y * alpha) * -0.5 - logdet * 0.5 - n / 2 * std::log(2 * std::numbers::pi);
}

// 1/2 tr((α α^T - K^-1) dK/dθ_i) with dK/dlog s = 2 s^2 E, dK/dlog l = s^2 E D / l^2,
// dK/dlog noise = 2 noise^2 I (E = exp(-D / (2 l^2)), D the squared distances).
std::vector<double> closed_form_gradient(const xj::Array& theta, const Data& d) {
  const std::vector<double> t = theta.to_vector<double>();
  const double s2 = std::exp(2 * t[0]), l2 = std::exp(2 * t[1]), noise2 = std::exp(2 * t[2]);
  const xj::Array dist = squared_distances(d.x);
  const xj::Array e = xj::exp(-dist / (l2 * 2.0));
  const xj::Array k = kernel_matrix(theta, d.x);
  const xj::Array k_inv = linalg::inv(k);
  const xj::Array alpha = xj::matmul(k_inv, d.y);
  const xj::Array inner = xj::outer(alpha, alpha) - k_inv;
  const std::int64_t n = d.x.dim(0);
  const xj::Array dk[3] = {e * (2 * s2), e * dist * (s2 / l2), xj::eye(n, xj::f64) * (2 * noise2)};
  std::vector<double> g;
  for (const auto& dki : dk) g.push_back(0.5 * xj::sum(inner * dki).item<double>());  // tr(A B) = sum(A ∘ B^T), B symmetric
  return g;
}

}  // namespace

int example_main(int argc, char** argv) {
  example_flags::Flags("gaussian_process", "usage: gaussian_process   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "gaussian_process: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };
  const Data data = make_data(40);
  xj::Array theta = xj::array<double>({0.3, -0.5, -1.0}, {3});
  auto lml = [&](const xj::Array& t) { return log_marginal_likelihood(t, data); };

  // log|K| two ways: slogdet (through LU) and twice the log-diagonal of the Cholesky factor.
  const xj::Array k = kernel_matrix(theta, data.x);
  const double by_lu = linalg::slogdet(k).second.item<double>();
  const double by_cholesky = 2 * xj::sum(xj::log(xj::diagonal(linalg::cholesky(k)))).item<double>();
  std::printf("log|K|: %.10f (slogdet), %.10f (cholesky)\n", by_lu, by_cholesky);
  expect(std::abs(by_lu - by_cholesky) < 1e-9 * std::abs(by_lu), "slogdet agrees with the Cholesky factor's diagonal");

  // The gradient against finite differences and the closed form.
  const std::vector<double> g = xj::grad(lml)(theta).to_vector<double>();
  const std::vector<double> closed = closed_form_gradient(theta, data);
  const std::vector<double> t0 = theta.to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) {
    const double h = 1e-5;
    std::vector<double> up = t0, down = t0;
    up[i] += h, down[i] -= h;
    const double fd = (lml(xj::array<double>(up, {3})).item<double>() - lml(xj::array<double>(down, {3})).item<double>()) / (2 * h);
    std::printf("d lml / d theta[%zu]: grad %+.8f  finite differences %+.8f  closed form %+.8f\n", i, g[i], fd, closed[i]);
    expect(std::abs(g[i] - fd) < 1e-6 * (1 + std::abs(fd)), "grad agrees with finite differences");
    expect(std::abs(g[i] - closed[i]) < 1e-8 * (1 + std::abs(closed[i])), "grad agrees with the closed form");
  }

  // A few Adam steps on -lml (jitted, one trace): the likelihood goes up.
  const xj::optim::GradientTransformation opt = xj::optim::adam(0.05);
  xj::optim::OptState state = opt.init(theta);
  auto step = xj::jit([&](const xj::Array& t, const xj::optim::OptState& s) {
    auto [value, grad] = xj::value_and_grad([&](const xj::Array& q) { return -lml(q); })(t);
    auto [updates, s2] = opt.update(grad, s, t);
    return std::tuple{xj::optim::apply_updates(t, updates), s2, value};
  });
  const double start = lml(theta).item<double>();
  for (int i = 0; i < 60; ++i) {
    xj::Array value;
    std::tie(theta, state, value) = step(theta, state);
    if (i % 20 == 0) std::printf("step %2d: log marginal likelihood %.6f\n", i, -value.item<double>());
  }
  const double end = lml(theta).item<double>();
  const std::vector<double> t = theta.to_vector<double>();
  std::printf("after 60 steps: log marginal likelihood %.6f (from %.6f); s = %.3f, l = %.3f, noise = %.3f\n", end, start,
              std::exp(t[0]), std::exp(t[1]), std::exp(t[2]));
  expect(end > start + 1.0, "Adam raises the log marginal likelihood");
  expect(std::exp(t[2]) < 0.3, "the fitted noise level moves toward the data's 0.1");
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return example_flags::guarded_main("gaussian_process", example_main, argc, argv); }
