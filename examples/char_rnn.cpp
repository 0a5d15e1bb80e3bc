// char_rnn: a character-level recurrent network trained with scan and plain SGD.
//
// The network reads a short text one character at a time and predicts the next one:
//   h_t = tanh(x_t @ Wxh + h_{t-1} @ Whh + bh),   logits_t = h_t @ Why + by,
// with x_t the one-hot character. The recurrence is an xj::scan whose carry is h; the input
// projection and the output layer are single matmuls over all time steps outside the scan.
// grad differentiates through the scan (reverse mode runs a reverse scan). The parameters are a
// Hana struct, so the gradient comes back as the same struct.
//
//   char_rnn [--steps S] [--lr LR]     (defaults: 300 steps, learning rate 0.5)
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace xj = xjax;

const std::string text =
    "the quick brown fox jumps over the lazy dog. "
    "the lazy dog sleeps in the sun. the fox runs home.";

struct Rnn {
  BOOST_HANA_DEFINE_STRUCT(Rnn,
    (xj::Array, wxh),  // (V, H) input to hidden
    (xj::Array, whh),  // (H, H) hidden to hidden
    (xj::Array, bh),   // (H)
    (xj::Array, why),  // (H, V) hidden to logits
    (xj::Array, by));  // (V)
};

// Mean cross-entropy of predicting targets[t] from inputs[0..t]. inputs, targets: one-hot (T, V).
xj::Array loss(const Rnn& p, const xj::Array& inputs, const xj::Array& targets) {
  xj::Array xw = xj::matmul(inputs, p.wxh);  // (T, H): the input projection for every step at once
  xj::Array h0 = xj::zeros({p.whh.dim(0)});
  // The body: carry h (H), per-step input xw_t (H); emits h_t, stacked into hs (T, H).
  auto step = [&p](const xj::Array& h, const xj::Array& xw_t) {
    xj::Array h_new = xj::tanh(xw_t + xj::matmul(h, p.whh) + p.bh);
    return std::pair{h_new, h_new};
  };
  auto [h_last, hs] = xj::scan(step, h0, xw);
  (void)h_last;
  xj::Array logits = xj::matmul(hs, p.why) + p.by;  // (T, V)
  return -xj::mean(xj::sum(targets * xj::log_softmax(logits, -1), {-1}));
}

int example_main(int argc, char** argv) {
  std::int64_t steps = 300;
  double lr = 0.5;
  example_flags::Flags flags("char_rnn", "usage: char_rnn [--steps S] [--lr LR]   (defaults: 300 steps, learning rate 0.5)\n");
  flags.integer("--steps", steps, 1);
  flags.real("--lr", lr);
  flags.parse(argc, argv);

  // The vocabulary and the one-hot encoding, on the host.
  std::string vocab = text;
  std::sort(vocab.begin(), vocab.end());
  vocab.erase(std::unique(vocab.begin(), vocab.end()), vocab.end());
  std::map<char, std::int64_t> index;
  for (std::size_t i = 0; i < vocab.size(); ++i) index[vocab[i]] = static_cast<std::int64_t>(i);
  const auto V = static_cast<std::int64_t>(vocab.size()), T = static_cast<std::int64_t>(text.size()) - 1;
  const std::int64_t H = 32;
  auto one_hot = [&](std::size_t first) {
    std::vector<float> v(static_cast<std::size_t>(T * V), 0.f);
    for (std::int64_t t = 0; t < T; ++t) v[static_cast<std::size_t>(t * V + index[text[first + static_cast<std::size_t>(t)]])] = 1.f;
    return xj::array<float>(v, {T, V});
  };
  xj::Array inputs = one_hot(0), targets = one_hot(1);  // targets: the text shifted by one
  std::printf("text: %lld characters, vocabulary of %lld, hidden size %lld\n", (long long)text.size(), (long long)V,
              (long long)H);

  xj::Array k = xj::random::split(xj::random::key(7), 3);
  Rnn p{xj::random::normal(k[0], {V, H}) * 0.3, xj::random::normal(k[1], {H, H}) * (0.5 / std::sqrt(double(H))),
        xj::zeros({H}), xj::random::normal(k[2], {H, V}) * 0.1, xj::zeros({V})};

  auto vg = xj::value_and_grad(loss);  // traced and transformed on the first call only
  double first = 0, last = 0;
  for (std::int64_t it = 0; it <= steps; ++it) {
    auto [value, g] = vg(p, inputs, targets);
    last = value.item<double>();
    if (it == 0) first = last;
    if (it % 50 == 0 || it == steps) std::printf("step %4lld  loss %.4f\n", static_cast<long long>(it), last);
    if (it == steps) break;
    // Plain SGD, leaf by leaf (Rnn is a pytree: flatten, update, unflatten).
    auto [leaves, def] = xj::tree_flatten(p);
    auto gl = xj::tree_flatten(g).first;
    for (std::size_t i = 0; i < leaves.size(); ++i) leaves[i] = leaves[i] - gl[i] * lr;
    p = xj::tree_unflatten<Rnn>(def, leaves);
  }

  // Greedy sampling from the trained network, eagerly (the same ops, no tracing).
  std::string sample = "t";
  xj::Array h = xj::zeros({H});
  for (int i = 0; i < 60; ++i) {
    std::vector<float> oh(static_cast<std::size_t>(V), 0.f);
    oh[static_cast<std::size_t>(index[sample.back()])] = 1.f;
    xj::Array x = xj::array<float>(oh, {V});
    h = xj::tanh(xj::matmul(x, p.wxh) + xj::matmul(h, p.whh) + p.bh);
    auto logits = (xj::matmul(h, p.why) + p.by).to_vector<float>();
    sample += vocab[static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())];
  }
  std::printf("greedy sample: \"%s\"\n", sample.c_str());

  std::printf("loss: %.4f -> %.4f (uniform guessing: ln %lld = %.4f)\n", first, last, (long long)V, std::log(double(V)));
  if (!(last < first) || !std::isfinite(last)) {
    std::fprintf(stderr, "char_rnn: FAILED: the loss did not go down\n");
    return 1;
  }
  std::printf("char_rnn: the loss went down\n");
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("char_rnn", example_main, argc, argv); }
