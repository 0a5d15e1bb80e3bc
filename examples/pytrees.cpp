// pytrees: parameters as a struct, gradients in the same struct.
//
// Transforms accept and return "pytrees": nested containers whose leaves are xj::Array. A struct
// declared with BOOST_HANA_DEFINE_STRUCT is one (so are std::pair, std::tuple, std::vector,
// std::array, std::map<std::string, T> and xj::None). grad of a function of such a struct returns
// the gradient as the same struct, so a training step is one tree_map per parameter set.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace xj = xjax;

// A two-layer perceptron's parameters. The macro declares the members and makes them visible
// to Hana, and so to xjax's flatten / unflatten.
struct Mlp {
  BOOST_HANA_DEFINE_STRUCT(Mlp,
    (xj::Array, w1),   // (in, hidden)
    (xj::Array, b1),   // (hidden)
    (xj::Array, w2),   // (hidden, out)
    (xj::Array, b2));  // (out)
};

xj::Array predict(const Mlp& p, const xj::Array& x) {
  xj::Array h = xj::tanh(xj::matmul(x, p.w1) + p.b1);
  return xj::matmul(h, p.w2) + p.b2;
}

// Mean squared error on a batch.
xj::Array mse(const Mlp& p, const xj::Array& x, const xj::Array& y) {
  xj::Array err = predict(p, x) - y;
  return xj::mean(err * err);
}

int example_main(int argc, char** argv) {
  example_flags::Flags("pytrees", "usage: pytrees   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "pytrees: FAILED: %s\n", what);
      ++failures;
    }
  };

  // Data: y = sin(3 x) on 32 points of [-1, 1].
  const std::int64_t n = 32;
  std::vector<float> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    float t = -1.f + 2.f * float(i) / float(n - 1);
    xs.push_back(t);
    ys.push_back(std::sin(3.f * t));
  }
  xj::Array x = xj::array<float>(xs, {n, 1}), y = xj::array<float>(ys, {n, 1});

  xj::Array k = xj::random::split(xj::random::key(1), 2);
  Mlp params{xj::random::normal(k[0], {1, 16}), xj::zeros({16}),
             xj::random::normal(k[1], {16, 1}) * 0.25, xj::zeros({1})};

  // The structure xjax sees: 4 leaves, in declaration order.
  auto [leaves, treedef] = xj::tree_flatten(params);
  std::cout << "Mlp has " << leaves.size() << " leaves, treedef " << treedef.str() << "\n";
  expect(leaves.size() == 4, "four leaves");

  // grad w.r.t. argument 0 returns an Mlp of gradients.
  Mlp g = xj::grad(mse)(params, x, y);
  std::cout << "grad: w1 " << g.w1.aval() << ", b1 " << g.b1.aval() << ", w2 " << g.w2.aval() << ", b2 " << g.b2.aval() << "\n";
  expect(g.w1.aval() == params.w1.aval() && g.b2.aval() == params.b2.aval(), "gradient has the parameters' shapes");

  // A few hundred steps of gradient descent: p <- p - lr * g, leaf by leaf.
  const double lr = 0.1;
  auto step = xj::value_and_grad(mse);  // traced once, reused every step
  double first = 0, last = 0;
  for (int it = 0; it <= 300; ++it) {
    auto [loss, grads] = step(params, x, y);
    // xj::tree_map(f, tree, rest...) maps f over the leaves at the same place in several trees of
    // one structure (JAX's tree_map(f, tree, *rest)): here the parameters and their gradients.
    params = xj::tree_map([lr](const xj::Array& p, const xj::Array& g) { return p - g * lr; }, params, grads);
    if (it == 0) first = loss.item<double>();
    last = loss.item<double>();
    if (it % 50 == 0) std::printf("step %3d  loss %.5f\n", it, last);
  }
  expect(last < 0.5 * first, "training reduces the loss by half");

  // Other containers are pytrees too: a map of named arrays, gradient in the same map.
  std::map<std::string, xj::Array> named{{"a", xj::scalar(2.0)}, {"b", xj::scalar(3.0)}};
  auto gm = xj::grad([](const std::map<std::string, xj::Array>& m) { return m.at("a") * m.at("b"); })(named);
  std::cout << "grad of a*b over a map: d/da = " << gm.at("a").item<float>() << ", d/db = " << gm.at("b").item<float>() << "\n";
  expect(gm.at("a").item<float>() == 3.f && gm.at("b").item<float>() == 2.f, "map gradient");

  // And a std::vector of layers.
  std::vector<xj::Array> ws{xj::scalar(0.5), xj::scalar(2.0), xj::scalar(3.0)};
  auto gv = xj::grad([](const std::vector<xj::Array>& v) { return v[0] * v[1] * v[2]; })(ws);
  expect(gv.size() == 3 && gv[0].item<float>() == 6.f && gv[2].item<float>() == 1.f, "vector gradient");

  if (failures) return 1;
  std::cout << "pytrees: all checks passed\n";
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("pytrees", example_main, argc, argv); }
