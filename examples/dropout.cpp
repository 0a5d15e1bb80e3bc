// dropout: random masks inside a checkpointed scan body, with explicit PRNG keys.
//
// xj::random is counter-based (JAX's Threefry): a draw is a pure function of its key, built from
// traceable primitives. So when a checkpointed layer is recomputed in the backward pass, the
// dropout mask drawn from the key passed in is redrawn bit for bit: no mask is stored and the
// gradient is exactly the one without checkpointing. Keys are split, never reused.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace xj = xjax;

// Inverted dropout: zero each entry with probability `rate`, scale the rest by 1 / (1 - rate).
xj::Array dropout(const xj::Array& x, double rate, const xj::Array& key) {
  xj::Array keep = xj::random::bernoulli(key, 1.0 - rate, x.shape());
  return xj::where(keep, x / (1.0 - rate), 0.0);
}

// One layer: relu(y @ W) with dropout; xs of the scan are (W[i], key[i]).
using WeightAndKey = std::pair<xj::Array, xj::Array>;
std::pair<xj::Array, xj::None> layer(const xj::Array& y, const WeightAndKey& wk) {
  return {dropout(xj::relu(xj::matmul(y, wk.first)), 0.2, wk.second), xj::None{}};
}

xj::Array loss(const xj::Array& W, const xj::Array& x, const xj::Array& key, bool remat) {
  // One key per layer, derived from the caller's key.
  WeightAndKey xs{W, xj::random::split(key, W.dim(0))};
  xj::Array y = remat ? xj::scan(xj::checkpoint(layer), x, xs).first : xj::scan(layer, x, xs).first;
  return xj::sum(y * y);
}

int example_main(int argc, char** argv) {
  example_flags::Flags("dropout", "usage: dropout   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "dropout: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };

  // The mask: about 20% zeros, the mean preserved in expectation.
  xj::Array key = xj::random::key(0);
  xj::Array d = dropout(xj::ones({100, 100}), 0.2, key);
  auto dv = d.to_vector<float>();
  double zeros = double(std::count(dv.begin(), dv.end(), 0.f)) / double(dv.size());
  std::printf("dropout(ones(100, 100), rate 0.2): fraction zeroed %.3f, mean %.3f\n", zeros, xj::mean(d).item<double>());
  expect(std::fabs(zeros - 0.2) < 0.03, "about 20% of the entries are dropped");
  expect(dropout(xj::ones({100, 100}), 0.2, key).to_vector<float>() == dv, "the same key gives the same mask");
  expect(dropout(xj::ones({100, 100}), 0.2, xj::random::key(1)).to_vector<float>() != dv, "another key, another mask");

  // A stack of 6 layers under scan.
  const std::int64_t L = 6, N = 16, D = 32;
  xj::Array k = xj::random::split(xj::random::key(42), 3);
  xj::Array W = xj::random::normal(k[0], {L, D, D}) * (1.4 / std::sqrt(double(D)));
  xj::Array x = xj::random::normal(k[1], {N, D});
  xj::Array layer_keys = k[2];

  auto g_plain = xj::grad([&](const xj::Array& w) { return loss(w, x, layer_keys, false); })(W);
  auto g_remat = xj::grad([&](const xj::Array& w) { return loss(w, x, layer_keys, true); })(W);
  auto a = g_plain.to_vector<float>(), b = g_remat.to_vector<float>();
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] == b[i] ? 0 : 1;
  std::printf("gradient with checkpointed layers vs plain layers: %zu of %zu entries differ\n", differ, a.size());
  expect(differ == 0, "checkpointing does not change the gradient (the mask is redrawn identically)");

  // What one checkpointed layer keeps for the backward pass: its inputs only. The u32 key is an
  // input, and the mask is recomputed from it; the plain layer stores the mask (a bool array).
  xj::Array W0 = W[0], key0 = xj::random::split(layer_keys, L)[0];
  auto one = [](auto body) { return [body](const xj::Array& y, const xj::Array& w, const xj::Array& kk) {
    return body(y, WeightAndKey{w, kk}).first; }; };
  std::printf("\nresiduals of one plain layer:\n");
  xj::print_saved_residuals(one(layer), x, W0, key0);
  std::printf("residuals of one checkpointed layer:\n");
  xj::print_saved_residuals(one(xj::checkpoint(layer)), x, W0, key0);
  for (const auto& r : xj::saved_residuals(one(xj::checkpoint(layer)), x, W0, key0))
    expect(r.description.rfind("from the argument", 0) == 0, "the checkpointed layer saves only its arguments");

  // A different key gives a different gradient (the masks matter).
  auto g_other = xj::grad([&](const xj::Array& w) { return loss(w, x, xj::random::key(43), true); })(W);
  expect(g_other.to_vector<float>() != a, "another key changes the gradient");

  if (failures) return 1;
  std::printf("dropout: all checks passed\n");
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("dropout", example_main, argc, argv); }
