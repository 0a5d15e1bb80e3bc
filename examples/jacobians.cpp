// jacobians: jacfwd, jacrev and hessian, checked against closed forms.
//
// jacfwd builds the Jacobian column by column with forward mode (one jvp per input element);
// jacrev builds it row by row with reverse mode (one vjp per output element). Both return an
// array of shape f(x).shape + x.shape. hessian(f) = jacfwd(jacrev(f)) for scalar f.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace xj = xjax;

int example_main(int argc, char** argv) {
  example_flags::Flags("jacobians", "usage: jacobians   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "jacobians: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };
  auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 1e-10 * (1 + std::fabs(b[i]))) return false;
    return true;
  };

  // f : R^3 -> R^2, f(x) = [x0 * x1, sin(x2) + x0]   (f64 for exact comparisons)
  auto f = [](const xj::Array& x) {
    xj::Array a = x[0] * x[1];
    xj::Array b = xj::sin(x[2]) + x[0];
    return xj::stack({a, b});
  };
  std::vector<double> xv{1.5, -2.0, 0.3};
  xj::Array x = xj::array<double>(xv, {3});
  xj::Array jf = xj::jacfwd(f)(x), jr = xj::jacrev(f)(x);
  std::cout << "f(x) = [x0 x1, sin(x2) + x0] at x = " << x << "\n";
  std::cout << "jacfwd: " << jf << "\njacrev: " << jr << "\n";
  std::vector<double> want{xv[1], xv[0], 0.0,  //
                           1.0, 0.0, std::cos(xv[2])};
  expect(jf.shape() == xj::Shape{2, 3} && jr.shape() == xj::Shape{2, 3}, "Jacobian shape (2, 3)");
  expect(near(jf.to_vector<double>(), want), "jacfwd matches the closed form");
  expect(near(jr.to_vector<double>(), want), "jacrev matches the closed form");

  // hessian of g(x) = sum(x^3) + x0 x1: diag(6 x) + [[0, 1, 0], [1, 0, 0], [0, 0, 0]].
  auto g = [](const xj::Array& v) { return xj::sum(v * v * v) + v[0] * v[1]; };
  xj::Array h = xj::hessian(g)(x);
  std::cout << "hessian of sum(x^3) + x0 x1: " << h << "\n";
  std::vector<double> hw{6 * xv[0], 1, 0, 1, 6 * xv[1], 0, 0, 0, 6 * xv[2]};
  expect(h.shape() == xj::Shape{3, 3}, "Hessian shape (3, 3)");
  expect(near(h.to_vector<double>(), hw), "hessian matches the closed form");

  // The Jacobian of an elementwise function is diagonal; that of a matrix-valued function has the
  // shape out.shape + x.shape.
  auto m = [](const xj::Array& v) { return xj::tanh(v); };
  xj::Array jd = xj::jacrev(m)(x);
  auto jdv = jd.to_vector<double>();
  bool diagonal = true;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double e = jdv[static_cast<std::size_t>(i * 3 + j)];
      double w = i == j ? 1 - std::tanh(xv[static_cast<std::size_t>(i)]) * std::tanh(xv[static_cast<std::size_t>(i)]) : 0;
      diagonal = diagonal && std::fabs(e - w) < 1e-12;
    }
  expect(diagonal, "jacrev(tanh) is diag(1 - tanh^2)");
  auto outer = [](const xj::Array& v) { return xj::matmul(xj::reshape(v, {3, 1}), xj::reshape(v, {1, 3})); };
  xj::Array jo = xj::jacfwd(outer)(x);
  std::cout << "jacfwd of the outer product x x^T has shape " << xj::shape_str(jo.shape()) << "\n";
  expect(jo.shape() == xj::Shape{3, 3, 3}, "Jacobian of a (3, 3)-valued function has shape (3, 3, 3)");

  if (failures) return 1;
  std::cout << "jacobians: all checks passed\n";
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("jacobians", example_main, argc, argv); }
