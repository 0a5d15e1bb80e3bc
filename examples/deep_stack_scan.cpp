// deep_stack_scan: a stack of layers as a scan over stacked weights, differentiated with a
// checkpointed (rematerialized) body. This is xjax's main example; `./xjax.sh example` runs it.
//
// Part 1 is the eight-layer task in JAX:
//
//   def layer(y, w): return jax.nn.relu(y @ w), None
//   def loss(weights, x):
//     final, _ = lax.scan(jax.checkpoint(layer), x, weights)
//     return jnp.sum(final ** 2)
//   jax.grad(loss)(weights, x)          # shape (8, d, d)
//
// written in C++ with xjax, run on identity weights (every gradient entry is 2.0) and on random
// weights (checked against finite differences with xj::check_grads).
//
// Part 2 measures what checkpointing buys on a deeper stack of residual MLP layers
// (y + relu(y @ W1) @ W2): for each strategy, the time of one gradient, the peak memory, the
// number of primitive executions, and the residuals reverse mode keeps for one layer.
//
//   deep_stack_scan [--layers L] [--width d] [--batch N] [--hidden H] [--strategy S]
//                   [--repeats R] [--plot FILE.svg] [--depths 8,16,32,64] [--skip-part1]
//   S: none | checkpoint | dots_saveable | names | binomial:K | all (default; binomial:8 among them)
//   binomial:K keeps the plain layer but reverses the scan with the binomial schedule
//   (xj::scan_checkpoints::binomial(K)): at most K stored carries for the whole stack, whatever its
//   depth, for about log(L) recomputations per layer.
//
// --plot FILE.svg also runs every selected strategy at each depth in --depths and writes an SVG
// chart of peak memory and time against depth (one line per strategy).
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace xj = xjax;
namespace policies = xjax::checkpoint_policies;

// ================================================================================================
// Part 1: the eight-layer task
// ================================================================================================

// One layer: the carry is the activation (N, d); each step reads one (d, d) weight matrix.
// The second element is the per-step output; xj::None{} means "no stacked output".
std::pair<xj::Array, xj::None> layer(const xj::Array& y, const xj::Array& w) {
  return {xj::relu(xj::matmul(y, w)), xj::None{}};
}

// sum(final^2) after scanning the checkpointed layer over weights[0], ..., weights[L-1].
xj::Array loss(const xj::Array& weights, const xj::Array& x) {
  auto [final_y, unused] = xj::scan(xj::checkpoint(layer), x, weights);
  (void)unused;
  return xj::sum(final_y * final_y);
}

// The gradient with respect to argument 0, the weights: shape (8, d, d).
xj::Array grad_checkpointed_stack(const xj::Array& weights, const xj::Array& x) {
  return xj::grad(loss)(weights, x);
}

// The same network as a plain C++ loop without scan or checkpoint (a reference).
xj::Array loss_unrolled(const xj::Array& weights, const xj::Array& x) {
  xj::Array y = x;
  for (std::int64_t i = 0; i < weights.dim(0); ++i) y = xj::relu(xj::matmul(y, weights[i]));
  return xj::sum(y * y);
}

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "deep_stack_scan: FAILED: %s\n", what.c_str());
    ++failures;
  }
}

void print_matrix(const xj::Array& m, const char* indent) {
  auto v = m.to_vector<double>();
  std::int64_t rows = m.dim(0), cols = m.dim(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::printf("%s[", indent);
    for (std::int64_t c = 0; c < cols; ++c) std::printf("%s%8.4f", c ? " " : "", v[static_cast<std::size_t>(r * cols + c)]);
    std::printf("]\n");
  }
}

void identity_example() {
  std::printf("-- identity weights: weights = 8 x eye(2), x = ones(1, 2) --\n");
  xj::Array weights = xj::stack(std::vector<xj::Array>(8, xj::eye(2)));  // f32[8,2,2]
  xj::Array x = xj::ones({1, 2});                                         // f32[1,2]
  xj::Array g = grad_checkpointed_stack(weights, x);
  std::printf("loss = %g\n", loss(weights, x).item<double>());
  std::printf("gradient: %s\n", g.aval().str().c_str());
  for (std::int64_t i = 0; i < g.dim(0); ++i) {
    std::printf("  layer %lld:\n", static_cast<long long>(i));
    print_matrix(g[i], "    ");
  }
  auto v = g.to_vector<float>();
  bool all_two = std::all_of(v.begin(), v.end(), [](float e) { return e == 2.0f; });
  std::printf("every entry is 2.0: %s\n\n", all_two ? "yes" : "NO");
  expect(g.aval() == (xj::ShapedArray{{8, 2, 2}, xj::f32}), "identity gradient has shape f32[8,2,2]");
  expect(all_two, "identity gradient is 2.0 everywhere");
}

void random_example() {
  const std::int64_t L = 8, d = 4, N = 3;
  std::printf("-- random weights: weights f32[%lld,%lld,%lld] = eye + 0.3 normal, x f32[%lld,%lld] normal --\n",
              (long long)L, (long long)d, (long long)d, (long long)N, (long long)d);
  // Finite differences are meaningless across a relu kink, so draw inputs (explicit PRNG keys,
  // as in jax.random) until no preactivation lies within ten finite-difference steps of 0.
  auto smallest_preactivation = [](const xj::Array& w, const xj::Array& x0) {
    double closest = 1e30;
    xj::Array y = x0;
    for (std::int64_t i = 0; i < w.dim(0); ++i) {
      xj::Array z = xj::matmul(y, w[i]);
      for (double e : z.to_vector<double>()) closest = std::min(closest, std::abs(e));
      y = xj::relu(z);
    }
    return closest;
  };
  xj::Array weights, x;
  double closest = 0;
  std::uint64_t seed = 0;
  for (; seed < 100; ++seed) {
    xj::Array k = xj::random::split(xj::random::key(seed), 2);
    weights = xj::stack(std::vector<xj::Array>(L, xj::eye(d))) + xj::random::normal(k[0], {L, d, d}) * 0.3;
    x = xj::random::normal(k[1], {N, d});
    closest = smallest_preactivation(weights, x);
    if (closest > 2e-2) break;
  }
  std::printf("seed %llu: smallest |preactivation| = %.3g (finite-difference step 2e-3)\n", (unsigned long long)seed, closest);
  expect(closest > 2e-2, "inputs away from the relu kink");

  xj::Array g = grad_checkpointed_stack(weights, x);
  xj::Array g_ref = xj::grad(loss_unrolled)(weights, x);
  std::printf("loss = %.6g\n", loss(weights, x).item<double>());
  std::printf("gradient %s, layer 0:\n", g.aval().str().c_str());
  print_matrix(g[0], "    ");
  std::printf("layer 7:\n");
  print_matrix(g[7], "    ");

  // Agreement with the unrolled loop (same math, different program).
  auto a = g.to_vector<double>(), b = g_ref.to_vector<double>();
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  std::printf("max |scan+checkpoint - unrolled loop| = %.3g (largest entry %.3g)\n", worst, scale);
  expect(scale > 0, "random gradient is not all zero");
  expect(worst <= 1e-5 * scale, "scan+checkpoint gradient matches the unrolled loop");

  // check_grads compares forward mode and reverse mode with central finite differences along
  // random directions (jax.test_util.check_grads). f32 needs a larger step and tolerance.
  try {
    xj::check_grads(loss, std::tuple{weights, x}, {.order = 1, .modes = {xj::fwd, xj::rev}, .atol = 1e-2, .rtol = 1e-2, .eps = 2e-3});
    std::printf("check_grads(loss, order 1, fwd and rev, f32, eps 2e-3, tol 1e-2): passed\n\n");
  } catch (const xj::GradCheckError& e) {
    std::printf("check_grads: FAILED\n%s\n\n", e.what());
    expect(false, "check_grads on the random example");
  }
}

// ================================================================================================
// Part 2: deep stacks, strategies compared
// ================================================================================================

struct Config {
  std::int64_t layers = 32, width = 128, batch = 128, hidden = 0;  // hidden 0 = 4 * width
  int repeats = 3;
  std::vector<std::string> strategies;
  std::string plot;
  std::vector<std::int64_t> depths = {8, 16, 32, 64};
  bool part1 = true;
};

using Weights = std::pair<xj::Array, xj::Array>;  // (W1 (d, H), W2 (H, d)) for one layer, or stacked (L, ...)
using LayerFn = std::function<std::pair<xj::Array, xj::None>(const xj::Array&, const Weights&)>;

// One residual MLP layer, y + relu(y @ W1) @ W2. The hidden activation is tagged "hidden" so the
// `names` strategy can save exactly it (checkpoint_name is the identity on values).
std::pair<xj::Array, xj::None> mlp_layer(const xj::Array& y, const Weights& w) {
  xj::Array h = xj::checkpoint_name(xj::relu(xj::matmul(y, w.first)), "hidden");
  return {y + xj::matmul(h, w.second), xj::None{}};
}

const std::vector<std::string> all_strategies = {"none", "checkpoint", "dots_saveable", "names", "binomial:8"};

// binomial:K -> K (0 for the other strategies).
std::int64_t binomial_snapshots(const std::string& s) {
  if (s.rfind("binomial:", 0) != 0) return 0;
  std::int64_t k = 0;
  if (example_flags::parse_integer(s.substr(9), k) && k > 0) return k;
  throw std::invalid_argument("strategy '" + s + "': binomial:K needs a positive number of snapshots K");
}

// The scan body for a strategy: the plain layer, or the layer wrapped in checkpoint with a policy.
LayerFn body_for(const std::string& s) {
  if (s == "none" || binomial_snapshots(s) > 0) return mlp_layer;
  if (s == "checkpoint") return xj::checkpoint(mlp_layer);  // save only the layer's inputs
  if (s == "dots_saveable") return xj::checkpoint(mlp_layer, {.policy = policies::dots_saveable});
  if (s == "names") return xj::checkpoint(mlp_layer, {.policy = policies::save_only_these_names({"hidden"})});
  throw std::invalid_argument("unknown strategy '" + s + "'");
}

xj::ScanCheckpoints checkpoints_for(const std::string& s) {
  std::int64_t k = binomial_snapshots(s);
  return k > 0 ? xj::scan_checkpoints::binomial(k) : xj::scan_checkpoints::all();
}

xj::Array mlp_loss(const LayerFn& body, const xj::ScanCheckpoints& cp, const Weights& w, const xj::Array& x) {
  xj::Array y = xj::scan(body, x, w, {.checkpoints = cp}).first;
  return xj::sum(y * y) / static_cast<double>(y.size());
}

struct Result {
  std::string strategy;
  std::int64_t layers = 0;
  double seconds = 0;
  double peak_mib = 0;
  std::int64_t executions = 0;
  std::int64_t matmuls = 0;  // dot_general executions (the expensive ones)
  std::vector<xj::Residual> residuals;  // for one layer
  Weights grads;
};

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::int64_t residual_bytes(const std::vector<xj::Residual>& rs) {
  std::int64_t b = 0;
  for (const auto& r : rs) b += static_cast<std::int64_t>(r.aval.nbytes());
  return b;
}

Result measure(const std::string& strategy, const Config& c, std::int64_t layers, bool residuals) {
  const std::int64_t d = c.width, H = c.hidden, N = c.batch;
  xj::Array key = xj::random::key(static_cast<std::uint64_t>(layers));
  xj::Array k = xj::random::split(key, 3);
  // Scaled so the activations neither vanish nor explode with depth.
  Weights w{xj::random::normal(k[0], {layers, d, H}) * (1.0 / std::sqrt(double(d))),
            xj::random::normal(k[1], {layers, H, d}) * (0.5 / std::sqrt(double(H * layers)))};
  xj::Array x = xj::random::normal(k[2], {N, d});

  LayerFn body = body_for(strategy);
  xj::ScanCheckpoints cp = checkpoints_for(strategy);
  auto g = xj::grad([body, cp](const Weights& ws, const xj::Array& xs) { return mlp_loss(body, cp, ws, xs); });

  Result r;
  r.strategy = strategy;
  r.layers = layers;
  r.grads = g(w, x);  // the first call traces and transforms; later calls reuse the jaxpr

  // Time: the median of a few runs. The first also records the peak memory (beyond what is live
  // before it: the weights and x) and the primitive executions of one gradient.
  std::vector<double> times;
  for (int i = 0; i < std::max(1, c.repeats); ++i) {
    std::int64_t live_before = xj::memory_stats().live_bytes;
    xj::reset_peak_memory();
    xj::reset_eval_counts();
    auto t0 = std::chrono::steady_clock::now();
    { Weights tmp = g(w, x); }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (i == 0) {
      r.peak_mib = mib(static_cast<double>(xj::memory_stats().peak_bytes - live_before));
      for (const auto& [name, n] : xj::eval_counts()) r.executions += n;
      r.matmuls = xj::eval_counts()["dot_general"];
    }
  }
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];

  // What reverse mode saves for one layer (the scan saves this once per layer).
  if (residuals) {
    Weights w0{w.first[0], w.second[0]};
    r.residuals = xj::saved_residuals([body](const xj::Array& y, const Weights& wl) { return body(y, wl).first; }, x, w0);
  }
  return r;
}

void print_table(const std::vector<Result>& rs, const Config& c) {
  std::printf("== Part 2: residual MLP stack, gradient w.r.t. the weights ==\n");
  std::printf("layers L=%lld, width d=%lld, hidden H=%lld, batch N=%lld, f32; layer: y + relu(y @ W1) @ W2\n",
              (long long)c.layers, (long long)c.width, (long long)c.hidden, (long long)c.batch);
  std::printf("seconds: median of %d runs; peak MiB: most memory live during one gradient beyond the inputs;\n"
              "executions: primitive executions in one gradient (xj::eval_counts), matmuls: the dot_general ones;\n"
              "residuals: what reverse mode keeps for one layer (xj::saved_residuals) beside the layer's inputs.\n\n",
              std::max(1, c.repeats));
  std::printf("%-14s %9s %10s %11s %8s   %s\n", "strategy", "seconds", "peak MiB", "executions", "matmuls", "residuals per layer");
  std::printf("%-14s %9s %10s %11s %8s   %s\n", "--------", "-------", "--------", "----------", "-------", "-------------------");
  for (const auto& r : rs) {
    std::int64_t n = 0, bytes = 0;
    for (const auto& res : r.residuals)
      if (res.description.rfind("from the argument", 0) != 0) {
        ++n;
        bytes += static_cast<std::int64_t>(res.aval.nbytes());
      }
    if (std::int64_t k = binomial_snapshots(r.strategy); k > 0) {
      std::printf("%-14s %9.4f %10.2f %11lld %8lld   none kept per layer: at most %lld carries for the stack\n",
                  r.strategy.c_str(), r.seconds, r.peak_mib, (long long)r.executions, (long long)r.matmuls, (long long)k);
      continue;
    }
    std::printf("%-14s %9.4f %10.2f %11lld %8lld   %lld computed, %.3f MiB\n", r.strategy.c_str(), r.seconds, r.peak_mib,
                (long long)r.executions, (long long)r.matmuls, (long long)n, mib(static_cast<double>(bytes)));
  }
  std::printf("\nThe residuals of one layer (print_saved_residuals; argument 0 = y, argument 1 = (W1, W2)):\n");
  for (const auto& r : rs) {
    if (binomial_snapshots(r.strategy) > 0) continue;  // its layer is none's; the schedule keeps carries, not residuals
    std::printf("  %s:\n", r.strategy.c_str());
    std::ostringstream os;
    xj::detail::print_residuals(os, r.residuals);
    std::istringstream lines(os.str());
    for (std::string line; std::getline(lines, line);) std::printf("    %s\n", line.c_str());
  }
  std::printf("(Under scan, a residual that is the same in every layer is computed once for the whole loop\n"
              "instead of once per layer. Of the arguments, y (the carry) is stacked, one per layer; W1 and W2\n"
              "are slices of the stacked weights, which the scan passes on without copying.)\n");
}

// ---- the SVG chart -----------------------------------------------------------------------------

std::string fmt(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) < 0.01 || std::abs(v) >= 10000)) std::snprintf(buf, sizeof buf, "%.1e", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A "nice" step (1, 2 or 5 times a power of ten) giving about `n` ticks up to `max`.
double tick_step(double max, int n) {
  double raw = max / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// Dash patterns, so that lines which coincide (two strategies saving the same bytes) stay visible.
const std::vector<std::string> line_dashes = {"none", "8 4", "2 3", "10 3 2 3", "4 4"};

// One panel: value(result) against depth, one polyline per strategy.
void svg_panel(std::ostream& os, double x0, double y0, double w, double h, const std::string& title,
               const std::string& ylabel, const std::vector<std::int64_t>& depths, const std::vector<Result>& rs,
               const std::vector<std::string>& strategies, const std::function<double(const Result&)>& value,
               const std::vector<std::string>& colors) {
  const std::vector<std::string>& dashes = line_dashes;
  double ymax = 0;
  for (const auto& r : rs) ymax = std::max(ymax, value(r));
  if (ymax <= 0) ymax = 1;
  double step = tick_step(ymax, 5);
  ymax = std::ceil(ymax / step) * step;
  double dmin = double(depths.front()), dmax = double(depths.back());
  if (dmax == dmin) dmax = dmin + 1;
  auto px = [&](double depth) { return x0 + (depth - dmin) / (dmax - dmin) * w; };
  auto py = [&](double v) { return y0 + h - v / ymax * h; };

  os << "  <text x='" << x0 + w / 2 << "' y='" << y0 - 14 << "' text-anchor='middle' font-size='15' font-weight='bold'>" << title << "</text>\n";
  // Grid and y ticks.
  for (double v = 0; v <= ymax + step / 2; v += step) {
    os << "  <line x1='" << x0 << "' y1='" << py(v) << "' x2='" << x0 + w << "' y2='" << py(v) << "' stroke='#ddd'/>\n";
    os << "  <text x='" << x0 - 6 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='11'>" << fmt(v) << "</text>\n";
  }
  // x ticks at each depth.
  for (auto dep : depths) {
    os << "  <line x1='" << px(double(dep)) << "' y1='" << y0 + h << "' x2='" << px(double(dep)) << "' y2='" << y0 + h + 5 << "' stroke='#333'/>\n";
    os << "  <text x='" << px(double(dep)) << "' y='" << y0 + h + 18 << "' text-anchor='middle' font-size='11'>" << dep << "</text>\n";
  }
  // Axes and their labels.
  os << "  <line x1='" << x0 << "' y1='" << y0 + h << "' x2='" << x0 + w << "' y2='" << y0 + h << "' stroke='#333'/>\n";
  os << "  <line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 << "' y2='" << y0 + h << "' stroke='#333'/>\n";
  os << "  <text x='" << x0 + w / 2 << "' y='" << y0 + h + 38 << "' text-anchor='middle' font-size='13'>depth (layers)</text>\n";
  os << "  <text x='" << x0 - 52 << "' y='" << y0 + h / 2 << "' text-anchor='middle' font-size='13' transform='rotate(-90 "
     << x0 - 52 << " " << y0 + h / 2 << ")'>" << ylabel << "</text>\n";
  // One line (and markers) per strategy.
  for (std::size_t s = 0; s < strategies.size(); ++s) {
    std::ostringstream pts;
    std::vector<std::pair<double, double>> marks;
    for (const auto& r : rs)
      if (r.strategy == strategies[s]) {
        pts << px(double(r.layers)) << "," << py(value(r)) << " ";
        marks.emplace_back(px(double(r.layers)), py(value(r)));
      }
    const std::string& col = colors[s % colors.size()];
    os << "  <polyline fill='none' stroke='" << col << "' stroke-width='2' stroke-dasharray='" << dashes[s % dashes.size()]
       << "' points='" << pts.str() << "'/>\n";
    for (auto [mx, my] : marks) os << "  <circle cx='" << mx << "' cy='" << my << "' r='3.5' fill='" << col << "'/>\n";
  }
}

void write_svg(const std::string& path, const Config& c, const std::vector<Result>& rs,
               const std::vector<std::string>& strategies) {
  const std::vector<std::string> colors = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  const double W = 1060, H = 440, pw = 340, ph = 280, top = 80;
  std::ofstream os(path);
  if (!os) throw std::runtime_error("cannot write " + path);
  os << "<?xml version='1.0' encoding='UTF-8'?>\n";
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
     << "' font-family='sans-serif'>\n";
  os << "  <rect width='100%' height='100%' fill='white'/>\n";
  os << "  <text x='" << W / 2 << "' y='28' text-anchor='middle' font-size='17'>xjax: gradient of a residual MLP stack under scan (d="
     << c.width << ", H=" << c.hidden << ", N=" << c.batch << ", f32)</text>\n";
  svg_panel(os, 90, top, pw, ph, "Peak memory", "peak MiB (beyond inputs)", c.depths, rs, strategies,
            [](const Result& r) { return r.peak_mib; }, colors);
  svg_panel(os, 90 + pw + 110, top, pw, ph, "Time per gradient", "seconds (median)", c.depths, rs, strategies,
            [](const Result& r) { return r.seconds; }, colors);
  // Legend.
  double lx = 90 + 2 * pw + 140, ly = top + 10;
  os << "  <text x='" << lx << "' y='" << ly << "' font-size='13' font-weight='bold'>strategy</text>\n";
  const std::vector<std::string>& dashes = line_dashes;
  for (std::size_t s = 0; s < strategies.size(); ++s) {
    double yy = ly + 22 * double(s + 1);
    const std::string& col = colors[s % colors.size()];
    os << "  <line x1='" << lx << "' y1='" << yy - 4 << "' x2='" << lx + 24 << "' y2='" << yy - 4 << "' stroke='" << col
       << "' stroke-width='2' stroke-dasharray='" << dashes[s % dashes.size()] << "'/>\n";
    os << "  <circle cx='" << lx + 12 << "' cy='" << yy - 4 << "' r='3.5' fill='" << col << "'/>\n";
    os << "  <text x='" << lx + 30 << "' y='" << yy << "' font-size='12'>" << strategies[s] << "</text>\n";
  }
  os << "</svg>\n";
}

// ---- command line ------------------------------------------------------------------------------

const char* const usage =
    "usage: deep_stack_scan [--layers L] [--width d] [--batch N] [--hidden H] [--strategy S]\n"
    "                       [--repeats R] [--plot FILE.svg] [--depths 8,16,32,64] [--skip-part1]\n"
    "  defaults: 32 layers, width 128, batch 128, hidden 4 x width, strategy all, 3 repeats\n"
    "  S: none | checkpoint | dots_saveable | names | binomial:K | all (binomial:8 among them)\n"
    "  --plot FILE.svg also runs every selected strategy at each depth of --depths and charts memory and time\n";

Config parse(int argc, char** argv) {
  Config c;
  example_flags::Flags flags("deep_stack_scan", usage);
  flags.integer("--layers", c.layers, 1);
  flags.integer("--width", c.width, 1);
  flags.integer("--batch", c.batch, 1);
  flags.integer("--hidden", c.hidden, 1);
  flags.integer("--repeats", c.repeats, 1);
  flags.value("--strategy", [&c](const std::string& v) -> std::string {
    if (v == "all") c.strategies = all_strategies;
    else if (std::find(all_strategies.begin(), all_strategies.end(), v) != all_strategies.end()) c.strategies = {v};
    else if (v.rfind("binomial:", 0) == 0) {
      try {
        (void)binomial_snapshots(v);
      } catch (const std::invalid_argument&) {
        return "binomial:K needs a positive number of snapshots K";
      }
      c.strategies = {v};
    } else return "needs none, checkpoint, dots_saveable, names, binomial:K or all";
    return "";
  });
  flags.text("--plot", c.plot);
  flags.toggle("--skip-part1", [&c] { c.part1 = false; });
  flags.value("--depths", [&c](const std::string& v) -> std::string {
    c.depths.clear();
    std::istringstream in(v);
    std::int64_t d = 0;
    for (std::string t; std::getline(in, t, ',');) {
      if (!example_flags::parse_integer(t, d) || d < 1) return "needs a comma-separated list of positive integers such as 8,16,32,64";
      c.depths.push_back(d);
    }
    if (c.depths.empty()) return "needs a comma-separated list such as 8,16,32,64";
    std::sort(c.depths.begin(), c.depths.end());
    return "";
  });
  c.strategies = all_strategies;
  flags.parse(argc, argv);
  if (c.hidden == 0) c.hidden = 4 * c.width;
  if (!c.plot.empty()) {  // find out now, not after the sweep, that the chart cannot be written
    std::error_code ec;
    const bool existed = std::filesystem::exists(c.plot, ec);
    if (!std::ofstream(c.plot, std::ios::app)) flags.fail("--plot: cannot write " + c.plot);
    if (!existed) std::filesystem::remove(c.plot, ec);
  }
  return c;
}

}  // namespace

int example_main(int argc, char** argv) {
  Config c = parse(argc, argv);

  if (c.part1) {
    std::printf("== Part 1: grad of sum(scan(checkpoint(layer), x, weights)^2) w.r.t. weights (8 layers) ==\n\n");
    identity_example();
    random_example();
  }

  std::vector<Result> results;
  for (const auto& s : c.strategies) results.push_back(measure(s, c, c.layers, true));
  print_table(results, c);

  // Every strategy computes the same gradient; only what is stored and recomputed differs.
  const int failures_before = failures;
  for (const auto& r : results) {
    for (int k = 0; k < 2; ++k) {
      const xj::Array& a = k == 0 ? r.grads.first : r.grads.second;
      const xj::Array& b = k == 0 ? results[0].grads.first : results[0].grads.second;
      auto va = a.to_vector<double>(), vb = b.to_vector<double>();
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < va.size(); ++i) {
        worst = std::max(worst, std::abs(va[i] - vb[i]));
        scale = std::max(scale, std::abs(vb[i]));
      }
      expect(worst <= 1e-5 * scale, r.strategy + " gives the same gradient as " + results[0].strategy);
    }
    // A checkpointed layer never keeps more than the plain one.
    for (const auto& other : results)
      if (other.strategy == "none" && r.strategy != "none")
        expect(residual_bytes(r.residuals) <= residual_bytes(other.residuals),
               r.strategy + " keeps no more residual bytes per layer than none");
  }
  if (results.size() > 1)
    std::printf("\nall strategies give the same gradient (max difference <= 1e-5 of its largest entry): %s\n",
                failures == failures_before ? "yes" : "NO");
  else
    std::printf("\none strategy (%s): no other gradient to compare with (--strategy all compares them)\n",
                results[0].strategy.c_str());

  if (!c.plot.empty()) {
    std::vector<Result> sweep;
    for (auto depth : c.depths)
      for (const auto& s : c.strategies) {
        sweep.push_back(measure(s, c, depth, false));
        std::printf("  depth %3lld  %-14s %8.4f s %9.2f MiB\n", (long long)depth, s.c_str(), sweep.back().seconds,
                    sweep.back().peak_mib);
      }
    write_svg(c.plot, c, sweep, c.strategies);
    std::printf("wrote %s (peak memory and time against depth, one line per strategy)\n", c.plot.c_str());
  }

  if (failures) {
    std::fprintf(stderr, "deep_stack_scan: %d check(s) failed\n", failures);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("deep_stack_scan", example_main, argc, argv); }
