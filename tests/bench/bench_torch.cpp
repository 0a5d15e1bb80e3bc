// The libtorch workloads of xjax-bench (see bench_torch.hpp): the relu chain of P1/P2 with plain
// autograd and with a hand-written per-layer recompute, E1's eager ops, O1's optimizers and T1's
// transformer. The only file of the
// benchmark that includes libtorch's headers (as system headers: -Werror covers this code only).
#include "bench_torch.hpp"

#include <torch/autograd.h>
#include <ATen/Functions.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace bench_torch {

namespace {

/// A new float tensor of the given shape holding a copy of src[0, numel).
torch::Tensor copy_of(const float* src, at::IntArrayRef shape) {
  torch::Tensor t = torch::empty(shape, torch::kFloat32);
  std::memcpy(t.data_ptr<float>(), src, static_cast<std::size_t>(t.numel()) * sizeof(float));
  return t;
}

/// The floats of a tensor, in row-major order.
std::vector<float> floats_of(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

}  // namespace

const char* version() { return TORCH_VERSION; }

int set_threads(int n) {
  torch::set_num_threads(n);
  return torch::get_num_threads();
}

// ---- P1 / P2: the relu chain ---------------------------------------------------------------

struct ReluChain::Impl {
  std::vector<torch::Tensor> W;   // one d x d leaf per layer (requires_grad), as layer parameters
  torch::Tensor y0;               // N x d
  bool recompute = false;
  std::vector<torch::Tensor> dW;  // the last run's gradient, one d x d tensor per layer

  /// Plain autograd: the forward records the graph, backward() fills each W[i].grad().
  void run_plain() {
    for (auto& w : W) w.mutable_grad().reset();  // zero_grad(set_to_none): fresh gradients
    torch::Tensor y = y0;
    for (const auto& w : W) y = torch::relu(torch::matmul(y, w));
    (y * y).sum().backward();
    for (std::size_t i = 0; i < W.size(); ++i) dW[i] = W[i].grad();
  }

  /// Per-layer recompute: a forward without grad keeps only the layer inputs; the backward walks
  /// the layers in reverse, re-runs each one under autograd and differentiates it alone
  /// (what torch.utils.checkpoint does per layer).
  void run_recompute() {
    const std::size_t L = W.size();
    std::vector<torch::Tensor> inputs(L);
    torch::Tensor y = y0;
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < L; ++i) {
        inputs[i] = y;
        y = torch::relu(torch::matmul(y, W[i]));
      }
    }
    torch::Tensor g = 2 * y;  // d sum(y^2) / dy
    for (std::size_t i = L; i-- > 0;) {
      const bool need_dx = i > 0;  // y0 needs no gradient
      torch::Tensor x = inputs[i].detach().requires_grad_(need_dx);
      torch::Tensor out = torch::relu(torch::matmul(x, W[i]));
      if (need_dx) {
        auto grads = torch::autograd::grad({out}, {x, W[i]}, {g});
        g = grads[0];
        dW[i] = grads[1];
      } else {
        dW[i] = torch::autograd::grad({out}, {W[i]}, {g})[0];
      }
    }
  }
};

ReluChain::ReluChain(const std::vector<float>& W, const std::vector<float>& y0, std::int64_t L, std::int64_t d,
                     std::int64_t N, bool recompute)
    : impl_(std::make_unique<Impl>()) {
  for (std::int64_t i = 0; i < L; ++i) impl_->W.push_back(copy_of(W.data() + i * d * d, {d, d}).requires_grad_());
  impl_->y0 = copy_of(y0.data(), {N, d});
  impl_->recompute = recompute;
  impl_->dW.resize(static_cast<std::size_t>(L));
}

ReluChain::~ReluChain() = default;

void ReluChain::run() {
  if (impl_->recompute) impl_->run_recompute();
  else impl_->run_plain();
}

std::vector<float> ReluChain::grad() const { return floats_of(torch::stack(impl_->dW)); }

// ---- E1: eager per-op cost -----------------------------------------------------------------

struct Eager::Impl {
  torch::Tensor a, b, c;  // d x d; c: the last run's result
  int op = 0;
};

Eager::Eager(const std::vector<float>& a, const std::vector<float>& b, std::int64_t d, int op)
    : impl_(std::make_unique<Impl>()) {
  impl_->a = copy_of(a.data(), {d, d});
  impl_->b = copy_of(b.data(), {d, d});
  impl_->op = op;
}

Eager::~Eager() = default;

void Eager::run(std::int64_t n_ops) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& b = impl_->b;
  torch::Tensor c = impl_->a;
  for (std::int64_t i = 0; i < n_ops; ++i) {
    if (impl_->op == 0) c = c + b;
    else if (impl_->op == 1) c = c * b;
    else c = torch::matmul(c, b);
  }
  impl_->c = c;
}

std::vector<float> Eager::result() const { return floats_of(impl_->c); }

// ---- O1: the optimizers ----------------------------------------------------------------------

std::vector<std::vector<float>> adam_trajectory(const std::vector<float>& p0, const std::vector<std::vector<float>>& grads,
                                                double lr, double b1, double b2, double eps, double weight_decay,
                                                bool decoupled) {
  const auto n = static_cast<std::int64_t>(p0.size());
  torch::Tensor p = copy_of(p0.data(), {n});
  std::vector<torch::Tensor> params{p};
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (decoupled)
    opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr).betas({b1, b2}).eps(eps).weight_decay(weight_decay));
  else
    opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr).betas({b1, b2}).eps(eps).weight_decay(weight_decay));
  std::vector<std::vector<float>> out;
  for (const auto& g : grads) {
    p.mutable_grad() = copy_of(g.data(), {n});
    opt->step();
    out.push_back(floats_of(p));
  }
  return out;
}

// ---- T1: the transformer -----------------------------------------------------------------------

struct Gpt::Impl {
  // One block's leaves, in gpt::Block's order.
  enum { kLn1Scale, kLn1Bias, kQkv, kOut, kLn2Scale, kLn2Bias, kUp, kUpBias, kDown, kDownBias, kBlockLeaves };
  torch::Tensor token_embedding, position_embedding, lnf_scale, lnf_bias;
  std::vector<std::vector<torch::Tensor>> layers;  // [layer][leaf]
  std::int64_t heads = 1;
  bool recompute = false;
  std::unique_ptr<torch::optim::AdamW> opt;
  torch::Tensor causal;  // (T, T): 0 on and below the diagonal, -1e9 above (as gpt::causal_mask)

  torch::Tensor embed(const torch::Tensor& inputs) const {  // (B, T) int64 -> (B, T, d)
    const auto B = inputs.size(0), T = inputs.size(1);
    return token_embedding.index_select(0, inputs.reshape({-1})).view({B, T, -1}) + position_embedding;
  }

  torch::Tensor block(std::size_t l, const torch::Tensor& x) const {
    const std::vector<torch::Tensor>& p = layers[l];
    const auto B = x.size(0), T = x.size(1), d = x.size(2), hd = d / heads;
    const torch::Tensor h = torch::layer_norm(x, {d}, p[kLn1Scale], p[kLn1Bias], 1e-5);
    const torch::Tensor qkv = torch::matmul(h, p[kQkv]).view({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    const torch::Tensor scores =
        torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd))) + causal;
    const torch::Tensor heads_out = torch::matmul(torch::softmax(scores, -1), qkv[2]);
    const torch::Tensor y = x + torch::matmul(heads_out.permute({0, 2, 1, 3}).reshape({B, T, d}), p[kOut]);
    const torch::Tensor up = torch::matmul(torch::layer_norm(y, {d}, p[kLn2Scale], p[kLn2Bias], 1e-5), p[kUp]) + p[kUpBias];
    return y + torch::matmul(torch::gelu(up, "tanh"), p[kDown]) + p[kDownBias];
  }

  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets) const {
    const torch::Tensor h = torch::layer_norm(x, {x.size(2)}, lnf_scale, lnf_bias, 1e-5);
    const torch::Tensor logits = torch::matmul(h, token_embedding.t());
    return torch::cross_entropy_loss(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}));
  }

  /// Plain autograd over the whole model.
  torch::Tensor loss_and_backward(const torch::Tensor& inputs, const torch::Tensor& targets) {
    torch::Tensor x = embed(inputs);
    for (std::size_t l = 0; l < layers.size(); ++l) x = block(l, x);
    torch::Tensor loss = head_loss(x, targets);
    loss.backward();
    return loss;
  }

  /// Per-block recompute: the forward keeps each block's input only.
  torch::Tensor loss_and_backward_recomputed(const torch::Tensor& inputs, const torch::Tensor& targets) {
    std::vector<torch::Tensor> block_inputs(layers.size());
    torch::Tensor x;
    {
      torch::NoGradGuard no_grad;
      x = embed(inputs);
      for (std::size_t l = 0; l < layers.size(); ++l) {
        block_inputs[l] = x;
        x = block(l, x);
      }
    }
    torch::Tensor top = x.detach().requires_grad_(true);
    torch::Tensor loss = head_loss(top, targets);
    loss.backward();
    torch::Tensor g = top.grad();
    for (std::size_t l = layers.size(); l-- > 0;) {
      torch::Tensor in = block_inputs[l].detach().requires_grad_(true);
      block(l, in).backward(g);
      g = in.grad();
    }
    embed(inputs).backward(g);
    return loss;
  }
};

Gpt::Gpt(const std::vector<Leaf>& leaves, std::int64_t heads, double lr, double b1, double b2, double eps,
         double weight_decay, bool recompute)
    : impl_(std::make_unique<Impl>()) {
  if (leaves.size() != 4 + Impl::kBlockLeaves) throw std::invalid_argument("bench_torch::Gpt: expected 14 leaves");
  auto leaf = [](const Leaf& l) { return copy_of(l.values.data(), l.shape).requires_grad_(); };
  Impl& m = *impl_;
  m.token_embedding = leaf(leaves[0]);
  m.position_embedding = leaf(leaves[1]);
  m.lnf_scale = leaf(leaves[2 + Impl::kBlockLeaves]);
  m.lnf_bias = leaf(leaves[3 + Impl::kBlockLeaves]);
  const std::int64_t L = leaves[2].shape.at(0);
  m.layers.resize(static_cast<std::size_t>(L));
  for (int k = 0; k < Impl::kBlockLeaves; ++k) {
    const Leaf& stacked = leaves[static_cast<std::size_t>(2 + k)];
    const std::vector<std::int64_t> shape(stacked.shape.begin() + 1, stacked.shape.end());
    const std::size_t per_layer = stacked.values.size() / static_cast<std::size_t>(L);
    for (std::int64_t l = 0; l < L; ++l)
      m.layers[static_cast<std::size_t>(l)].push_back(
          copy_of(stacked.values.data() + static_cast<std::size_t>(l) * per_layer, shape).requires_grad_());
  }
  m.heads = heads;
  m.recompute = recompute;
  std::vector<torch::Tensor> params{m.token_embedding, m.position_embedding};
  for (const auto& layer : m.layers) params.insert(params.end(), layer.begin(), layer.end());
  params.push_back(m.lnf_scale);
  params.push_back(m.lnf_bias);
  m.opt = std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(lr).betas({b1, b2}).eps(eps).weight_decay(weight_decay));
}

Gpt::~Gpt() = default;

double Gpt::step(const std::vector<std::int32_t>& tokens, std::int64_t batch) {
  Impl& m = *impl_;
  const std::int64_t T = static_cast<std::int64_t>(tokens.size()) / batch - 1;
  if (!m.causal.defined() || m.causal.size(0) != T) {
    m.causal = torch::triu(torch::full({T, T}, -1e9, torch::kFloat32), 1);
  }
  torch::Tensor all = torch::empty({batch, T + 1}, torch::kInt32);
  std::memcpy(all.data_ptr<std::int32_t>(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  all = all.to(torch::kInt64);
  const torch::Tensor inputs = all.slice(1, 0, T), targets = all.slice(1, 1, T + 1);
  m.opt->zero_grad();
  const torch::Tensor loss = m.recompute ? m.loss_and_backward_recomputed(inputs, targets) : m.loss_and_backward(inputs, targets);
  m.opt->step();
  return loss.item<double>();
}

std::vector<std::vector<float>> Gpt::parameters() const {
  const Impl& m = *impl_;
  std::vector<std::vector<float>> out{floats_of(m.token_embedding), floats_of(m.position_embedding)};
  for (int k = 0; k < Impl::kBlockLeaves; ++k) {
    std::vector<torch::Tensor> per_layer;
    for (const auto& layer : m.layers) per_layer.push_back(layer[static_cast<std::size_t>(k)].detach());
    out.push_back(floats_of(torch::stack(per_layer)));
  }
  out.push_back(floats_of(m.lnf_scale));
  out.push_back(floats_of(m.lnf_bias));
  return out;
}

// ---- C1-C3: one convolution or pooling layer, forward and backward -------------------------

struct ConvLayer::Impl {
  torch::Tensor x, w, g;  // x requires grad; w too for a convolution
  std::int64_t groups = 1;
  bool pool = false;
};

ConvLayer::ConvLayer(const std::vector<float>& x, const std::vector<std::int64_t>& x_shape, const std::vector<float>& w,
                     const std::vector<std::int64_t>& w_shape, const std::vector<float>& g, std::int64_t groups,
                     bool channels_last)
    : impl_(std::make_unique<Impl>()) {
  const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  impl_->pool = w.empty();
  impl_->groups = groups;
  impl_->x = copy_of(x.data(), x_shape).contiguous(format).requires_grad_(true);
  if (!impl_->pool) impl_->w = copy_of(w.data(), w_shape).contiguous(format).requires_grad_(true);
  torch::Tensor probe;
  {
    torch::NoGradGuard no_grad;
    probe = impl_->pool ? at::max_pool2d(impl_->x, {3, 3}, {2, 2}, {1, 1})
                        : at::conv2d(impl_->x, impl_->w, {}, {1, 1}, {(w_shape[2] - 1) / 2, (w_shape[3] - 1) / 2}, {1, 1}, groups);
  }
  impl_->g = copy_of(g.data(), probe.sizes()).contiguous(format);
}
ConvLayer::~ConvLayer() = default;

void ConvLayer::run() {
  impl_->x.mutable_grad().reset();
  if (!impl_->pool) impl_->w.mutable_grad().reset();
  const std::int64_t pad = impl_->pool ? 1 : (impl_->w.size(2) - 1) / 2;
  torch::Tensor y = impl_->pool ? at::max_pool2d(impl_->x, {3, 3}, {2, 2}, {1, 1})
                                : at::conv2d(impl_->x, impl_->w, {}, {1, 1}, {pad, pad}, {1, 1}, impl_->groups);
  y.backward(impl_->g);
}

std::vector<float> ConvLayer::grad_input() const { return floats_of(impl_->x.grad()); }

}  // namespace bench_torch
