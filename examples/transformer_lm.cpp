// transformer_lm: a GPT-style byte-level language model trained with xj::optim, saved with
// safetensors, reloaded, and sampled.
//
// The model (transformer_model.hpp): token and positional embeddings, L pre-LN blocks (causal multi-head attention, a GELU
// MLP, residual connections), a final LayerNorm, and the output projection tied to the token
// embedding. The blocks' parameters are stacked on a leading layer axis and applied with
// xj::scan(checkpoint(block, policy)): the deep-stack pattern. --policy chooses what reverse mode
// keeps per layer: none (no checkpoint: everything), nothing_saveable (only the layer's input),
// dots_saveable (the matrix products), attn_out (the attention output, by name). Training:
// adamw with a warmup-cosine schedule and global-norm clipping, in one jitted step whose
// parameters and optimizer state are donated. The text: a license the base-files package ships
// (/usr/share/common-licenses/GPL-3), read as bytes (a 256-token vocabulary).
//
//   transformer_lm [--steps N] [--layers L] [--width D] [--heads H] [--context T] [--batch B]
//                  [--lr LR] [--policy P] [--text FILE] [--out FILE] [--check-grads]
// The run fails (exit 1) if the loss does not go down. --check-grads checks the gradient of the
// loss against finite differences at f64 on a tiny model instead of training.
#include "example_flags.hpp"
#include "transformer_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace xj = xjax;
namespace optim = xjax::optim;
using gpt::Block;
using gpt::BlockFn;
using gpt::Gpt;
using gpt::body_for;
using gpt::causal_mask;
using gpt::forward;
using gpt::loss_of;

struct Config {
  std::int64_t vocab = 256, context = 64, width = 128, heads = 4, layers = 6, batch = 16, steps = 300;
  double lr = 3e-3;
  std::string policy = "attn_out", text = "/usr/share/common-licenses/GPL-3", out = "transformer_lm.safetensors";
  bool text_given = false;  // --text named a file: it must be there and long enough
  bool check_grads = false;
};

// gpt::body_for's policies.
const std::vector<std::string> policy_names = {"none", "nothing_saveable", "dots_saveable", "attn_out"};

const char* const usage =
    "usage: transformer_lm [--steps N] [--layers L] [--width D] [--heads H] [--context T] [--batch B]\n"
    "                      [--lr LR] [--policy P] [--text FILE] [--out FILE] [--check-grads]\n"
    "  defaults: 300 steps, 6 layers, width 128, 4 heads, context 64, batch 16, lr 3e-3, policy attn_out,\n"
    "  text /usr/share/common-licenses/GPL-3 (a built-in text where it is missing), out transformer_lm.safetensors\n"
    "  P: none | nothing_saveable | dots_saveable | attn_out; D must be a multiple of H\n";

// The training text: the file --text names (exit 2 if it cannot be read), or the default
// license, or where that is missing (a minimal system) a text of our own.
std::string read_text(const Config& c, const example_flags::Flags& flags) {
  std::error_code ec;
  if (c.text_given && !std::filesystem::exists(c.text, ec)) flags.fail("--text: no such file: " + c.text);
  if (c.text_given && !std::filesystem::is_regular_file(c.text, ec)) flags.fail("--text: not a regular file: " + c.text);
  std::ifstream in(c.text, std::ios::binary);
  if (!in && c.text_given) flags.fail("--text: cannot open " + c.text);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() && c.text_given) flags.fail("--text: cannot read " + c.text);
  if (!c.text_given && text.size() < 1024) {
    text.clear();
    for (int i = 0; i < 200; ++i)
      text += "Everyone is permitted to copy and distribute verbatim copies of this license document, but changing it is not allowed. ";
  }
  return text;
}

int check_gradients() {
  Config c;
  c.context = 4;
  c.width = 8;
  c.heads = 2;
  c.layers = 2;
  c.vocab = 256;
  const Gpt p = gpt::init(c.vocab, c.context, c.width, c.layers, xj::f64, 7);
  const xj::Array causal = causal_mask(c.context, xj::f64);
  std::vector<std::int32_t> toks = {72, 101, 108, 108, 111, 33, 32, 87, 111, 114};
  const xj::Array tokens = xj::array<std::int32_t>(toks, {2, 5});
  for (const char* policy : {"none", "attn_out"}) {
    const BlockFn body = body_for(policy, causal, c.heads);
    // A small step: the embeddings are of scale 0.02, so LayerNorm's input moves by 0.5% at
    // JAX's default step 1e-4, where the central difference's third-order error shows (1e-4).
    xj::check_grads([&](const Gpt& q) { return loss_of(q, tokens, body); }, std::tuple{p}, {.order = 1, .eps = 1e-6});
    std::printf("check_grads (f64, d=8, 2 layers, 2 heads, policy %s): ok\n", policy);
  }
  return 0;
}

int example_main(int argc, char** argv) {
  Config c;
  example_flags::Flags flags("transformer_lm", usage);
  flags.integer("--steps", c.steps, 1);
  flags.integer("--layers", c.layers, 1);
  flags.integer("--width", c.width, 1);
  flags.integer("--heads", c.heads, 1);
  flags.integer("--context", c.context, 1);
  flags.integer("--batch", c.batch, 1);
  flags.real("--lr", c.lr);
  flags.choice("--policy", c.policy, policy_names);
  flags.value("--text", [&c](const std::string& v) -> std::string {
    if (v.empty()) return "needs a file name";
    c.text = v;
    c.text_given = true;
    return "";
  });
  flags.text("--out", c.out);
  flags.toggle("--check-grads", [&c] { c.check_grads = true; });
  flags.parse(argc, argv);
  if (c.check_grads) return check_gradients();
  if (c.width % c.heads != 0) flags.fail("--width (" + std::to_string(c.width) + ") must be a multiple of --heads (" + std::to_string(c.heads) + ")");

  const std::string text = read_text(c, flags);
  if (text.size() < static_cast<std::size_t>(c.context) + 2)
    flags.fail("the text (" + c.text + ") has " + std::to_string(text.size()) + " bytes; --context " + std::to_string(c.context) +
               " needs at least " + std::to_string(c.context + 2));
  std::printf("text: %zu bytes; model: d=%lld, %lld heads, %lld layers, context %lld, batch %lld, policy %s\n", text.size(),
              (long long)c.width, (long long)c.heads, (long long)c.layers, (long long)c.context, (long long)c.batch, c.policy.c_str());
  const xj::Array causal = causal_mask(c.context, xj::f32);
  std::mt19937_64 rng(1);
  auto batch = [&] {  // B random windows of T + 1 bytes
    std::vector<std::int32_t> v;
    std::uniform_int_distribution<std::size_t> start(0, text.size() - static_cast<std::size_t>(c.context) - 2);
    for (std::int64_t b = 0; b < c.batch; ++b) {
      const std::size_t s = start(rng);
      for (std::int64_t t = 0; t <= c.context; ++t) v.push_back(static_cast<unsigned char>(text[s + static_cast<std::size_t>(t)]));
    }
    return xj::array<std::int32_t>(v, {c.batch, c.context + 1});
  };

  // What each policy keeps per layer, and the peak memory of one gradient.
  Gpt params = gpt::init(c.vocab, c.context, c.width, c.layers, xj::f32, 0);
  const xj::Array probe = batch();
  std::printf("\n%-17s %14s %16s\n", "policy", "residuals/layer", "gradient peak MiB");
  for (const std::string& policy : policy_names) {
    const BlockFn body = body_for(policy, causal, c.heads);
    auto residuals = xj::saved_residuals([&](const xj::Array& x, const Block& b) { return body(x, b).first; },
                                         xj::zeros({c.batch, c.context, c.width}), xj::tree_map([](const xj::Array& a) { return a[0]; }, params.blocks));
    double bytes = 0;
    for (const auto& r : residuals) bytes += static_cast<double>(r.aval.nbytes());
    auto grad = xj::jit(xj::grad([&](const Gpt& p, const xj::Array& t) { return loss_of(p, t, body); }));
    (void)grad(params, probe);
    const std::int64_t live = xj::memory_stats().live_bytes;
    xj::reset_peak_memory();
    (void)grad(params, probe);
    const double peak = static_cast<double>(xj::memory_stats().peak_bytes - live) / (1 << 20);
    std::printf("%-17s %8zu, %.2f MiB %16.2f\n", policy.c_str(), residuals.size(), bytes / (1 << 20), peak);
  }

  // Training.
  const BlockFn body = body_for(c.policy, causal, c.heads);
  const auto opt = optim::chain({optim::clip_by_global_norm(1.0),
                                 optim::adamw(optim::warmup_cosine_decay_schedule(0.0, c.lr, std::max<std::int64_t>(1, c.steps / 10), c.steps + 1),
                                              0.9, 0.95, 1e-8, 0.0, std::nullopt, 0.01, [](const std::string& path) { return path.find(".w_") != std::string::npos; })});
  auto step = xj::jit(
      [&](const Gpt& p, const optim::OptState& s, const xj::Array& tokens) {
        auto [value, g] = xj::value_and_grad([&](const Gpt& q) { return loss_of(q, tokens, body); })(p);
        auto [updates, s2] = opt.update(g, s, p);
        return std::tuple{optim::apply_updates(p, updates), s2, value};
      },
      {.donate_argnums = {0, 1}});
  optim::OptState state = opt.init(params);
  std::vector<double> losses;
  for (std::int64_t k = 0; k < c.steps; ++k) {
    xj::Array value;
    std::tie(params, state, value) = step(params, state, batch());
    losses.push_back(value.item<double>());
    if (k % std::max<std::int64_t>(1, c.steps / 10) == 0 || k + 1 == c.steps) std::printf("step %4lld  loss %.4f\n", (long long)k, losses.back());
  }
  const std::size_t w = std::max<std::size_t>(1, losses.size() / 5);
  double first = 0, last = 0;
  for (std::size_t i = 0; i < w; ++i) first += losses[i] / static_cast<double>(w), last += losses[losses.size() - 1 - i] / static_cast<double>(w);
  std::printf("mean loss of the first %zu steps %.4f, of the last %zu %.4f\n", w, first, w, last);

  // Save, reload, sample greedily from the first T bytes of the text.
  xj::save_safetensors(c.out, params);
  const Gpt loaded = xj::load_safetensors(c.out, params);
  std::printf("saved %s (%ju bytes) and loaded it back\n", c.out.c_str(), static_cast<std::uintmax_t>(std::filesystem::file_size(c.out)));
  auto logits_of = xj::jit([&](const Gpt& p, const xj::Array& tokens) { return forward(p, tokens, body_for("none", causal, c.heads)); });
  std::vector<std::int32_t> window(text.begin(), text.begin() + c.context);
  std::string sample;
  for (int k = 0; k < 80; ++k) {
    const xj::Array logits = logits_of(loaded, xj::array<std::int32_t>(window, {1, c.context}));
    const auto next = xj::argmax(logits[0][c.context - 1], 0).item<std::int32_t>();
    sample.push_back(static_cast<char>(next));
    window.erase(window.begin());
    window.push_back(next);
  }
  for (char& ch : sample) if (ch == '\n' || static_cast<unsigned char>(ch) < 32) ch = ' ';
  const std::size_t shown = std::min<std::size_t>(20, static_cast<std::size_t>(c.context));
  std::string prompt = text.substr(static_cast<std::size_t>(c.context) - shown, shown);
  for (char& ch : prompt) if (ch == '\n' || static_cast<unsigned char>(ch) < 32) ch = ' ';
  std::printf("sample after \"...%s\": \"%s\"\n", prompt.c_str(), sample.c_str());
  if (!(last < first)) {
    std::printf("FAILED: the loss did not go down\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("transformer_lm", example_main, argc, argv); }
