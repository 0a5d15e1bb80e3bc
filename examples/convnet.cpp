// convnet: a small ResNet-style classifier whose residual blocks are one checkpointed body scanned
// over stacked block weights: the deep-stack pattern (scan(checkpoint(block, policy))) in a
// vision model, trained with Adam on synthetic images.
//
// The task: 1-channel 16 x 16 images of noise with a bright 4 x 4 square in one of the four
// quadrants; the label is the quadrant. The model (NHWC layout, HWIO kernels):
//   stem    conv 3x3, 1 -> C channels, relu, max_pool 2x2 stride 2   (16 x 16 -> 8 x 8)
//   blocks  L times h = h + conv(relu(conv(h, W1[l]) + b1[l]), W2[l])   (scan over l)
//   head    mean over the 8 x 8 positions, dense C -> 4, softmax cross-entropy
// It prints what each checkpoint policy keeps for one block (dots_saveable keeps convolutions:
// they are dot-like, as in JAX), checks that every policy gives the same gradient, trains, and
// fails (exit 1) unless the loss falls and the accuracy rises.
//
//   ./convnet [--steps 60] [--layers 4] [--channels 8] [--batch 32] [--policy dots_saveable]
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace xj = xjax;
namespace optim = xjax::optim;
namespace policies = xjax::checkpoint_policies;

struct Blocks {  // the residual blocks' weights, stacked on a leading layer axis
  BOOST_HANA_DEFINE_STRUCT(Blocks, (xj::Array, w1), (xj::Array, b1), (xj::Array, w2));
};
struct Net {
  BOOST_HANA_DEFINE_STRUCT(Net, (xj::Array, stem), (Blocks, blocks), (xj::Array, head), (xj::Array, head_bias));
};
struct Block {  // one layer's slice of Blocks
  BOOST_HANA_DEFINE_STRUCT(Block, (xj::Array, w1), (xj::Array, b1), (xj::Array, w2));
};

const xj::ConvDimensionNumbers nhwc{"NHWC", "HWIO", "NHWC"};

xj::Array conv3x3(const xj::Array& x, const xj::Array& w) {
  return xj::conv_general_dilated(x, w, {1, 1}, "SAME", {}, {}, nhwc);
}

// One residual block; its first convolution is named, for save_only_these_names.
std::pair<xj::Array, xj::None> block(const xj::Array& h, const Block& p) {
  const xj::Array z = xj::checkpoint_name(conv3x3(h, p.w1), "conv1");
  return {h + conv3x3(xj::relu(z + p.b1), p.w2), xj::None{}};
}

const std::vector<std::string> policy_names = {"none", "nothing_saveable", "dots_saveable", "conv1"};

using BlockFn = std::function<std::pair<xj::Array, xj::None>(const xj::Array&, const Block&)>;

BlockFn body_for(const std::string& policy) {
  if (policy == "none") return block;
  if (policy == "nothing_saveable") return xj::checkpoint(block);
  if (policy == "dots_saveable") return xj::checkpoint(block, {.policy = policies::dots_saveable});
  if (policy == "conv1") return xj::checkpoint(block, {.policy = policies::save_only_these_names({"conv1"})});
  throw std::invalid_argument("unknown policy '" + policy + "'");
}

xj::Array logits_of(const Net& p, const xj::Array& images, const BlockFn& body) {
  xj::Array h = xj::max_pool(xj::relu(conv3x3(images, p.stem)), {2, 2}, {2, 2});
  const Blocks& b = p.blocks;
  h = xj::scan([&](const xj::Array& carry, const std::tuple<xj::Array, xj::Array, xj::Array>& w) {
        return body(carry, Block{std::get<0>(w), std::get<1>(w), std::get<2>(w)});
      }, h, std::tuple{b.w1, b.b1, b.w2}).first;
  return xj::matmul(xj::mean(h, {1, 2}), p.head) + p.head_bias;
}

xj::Array loss_of(const Net& p, const xj::Array& images, const xj::Array& labels, const BlockFn& body) {
  return xj::mean(optim::softmax_cross_entropy_with_integer_labels(logits_of(p, images, body), labels));
}

Net init(std::int64_t layers, std::int64_t c) {
  xj::Array k = xj::random::split(xj::random::key(0), 4);
  const double s = 1.0 / std::sqrt(9.0 * static_cast<double>(c));
  return {xj::random::normal(k[0], {3, 3, 1, c}) * (1.0 / 3.0),
          {xj::random::normal(k[1], {layers, 3, 3, c, c}) * s, xj::zeros({layers, c}),
           xj::random::normal(k[2], {layers, 3, 3, c, c}) * (0.5 * s)},
          xj::random::normal(k[3], {c, 4}) * (1.0 / std::sqrt(static_cast<double>(c))), xj::zeros({4})};
}

// A batch of images (N, 16, 16, 1) and their quadrant labels.
std::pair<xj::Array, xj::Array> make_batch(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_int_distribution<int> quadrant(0, 3), offset(0, 4);
  std::vector<float> px(static_cast<std::size_t>(n * 256));
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < n; ++i) {
    const int q = quadrant(rng), r0 = (q / 2) * 8 + offset(rng), c0 = (q % 2) * 8 + offset(rng);
    labels.push_back(q);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) {
        const bool lit = r >= r0 && r < r0 + 4 && c >= c0 && c < c0 + 4;
        px[static_cast<std::size_t>(i * 256 + r * 16 + c)] = (lit ? 1.0f : 0.0f) + noise(rng);
      }
  }
  return {xj::array<float>(px, {n, 16, 16, 1}), xj::array<std::int32_t>(labels, {n})};
}

int example_main(int argc, char** argv) {
  std::int64_t steps = 60, layers = 4, channels = 8, batch = 32;
  std::string policy = "dots_saveable";
  example_flags::Flags flags("convnet",
                             "usage: convnet [--steps 60] [--layers 4] [--channels 8] [--batch 32] [--policy dots_saveable]\n"
                             "  policy: none | nothing_saveable | dots_saveable | conv1\n");
  flags.integer("--steps", steps, 1);
  flags.integer("--layers", layers, 1);
  flags.integer("--channels", channels, 1);
  flags.integer("--batch", batch, 1);
  flags.choice("--policy", policy, policy_names);
  flags.parse(argc, argv);
  int failures = 0;
  std::mt19937_64 rng(7);
  Net params = init(layers, channels);
  const auto [probe_x, probe_y] = make_batch(batch, rng);

  // What reverse mode keeps for one block under each policy, and the gradient each gives.
  std::printf("residuals of one block (h: %lld x 8 x 8 x %lld), by policy:\n", (long long)batch, (long long)channels);
  const Block one{params.blocks.w1[0], params.blocks.b1[0], params.blocks.w2[0]};
  const xj::Array h0 = xj::zeros({batch, 8, 8, channels});
  Net reference_grad;
  for (const std::string& name : policy_names) {
    const BlockFn body = body_for(name);
    const auto residuals = xj::saved_residuals([&](const xj::Array& h, const Block& b) { return body(h, b).first; }, h0, one);
    std::printf("\n  %s: %zu\n", name.c_str(), residuals.size());
    xj::print_saved_residuals([&](const xj::Array& h, const Block& b) { return body(h, b).first; }, h0, one);
    const Net g = xj::grad([&](const Net& p) { return loss_of(p, probe_x, probe_y, body); })(params);
    if (name == "none") {
      reference_grad = g;
      continue;
    }
    double worst = 0;
    const auto a = xj::tree_leaves(g), b = xj::tree_leaves(reference_grad);
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, xj::max(xj::abs(a[k] - b[k])).item<double>());
    std::printf("  gradient vs no checkpoint: max |difference| %.1e\n", worst);
    if (worst > 1e-5) {
      std::fprintf(stderr, "convnet: FAILED: policy %s changes the gradient by %g\n", name.c_str(), worst);
      ++failures;
    }
  }

  // Training with Adam, the chosen policy inside the scan.
  const BlockFn body = body_for(policy);
  const auto opt = optim::adam(0.01);
  auto step = xj::jit([&](const Net& p, const optim::OptState& s, const xj::Array& x, const xj::Array& y) {
    auto [value, g] = xj::value_and_grad([&](const Net& q) { return loss_of(q, x, y, body); })(p);
    auto [updates, s2] = opt.update(g, s, p);
    return std::tuple{optim::apply_updates(p, updates), s2, value};
  });
  auto accuracy = [&](const Net& p) {
    const xj::Array predicted = xj::argmax(logits_of(p, probe_x, body_for("none")), 1);
    return xj::mean(xj::astype(xj::eq(predicted, probe_y), xj::f32)).item<double>();
  };
  const double accuracy_before = accuracy(params);
  optim::OptState state = opt.init(params);
  std::vector<double> losses;
  std::printf("\ntraining %lld steps (%lld blocks, %lld channels, batch %lld, policy %s)\n", (long long)steps, (long long)layers,
              (long long)channels, (long long)batch, policy.c_str());
  for (std::int64_t k = 0; k < steps; ++k) {
    const auto [x, y] = make_batch(batch, rng);
    xj::Array value;
    std::tie(params, state, value) = step(params, state, x, y);
    losses.push_back(value.item<double>());
    if (k % std::max<std::int64_t>(1, steps / 6) == 0 || k + 1 == steps) std::printf("step %3lld  loss %.4f\n", (long long)k, losses.back());
  }
  const std::size_t w = std::max<std::size_t>(1, losses.size() / 5);
  double first = 0, last = 0;
  for (std::size_t i = 0; i < w; ++i) first += losses[i] / double(w), last += losses[losses.size() - 1 - i] / double(w);
  const double accuracy_after = accuracy(params);
  std::printf("mean loss of the first %zu steps %.4f, of the last %zu %.4f; accuracy on a held batch %.2f -> %.2f\n", w, first,
              w, last, accuracy_before, accuracy_after);
  if (!(last < 0.8 * first) || !(accuracy_after > accuracy_before)) {
    std::fprintf(stderr, "convnet: FAILED: training did not learn (loss %g -> %g, accuracy %g -> %g)\n", first, last,
                 accuracy_before, accuracy_after);
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return example_flags::guarded_main("convnet", example_main, argc, argv); }
