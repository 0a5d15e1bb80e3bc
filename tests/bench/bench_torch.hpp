// The libtorch side of xjax-bench (issue 15), implemented in bench_torch.cpp, the only file that
// includes libtorch's headers (they take long to compile). This header uses std types only, so
// bench.cpp includes it without them. Built when meson finds libtorch (option `torch`), which
// then defines XJAX_BENCH_TORCH=1 for bench.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace bench_torch {

/// libtorch's version, e.g. "1.13.0".
const char* version();

/// Sets libtorch's intra-op thread count (torch::set_num_threads); returns the count in effect.
int set_threads(int n);

/// The relu chain of P1/P2 in libtorch: y = relu(y @ W[i]) for i < L, loss = sum(y^2), the
/// gradient w.r.t. every W[i]. W (L*d*d floats) and y0 (N*d) are copied into tensors once.
/// recompute = false: plain autograd over L leaf weights. recompute = true: a hand-written
/// per-layer recompute (libtorch's C++ API has no checkpoint): the forward runs without grad and
/// keeps the layer inputs; the backward re-runs each layer under autograd and differentiates it.
class ReluChain {
 public:
  ReluChain(const std::vector<float>& W, const std::vector<float>& y0, std::int64_t L, std::int64_t d,
            std::int64_t N, bool recompute);
  ~ReluChain();
  ReluChain(const ReluChain&) = delete;
  ReluChain& operator=(const ReluChain&) = delete;
  /// One gradient evaluation; the gradient stays in the object.
  void run();
  /// The gradient of the last run, L*d*d floats in W's layout.
  std::vector<float> grad() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// E1 in libtorch eager mode: c = a, then n_ops times c = c op b (op 0: +, 1: *, 2: matmul) on
/// d x d float tensors under torch::NoGradGuard, each op a separate libtorch call.
class Eager {
 public:
  Eager(const std::vector<float>& a, const std::vector<float>& b, std::int64_t d, int op);
  ~Eager();
  Eager(const Eager&) = delete;
  Eager& operator=(const Eager&) = delete;
  /// n_ops ops from c = a.
  void run(std::int64_t n_ops);
  /// c after the last run, d*d floats.
  std::vector<float> result() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// torch.optim.Adam (decoupled = false, weight_decay 0) or torch.optim.AdamW on one parameter
/// vector p0, its gradient at step k set to grads[k]: the parameters after every step.
std::vector<std::vector<float>> adam_trajectory(const std::vector<float>& p0, const std::vector<std::vector<float>>& grads,
                                                double lr, double b1, double b2, double eps, double weight_decay,
                                                bool decoupled);

/// T1's model in libtorch (issue 29): the GPT of examples/transformer_model.hpp written with
/// torch ops as a PyTorch user would (each layer's parameters their own leaves, as in an
/// nn.ModuleList), trained with torch.optim.AdamW. `leaves` are gpt::Gpt's in tree order:
/// token_embedding, position_embedding, the ten block leaves stacked on a layer axis (Block's
/// order), lnf_scale, lnf_bias. recompute: nothing_saveable's twin, a hand-written per-block
/// recompute (libtorch's C++ API has no checkpoint): the forward runs without grad and keeps each
/// block's input; the backward re-runs each block under autograd and differentiates it alone.
class Gpt {
 public:
  struct Leaf {
    std::vector<float> values;
    std::vector<std::int64_t> shape;
  };
  Gpt(const std::vector<Leaf>& leaves, std::int64_t heads, double lr, double b1, double b2, double eps,
      double weight_decay, bool recompute);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;
  /// One training step on `tokens` (batch rows of T + 1 bytes): the mean next-token
  /// cross-entropy of the first T against the last T, its gradient, one AdamW update. Returns the
  /// loss (at the parameters before the update).
  double step(const std::vector<std::int32_t>& tokens, std::int64_t batch);
  /// The parameters, as the constructor's leaves (layers stacked again).
  std::vector<std::vector<float>> parameters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// C1-C3 in libtorch (issue 30): forward and backward of one layer, y = conv2d(x, w) (stride 1,
/// padding (k - 1) / 2, `groups`) or, with a window of 0, y = max_pool2d(x, 3, stride 2, padding
/// 1); then y.backward(g). x is (N, C, H, W), w (O, C / groups, k, k), g y's shape, all given in
/// NCHW order; channels_last stores x, w and g in PyTorch's channels_last memory format (NHWC).
class ConvLayer {
 public:
  ConvLayer(const std::vector<float>& x, const std::vector<std::int64_t>& x_shape, const std::vector<float>& w,
            const std::vector<std::int64_t>& w_shape, const std::vector<float>& g, std::int64_t groups, bool channels_last);
  ~ConvLayer();
  ConvLayer(const ConvLayer&) = delete;
  ConvLayer& operator=(const ConvLayer&) = delete;
  void run();
  /// The gradient with respect to x of the last run, in NCHW order.
  std::vector<float> grad_input() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench_torch
