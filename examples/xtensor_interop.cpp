// xtensor_interop: xtensor prepares the data, xjax trains, xtensor analyses the result.
//
// <xjax/xtensor.hpp> moves data across without copies where it can:
//   xj::adapt(x)             an Array on x's buffer (x must outlive it and stay unchanged)
//   xj::adapt(std::move(x))  an Array that owns x's buffer (the recommended form)
//   xj::from_xtensor(expr)   a copy of any xtensor expression (views, lazy expressions)
//   xj::as_xtensor<T>(a)     a read-only xtensor view of a result, no copy
//   xj::to_xarray<T>(a)      an xt::xarray copy of a result
//
// Part 1 fits a linear regression y = X w + noise; part 2 trains a small MLP classifier on three
// Gaussian blobs. Both check their results numerically and exit non-zero when training fails.
#include <xjax/xjax.hpp>
#include <xjax/xtensor.hpp>

#include "example_flags.hpp"

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnorm.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace xj = xjax;

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "xtensor_interop: FAILED: %s\n", what);
    ++failures;
  }
}

void linear_regression() {
  std::puts("== linear regression: y = X w + noise ==");
  // Data, prepared with xtensor.
  const std::size_t n = 256, d = 5;
  xt::random::seed(7);
  xt::xarray<double> X = xt::random::randn<double>({n, d});
  const xt::xarray<double> w_true = xt::linspace<double>(-1.0, 1.0, d);
  const double noise = 0.05;
  xt::xarray<double> y = xt::sum(X * xt::view(w_true, xt::newaxis(), xt::all()), {1}) +
                         noise * xt::random::randn<double>({n});

  // Into xjax without copying: X is borrowed (it lives until the end of this function and is not
  // modified), y is handed over.
  xj::Array Xa = xj::adapt(X);
  xj::Array ya = xj::adapt(std::move(y));
  expect(Xa.raw_data() == static_cast<const void*>(X.data()), "adapt(X) shares X's buffer");

  // Training with xjax: gradient descent on the mean squared error, jitted.
  auto mse = [](const xj::Array& w, const xj::Array& Xs, const xj::Array& ys) {
    xj::Array r = xj::matmul(Xs, w) - ys;
    return xj::mean(r * r);
  };
  auto step = xj::jit(xj::value_and_grad(mse));
  xj::Array w = xj::zeros({static_cast<std::int64_t>(d)}, xj::f64);
  double first = 0, last = 0;
  for (int it = 0; it < 200; ++it) {
    auto [loss, g] = step(w, Xa, ya);
    w = w - g * 0.1;
    if (it == 0) first = loss.item<double>();
    last = loss.item<double>();
    if (it % 50 == 0) std::printf("step %3d  mse %.6f\n", it, last);
  }

  // Analysis with xtensor on views of xjax's results (no copies).
  auto w_hat = xj::as_xtensor<double>(w);
  const double w_err = xt::norm_l2(w_hat - w_true)();
  xt::xarray<double> residual = xt::sum(X * xt::view(w_hat, xt::newaxis(), xt::all()), {1}) -
                                xj::as_xtensor<double>(ya);
  const double rms = std::sqrt(xt::mean(residual * residual)());
  std::printf("mse %.6f -> %.6f; |w_hat - w_true| = %.4f; residual rms %.4f (noise %.2f)\n", first, last,
              w_err, rms, noise);
  expect(last < 0.01 * first, "training reduces the mse a hundredfold");
  expect(w_err < 0.05, "the fitted weights are close to the true ones");
  expect(std::abs(rms - noise) < 0.3 * noise, "the residuals are the noise");
}

void mlp_classifier() {
  std::puts("== MLP classifier on three Gaussian blobs ==");
  // Data: 3 classes of 100 points around three centers, prepared with xtensor.
  const std::size_t per_class = 100, classes = 3, n = per_class * classes, hidden = 16;
  const xt::xarray<float> centers = {{-2.f, 0.f}, {2.f, 0.f}, {0.f, 2.5f}};
  const xt::xarray<std::int32_t> class_ids = xt::arange<std::int32_t>(classes);
  const xt::xarray<std::int32_t> labels = xt::repeat(class_ids, per_class, 0);  // 0 0 ... 1 1 ... 2 2
  xt::xarray<float> points = xt::view(centers, xt::keep(labels), xt::all()) +
                             0.6f * xt::random::randn<float>({n, std::size_t{2}});
  // One-hot targets: a lazy xtensor expression, copied into an xjax array.
  xj::Array onehot = xj::from_xtensor(
      xt::cast<float>(xt::equal(xt::view(labels, xt::all(), xt::newaxis()), class_ids)));
  xj::Array inputs = xj::adapt(std::move(points));

  // Parameters (a pytree: a vector of arrays), initialized with xjax's PRNG.
  xj::Array k = xj::random::split(xj::random::key(0), 2);
  std::vector<xj::Array> params{xj::random::normal(k[0], {2, static_cast<std::int64_t>(hidden)}) * 0.5,
                                xj::zeros({static_cast<std::int64_t>(hidden)}),
                                xj::random::normal(k[1], {static_cast<std::int64_t>(hidden), 3}) * 0.5,
                                xj::zeros({3})};
  auto logits_of = [](const std::vector<xj::Array>& p, const xj::Array& x) {
    return xj::matmul(xj::tanh(xj::matmul(x, p[0]) + p[1]), p[2]) + p[3];
  };
  auto cross_entropy = [&](const std::vector<xj::Array>& p, const xj::Array& x, const xj::Array& t) {
    return -xj::mean(xj::sum(t * xj::log_softmax(logits_of(p, x), -1), {1}));
  };
  auto step = xj::jit(xj::value_and_grad(cross_entropy));
  double first = 0, last = 0;
  for (int it = 0; it < 300; ++it) {
    auto [loss, g] = step(params, inputs, onehot);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = params[i] - g[i] * 0.5;
    if (it == 0) first = loss.item<double>();
    last = loss.item<double>();
    if (it % 100 == 0) std::printf("step %3d  cross-entropy %.4f\n", it, last);
  }

  // Analysis with xtensor: predicted classes, accuracy per class and overall.
  xj::Array logits = xj::jit(logits_of)(params, inputs);
  auto predicted = xt::argmax(xj::as_xtensor<float>(logits), 1);
  xt::xarray<bool> correct = xt::equal(predicted, labels);
  const double accuracy = xt::mean(xt::cast<double>(correct))();
  std::printf("cross-entropy %.4f -> %.4f; accuracy %.3f; per class:", first, last, accuracy);
  for (std::size_t c = 0; c < classes; ++c)
    std::printf(" %.2f", xt::mean(xt::cast<double>(xt::view(correct, xt::range(c * per_class, (c + 1) * per_class))))());
  std::printf("\n");
  // The softmax probabilities, copied out as an xarray, sum to one per row.
  xt::xarray<float> probs = xj::to_xarray<float>(xj::softmax(logits, -1));
  const float worst_row = xt::amax(xt::abs(xt::sum(probs, {1}) - 1.f))();
  expect(last < 0.3 * first, "training reduces the cross-entropy");
  expect(accuracy > 0.95, "the classifier separates the blobs");
  expect(worst_row < 1e-5f, "softmax rows sum to one");
}

}  // namespace

int example_main(int argc, char** argv) {
  example_flags::Flags("xtensor_interop", "usage: xtensor_interop   (no flags)\n").parse(argc, argv);
  linear_regression();
  mlp_classifier();
  if (failures) return 1;
  std::puts("xtensor_interop: all checks passed");
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("xtensor_interop", example_main, argc, argv); }
