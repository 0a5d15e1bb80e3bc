// transformer_model.hpp: the GPT-style byte-level language model of examples/transformer_lm.cpp,
// written in xjax's ops as a user would; also xjax-bench's T1 workload (tests/bench), which
// trains the same model against its libtorch twin.
//
// Token and positional embeddings, L pre-LN blocks (causal multi-head attention, a GELU MLP,
// residual connections), a final LayerNorm, and the output projection tied to the token embedding.
// The blocks' parameters are stacked on a leading layer axis and applied with
// xj::scan(checkpoint(block, policy)): the deep-stack pattern.
#pragma once
#include <xjax/xjax.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

namespace xj = xjax;
namespace policies = xjax::checkpoint_policies;

// One block's parameters; stacked, each array has a leading layer axis.
struct Block {
  BOOST_HANA_DEFINE_STRUCT(Block,
    (xj::Array, ln1_scale), (xj::Array, ln1_bias),  // (d)
    (xj::Array, w_qkv),                             // (d, 3d): queries, keys, values of every head
    (xj::Array, w_out),                             // (d, d)
    (xj::Array, ln2_scale), (xj::Array, ln2_bias),  // (d)
    (xj::Array, w_up), (xj::Array, b_up),           // (d, 4d), (4d)
    (xj::Array, w_down), (xj::Array, b_down));      // (4d, d), (d)
};

struct Gpt {
  BOOST_HANA_DEFINE_STRUCT(Gpt,
    (xj::Array, token_embedding),     // (V, d), also the output projection (tied)
    (xj::Array, position_embedding),  // (T, d)
    (Block, blocks),                  // stacked: (L, ...)
    (xj::Array, lnf_scale), (xj::Array, lnf_bias));
};

// x @ w for x (..., d) and w (d, e): one GEMM over all leading positions.
inline xj::Array linear(const xj::Array& x, const xj::Array& w) {
  xj::Shape out = x.shape();
  out.back() = w.dim(1);
  return xj::reshape(xj::matmul(xj::reshape(x, {x.size() / x.dim(-1), x.dim(-1)}), w), out);
}

// One pre-LN block on x (B, T, d); `causal` is the additive mask (T, T): 0 on and below the
// diagonal, a large negative number above.
inline xj::Array block(const Block& p, const xj::Array& x, const xj::Array& causal, std::int64_t heads) {
  const std::int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2), hd = d / heads;
  const xj::Array h = xj::layer_norm(x, p.ln1_scale, p.ln1_bias);
  // (B, T, 3, H, hd) -> (3, B, H, T, hd): queries, keys and values per head.
  const xj::Array qkv = xj::transpose(xj::reshape(linear(h, p.w_qkv), {B, T, 3, heads, hd}), {2, 0, 3, 1, 4});
  const xj::Array scores = xj::einsum("bhtd,bhsd->bhts", qkv[0], qkv[1]) * (1.0 / std::sqrt(static_cast<double>(hd))) + causal;
  const xj::Array heads_out = xj::einsum("bhts,bhsd->bhtd", xj::softmax(scores, -1), qkv[2]);
  xj::Array attn = linear(xj::reshape(xj::transpose(heads_out, {0, 2, 1, 3}), {B, T, d}), p.w_out);
  attn = xj::checkpoint_name(attn, "attn_out");
  const xj::Array y = x + attn;
  const xj::Array m = linear(xj::gelu(linear(xj::layer_norm(y, p.ln2_scale, p.ln2_bias), p.w_up) + p.b_up), p.w_down) + p.b_down;
  return y + m;
}

using BlockFn = std::function<std::pair<xj::Array, xj::None>(const xj::Array&, const Block&)>;

inline BlockFn body_for(const std::string& policy, const xj::Array& causal, std::int64_t heads) {
  auto plain = [causal, heads](const xj::Array& x, const Block& p) { return std::pair{block(p, x, causal, heads), xj::None{}}; };
  if (policy == "none") return plain;
  if (policy == "nothing_saveable") return xj::checkpoint(plain, {.policy = policies::nothing_saveable});
  if (policy == "dots_saveable") return xj::checkpoint(plain, {.policy = policies::dots_saveable});
  if (policy == "attn_out") return xj::checkpoint(plain, {.policy = policies::save_only_these_names({"attn_out"})});
  throw std::invalid_argument("unknown policy '" + policy + "' (none, nothing_saveable, dots_saveable, attn_out)");
}

inline xj::Array causal_mask(std::int64_t T, xj::DType dtype) {
  std::vector<double> m(static_cast<std::size_t>(T * T));
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j) m[static_cast<std::size_t>(i * T + j)] = j <= i ? 0.0 : -1e9;
  return xj::astype(xj::array<double>(m, {T, T}), dtype);
}

// Logits (B, T, V) of tokens (B, T).
inline xj::Array forward(const Gpt& p, const xj::Array& tokens, const BlockFn& body) {
  const xj::Array x0 = xj::take(p.token_embedding, tokens, 0) + p.position_embedding;
  const xj::Array x = xj::scan(body, x0, p.blocks).first;
  const xj::Array h = xj::layer_norm(x, p.lnf_scale, p.lnf_bias);
  return linear(h, xj::transpose(p.token_embedding));
}

// Mean next-token cross-entropy: tokens (B, T + 1), inputs the first T, targets the last T.
inline xj::Array loss_of(const Gpt& p, const xj::Array& tokens, const BlockFn& body) {
  const std::int64_t B = tokens.dim(0), T = tokens.dim(1) - 1;
  const xj::Array inputs = xj::slice(tokens, {0, 0}, {B, T}), targets = xj::slice(tokens, {0, 1}, {B, T + 1});
  const xj::Array logits = forward(p, inputs, body);
  return xj::mean(xj::optim::softmax_cross_entropy_with_integer_labels(logits, targets));
}

/// GPT-2's initialization (normal 0.02; the residual projections scaled by 1/sqrt(2 layers)).
inline Gpt init(std::int64_t vocab, std::int64_t context, std::int64_t width, std::int64_t layers, xj::DType dtype,
                std::uint64_t seed) {
  const std::int64_t L = layers, d = width;
  xj::Array key = xj::random::key(seed);
  auto normal = [&](xj::Shape s, double scale) {
    xj::Array ks = xj::random::split(key);
    key = ks[0];
    return xj::astype(xj::random::normal(ks[1], s, xj::f32) * scale, dtype);
  };
  const double residual_scale = 0.02 / std::sqrt(2.0 * static_cast<double>(L));  // GPT-2's
  Block b{xj::ones({L, d}, dtype), xj::zeros({L, d}, dtype), normal({L, d, 3 * d}, 0.02), normal({L, d, d}, residual_scale),
          xj::ones({L, d}, dtype), xj::zeros({L, d}, dtype), normal({L, d, 4 * d}, 0.02), xj::zeros({L, 4 * d}, dtype),
          normal({L, 4 * d, d}, residual_scale), xj::zeros({L, d}, dtype)};
  return Gpt{normal({vocab, d}, 0.02), normal({context, d}, 0.01), b, xj::ones({d}, dtype), xj::zeros({d}, dtype)};
}

}  // namespace gpt
