// quickstart: the first xjax program to read.
//
// A function written once on xj::Array runs eagerly on concrete arrays, and the same function
// can be traced into a jaxpr: the typed list of primitive equations that every transform
// (grad, jvp, checkpoint, scan, ...) rewrites.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>

namespace xj = xjax;

namespace {
int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "quickstart: FAILED: %s\n", what);
    ++failures;
  }
}
bool close(double a, double b) { return std::fabs(a - b) <= 1e-5 * (1 + std::fabs(b)); }
}  // namespace

int example_main(int argc, char** argv) {
  example_flags::Flags("quickstart", "usage: quickstart   (no flags)\n").parse(argc, argv);
  // An ordinary C++ callable on arrays.
  auto f = [](const xj::Array& x) { return xj::sin(xj::sin(x)); };
  xj::Array x = xj::array({1.f, 2.f, 3.f});

  // Eager: outside any transform, ops compute at once.
  xj::Array y = xj::sin(x);
  std::cout << "sin([1, 2, 3]) = " << y << "\n";
  auto v = y.to_vector<float>();
  expect(v.size() == 3 && close(v[0], std::sin(1.0)), "eager sin");

  // Traced: make_jaxpr shows what f does, primitive by primitive.
  std::cout << "make_jaxpr(f):\n" << xj::make_jaxpr(f)(x) << "\n";

  // grad needs a scalar-valued function. Its result has the structure of the argument.
  auto loss = [](const xj::Array& w) { return xj::sum(xj::sin(w) * w); };  // sum_i sin(w_i) w_i
  xj::Array g = xj::grad(loss)(x);                                           // cos(w) w + sin(w)
  std::cout << "grad(sum(sin(w) * w)) at [1, 2, 3] = " << g << "\n";
  auto gv = g.to_vector<double>();
  for (int i = 0; i < 3; ++i) expect(close(gv[i], std::cos(i + 1.0) * (i + 1.0) + std::sin(i + 1.0)), "grad");

  // value_and_grad computes both in one pass.
  auto [value, g2] = xj::value_and_grad(loss)(x);
  std::cout << "value_and_grad: value = " << value.item<float>() << ", grad = " << g2 << "\n";
  double want = std::sin(1.0) + 2 * std::sin(2.0) + 3 * std::sin(3.0);
  expect(close(value.item<double>(), want), "value_and_grad value");
  expect(g2.to_vector<float>() == g.to_vector<float>(), "value_and_grad grad");

  // A transformed function is again a function on arrays: it can be traced. The gradient's
  // jaxpr is the forward pass followed by the backward pass, with dead code removed.
  std::cout << "make_jaxpr(grad(loss)):\n" << xj::make_jaxpr(xj::grad(loss))(x) << "\n";

  // Transforms compose: the second derivative of a scalar function.
  auto s = [](const xj::Array& t) { return xj::sin(t) * t; };
  double d2 = xj::grad(xj::grad(s))(xj::scalar(0.5)).item<double>();  // 2 cos t - t sin t
  std::cout << "grad(grad(sin(t) * t)) at 0.5 = " << d2 << "\n";
  expect(close(d2, 2 * std::cos(0.5) - 0.5 * std::sin(0.5)), "grad of grad");

  if (failures) return 1;
  std::cout << "quickstart: all checks passed\n";
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("quickstart", example_main, argc, argv); }
