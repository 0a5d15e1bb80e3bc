// bench_conv.cpp: xjax-bench's C1-C3 (issue 30). One layer, forward and backward (the gradients
// with respect to the input and the kernel), as a user writes it: xj::vjp of the convolution and
// its pullback on a fixed cotangent; libtorch's y = conv2d(x, w); y.backward(g) on the same
// values; and the GEMM-bound limit, the layer's multiply-adds at this machine's sgemm rate
// (measured here on a 1024^3 product). Each at 1 and 2 threads (OpenBLAS's for xjax and the limit,
// OpenBLAS's and libtorch's intra-op threads for libtorch).
#include <cblas.h>

#include "bench_rows.hpp"
#include "xjax/xjax.hpp"

#if XJAX_BENCH_TORCH
#include "bench_torch.hpp"
#endif

namespace xj = xjax;

namespace bench {
namespace {

struct Layer {
  const char* workload;
  const char* what;
  std::int64_t n, c, o, hw, k, groups;
  bool pool;  // max_pool 3x3 stride 2 padding 1 instead of a convolution
};

/// Single-precision GEMM rate (flop/s) of a 1024^3 product at the current OpenBLAS threads.
double sgemm_rate(int reps) {
  const std::int64_t m = 1024;
  std::vector<float> a = randn(m * m, 1, 1.0), b = randn(m * m, 2, 1.0), c(static_cast<std::size_t>(m * m));
  const double s = median_seconds([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(m), int(m), 1.0f, a.data(), int(m), b.data(), int(m),
                0.0f, c.data(), int(m));
  }, reps);
  return 2.0 * double(m * m * m) / s;
}

/// xjax's layer: the convolution (or pool) of x with w in the given layout.
xj::Array layer_fn(const Layer& l, const xj::Array& x, const xj::Array& w, bool nhwc) {
  const std::int64_t pad = (l.k - 1) / 2;
  if (l.pool) {
    if (nhwc) return xj::max_pool(x, {3, 3}, {2, 2}, xj::Padding{{1, 1}, {1, 1}});
    return xj::reduce_window(x, -INFINITY, xj::WindowOp::max, {1, 1, 3, 3}, {1, 1, 2, 2}, xj::Padding{{0, 0}, {0, 0}, {1, 1}, {1, 1}});
  }
  const xj::ConvDimensionNumbers dn = nhwc ? xj::ConvDimensionNumbers{"NHWC", "HWIO", "NHWC"}
                                           : xj::ConvDimensionNumbers{"NCHW", "OIHW", "NCHW"};
  return xj::conv_general_dilated(x, w, {1, 1}, xj::Padding{{pad, pad}, {pad, pad}}, {}, {}, dn, l.groups);
}

void bench_layer(std::vector<Row>& rows, const Layer& l, bool nhwc, int reps, int torch_threads_after) {
  const std::int64_t out_hw = l.pool ? (l.hw - 1) / 2 + 1 : l.hw;
  const std::vector<std::int64_t> xs{l.n, l.c, l.hw, l.hw}, ws{l.o, l.c / l.groups, l.k, l.k}, gs{l.n, l.pool ? l.c : l.o, out_hw, out_hw};
  const auto size = [](const std::vector<std::int64_t>& s) { return s[0] * s[1] * s[2] * s[3]; };
  const std::vector<float> xv = randn(size(xs), 11, 1.0), wv = l.pool ? std::vector<float>{} : randn(size(ws), 12, 0.1),
                           gv = randn(size(gs), 13, 1.0);
  // NCHW values; NHWC arrays are their transposes (HWIO for the kernel).
  xj::Array x = xj::array<float>(xv, xs), g = xj::array<float>(gv, gs), w = l.pool ? x : xj::array<float>(wv, ws);
  if (nhwc) {
    x = xj::transpose(x, {0, 2, 3, 1});
    g = xj::transpose(g, {0, 2, 3, 1});
    if (!l.pool) w = xj::transpose(w, {2, 3, 1, 0});
    x = x + 0.0f;  // materialize the transposes (contiguous in the new layout)
    g = g + 0.0f;
    w = w + 0.0f;
  }
  const double flops = l.pool ? 0.0 : 3.0 * 2.0 * double(l.n * l.o * (l.c / l.groups) * l.k * l.k * out_hw * out_hw);
  const std::string layout = nhwc ? "NHWC" : "NCHW";
  std::string shape = fmt("N=%.0f, ", double(l.n)) + fmt("%.0f", double(l.c)) + (l.pool ? "" : fmt("->%.0f", double(l.o))) +
                      fmt(" ch, %.0f^2", double(l.hw));
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    xj::Array gx;
    const double xt = median_seconds([&] {
      if (l.pool) {
        auto [y, pullback] = xj::vjp([&](const xj::Array& a) { return layer_fn(l, a, w, nhwc); }, x);
        gx = std::get<0>(pullback(g));
      } else {
        auto [y, pullback] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return layer_fn(l, a, b, nhwc); }, x, w);
        gx = std::get<0>(pullback(g));
      }
    }, reps);
    const std::string variant = std::string(l.what) + " " + layout + ", " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "");
    std::string note = shape;
    const double limit = l.pool ? 0.0 : flops / sgemm_rate(reps);
#if XJAX_BENCH_TORCH
    bench_torch::set_threads(threads);
    bench_torch::ConvLayer torch(xv, xs, wv, ws, gv, l.groups, nhwc);
    const double tt = median_seconds([&] { torch.run(); }, reps);
    bench_torch::set_threads(torch_threads_after);
    const xj::Array gx_nchw = nhwc ? xj::transpose(gx, {0, 3, 1, 2}) + 0.0f : gx;
    const std::vector<float> mine = gx_nchw.to_vector<float>(), theirs = torch.grad_input();
    note += fmt("; d/dx vs libtorch %.1e", rel_err(mine.data(), theirs.data(), std::int64_t(mine.size())));
    if (limit > 0) note += fmt("; %.2fx the GEMM-bound limit", xt / limit);
    rows.push_back({l.workload, variant, "xjax", xt, xt / tt, flops / xt * 1e-9, 0, 0, note});
    rows.push_back({l.workload, variant, "libtorch", tt, 1.0, flops / tt * 1e-9, 0, 0, ""});
#else
    (void)torch_threads_after;
    if (limit > 0) note += fmt("; %.2fx the GEMM-bound limit", xt / limit);
    rows.push_back({l.workload, variant, "xjax", xt, limit > 0 ? xt / limit : 0, flops / xt * 1e-9, 0, 0, note + "; no libtorch"});
#endif
    if (limit > 0) rows.push_back({l.workload, variant, "GEMM-bound limit", limit, 1.0, flops / limit * 1e-9, 0, 0, "3 convolutions' flops at the sgemm rate of 1024^3"});
  }
  openblas_set_num_threads(1);
}

}  // namespace

void bench_conv(std::vector<Row>& rows, bool quick, int reps, int torch_threads_after) {
  const std::int64_t n = quick ? 2 : 32, c = quick ? 16 : 64, hw = quick ? 28 : 56;
  const Layer layers[] = {
      {"C1", "3x3 conv", n, c, c, hw, 3, 1, false},
      {"C2", "depthwise 3x3", n, c, c, hw, 3, c, false},
      {"C2", "pointwise 1x1", n, c, c, hw, 1, 1, false},
      {"C3", "max_pool 3x3 stride 2", n, c, c, hw, 3, 1, true},
  };
  const int blas_threads = openblas_get_num_threads();
  for (const Layer& l : layers)
    for (bool nhwc : {false, true}) bench_layer(rows, l, nhwc, reps, torch_threads_after);
  openblas_set_num_threads(blas_threads);
}

}  // namespace bench
