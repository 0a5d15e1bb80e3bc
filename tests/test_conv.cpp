// test_conv.cpp: conv_general_dilated, conv, conv_transpose, reduce_window and the pools against
// plain loops in double written here from the definitions (every padding mode, strides, both
// dilations, feature and batch groups, 1-D / 2-D / 3-D, several layouts); derivatives against
// finite differences and against the adjoint loops (the transpose rules are the vjp of the naive
// loop); conv_transpose as the gradient of conv; vmap against a loop of members; the errors.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "reference/conv_loops.hpp"
#include "test_util.hpp"
#include "xjax/convolution.hpp"

namespace xj = xjax;
using test_util::contains;
using test_util::vec;
using Ints = std::vector<std::int64_t>;
using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

namespace {

// ---- the reference convolution: tests/reference/conv_loops.hpp ------------------------------------

using conv_reference::ConvCase;
using conv_reference::naive_conv;

// The adjoint loops at x, w and the cotangent ct (conv_reference::adjoint_conv).
std::pair<std::vector<double>, std::vector<double>> adjoint_conv(const ConvCase& c, const xj::Array& x, const xj::Array& w,
                                                                 const xj::Array& ct) {
  return conv_reference::adjoint_conv(c, vec(x), vec(w), vec(ct));
}

std::int64_t flat(const xj::Shape& shape, const Ints& index) {
  std::int64_t f = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + index[i];
  return f;
}

xj::Array run_conv(const ConvCase& c, const xj::Array& x, const xj::Array& w) {
  return xj::conv_general_dilated(x, w, c.strides, c.pads, c.lhs_dil, c.rhs_dil, {c.dl, c.dr, c.dout}, c.groups,
                                  c.batch_groups);
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"2-D NCHW plain", {2, 3, 5, 6}, {4, 3, 3, 2}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D NCHW strides + padding", {2, 3, 7, 6}, {4, 3, 3, 3}, {2, 1}, {{1, 1}, {2, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D NHWC / HWIO", {2, 6, 5, 3}, {3, 2, 3, 4}, {1, 2}, {{1, 0}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC"},
      {"2-D mixed layouts", {5, 2, 3, 6}, {3, 4, 2, 3}, {1, 1}, {{0, 1}, {1, 0}}, {1, 1}, {1, 1}, "HNCW", "WOHI", "CWNH"},
      {"2-D negative padding", {1, 2, 8, 7}, {3, 2, 3, 2}, {1, 1}, {{-1, 0}, {0, -2}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D rhs dilation", {2, 2, 8, 9}, {3, 2, 3, 2}, {1, 2}, {{1, 1}, {0, 0}}, {1, 1}, {2, 3}, "NCHW", "OIHW", "NCHW"},
      {"2-D lhs dilation", {2, 2, 4, 3}, {3, 2, 3, 2}, {1, 1}, {{2, 2}, {1, 1}}, {2, 3}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D both dilations + stride", {1, 2, 5, 4}, {2, 2, 2, 3}, {2, 1}, {{1, 0}, {2, 1}}, {2, 2}, {2, 1}, "NCHW", "OIHW", "NCHW"},
      // 32 output channels, one group: the patch tiles' small-product loops (conv.cpp's
      // im2col_small_gemm) where the kernel set has them; its input gradient too (16 channels)
      {"2-D NCHW, 32 output channels", {2, 16, 9, 8}, {32, 16, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"1-D NWC, 16 output channels, stride 2, rhs dilation", {2, 30, 8}, {3, 8, 16}, {2}, {{1, 2}}, {1}, {2}, "NWC", "WIO", "NWC"},
      {"2-D NHWC, 16 output channels, lhs dilation, negative padding", {1, 5, 6, 4}, {2, 3, 4, 16}, {1, 1}, {{-1, 1}, {1, 0}}, {2, 1}, {1, 1}, "NHWC", "HWIO", "NHWC"},
      {"3-D NCDHW, 16 output channels", {1, 3, 4, 5, 6}, {16, 3, 2, 2, 3}, {1, 2, 1}, {{0, 1}, {1, 1}, {1, 0}}, {1, 1, 1}, {1, 1, 1}, "NCDHW", "OIDHW", "NCDHW"},
      {"2-D feature groups", {2, 6, 5, 5}, {4, 3, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 2, 1},
      {"2-D depthwise", {2, 6, 7, 4}, {3, 3, 1, 4}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 4, 1},
      {"2-D depthwise x2", {2, 6, 5, 3}, {3, 3, 1, 6}, {2, 1}, {{1, 1}, {0, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 3, 1},
      {"2-D depthwise, 70 channels (the register-blocked loop and its tail)", {2, 4, 5, 70}, {3, 3, 1, 70}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 70, 1},
      // depthwise with the channels leading (the channels-first loop; rows of 37-40 run its vector
      // interior and its tail, the edges through the table)
      {"2-D depthwise NCHW", {2, 4, 7, 40}, {4, 1, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 4, 1},
      {"2-D depthwise NCHW x2, strides, rhs dilation", {2, 3, 9, 37}, {6, 1, 3, 2}, {2, 1}, {{1, 0}, {2, 1}}, {1, 1}, {2, 3}, "NCHW", "OIHW", "NCHW", 3, 1},
      {"2-D depthwise NCHW x3, stride 1 (an input plane's padded rows serve its three outputs)", {2, 2, 6, 35}, {6, 1, 3, 3}, {1, 1}, {{1, 1}, {2, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 2, 1},
      {"2-D depthwise NCHW, HWIO kernel, negative padding", {2, 5, 6, 33}, {3, 3, 1, 5}, {1, 1}, {{0, -1}, {-2, 1}}, {1, 1}, {1, 1}, "NCHW", "HWIO", "NCHW", 5, 1},
      {"1-D depthwise NCH, lhs dilation", {2, 3, 11}, {3, 1, 3}, {1}, {{2, 1}}, {2}, {1}, "NCH", "OIH", "NCH", 3, 1},
      {"3-D depthwise NCDHW", {1, 2, 3, 4, 20}, {2, 1, 2, 2, 3}, {1, 1, 1}, {{1, 0}, {0, 1}, {1, 1}}, {1, 1, 1}, {1, 1, 1}, "NCDHW", "OIDHW", "NCDHW", 2, 1},
      {"2-D batch groups", {6, 2, 5, 4}, {6, 2, 2, 3}, {1, 1}, {{0, 1}, {1, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 3},
      {"2-D pointwise", {3, 4, 5, 6}, {7, 4, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"1-D", {3, 2, 9}, {4, 2, 3}, {2}, {{1, 2}}, {1}, {2}, "NCH", "OIH", "NCH"},
      {"1-D NWC", {2, 11, 3}, {4, 3, 2}, {3}, {{0, 0}}, {1}, {1}, "NWC", "WIO", "NWC"},
      {"3-D", {1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {{1, 0}, {1, 1}, {0, 1}}, {1, 1, 1}, {1, 1, 2}, "NCDHW", "OIDHW", "NCDHW"},
      {"3-D NDHWC groups", {2, 3, 4, 3, 4}, {2, 2, 2, 2, 6}, {1, 1, 2}, {{0, 0}, {1, 0}, {1, 1}}, {1, 2, 1}, {1, 1, 1}, "NDHWC", "DHWIO", "NDHWC", 2, 1},
      {"window larger than output (a weight gradient's shape)", {4, 3, 9, 8}, {2, 3, 7, 8}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"full window (one output position), batch groups", {4, 3, 5, 4}, {6, 3, 5, 4}, {2, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 2},
      {"2-D pointwise, rhs stored (I, O)", {2, 3, 4, 5}, {3, 4, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "IOHW", "NCHW"},
      // 8 x 8 positions per image: the product loops (conv.cpp's channels_first_pointwise), both
      // storages of the kernel
      {"2-D pointwise, 8 x 8 positions", {3, 5, 8, 8}, {7, 5, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D pointwise, an empty spatial dim (its kernel gradient: zeros, no product)", {2, 3, 0, 4}, {8, 3, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
      {"2-D pointwise, 8 x 8 positions, rhs stored (I, O)", {2, 3, 8, 8}, {3, 6, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "IOHW", "NCHW"},
      {"empty output", {1, 2, 2, 2}, {3, 2, 3, 3}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW"},
  };
  return cases;
}

const ConvCase& conv_case(const std::string& what) {
  for (const ConvCase& c : conv_cases())
    if (what == c.what) return c;
  throw std::invalid_argument("no conv case " + what);
}

// Every element within tol (relative, past 1) of want; an infinite want (a window of padding
// only: the identity) exactly. One assertion per array, naming the first element off and the count.
void check_close_all(const xj::Array& got, const std::vector<double>& want, double tol) {
  const auto g = vec(got);
  REQUIRE(g.size() == want.size());
  std::size_t off = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::isinf(want[i]) ? g[i] == want[i] : std::abs(g[i] - want[i]) <= tol * (1.0 + std::abs(want[i]));
    if (!ok && off++ == 0) first = i;
  }
  INFO(off << " of " << g.size() << " elements off; the first, element " << first << ": got "
            << (off ? g[first] : 0.0) << ", want " << (off ? want[first] : 0.0));
  CHECK(off == 0);
}

}  // namespace

TEST_CASE("conv_general_dilated: values against the definition's loops, every case, f64 and f32") {
  unsigned seed = 1;
  for (const ConvCase& c : conv_cases())
    for (xj::DType dtype : {xj::f64, xj::f32}) {
      INFO(std::string(c.what) << " " << dtype);
      const xj::Array x = test_util::randn(c.lhs, seed++, dtype), w = test_util::randn(c.rhs, seed++, dtype);
      xj::Shape shape;
      const auto want = naive_conv(c, vec(x), vec(w), shape);
      const xj::Array y = run_conv(c, x, w);
      CHECK(y.shape() == shape);
      CHECK(y.dtype() == dtype);
      check_close_all(y, want, dtype == xj::f32 ? 1e-5 : 1e-12);
      // jit runs the same kernel through a plan.
      const auto jitted = xj::jit([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); });
      check_close_all(jitted(x, w), want, dtype == xj::f32 ? 1e-5 : 1e-12);
    }
}

TEST_CASE("conv_general_dilated, its gradients and the pools in bf16 and f16: computed in f32, rounded once") {
  // The narrow operands are widened, the f32 kernel run, its result rounded once: the same bits as
  // rounding the f32 convolution of the widened operands, and within half an ulp of the format
  // (plus f32's summation error) of the double loops on the narrow values.
  const ConvCase cases[] = {conv_case("2-D NCHW strides + padding"), conv_case("2-D depthwise"),
                            conv_case("2-D depthwise NCHW"), conv_case("2-D batch groups"), conv_case("1-D NWC")};
  unsigned seed = 4300;
  for (const ConvCase& c : cases)
    for (xj::DType dtype : {xj::bf16, xj::f16}) {
      INFO(std::string(c.what) << " " << dtype);
      const double tol = dtype == xj::bf16 ? 0x1p-8 : 0x1p-11;  // half an ulp at 1, relative
      const xj::Array x = xj::astype(test_util::randn(c.lhs, seed++, xj::f32), dtype);
      const xj::Array w = xj::astype(test_util::randn(c.rhs, seed++, xj::f32), dtype);
      xj::Shape shape;
      const auto want = naive_conv(c, vec(x), vec(w), shape);
      const xj::Array y = run_conv(c, x, w);
      CHECK(y.dtype() == dtype);
      check_close_all(y, want, tol);
      CHECK(vec(y) == vec(xj::astype(run_conv(c, xj::astype(x, xj::f32), xj::astype(w, xj::f32)), dtype)));
      // The gradients come back in the primal's dtype, against the adjoint loops.
      const xj::Array ct = xj::astype(test_util::randn(shape, seed++, xj::f32), dtype);
      const auto [dx, dw] = adjoint_conv(c, x, w, ct);
      auto [v, pullback] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); }, x, w);
      auto [gx, gw] = pullback(ct);
      CHECK(gx.dtype() == dtype);
      CHECK(gw.dtype() == dtype);
      check_close_all(gx, dx, tol);
      check_close_all(gw, dw, tol);
      // and are the f32 gradients of the widened values, rounded once.
      auto [v32, pullback32] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); },
                                       xj::astype(x, xj::f32), xj::astype(w, xj::f32));
      auto [gx32, gw32] = pullback32(xj::astype(ct, xj::f32));
      CHECK(vec(v) == vec(xj::astype(v32, dtype)));
      CHECK(vec(gx) == vec(xj::astype(gx32, dtype)));
      CHECK(vec(gw) == vec(xj::astype(gw32, dtype)));
    }
  // The pools: max picks an element (exact); avg sums in f32 and rounds once.
  for (xj::DType dtype : {xj::bf16, xj::f16}) {
    INFO(dtype);
    const xj::Array x = xj::astype(test_util::randn({2, 7, 6, 3}, 4400, xj::f32), dtype);
    const xj::Array x32 = xj::astype(x, xj::f32);
    const xj::Array mp = xj::max_pool(x, {3, 2}, {2, 2}, "SAME");
    CHECK(mp.dtype() == dtype);
    CHECK(vec(mp) == vec(xj::max_pool(x32, {3, 2}, {2, 2}, "SAME")));
    const xj::Array ap = xj::avg_pool(x, {2, 2}, {1, 1});
    CHECK(ap.dtype() == dtype);
    check_close_all(ap, vec(xj::avg_pool(xj::astype(x, xj::f64), {2, 2}, {1, 1})), dtype == xj::bf16 ? 0x1p-8 : 0x1p-11);
    const xj::Array g = xj::grad([](const xj::Array& a) { return xj::sum(xj::astype(xj::max_pool(a, {3, 2}, {2, 2}, "SAME"), xj::f32)); })(x);
    CHECK(g.dtype() == dtype);
    CHECK(vec(g) == vec(xj::grad([](const xj::Array& a) { return xj::sum(xj::max_pool(a, {3, 2}, {2, 2}, "SAME")); })(x32)));
  }
}

TEST_CASE("conv_general_dilated: vjp against the adjoint loops (the transpose rules), jvp against the definition") {
  unsigned seed = 100;
  for (const ConvCase& c : conv_cases()) {
    INFO(std::string(c.what));
    const xj::Array x = test_util::randn(c.lhs, seed++), w = test_util::randn(c.rhs, seed++);
    xj::Shape shape;
    naive_conv(c, vec(x), vec(w), shape);
    const xj::Array ct = test_util::randn(shape, seed++);
    const auto [dx, dw] = adjoint_conv(c, x, w, ct);
    const auto xv = vec(x), wv = vec(w);
    auto [y, pullback] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); }, x, w);
    auto [gx, gw] = pullback(ct);
    check_close_all(gx, dx, 1e-12);
    check_close_all(gw, dw, 1e-12);
    // jvp: conv(dx, w) + conv(x, dw), by the loops.
    const xj::Array tx = test_util::randn(c.lhs, seed++), tw = test_util::randn(c.rhs, seed++);
    const auto txv = vec(tx), twv = vec(tw);
    std::vector<double> want = naive_conv(c, txv, wv, shape);
    const std::vector<double> x_tw = naive_conv(c, xv, twv, shape);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += x_tw[i];
    auto [v, t] = xj::jvp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); }, std::tuple{x, w},
                          std::tuple{tx, tw});
    check_close_all(t, want, 1e-12);
  }
}

TEST_CASE("conv_general_dilated: gradients against finite differences, second order by check_grads") {
  const ConvCase cases[] = {conv_case("2-D NCHW strides + padding"), conv_case("2-D both dilations + stride"),
                            conv_case("2-D feature groups"), conv_case("2-D batch groups"), conv_case("3-D")};
  unsigned seed = 300;
  for (const ConvCase& c : cases) {
    INFO(std::string(c.what));
    const xj::Array x = test_util::randn(c.lhs, seed++), w = test_util::randn(c.rhs, seed++, xj::f64, 0.5);
    // A non-linear scalar of the output, so the gradient depends on both operands.
    auto f = [&](const xj::Array& a, const xj::Array& b) { return xj::sum(xj::sin(run_conv(c, a, b))); };
    xj::check_grads(f, std::tuple{x, w}, {.order = 2, .eps = 1e-5});
    const auto gx = vec(xj::grad(f)(x, w));
    const auto fd = test_util::fd_grad([&](const std::vector<double>& v) {
      return f(test_util::f64v(v, c.lhs), w).item<double>();
    }, vec(x));
    check_close_all(xj::array<double>(gx, {static_cast<std::int64_t>(gx.size())}), fd, 1e-6);
  }
}

TEST_CASE("conv_transpose is the gradient of conv with respect to its input (JAX's identity)") {
  struct T {
    xj::Shape x, w;
    Ints strides;
    const char* padding;
  };
  // Sizes where the forward convolution uses every input element (else its gradient has rows
  // the transposed convolution does not produce).
  const T cases[] = {{{2, 8, 8, 3}, {3, 3, 3, 4}, {1, 1}, "SAME"},  {{2, 8, 8, 3}, {3, 3, 3, 4}, {2, 2}, "SAME"},
                     {{1, 9, 9, 2}, {3, 2, 2, 5}, {2, 3}, "VALID"}, {{1, 8, 6, 2}, {2, 2, 2, 3}, {2, 2}, "VALID"},
                     {{3, 9, 4}, {4, 4, 2}, {3}, "SAME"}};
  unsigned seed = 500;
  for (const T& c : cases) {
    INFO(c.padding << " strides " << c.strides[0]);
    const xj::Array x = test_util::randn(c.x, seed++), w = test_util::randn(c.w, seed++);
    const std::string sp = c.x.size() == 4 ? "HW" : "H";
    const xj::ConvDimensionNumbers dn{"N" + sp + "C", sp + "IO", "N" + sp + "C"};
    auto f = [&](const xj::Array& a) { return xj::conv_general_dilated(a, w, c.strides, c.padding, {}, {}, dn); };
    const xj::Array y = f(x);
    const xj::Array ct = test_util::randn(y.shape(), seed++);
    auto [out, pullback] = xj::vjp(f, x);
    const xj::Array want = std::get<0>(pullback(ct));
    // conv_transpose of the cotangent with the same kernel and transpose_kernel = true.
    test_util::check_close(xj::conv_transpose(ct, w, c.strides, c.padding, {}, dn, true), want, 1e-12);
  }
}

TEST_CASE("conv_general_dilated under vmap: lhs, rhs or both batched, with groups, against a loop") {
  unsigned seed = 700;
  const ConvCase cases[] = {conv_case("2-D NCHW strides + padding"), conv_case("2-D mixed layouts"), conv_case("2-D feature groups"),
                            conv_case("2-D depthwise x2"), conv_case("2-D batch groups")};
  for (const ConvCase& c : cases)
    for (int which = 0; which < 3; ++which) {
      INFO(std::string(c.what) << " batched operands " << which);
      const std::int64_t n = 3;
      xj::Shape xs = c.lhs, ws = c.rhs;
      const std::int64_t xd = which == 1 ? -1 : 1, wd = which == 0 ? -1 : 2;
      if (xd >= 0) xs.insert(xs.begin() + xd, n);
      if (wd >= 0) ws.insert(ws.begin() + wd, n);
      const xj::Array x = test_util::randn(xs, seed++), w = test_util::randn(ws, seed++);
      auto f = [&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); };
      const xj::Array got = which == 0   ? xj::vmap(f, std::tuple{1, xj::None{}})(x, w)
                            : which == 1 ? xj::vmap(f, std::tuple{xj::None{}, 2})(x, w)
                                         : xj::vmap(f, std::tuple{1, 2})(x, w);
      for (std::int64_t b = 0; b < n; ++b) {
        const xj::Array xb = xd >= 0 ? xj::take(x, xj::scalar(b, xj::i32), xd) : x;
        const xj::Array wb = wd >= 0 ? xj::take(w, xj::scalar(b, xj::i32), wd) : w;
        xj::Shape shape;
        const auto want = naive_conv(c, vec(xb), vec(wb), shape);
        check_close_all(xj::take(got, xj::scalar(b, xj::i32), 0), want, 1e-12);
      }
    }
}

TEST_CASE("conv: an infinite weight meets padding as zeros in every kernel path (NaN, as XLA's products)") {
  // The same depthwise convolution run by the depthwise loop (feature groups) and by im2col (its
  // block-diagonal kernel, one group): padding is 0 * inf = NaN in both (review of 2026-12-02:
  // the depthwise and direct loops skipped padding).
  const xj::Array x = xj::ones({1, 2, 3, 3}, xj::f64);
  std::vector<double> wv(2 * 9, 0.5);
  wv[0] = INFINITY;  // channel 0, top-left tap
  const xj::Array w = test_util::f64v(wv, {2, 1, 3, 3});
  std::vector<double> dense(2 * 2 * 9, 0.0);
  for (int c = 0; c < 2; ++c)
    for (int k = 0; k < 9; ++k) dense[static_cast<std::size_t>((c * 2 + c) * 9 + k)] = wv[static_cast<std::size_t>(c * 9 + k)];
  const auto depthwise = vec(xj::conv_general_dilated(x, w, {1, 1}, "SAME", {}, {}, {}, 2));
  const auto im2col = vec(xj::conv(x, test_util::f64v(dense, {2, 2, 3, 3}), {1, 1}, "SAME"));
  REQUIRE(depthwise.size() == im2col.size());
  for (std::size_t i = 0; i < im2col.size(); ++i) {
    INFO("element " << i);
    CHECK(std::isnan(depthwise[i]) == std::isnan(im2col[i]));
    if (!std::isnan(im2col[i])) CHECK(depthwise[i] == im2col[i]);
  }
  CHECK(std::isnan(depthwise[0]));  // the top-left output reads padding through the infinite tap
}

TEST_CASE("conv: an infinite cotangent meets padding as zeros in the channels-last kernel gradient (NaN, as the general path)") {
  // The kernel gradient of a channels-last convolution with 8 output channels reads the input and
  // the cotangent in place (conv.cpp's channels_last_dense_filter_grad), skipping the padding; the
  // same convolution channels-first goes through the general path's patch matrix, whose padding
  // is zeros: both give NaN where the infinite cotangent element meets padding, inf elsewhere.
  const xj::Array x = xj::ones({1, 3, 3, 2}, xj::f64);
  const xj::Array w = xj::ones({3, 3, 2, 8}, xj::f64);
  std::vector<double> ctv(9 * 8, 1.0);
  ctv[0] = INFINITY;  // position (0, 0), output channel 0
  const xj::Array ct = test_util::f64v(ctv, {1, 3, 3, 8});
  const xj::ConvDimensionNumbers nhwc{"NHWC", "HWIO", "NHWC"}, nchw{"NCHW", "OIHW", "NCHW"};
  const xj::Padding same{{1, 1}, {1, 1}};
  auto [y1, pb1] = xj::vjp([&](const xj::Array& b) { return xj::conv_general_dilated(x, b, {1, 1}, same, {}, {}, nhwc, 1); }, w);
  auto [y2, pb2] = xj::vjp([&](const xj::Array& b) { return xj::conv_general_dilated(xj::transpose(x, {0, 3, 1, 2}), b, {1, 1}, same, {}, {}, nchw, 1); },
                           xj::transpose(w, {3, 2, 0, 1}));
  const auto channels_last = vec(xj::transpose(std::get<0>(pb1(ct)), {3, 2, 0, 1}));  // as OIHW
  const auto general = vec(std::get<0>(pb2(xj::transpose(ct, {0, 3, 1, 2}))));
  REQUIRE(channels_last.size() == general.size());
  int nans = 0;
  for (std::size_t i = 0; i < general.size(); ++i) {
    INFO("element " << i);
    CHECK(std::isnan(channels_last[i]) == std::isnan(general[i]));
    if (!std::isnan(general[i])) CHECK(channels_last[i] == general[i]);
    nans += std::isnan(general[i]) ? 1 : 0;
  }
  CHECK(nans == 2 * 5);  // output channel 0, both input channels, the 5 taps with kh = 0 or kw = 0
}

TEST_CASE("conv: an infinite weight meets padding as zeros in the row-by-row channels-last loop (NaN), inf elsewhere") {
  // 16 input channels, 8 outputs along each row: conv.cpp's direct_rows, which skips padding
  // (closed form: every output reads tap (0, 0), through padding on the top row and left column)
  const xj::Array x = xj::ones({1, 9, 9, 16}, xj::f64);
  std::vector<double> wv(3 * 3 * 16 * 8, 1.0);
  wv[0] = INFINITY;  // tap (0, 0), input channel 0, output channel 0
  const xj::Array w = test_util::f64v(wv, {3, 3, 16, 8});
  const auto y = vec(xj::conv_general_dilated(x, w, {1, 1}, xj::Padding{{1, 1}, {1, 1}}, {}, {}, {"NHWC", "HWIO", "NHWC"}, 1));
  REQUIRE(y.size() == 9 * 9 * 8);
  for (int h = 0; h < 9; ++h)
    for (int v = 0; v < 9; ++v) {
      INFO("output (" << h << ", " << v << ")");
      const double taps = (3.0 - (h == 0 || h == 8)) * (3.0 - (v == 0 || v == 8));
      const double first = y[static_cast<std::size_t>((h * 9 + v) * 8)];
      if (h == 0 || v == 0) CHECK(std::isnan(first));
      else CHECK(first == INFINITY);
      for (int o = 1; o < 8; ++o) CHECK(y[static_cast<std::size_t>((h * 9 + v) * 8 + o)] == 16.0 * taps);
    }
}

TEST_CASE("conv: the channels-first depthwise kernel gradient leaves out input elements no cotangent element reads (inf stays out)") {
  // A VALID 3x3 depthwise convolution of 2 channels of 3 x 20: kernel column kx sums input columns
  // kx .. kx + 17 against the cotangent's 18. The input's last column is infinite in row 1: only
  // kx = 2 reads it (inf); kx = 0 and 1 must stay finite (18 ones). The plain 2-D loop runs whole
  // vectors over padded rows: its lanes past the cotangent row read that column and must drop it
  // (a product with a zero cotangent would make NaN).
  for (const xj::DType dt : {xj::f32, xj::f64}) {
    std::vector<double> xv(2 * 3 * 20, 1.0);
    for (int c = 0; c < 2; ++c) xv[static_cast<std::size_t>((c * 3 + 1) * 20 + 19)] = INFINITY;
    const xj::Array x = xj::astype(test_util::f64v(xv, {1, 2, 3, 20}), dt);
    const xj::Array w = xj::ones({2, 1, 3, 3}, dt), ct = xj::ones({1, 2, 1, 18}, dt);
    auto [y, pullback] = xj::vjp([](const xj::Array& a, const xj::Array& b) {
      return xj::conv_general_dilated(a, b, {1, 1}, "VALID", {}, {}, {"NCHW", "OIHW", "NCHW"}, 2);
    }, x, w);
    const auto dw = vec(std::get<1>(pullback(ct)));
    REQUIRE(dw.size() == 2 * 9);
    for (int c = 0; c < 2; ++c)
      for (int ky = 0; ky < 3; ++ky)
        for (int kx = 0; kx < 3; ++kx) {
          INFO(xj::dtype_name(dt) << " channel " << c << " tap (" << ky << ", " << kx << ")");
          const double got = dw[static_cast<std::size_t>((c * 3 + ky) * 3 + kx)];
          if (ky == 1 && kx == 2) CHECK(got == INFINITY);
          else CHECK(got == 18.0);
        }
  }
}

TEST_CASE("conv: the im2col tile is an arena buffer (counted in the peak, reused: a repeated convolution asks the system for nothing)") {
  // Regression (2026-12-04): the tile was a fresh zeroed std::vector per call; around each
  // convolution glibc grew and trimmed its heap and the tile page-faulted in again, which made
  // examples/convnet 8x slower at two threads than at one.
  // 1 x 4 x 8 x 8 input, 4 -> 4 channels, 3x3 SAME: one tile holds the whole patch matrix,
  // 64 output positions x (9 window positions x 4 channels) floats.
  const xj::Array x = xj::ones({1, 4, 8, 8}, xj::f32);
  const xj::Array w = xj::ones({4, 4, 3, 3}, xj::f32);
  constexpr std::int64_t tile_bytes = 64 * 9 * 4 * 4;
  xj::reset_peak_memory();
  const std::int64_t live = xj::memory_stats().live_bytes;
  const xj::Array y = xj::conv(x, w, {1, 1}, "SAME");
  // Without the tile, the convolution's buffers (the channels-last input, the weight matrix, the
  // channels-last output and the result) are under 4 KiB.
  CHECK(xj::memory_stats().peak_bytes - live >= tile_bytes);
  CHECK(vec(y)[9] == doctest::Approx(36.0));  // an interior output: 3 x 3 x 4 ones
  if (test_util::arena_off()) return;  // no reuse without the arena
  (void)xj::conv(x, w, {1, 1}, "SAME");  // the first result is still alive: one more block of its size
  const std::int64_t fresh = xj::memory_stats().system_allocations;
  for (int i = 0; i < 3; ++i) (void)xj::conv(x, w, {1, 1}, "SAME");
  CHECK(xj::memory_stats().system_allocations == fresh);
}

TEST_CASE("conv: the channels-last depthwise kernel gradient sums its image blocks in arena buffers (counted in the peak)") {
  // Regression (2026-12-04): the blocks' partial sums were a fresh zeroed std::vector per call
  // (up to 16 MiB), the same heap churn as the im2col tile above.
  // 16 images of 8 x 8 x 8 channels, a 3 x 3 depthwise kernel: 16 blocks of 9 kernel positions x 8
  // channels of partial sums; the pullback's own buffers (the kernel gradient, its layout) are
  // 9 x 8 floats each.
  const xj::Array x = xj::ones({16, 8, 8, 8}, xj::f32);
  const xj::Array w = xj::ones({3, 3, 1, 8}, xj::f32);
  const xj::ConvDimensionNumbers dn{"NHWC", "HWIO", "NHWC"};
  auto [y, pullback] = xj::vjp([&](const xj::Array& k) { return xj::conv_general_dilated(x, k, {1, 1}, "SAME", {}, {}, dn, 8); }, w);
  const xj::Array ct = xj::ones_like(y);
  constexpr std::int64_t partial_bytes = 16 * 9 * 8 * 4;
  xj::reset_peak_memory();
  const std::int64_t live = xj::memory_stats().live_bytes;
  const xj::Array gw = std::get<0>(pullback(ct));
  CHECK(xj::memory_stats().peak_bytes - live >= partial_bytes);
  const std::vector<double> g = vec(gw);
  REQUIRE(g.size() == 72);
  CHECK(g[4 * 8] == doctest::Approx(16 * 64));  // the centre tap sees every input position
  CHECK(g[0] == doctest::Approx(16 * 49));       // the top-left tap misses the last row and column
}

TEST_CASE("conv: a window with a dim of size 0 sums nothing (zeros) in the depthwise layouts, whatever its dilation") {
  // Regression (2026-12-03): the channels-first depthwise loop sized its padded rows from the
  // window's extent times its dilation and asked for a negative-size buffer.
  for (const bool channels_first : {true, false}) {
    INFO("channels first: " << channels_first);
    const xj::Array x = channels_first ? xj::ones({1, 2, 3, 20}) : xj::ones({1, 3, 20, 2});
    const xj::Array w = channels_first ? xj::ones({2, 1, 3, 0}) : xj::ones({3, 0, 1, 2});
    const xj::ConvDimensionNumbers dn = channels_first ? xj::ConvDimensionNumbers{"NCHW", "OIHW", "NCHW"}
                                                       : xj::ConvDimensionNumbers{"NHWC", "HWIO", "NHWC"};
    const auto f = [&](const xj::Array& a, const xj::Array& b) {
      return xj::conv_general_dilated(a, b, {1, 1}, xj::Padding{{0, 0}, {1, 1}}, {}, {1, 100}, dn, 2);
    };
    const xj::Array y = f(x, w);
    CHECK(y.shape() == (channels_first ? xj::Shape{1, 2, 1, 23} : xj::Shape{1, 1, 23, 2}));
    for (float v : y.to_vector<float>()) CHECK(v == 0.0f);
    auto [out, pullback] = xj::vjp(f, x, w);
    auto [gx, gw] = pullback(xj::ones_like(out));
    for (float v : gx.to_vector<float>()) CHECK(v == 0.0f);
    CHECK(gw.shape() == w.shape());
  }
}

TEST_CASE("conv errors name the mismatching dimensions") {
  const xj::Array x = xj::zeros({2, 3, 5, 5}), w = xj::zeros({4, 2, 3, 3});
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(x, w, {1, 1}, "SAME"); }),
                 "lhs feature dimension (dim 1, size 3) / feature_group_count 1 must equal the rhs input-feature dimension (dim 1, size 2)"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] {
                   (void)xj::conv_general_dilated(xj::zeros({2, 6, 5, 5}), w, {1, 1}, "VALID", {}, {}, {}, 4);
                 }),
                 "not divisible by feature_group_count 4"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(x, xj::zeros({4, 3, 3}), {1, 1}, "SAME"); }),
                 "same rank"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(x, xj::zeros({4, 3, 3, 3}), {1}, "VALID"); }),
                 "window_strides"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(x, xj::zeros({4, 3, 3, 3}), {1, 1}, "FULL"); }),
                 "padding must be"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] {
                   (void)xj::conv_general_dilated(x, xj::zeros({4, 3, 3, 3}), {1, 1}, "VALID", {}, {}, {"NCHW", "OIHW", "NCHX"});
                 }),
                 "same spatial dims"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] {
                   (void)xj::conv_general_dilated(x, xj::zeros({4, 3, 3, 3}), {1, 1}, Pairs{{-9, 0}, {0, 0}});
                 }),
                 "negative padding"));
  CHECK(contains(test_util::message_of<xj::TypeError>([&] {
                   (void)xj::conv(xj::zeros({1, 1, 3, 3}, xj::i32), xj::zeros({1, 1, 2, 2}, xj::i32), {1, 1}, "VALID");
                 }),
                 "floating-point"));
  // A zero stride with string padding (review of 2026-12-02: a division by zero, SIGFPE, before
  // the shape rule could reject it).
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(x, xj::zeros({4, 3, 3, 3}), {0, 1}, "SAME"); }),
                 "strides must be >= 1"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::max_pool(xj::zeros({1, 4, 4, 1}), {2, 2}, {0, 0}, "SAME"); }),
                 "strides must be >= 1"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] {
                   (void)xj::reduce_window(xj::zeros({4}), 0.0, xj::WindowOp::add, {2}, {0}, "SAME");
                 }),
                 "strides must be >= 1"));
}

TEST_CASE("dots_saveable keeps convolutions (they are dot-like, as in JAX)") {
  const xj::Array x = test_util::randn({1, 2, 6, 6}, 1), w = test_util::randn({2, 2, 3, 3}, 2);
  auto block = [](const xj::Array& a, const xj::Array& k) { return xj::sum(xj::sin(xj::conv(xj::tanh(a), k, {1, 1}, "SAME"))); };
  auto saved = [&](const xj::Policy& p) {
    std::size_t convs = 0;
    for (const auto& r : xj::saved_residuals(xj::checkpoint(block, {.policy = p}), x, w))
      convs += contains(r.description, "conv_general_dilated") ? 1 : 0;
    return convs;
  };
  CHECK(saved(xj::checkpoint_policies::dots_saveable) == 1);
  CHECK(saved(xj::checkpoint_policies::nothing_saveable) == 0);
}

// ---- windows -----------------------------------------------------------------------------------

namespace {

struct WindowCase {
  const char* what;
  xj::Shape x;
  Ints window, strides;
  Pairs pads;
  Ints base, wdil;
};

const std::vector<WindowCase>& window_cases() {
  static const std::vector<WindowCase> cases = {
      {"2-D 3x3 stride 2 (a pool)", {2, 3, 7, 8}, {1, 1, 3, 3}, {1, 1, 2, 2}, {{0, 0}, {0, 0}, {1, 1}, {0, 1}}, {1, 1, 1, 1}, {1, 1, 1, 1}},
      {"1-D", {9}, {3}, {2}, {{1, 0}}, {1}, {1}},
      {"every dim windowed", {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {{0, 1}, {1, 1}, {0, 0}}, {1, 1, 1}, {1, 1, 1}},
      {"base dilation", {3, 4}, {2, 3}, {1, 2}, {{1, 0}, {0, 2}}, {2, 2}, {1, 1}},
      {"window dilation", {6, 7}, {2, 3}, {2, 1}, {{0, 0}, {1, 1}}, {1, 1}, {2, 2}},
      {"negative padding", {6, 7}, {2, 2}, {1, 2}, {{-1, 0}, {0, -1}}, {1, 1}, {1, 1}},
      {"window larger than padded operand", {2, 2}, {3, 3}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}},
      {"a pool over the leading dims, 37 channels (the vectorized rows)", {2, 5, 37}, {2, 3, 1}, {1, 2, 1}, {{0, 0}, {1, 1}, {0, 0}}, {1, 1, 1}, {1, 1, 1}},
      // 87 channels: four batches at a time, then one at a time, then a tail, in every kernel set
      {"a pool over the leading dims, 87 channels (batches four at a time)", {3, 5, 87}, {2, 3, 1}, {1, 2, 1}, {{0, 0}, {1, 1}, {0, 0}}, {1, 1, 1}, {1, 1, 1}},
      // long windowed last dims: their interiors (every tap inside) run in batches, the edges
      // through the index table
      {"NCHW pool rows of 75, stride 2 (the vectorized interior)", {2, 2, 5, 75}, {1, 1, 3, 3}, {1, 1, 2, 2}, {{0, 0}, {0, 0}, {1, 1}, {1, 0}}, {1, 1, 1, 1}, {1, 1, 1, 1}},
      {"rows of 70, stride 3, window dilation 2", {3, 70}, {2, 3}, {1, 3}, {{0, 0}, {2, 1}}, {1, 1}, {1, 2}},
      {"rows of 60, stride 1, window 4", {2, 60}, {1, 4}, {1, 1}, {{0, 0}, {1, 2}}, {1, 1}, {1, 1}},
      {"all-padding output rows after real ones", {3, 40}, {1, 3}, {1, 2}, {{0, 2}, {0, 0}}, {1, 1}, {1, 1}},
  };
  return cases;
}

// visit(out_flat, in_flat) for every operand element each output's window reads; returns the
// output shape. Window order: row-major over the window dims.
template <class F> xj::Shape window_loops(const WindowCase& c, F&& visit) {
  const std::size_t r = c.x.size();
  xj::Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t padded = (c.x[i] - 1) * c.base[i] + 1 + c.pads[i].first + c.pads[i].second;
    const std::int64_t extent = (c.window[i] - 1) * c.wdil[i] + 1;
    out[i] = padded < extent ? 0 : (padded - extent) / c.strides[i] + 1;
  }
  std::int64_t nout = xj::shape_size(out), nwin = 1;
  for (auto w : c.window) nwin *= w;
  Ints o(r), k(r), in(r);  // reused: nothing is allocated in the loops
  for (std::int64_t of = 0; of < nout; ++of) {
    for (std::int64_t rem = of, i = static_cast<std::int64_t>(r) - 1; i >= 0; --i) o[i] = rem % out[i], rem /= out[i];
    for (std::int64_t kf = 0; kf < nwin; ++kf) {
      for (std::int64_t rem = kf, i = static_cast<std::int64_t>(r) - 1; i >= 0; --i) k[i] = rem % c.window[i], rem /= c.window[i];
      bool inside = true;
      for (std::size_t i = 0; i < r && inside; ++i) {
        const std::int64_t q = o[i] * c.strides[i] + k[i] * c.wdil[i] - c.pads[i].first;
        inside = q >= 0 && q % c.base[i] == 0 && q / c.base[i] < c.x[i];
        in[i] = q / c.base[i];
      }
      if (inside) visit(of, flat(c.x, in));
    }
  }
  return out;
}

xj::Array run_window(const WindowCase& c, const xj::Array& x, xj::WindowOp op) {
  const double inf = std::numeric_limits<double>::infinity();
  const double init = op == xj::WindowOp::add ? 0.0 : op == xj::WindowOp::max ? -inf : inf;
  return xj::reduce_window(x, init, op, c.window, c.strides, c.pads, c.base, c.wdil);
}

}  // namespace

TEST_CASE("reduce_window add / max / min: values against loops, f64, f32 and integers") {
  const double inf = std::numeric_limits<double>::infinity();
  unsigned seed = 900;
  for (const WindowCase& c : window_cases())
    for (xj::WindowOp op : {xj::WindowOp::add, xj::WindowOp::max, xj::WindowOp::min}) {
      INFO(std::string(c.what) << " op " << static_cast<int>(op));
      const xj::Array x = test_util::randn(c.x, seed++);
      const auto xv = vec(x);
      xj::Shape shape = window_loops(c, [](std::int64_t, std::int64_t) {});
      const double init = op == xj::WindowOp::add ? 0.0 : op == xj::WindowOp::max ? -inf : inf;
      std::vector<double> want(static_cast<std::size_t>(xj::shape_size(shape)), init);
      window_loops(c, [&](std::int64_t o, std::int64_t i) {
        want[o] = op == xj::WindowOp::add ? want[o] + xv[i] : op == xj::WindowOp::max ? std::max(want[o], xv[i]) : std::min(want[o], xv[i]);
      });
      const xj::Array y = run_window(c, x, op);
      CHECK(y.shape() == shape);
      const auto g = vec(y);
      for (std::size_t i = 0; i < want.size(); ++i)
        CHECK((std::isinf(want[i]) ? g[i] == want[i] : std::abs(g[i] - want[i]) < 1e-12));
      check_close_all(xj::astype(run_window(c, xj::astype(x, xj::f32), op), xj::f64), want, 1e-5);
      if (op != xj::WindowOp::add && xj::shape_size(shape) > 0 && std::none_of(want.begin(), want.end(), [](double v) { return std::isinf(v); })) {
        // Integers: the same windows of rounded values.
        const xj::Array xi = xj::astype(x * 10.0, xj::i32);
        std::vector<double> wi(want.size(), op == xj::WindowOp::max ? -1e300 : 1e300);
        const auto xiv = vec(xi);
        window_loops(c, [&](std::int64_t o, std::int64_t i) { wi[o] = op == xj::WindowOp::max ? std::max(wi[o], xiv[i]) : std::min(wi[o], xiv[i]); });
        const double lo = std::numeric_limits<std::int32_t>::lowest(), hi = std::numeric_limits<std::int32_t>::max();
        CHECK(vec(xj::reduce_window(xi, op == xj::WindowOp::max ? lo : hi, op, c.window, c.strides, c.pads, c.base, c.wdil)) == wi);
      }
    }
}

TEST_CASE("reduce_window max / min: NaN, signed zeros and the tangent in a long strided row (the batched interior)") {
  // Row of 41, window 3, stride 2: outputs 0..19 read 2o, 2o + 1, 2o + 2. NaN at 7 (windows 2
  // and 3) and at 30 (windows 14 and 15); elsewhere -0.0 and +0.0 alternating in runs, so that
  // max / min of equal values must agree between the batched lanes and the scalar edges.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(41);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i / 3) % 2 == 0 ? 0.0 : -0.0;
  v[7] = nan;
  v[30] = nan;
  for (xj::DType dt : {xj::f32, xj::f64})
    for (xj::WindowOp op : {xj::WindowOp::max, xj::WindowOp::min}) {
      INFO(std::string(xj::dtype_name(dt)) << " op " << static_cast<int>(op));
      const xj::Array x = xj::astype(test_util::f64v(v, {41}), dt);
      const double init = op == xj::WindowOp::max ? -INFINITY : INFINITY;
      const auto y = vec(xj::astype(xj::reduce_window(x, init, op, {3}, {2}, "VALID"), xj::f64));
      REQUIRE(y.size() == 20);
      for (std::size_t o = 0; o < y.size(); ++o) {
        const bool has_nan = o == 3 || o == 14 || o == 15;
        if (has_nan) {
          CHECK(std::isnan(y[o]));
        } else {
          CHECK(y[o] == 0.0);
          // the last of equal values wins in every lane (the window's last element's sign)
          CHECK(std::signbit(y[o]) == std::signbit(v[2 * o + 2]));
        }
      }
      // the tangent goes where XLA's select walk ends: the choice is kept while choice >= next
      // (<= for min), which is false for a NaN on either side (so a NaN is taken, and left for
      // the element after it)
      const auto g = vec(xj::astype(xj::grad([&](const xj::Array& a) { return xj::sum(xj::reduce_window(a, init, op, {3}, {2}, "VALID")); })(x), xj::f64));
      std::vector<double> want(41, 0.0);
      for (std::size_t o = 0; o < 20; ++o) {
        std::size_t pick = 0;
        double best = nan;
        for (std::size_t k = 0; k < 3; ++k) {
          const double next = v[2 * o + k];
          if (!(op == xj::WindowOp::max ? best >= next : best <= next)) pick = 2 * o + k, best = next;
        }
        want[pick] += 1.0;
      }
      CHECK(g == want);
    }
}

TEST_CASE("reduce_window max / min propagate NaN (as lax.max), every layout of the last dim") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const xj::Array x = test_util::f64v({1.0, nan, 2.0, 0.5, -1.0, 3.0}, {6});
  for (xj::WindowOp op : {xj::WindowOp::max, xj::WindowOp::min}) {
    const auto y = vec(xj::reduce_window(x, op == xj::WindowOp::max ? -INFINITY : INFINITY, op, {2}, {1}, "VALID"));
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    CHECK(y[2] == (op == xj::WindowOp::max ? 2.0 : 0.5));
    // The same along a leading dim (the last dim's window is 1: the contiguous loop).
    const auto z = vec(xj::reduce_window(xj::reshape(x, {6, 1}), op == xj::WindowOp::max ? -INFINITY : INFINITY, op, {2, 1}, {1, 1}, "VALID"));
    CHECK(std::isnan(z[0]));
    CHECK(std::isnan(z[1]));
    CHECK(z[4] == (op == xj::WindowOp::max ? 3.0 : -1.0));
  }
  // Rows of 37 along an unwindowed last dim (the vectorized loop and its tail), NaN in some columns.
  std::vector<double> v(3 * 37);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i));
  v[1 * 37 + 5] = nan;   // column 5, row 1: both windows (rows 0-1, 1-2) are NaN there
  v[2 * 37 + 30] = nan;  // column 30, row 2: only the second window
  for (xj::DType dtype : {xj::f64, xj::f32})
    for (xj::WindowOp op : {xj::WindowOp::max, xj::WindowOp::min}) {
      const auto y = vec(xj::reduce_window(xj::astype(test_util::f64v(v, {3, 37}), dtype), op == xj::WindowOp::max ? -INFINITY : INFINITY,
                                           op, {2, 1}, {1, 1}, "VALID"));
      for (std::size_t w = 0; w < 2; ++w)
        for (std::size_t c = 0; c < 37; ++c) {
          const double a = v[w * 37 + c], b = v[(w + 1) * 37 + c];
          const double want = std::isnan(a) || std::isnan(b) ? nan : (op == xj::WindowOp::max ? std::max(a, b) : std::min(a, b));
          INFO("window " << w << " column " << c);
          if (std::isnan(want)) CHECK(std::isnan(y[w * 37 + c]));
          else CHECK(y[w * 37 + c] == doctest::Approx(want).epsilon(1e-6));
        }
    }
}

TEST_CASE("reduce_window derivatives: sum's transpose, max / min pass the tangent to the first extremum") {
  unsigned seed = 1100;
  for (const WindowCase& c : window_cases())
    for (xj::WindowOp op : {xj::WindowOp::add, xj::WindowOp::max, xj::WindowOp::min}) {
      INFO(std::string(c.what) << " op " << static_cast<int>(op));
      const xj::Array x = test_util::randn(c.x, seed++);  // distinct values: no ties
      const auto xv = vec(x);
      xj::Shape shape = window_loops(c, [](std::int64_t, std::int64_t) {});
      const xj::Array ct = test_util::randn(shape, seed++);
      const auto cv = vec(ct);
      // The adjoint: each window's cotangent to every element it sums, or to its chosen one.
      std::vector<std::int64_t> chosen(cv.size(), -1);
      std::vector<double> want(xv.size(), 0.0);
      window_loops(c, [&](std::int64_t o, std::int64_t i) {
        if (op == xj::WindowOp::add) want[i] += cv[o];
        else if (chosen[o] < 0 || (op == xj::WindowOp::max ? xv[i] > xv[chosen[o]] : xv[i] < xv[chosen[o]])) chosen[o] = i;
      });
      for (std::size_t o = 0; o < chosen.size(); ++o)
        if (chosen[o] >= 0) want[chosen[o]] += cv[o];
      auto [y, pullback] = xj::vjp([&](const xj::Array& a) { return run_window(c, a, op); }, x);
      check_close_all(std::get<0>(pullback(ct)), want, 1e-12);
      // f32 (indices held in 32 bits beside the values in the vectorized select)
      auto [y32, pullback32] = xj::vjp([&](const xj::Array& a) { return run_window(c, a, op); }, xj::astype(x, xj::f32));
      check_close_all(xj::astype(std::get<0>(pullback32(xj::astype(ct, xj::f32))), xj::f64), want, 1e-5);
      // (finite differences need finite outputs: a max / min window of padding only is -inf / inf)
      const bool empty_window = op != xj::WindowOp::add && std::find(chosen.begin(), chosen.end(), -1) != chosen.end();
      if (xj::shape_size(shape) > 0 && !empty_window)
        xj::check_grads([&](const xj::Array& a) { return run_window(c, a, op); }, std::tuple{x}, {.order = 2});
    }
  // A tie: the first maximum in window order takes the whole tangent (XLA's select, JAX's rule).
  const xj::Array tie = test_util::f64v({1.0, 3.0, 3.0, 0.0}, {4});
  const auto g = xj::grad([](const xj::Array& v) { return xj::sum(xj::reduce_window(v, -INFINITY, xj::WindowOp::max, {4}, {1}, "VALID")); })(tie);
  CHECK(vec(g) == std::vector<double>{0.0, 1.0, 0.0, 0.0});
  auto [v, t] = xj::jvp([](const xj::Array& a) { return xj::reduce_window(a, -INFINITY, xj::WindowOp::max, {4}, {1}, "VALID"); },
                        std::tuple{tie}, std::tuple{test_util::f64v({10.0, 20.0, 30.0, 40.0}, {4})});
  CHECK(vec(t) == std::vector<double>{20.0});
  // Ties in a long row (the batched interior, stride 2): each window's first element, f32 and f64,
  // max and min.
  for (xj::DType dt : {xj::f32, xj::f64})
    for (xj::WindowOp op : {xj::WindowOp::max, xj::WindowOp::min}) {
      const double init = op == xj::WindowOp::max ? -INFINITY : INFINITY;
      const auto row = vec(xj::astype(xj::grad([&](const xj::Array& v) {
                                         return xj::sum(xj::reduce_window(v, init, op, {3}, {2}, "VALID"));
                                       })(xj::ones({41}, dt)), xj::f64));
      for (std::size_t i = 0; i < row.size(); ++i) CHECK(row[i] == (i % 2 == 0 && i <= 38 ? 1.0 : 0.0));
    }
  // Ties along an unwindowed last dim of 87 (whole rows compared, batches four at a time): each
  // window's first row takes the tangent.
  for (xj::DType dt : {xj::f32, xj::f64})
    for (xj::WindowOp op : {xj::WindowOp::max, xj::WindowOp::min}) {
      const double init = op == xj::WindowOp::max ? -INFINITY : INFINITY;
      const auto rows = vec(xj::astype(xj::grad([&](const xj::Array& v) {
                                          return xj::sum(xj::reduce_window(v, init, op, {2, 1}, {1, 1}, "VALID"));
                                        })(xj::ones({3, 87}, dt)), xj::f64));
      for (std::size_t i = 0; i < rows.size(); ++i) CHECK(rows[i] == (i < 2 * 87 ? 1.0 : 0.0));
    }
}

TEST_CASE("reduce_window and the select pair under vmap, against a loop") {
  unsigned seed = 1300;
  for (const WindowCase& c : window_cases())
    for (xj::WindowOp op : {xj::WindowOp::add, xj::WindowOp::max}) {
      INFO(std::string(c.what));
      xj::Shape xs = c.x;
      xs.insert(xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2), 3);
      const xj::Array x = test_util::randn(xs, seed++);
      const std::int64_t axis = static_cast<std::int64_t>(c.x.size() / 2);
      // vmap of the gradient batches the select pair too.
      auto f = [&](const xj::Array& a) { return xj::grad([&](const xj::Array& b) { return xj::sum(xj::sin(run_window(c, b, op))); })(a); };
      const xj::Array got = xj::vmap(f, axis)(x);
      for (std::int64_t b = 0; b < 3; ++b) {
        const xj::Array xb = xj::take(x, xj::scalar(b, xj::i32), axis);
        test_util::check_close(xj::take(got, xj::scalar(b, xj::i32), 0), f(xb), 1e-12);
      }
    }
}

TEST_CASE("max_pool and avg_pool (flax's layout: batch, spatial..., features)") {
  const xj::Array x = test_util::randn({2, 6, 5, 3}, 7);
  const auto xv = vec(x);
  const xj::Array mp = xj::max_pool(x, {3, 2}, {2, 2}, "SAME");
  // SAME with stride 2: out = ceil(n / 2), padding split low / high as JAX's padtype_to_pads.
  CHECK(mp.shape() == xj::Shape{2, 3, 3, 3});
  const xj::Array ap = xj::avg_pool(x, {2, 2}, {1, 1});
  CHECK(ap.shape() == xj::Shape{2, 5, 4, 3});
  auto at = [&](std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c) { return xv[static_cast<std::size_t>(((n * 6 + h) * 5 + w) * 3 + c)]; };
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t h = 0; h < 5; ++h)
        for (std::int64_t w = 0; w < 4; ++w) {
          const double want = (at(n, h, w, c) + at(n, h + 1, w, c) + at(n, h, w + 1, c) + at(n, h + 1, w + 1, c)) / 4;
          CHECK(vec(ap)[static_cast<std::size_t>(((n * 5 + h) * 4 + w) * 3 + c)] == doctest::Approx(want).epsilon(1e-14));
        }
  // SAME with stride 2: window 3 over 6 pads (3 - 1) * 2 + 3 - 6 = 1, window 2 over 5 pads
  // (3 - 1) * 2 + 2 - 5 = 1, both at the end; the last window reads rows 4, 5 and column 4.
  for (std::int64_t c = 0; c < 3; ++c) {
    double want = -INFINITY;
    for (std::int64_t h = 4; h < 6; ++h) want = std::max(want, at(1, h, 4, c));
    CHECK(vec(mp)[static_cast<std::size_t>(((1 * 3 + 2) * 3 + 2) * 3 + c)] == want);
  }
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::max_pool(xj::zeros({4}), {3}); }), "rank at least 2 for a 1-D window"));
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::reduce_window(x, 1.0, xj::WindowOp::add, {1, 1, 1, 1}, {}, "VALID"); }),
                 "identity"));
}

// ---- the kernels' loops split across threads (src/kernels/parallel.hpp) --------------------------

namespace {

/// Sets OpenBLAS's (and so xjax's) thread count for a scope.
struct KernelThreads {
  int before = openblas_get_num_threads();
  explicit KernelThreads(int n) { openblas_set_num_threads(n); }
  ~KernelThreads() { openblas_set_num_threads(before); }
};

/// The value and input gradient of sum(ct * f(x)), computed at `threads` kernel threads.
std::pair<xj::Array, xj::Array> value_and_pullback(int threads, const std::function<xj::Array(const xj::Array&)>& f,
                                                   const xj::Array& x, const xj::Array& ct) {
  KernelThreads t(threads);
  auto [y, pullback] = xj::vjp(f, x);
  return {y, std::get<0>(pullback(ct))};
}

}  // namespace

TEST_CASE("conv: patch tiles split over threads are taken by the calling thread (release_arena_memory empties the arena)") {
  // Regression (2026-12-05, review): each chunk took its tile on its own thread; a worker's freed
  // tile stayed in that worker's cache, which release_arena_memory() cannot reach (arena_bytes
  // stayed 260352 after it: one 113 x 576 float tile).
  KernelThreads t(2);
  const xj::Array x = xj::ones({2, 20, 20, 64}, xj::f32), w = xj::ones({3, 3, 64, 32}, xj::f32);
  const xj::Array y = xj::conv_general_dilated(x, w, {1, 1}, "SAME", {}, {}, {"NHWC", "HWIO", "NHWC"});
  CHECK(vec(y)[0] == doctest::Approx(4 * 64));  // a corner output: 2 x 2 taps x 64 channels of ones
  xj::release_arena_memory();
  CHECK(xj::memory_stats().arena_bytes == 0);
}

TEST_CASE("window kernels split across threads: values and the select pair's scatter against the loops, same bits as one thread") {
  // Big enough that each loop splits (row_grain in window.cpp); the last case windows its leading
  // dim, so the scatter cannot split by it (overlapping windows) and runs on one thread.
  const WindowCase cases[] = {
      {"NCHW 3x3 stride 2 pool", {4, 16, 30, 30}, {1, 1, 3, 3}, {1, 1, 2, 2}, {{0, 0}, {0, 0}, {1, 1}, {1, 1}}, {1, 1, 1, 1}, {1, 1, 1, 1}},
      {"NHWC 3x3 stride 2 pool", {4, 30, 30, 16}, {1, 3, 3, 1}, {1, 2, 2, 1}, {{0, 0}, {1, 1}, {1, 1}, {0, 0}}, {1, 1, 1, 1}, {1, 1, 1, 1}},
      {"leading dim windowed", {96, 30, 16}, {3, 3, 1}, {2, 2, 1}, {{1, 1}, {1, 1}, {0, 0}}, {1, 1, 1}, {1, 1, 1}},
  };
  unsigned seed = 4000;
  for (const WindowCase& c : cases)
    for (xj::WindowOp op : {xj::WindowOp::add, xj::WindowOp::max}) {
      INFO(std::string(c.what) << " op " << static_cast<int>(op));
      const xj::Array x = test_util::randn(c.x, seed++, xj::f32);  // distinct values: no ties
      const auto xv = vec(x);
      const xj::Shape shape = window_loops(c, [](std::int64_t, std::int64_t) {});
      const xj::Array ct = test_util::randn(shape, seed++, xj::f32);
      const auto cv = vec(ct);
      std::vector<double> want(static_cast<std::size_t>(xj::shape_size(shape)), op == xj::WindowOp::add ? 0.0 : -INFINITY);
      std::vector<std::int64_t> chosen(want.size(), -1);
      window_loops(c, [&](std::int64_t o, std::int64_t i) {
        if (op == xj::WindowOp::add) want[o] += xv[i];
        else if (xv[i] > want[o]) want[o] = xv[i], chosen[o] = i;
      });
      std::vector<double> dx(xv.size(), 0.0);
      window_loops(c, [&](std::int64_t o, std::int64_t i) {
        if (op == xj::WindowOp::add) dx[i] += cv[o];
      });
      for (std::size_t o = 0; o < chosen.size(); ++o)
        if (chosen[o] >= 0) dx[chosen[o]] += cv[o];
      const auto f = [&](const xj::Array& a) { return run_window(c, a, op); };
      const std::int64_t splits = xjax::detail::split_loops();
      const auto [y3, dx3] = value_and_pullback(3, f, x, ct);
      CHECK(xjax::detail::split_loops() > splits);
      check_close_all(xj::astype(y3, xj::f64), want, 1e-5);
      check_close_all(xj::astype(dx3, xj::f64), dx, 1e-5);
      const auto [y1, dx1] = value_and_pullback(1, f, x, ct);
      CHECK(vec(y1) == vec(y3));
      CHECK(vec(dx1) == vec(dx3));
    }
}

// Whether the kernel set in use has small-product loops (the AVX2 and AVX-512 sets and a native
// build for either), asked of the set itself: a product of 8 x 8 by 8 x 32 floats it takes.
bool set_has_small_products() {
  std::vector<float> a(64, 1.0f), b(256, 1.0f), c(256);
  return xjax::detail::kernels::small_gemm_f32({8, 32, 8, false, false}, a.data(), b.data(), c.data());
}

TEST_CASE("depthwise, grouped and dense convolutions split across threads: value and both gradients against the loops, same bits as one thread") {
  const ConvCase cases[] = {
      {"depthwise NHWC, 40 channels", {4, 20, 20, 40}, {3, 3, 1, 40}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 40, 1},
      {"depthwise NCHW, 24 channels", {4, 24, 20, 40}, {24, 1, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 24, 1},
      // more images than the kernel gradient's 64 blocks of images; then 65 x 1024 kernel entries,
      // whose partial sums allow only 63 blocks (conv.cpp's kMaxPartialSums)
      {"depthwise NHWC, 70 images", {70, 6, 6, 8}, {3, 3, 1, 8}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 8, 1},
      {"depthwise NWC, 1024 channels, 70 images", {70, 66, 1024}, {65, 1, 1024}, {1}, {{0, 0}}, {1}, {1}, "NWC", "WIO", "NWC", 1024, 1},
      // one output channel per group of 8 (the direct loop), one image: split over the groups
      {"one image, 4 groups of 8 channels, one output each", {1, 32, 24, 24}, {4, 8, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 4, 1},
      // dense, 64 -> 32 channels: 800 patch rows of 576 columns in tiles of 113 rows, split over
      // the threads, each multiplied in the small-product loops (conv.cpp's im2col_small_gemm)
      {"dense NCHW, 64 -> 32 channels", {2, 64, 20, 20}, {32, 64, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 1},
      {"dense NHWC, 64 -> 32 channels, stride 2", {2, 21, 20, 64}, {3, 3, 64, 32}, {2, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 1, 1},
      // the kernel gradient of a dense convolution whose input and output layouts differ: 144
      // rows (3 x 3 x 16) of 1600 window positions x 8 images, in two column tiles accumulated in
      // the product loops (conv.cpp's im2col_gemm), the rows split over the threads
      {"dense, NCHW in and NHWC out, 16 -> 16 channels, 8 images of 40 x 40", {8, 16, 40, 40}, {16, 16, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NHWC", 1, 1},
      // the same channels-first: its kernel gradient transposed into channels-last order
      // (conv.cpp's channels_first_dense_filter_grad), 8 images in blocks over the threads
      {"dense NCHW, 16 -> 16 channels, 8 images of 40 x 40", {8, 16, 40, 40}, {16, 16, 3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 1},
      // 3600 rows of a 1x1 convolution in products of 1024 (conv.cpp's pointwise_small_gemm)
      {"pointwise NHWC, 64 -> 32 channels", {4, 30, 30, 64}, {1, 1, 64, 32}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 1, 1},
      // 8192 positions: the kernel gradient's contraction in two chunks (conv.cpp's channels_last_weight_grad)
      {"pointwise NHWC, 16 -> 8 channels, 8 images of 32 x 32", {8, 32, 32, 16}, {1, 1, 16, 8}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NHWC", "HWIO", "NHWC", 1, 1},
      // images split over the threads, each product in the loops (conv.cpp's channels_first_pointwise);
      // the kernel gradient in 5 blocks of one image (channels_first_weight_grad)
      {"pointwise NCHW, 32 -> 16 channels, 5 images", {5, 32, 8, 8}, {16, 32, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 1},
      // 12 images in 8 blocks, each image's 1120 positions in three pieces (the last a part)
      {"pointwise NCHW, 16 -> 32 channels, 12 images of 20 x 56", {12, 16, 20, 56}, {32, 16, 1, 1}, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, "NCHW", "OIHW", "NCHW", 1, 1},
  };
  unsigned seed = 4100;
  for (const ConvCase& c : cases) {
    INFO(std::string(c.what));
    const xj::Array x = test_util::randn(c.lhs, seed++, xj::f32), w = test_util::randn(c.rhs, seed++, xj::f32);
    xj::Shape shape;
    const std::vector<double> want = naive_conv(c, vec(x), vec(w), shape);
    const xj::Array ct = test_util::randn(shape, seed++, xj::f32);
    const auto [dx, dw] = adjoint_conv(c, x, w, ct);
    const auto run = [&](int threads) {
      KernelThreads t(threads);
      auto [y, pullback] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); }, x, w);
      auto [gx, gw] = pullback(ct);
      return std::tuple{y, gx, gw};
    };
    const std::int64_t splits = xjax::detail::split_loops();
    const auto [y3, gx3, gw3] = run(3);
    check_close_all(xj::astype(y3, xj::f64), want, 1e-4);
    check_close_all(xj::astype(gx3, xj::f64), dx, 1e-4);
    check_close_all(xj::astype(gw3, xj::f64), dw, 1e-3);
    // A dense convolution splits in xjax's loops (and so gives the same bits at any thread count)
    // only with a set that has small-product loops; the baseline set's goes to BLAS.
    if (c.groups == 1 && !set_has_small_products()) continue;
    CHECK(xjax::detail::split_loops() > splits);
    const auto [y1, gx1, gw1] = run(1);
    CHECK(vec(y1) == vec(y3));
    CHECK(vec(gx1) == vec(gx3));
    CHECK(vec(gw1) == vec(gw3));
  }
}

TEST_CASE("depthwise and direct convolutions with more window offsets than the kernels tabulate: value and gradients against the loops") {
  // 1101 output positions x 1000 window positions: above conv.cpp's kMaxOffsets (2^20), so the
  // depthwise and direct loops and the channels-last depthwise kernel gradient compute their
  // offsets per output position.
  const ConvCase cases[] = {
      {"1-D depthwise, long window", {1, 2100, 2}, {1000, 1, 2}, {1}, {{0, 0}}, {1}, {1}, "NWC", "WIO", "NWC", 2, 1},
      {"1-D, 8 channels into one (the direct loop), long window", {2, 2100, 8}, {1000, 8, 1}, {1}, {{0, 0}}, {1}, {1}, "NWC", "WIO", "NWC", 1, 1},
  };
  unsigned seed = 4200;
  for (const ConvCase& c : cases) {
    INFO(std::string(c.what));
    const xj::Array x = test_util::randn(c.lhs, seed++), w = test_util::randn(c.rhs, seed++);
    xj::Shape shape;
    const std::vector<double> want = naive_conv(c, vec(x), vec(w), shape);
    const xj::Array ct = test_util::randn(shape, seed++);
    const auto [dx, dw] = adjoint_conv(c, x, w, ct);
    auto [y, pullback] = xj::vjp([&](const xj::Array& a, const xj::Array& b) { return run_conv(c, a, b); }, x, w);
    auto [gx, gw] = pullback(ct);
    check_close_all(y, want, 1e-11);
    check_close_all(gx, dx, 1e-11);
    check_close_all(gw, dw, 1e-11);
  }
}

TEST_CASE("reduce_window regressions from review: every integer dtype's identity, narrow all-padding windows, string padding errors") {
  // The identity was computed for i32 and i64 only: i8's -128 (max) or u8's 255 (min) was refused
  // and 0 accepted for an i8 max; a window wholly in padding then wrapped i32's identity to 0.
  const xj::Array base = xj::array<int>({-5, -3, -7, -2}, {4});
  for (xj::DType d : {xj::i8, xj::i16, xj::u8, xj::u16, xj::i32, xj::u32, xj::i64, xj::u64}) {
    CAPTURE(xj::dtype_name(d));
    const xj::Array x = xj::astype(xj::is_signed_integer(d) ? base : xj::neg(base), d);
    const auto info = xj::iinfo(d);
    const double lo = static_cast<double>(info.min), hi = static_cast<double>(info.max);
    // windows of 2, stride 1, one pad each side: the first and last windows hold one element
    // each; with window 2 and pads (2, 2), the outer windows hold none (the identity).
    const xj::Padding pads(std::vector<std::pair<std::int64_t, std::int64_t>>{{2, 2}});
    const auto mx = xj::astype(xj::reduce_window(x, lo, xj::WindowOp::max, {2}, {1}, pads), xj::f64).to_vector<double>();
    const auto mn = xj::astype(xj::reduce_window(x, hi, xj::WindowOp::min, {2}, {1}, pads), xj::f64).to_vector<double>();
    const auto xv = xj::astype(x, xj::f64).to_vector<double>();
    REQUIRE(mx.size() == 7);
    CHECK(mx.front() == lo);
    CHECK(mx.back() == lo);
    CHECK(mn.front() == hi);
    CHECK(mn.back() == hi);
    for (std::size_t o = 1; o < 6; ++o) {
      double want_max = lo, want_min = hi;
      for (std::size_t i = o > 2 ? o - 2 : 0; i < std::min<std::size_t>(o, 4); ++i) {
        want_max = std::max(want_max, xv[i]);
        want_min = std::min(want_min, xv[i]);
      }
      CHECK(mx[o] == want_max);
      CHECK(mn[o] == want_min);
    }
    if (lo != 0.0)
      CHECK_THROWS_AS((void)xj::reduce_window(x, 0.0, xj::WindowOp::max, {2}, {1}, "VALID"), xj::ShapeError);
  }
  // String padding's errors carry the caller's line, as every other shape error; the mode's case
  // does not matter (JAX upper-cases it); a pool's pairs are counted per window dimension.
  const std::string zero_stride = test_util::message_of<xj::ShapeError>([&] {
    (void)xj::conv(xj::zeros({1, 3, 6, 6}), xj::zeros({4, 3, 3, 3}), {0, 1}, "SAME");
  });
  CHECK(contains(zero_stride, "test_conv.cpp"));
  CHECK(xj::conv(xj::ones({1, 1, 5}), xj::ones({1, 1, 3}), {1}, "same").shape() == xj::Shape{1, 1, 5});
  CHECK(contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::conv(xj::ones({1, 1, 5}), xj::ones({1, 1, 3}), {1}, "Full"); }),
                 "test_conv.cpp"));
  const std::string pairs = test_util::message_of<xj::ShapeError>([&] {
    (void)xj::max_pool(xj::zeros({1, 4, 4, 1}), {2, 2}, {1, 1}, xj::Padding(std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}}));
  });
  CHECK(contains(pairs, "max_pool"));
  CHECK(contains(pairs, "padding needs 2 (low, high) pairs, one per window dimension, got 1"));
}

TEST_CASE("conv: a short rhs_dilation with padding pairs is named as such (review finding: blamed the padding)") {
  const xj::Array x = xj::zeros({2, 2, 5, 5}), w = xj::zeros({3, 2, 3, 3});
  const std::string msg = test_util::message_of<xj::ShapeError>([&] {
    (void)xj::conv_general_dilated(x, w, {1, 1}, xj::Padding(std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {0, 0}}), {}, {2},
                                   {"NCHW", "OIHW", "NCHW"});
  });
  CHECK(test_util::contains(msg, "rhs_dilation needs 2 entries"));
}

TEST_CASE("pooling regressions from the twenty-seventh session's review: max_pool / avg_pool take any number of batch dims, none too (flax)") {
  const xj::Array x = test_util::randn({2, 3, 4, 4, 2}, 17);  // two batch dims, 4 x 4, 2 features
  const xj::Array two = xj::max_pool(x, {2, 2}, {2, 2});
  CHECK(two.shape() == xj::Shape{2, 3, 2, 2, 2});
  const auto xv = x.to_vector<double>(), tv = two.to_vector<double>();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          for (int c = 0; c < 2; ++c) {
            double m = -1e300;
            for (int di = 0; di < 2; ++di)
              for (int dj = 0; dj < 2; ++dj) m = std::max(m, xv[((((a * 3 + b) * 4 + 2 * i + di) * 4) + 2 * j + dj) * 2 + c]);
            CHECK(tv[(((a * 3 + b) * 2 + i) * 2 + j) * 2 + c] == m);
          }
  // no batch dim: the batched result of a batch of one
  const xj::Array one = xj::reshape(xj::slice(x, {0, 0, 0, 0, 0}, {1, 1, 4, 4, 2}), {4, 4, 2});
  CHECK(xj::avg_pool(one, {3, 3}, {1, 1}, "SAME").to_vector<double>() ==
        xj::avg_pool(xj::reshape(one, {1, 4, 4, 2}), {3, 3}, {1, 1}, "SAME").to_vector<double>());
  CHECK_THROWS_AS((void)xj::max_pool(xj::zeros({4, 4}), {2, 2}), xj::ShapeError);  // no feature dim
}
