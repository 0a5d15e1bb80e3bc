// The libtorch workloads of xjax-bench (see bench_torch.hpp): the relu chain of P1/P2 with plain
// autograd and with a hand-written per-layer recompute, and E1's eager ops. The only file of the
// benchmark that includes libtorch's headers (as system headers: -Werror covers this code only).
#include "bench_torch.hpp"

#include <torch/autograd.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <cstring>

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

}  // namespace bench_torch
