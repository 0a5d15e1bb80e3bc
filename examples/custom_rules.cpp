// custom_rules: user-defined derivatives with custom_vjp and custom_jvp (JAX's semantics).
//
// - custom_vjp(f, fwd, bwd) replaces reverse mode: fwd returns the output and residuals, bwd maps
//   (residuals, output cotangent) to one cotangent per argument. Here: gradient clipping, the
//   identity on values whose backward pass clips the incoming cotangent.
// - custom_jvp(f, rule) replaces forward mode; reverse mode transposes the rule's linear tangent
//   computation, so grad uses it too. Here: a numerically stable derivative of log(1 + e^x).
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace xj = xjax;

// ---- custom_vjp: clip the gradient to [-1, 1] ------------------------------------------------
// Values pass through unchanged; cotangents flowing back through clip_gradient are clipped.
auto clip_gradient = xj::custom_vjp(
    [](const xj::Array& x) { return x; },                                // f
    [](const xj::Array& x) { return std::pair{x, xj::None{}}; },         // fwd: (output, residuals)
    [](const xj::None&, const xj::Array& ct) {                           // bwd: a tuple, one per arg
      return std::tuple{xj::minimum(xj::maximum(ct, xj::scalar_like(-1.0, ct)), xj::scalar_like(1.0, ct))};
    });

// ---- custom_jvp: log(1 + e^x) with a stable derivative -----------------------------------------
// The automatic derivative is e^x / (1 + e^x), which is inf / inf = nan once e^x overflows.
// The rule writes it as 1 - 1 / (1 + e^x), which tends to 1.
auto log1pexp = xj::custom_jvp(
    [](const xj::Array& x) { return xj::log(1.0 + xj::exp(x)); },
    [](const auto& primals, const auto& tangents) {
      const xj::Array& x = std::get<0>(primals);
      const xj::Array& t = std::get<0>(tangents);
      xj::Array out = xj::log(1.0 + xj::exp(x));
      return std::pair{out, t * (1.0 - 1.0 / (1.0 + xj::exp(x)))};  // linear in t
    });

int example_main(int argc, char** argv) {
  example_flags::Flags("custom_rules", "usage: custom_rules   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "custom_rules: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };

  // loss = sum(clip_gradient(x)^2): the cotangent reaching clip_gradient is 2x, clipped to [-1, 1].
  xj::Array x = xj::array({-2.f, 0.25f, 3.f});
  auto clipped_loss = [](const xj::Array& v) { xj::Array c = clip_gradient(v); return xj::sum(c * c); };
  auto plain_loss = [](const xj::Array& v) { return xj::sum(v * v); };
  xj::Array g_clip = xj::grad(clipped_loss)(x), g_plain = xj::grad(plain_loss)(x);
  std::cout << "x                        = " << x << "\n";
  std::cout << "grad sum(x^2)            = " << g_plain << "\n";
  std::cout << "grad sum(clip_grad(x)^2) = " << g_clip << "\n";
  expect(clipped_loss(x).item<float>() == plain_loss(x).item<float>(), "clip_gradient leaves values alone");
  expect(g_clip.to_vector<float>() == std::vector<float>{-1.f, 0.5f, 1.f}, "clipped gradient is clip(2x, -1, 1)");
  expect(g_plain.to_vector<float>() == std::vector<float>{-4.f, 0.5f, 6.f}, "plain gradient is 2x");

  // The jaxpr shows one custom_vjp_call equation; its fwd and bwd are kept inside it.
  std::cout << "make_jaxpr(clipped_loss):\n" << xj::make_jaxpr(clipped_loss)(x) << "\n";

  // Forward mode of a custom_vjp function is an error, as in JAX.
  try {
    (void)xj::jvp(clipped_loss, std::tuple{x}, std::tuple{xj::ones_like(x)});
    expect(false, "jvp of custom_vjp raises");
  } catch (const xj::TransformError& e) {
    std::cout << "jvp of a custom_vjp function: xj::TransformError: " << e.what() << "\n\n";
  }

  // custom_jvp: the automatic derivative overflows at x = 100 (f32); the rule does not.
  auto naive = [](const xj::Array& v) { return xj::log(1.0 + xj::exp(v)); };
  xj::Array big = xj::scalar(100.0);
  double d_naive = xj::grad(naive)(big).item<double>();
  double d_rule = xj::grad(log1pexp)(big).item<double>();  // reverse mode through the jvp rule
  auto [y, t] = xj::jvp(log1pexp, std::tuple{big}, std::tuple{xj::scalar(1.0)});
  std::cout << "d/dx log(1 + e^x) at 100: automatic " << d_naive << ", custom_jvp (grad) " << d_rule
            << ", custom_jvp (jvp) " << t.item<double>() << "\n";
  expect(d_rule == 1.0 && t.item<double>() == 1.0, "custom_jvp derivative is 1 at x = 100");
  (void)y;

  // At moderate x the rule agrees with finite differences in both modes (f64).
  try {
    xj::check_grads(log1pexp, std::tuple{xj::array<double>({-3.0, 0.5, 4.0}, {3})}, {.order = 1});
    std::cout << "check_grads(log1pexp, order 1, fwd and rev, f64): passed\n";
  } catch (const xj::GradCheckError& e) {
    expect(false, std::string("check_grads(log1pexp): ") + e.what());
  }

  if (failures) return 1;
  std::cout << "custom_rules: all checks passed\n";
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("custom_rules", example_main, argc, argv); }
