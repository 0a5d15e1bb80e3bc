// conv.cpp: the kernel of conv_general_dilated, for every layout, padding, stride, dilation and
// group count, as GEMMs.
//
// out[n, o, s] = sum over (c, k) of lhs[n', g*Cg + c, pos(s, k)] * rhs[o, c, k], where o's group
// q = o / Oq picks the input channels (feature groups) or the lhs batch block n' = q*Nout + n
// (batch groups), and pos is the window geometry of windows.hpp. Read conv_general_dilated_kernel
// last: it brings lhs into channels-last order (N, spatial..., C) and rhs into one (kernel
// position, c) x o matrix per group, then either
//   - multiplies the channels-last lhs directly (1x1 windows without stride, padding or dilation),
//   - runs the depthwise loop (one input channel per group, no GEMM: each output channel is a
//     short dot along the window), or
//   - im2col: gathers tiles of the patch matrix (rows: output positions; columns: kernel
//     position x channel, each a contiguous run of the channels-last lhs) and multiplies each tile
//     into the output with BLAS, accumulating over column tiles, so the patch matrix is never
//     whole in memory.
// The output is produced channels-last (N, spatial..., O) and transposed to out_spec's order.
// The transposes of a convolution (its gradients) are convolutions too (transforms/transpose.cpp),
// so they run through the same code.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/kernels.hpp"
#include "windows.hpp"

namespace xjax::detail::kernels {
namespace {

// c (m x n, leading dim ldc) = a (m x k) b (k x n) + beta c, row-major.
template <class T> void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
                             std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  const auto bi = [](std::int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(n), bi(k), 1.0f, a, bi(lda), b, bi(ldb), beta, c,
                bi(ldc));
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(n), bi(k), 1.0, a, bi(lda), b, bi(ldb), beta, c,
                bi(ldc));
}

bool is_identity(const Ints& perm) {
  for (std::size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<std::int64_t>(i)) return false;
  return true;
}

// The order (batch, spatial..., feature) of an operand whose spec lists (batch, feature, spatial...).
Ints channels_last_order(const Ints& spec) {
  Ints perm{spec[0]};
  perm.insert(perm.end(), spec.begin() + 2, spec.end());
  perm.push_back(spec[1]);
  return perm;
}

Array in_order(const Array& x, const Ints& perm) { return is_identity(perm) ? x : transpose_kernel(x, perm); }

std::int64_t product(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{1}, std::multiplies<>());
}

// Row-major position counter over `extent` (the odometer of a nested loop of any depth).
struct Odometer {
  const std::vector<std::int64_t>& extent;
  std::vector<std::int64_t> at = std::vector<std::int64_t>(extent.size(), 0);
  void next() {
    for (std::size_t i = extent.size(); i-- > 0;) {
      if (++at[i] < extent[i]) return;
      at[i] = 0;
    }
  }
};

// Everything the loops need, worked out once per call.
struct Conv {
  std::vector<WindowDim> dims;              // spatial dims, rhs_spec's order
  std::vector<std::vector<std::int64_t>> table;  // per dim: input index of (out, window) or -1
  std::vector<std::int64_t> in_stride;      // channels-last lhs stride of each spatial dim
  std::vector<std::int64_t> out_extent, window_extent;
  std::int64_t n = 0, c = 0, cg = 0, o = 0, groups = 0, oq = 0, nout = 0, positions = 0, window = 0;
  bool batch_groups = false;

  // Offset (elements) in one channels-last image of window position kpos at output position opos,
  // or -1 when it reads padding.
  std::int64_t offset(const std::vector<std::int64_t>& opos, const std::vector<std::int64_t>& kpos) const {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const std::int64_t idx = table[i][static_cast<std::size_t>(opos[i] * dims[i].window + kpos[i])];
      if (idx < 0) return -1;
      off += idx * in_stride[i];
    }
    return off;
  }
};

Conv make_conv(const Shape& lhs, const Shape& rhs, const params::ConvGeneralDilated& p) {
  Conv g;
  g.dims = conv_window_dims(lhs, rhs, p);
  for (const auto& d : g.dims) {
    g.table.push_back(d.index_table());
    g.out_extent.push_back(d.out_size);
    g.window_extent.push_back(d.window);
  }
  g.in_stride.assign(g.dims.size(), 0);
  g.n = lhs[static_cast<std::size_t>(p.lhs_spec[0])];
  g.c = lhs[static_cast<std::size_t>(p.lhs_spec[1])];
  std::int64_t stride = g.c;
  for (std::size_t i = g.dims.size(); i-- > 0;) {
    g.in_stride[i] = stride;
    stride *= g.dims[i].in_size;
  }
  g.o = rhs[static_cast<std::size_t>(p.rhs_spec[0])];
  g.cg = rhs[static_cast<std::size_t>(p.rhs_spec[1])];
  g.groups = p.feature_group_count * p.batch_group_count;
  g.batch_groups = p.batch_group_count > 1;
  g.oq = g.o / g.groups;
  g.nout = g.n / p.batch_group_count;
  g.positions = product(g.out_extent);
  g.window = product(g.window_extent);
  return g;
}

// rhs as one (window position, input channel) x (output channel) matrix per group, contiguous:
// w[q][kpos][c][oq] = rhs[q*Oq + oq, c, kpos...].
template <class T> std::vector<T> weight_matrices(const Array& rhs, const params::ConvGeneralDilated& p, const Conv& g) {
  const Ints rs = row_major_strides(rhs.shape());
  const std::int64_t so = rs[static_cast<std::size_t>(p.rhs_spec[0])], si = rs[static_cast<std::size_t>(p.rhs_spec[1])];
  std::vector<std::int64_t> sk;
  for (std::size_t i = 0; i < g.dims.size(); ++i) sk.push_back(rs[static_cast<std::size_t>(p.rhs_spec[i + 2])]);
  const T* src = in_ptr<T>(rhs);
  std::vector<T> w(static_cast<std::size_t>(g.groups * g.window * g.cg * g.oq));
  T* dst = w.data();
  for (std::int64_t q = 0; q < g.groups; ++q) {
    Odometer k{g.window_extent};
    for (std::int64_t kp = 0; kp < g.window; ++kp, k.next()) {
      std::int64_t koff = 0;
      for (std::size_t i = 0; i < sk.size(); ++i) koff += k.at[i] * sk[i];
      for (std::int64_t c = 0; c < g.cg; ++c)
        for (std::int64_t j = 0; j < g.oq; ++j) *dst++ = src[(q * g.oq + j) * so + c * si + koff];
    }
  }
  return w;
}

// One input channel per group (depthwise): out[n, s, o] = sum_k x[n, pos(s, k), o / m] w[k, o],
// m = Oq output channels per input channel. Vectorizes along the channels when m = 1.
template <class T> void depthwise(const T* x, const T* w, const Conv& g, T* out) {
  const std::int64_t image = g.dims.empty() ? g.c : g.in_stride[0] * g.dims[0].in_size;
  const std::int64_t m = g.oq;
  for (std::int64_t n = 0; n < g.nout; ++n) {
    Odometer s{g.out_extent};
    for (std::int64_t pos = 0; pos < g.positions; ++pos, s.next()) {
      T* y = out + (n * g.positions + pos) * g.o;
      std::fill(y, y + g.o, T(0));
      Odometer k{g.window_extent};
      for (std::int64_t kp = 0; kp < g.window; ++kp, k.next()) {
        const std::int64_t off = g.offset(s.at, k.at);
        if (off < 0) continue;
        const T* xs = x + n * image + off;
        const T* ws = w + kp * g.o;
        if (m == 1)
          for (std::int64_t c = 0; c < g.o; ++c) y[c] += xs[c] * ws[c];
        else
          for (std::int64_t j = 0; j < g.o; ++j) y[j] += xs[j / m] * ws[j];
      }
    }
  }
}

// The depthwise weights: w[kpos][o] = rhs[o, 0, kpos...] (the general matrices with Cg = 1,
// regrouped so that one window position's weights for every channel are contiguous).
template <class T> std::vector<T> depthwise_weights(const std::vector<T>& w, const Conv& g) {
  std::vector<T> out(w.size());
  for (std::int64_t q = 0; q < g.groups; ++q)
    for (std::int64_t kp = 0; kp < g.window; ++kp)
      for (std::int64_t j = 0; j < g.oq; ++j)
        out[static_cast<std::size_t>(kp * g.o + q * g.oq + j)] = w[static_cast<std::size_t>((q * g.window + kp) * g.oq + j)];
  return out;
}

// The general case: for each group, tiles of the patch matrix times the group's weights.
template <class T> void im2col_gemm(const T* x, const std::vector<T>& w, const Conv& g, T* out) {
  constexpr std::int64_t tile_elements = std::int64_t{1} << 20;
  const std::int64_t image = g.dims.empty() ? g.c : g.in_stride[0] * g.dims[0].in_size;
  const std::int64_t rows = g.nout * g.positions;
  const std::int64_t kpos_per_tile = std::clamp<std::int64_t>(8192 / std::max<std::int64_t>(g.cg, 1), 1, g.window);
  const std::int64_t cols_max = kpos_per_tile * g.cg;
  const std::int64_t rows_per_tile = std::clamp<std::int64_t>(tile_elements / std::max<std::int64_t>(cols_max, 1), 1,
                                                              std::max<std::int64_t>(rows, 1));
  std::vector<T> patch(static_cast<std::size_t>(rows_per_tile * cols_max));
  for (std::int64_t q = 0; q < g.groups; ++q) {
    const std::int64_t cbase = g.batch_groups ? 0 : q * g.cg, nbase = g.batch_groups ? q * g.nout : 0;
    const T* wq = w.data() + q * g.window * g.cg * g.oq;
    for (std::int64_t r0 = 0; r0 < rows; r0 += rows_per_tile) {
      const std::int64_t r1 = std::min(rows, r0 + rows_per_tile);
      for (std::int64_t k0 = 0; k0 < g.window; k0 += kpos_per_tile) {
        const std::int64_t k1 = std::min(g.window, k0 + kpos_per_tile), cols = (k1 - k0) * g.cg;
        T* dst = patch.data();
        Odometer s{g.out_extent};
        for (std::int64_t i = 0; i < r0 % g.positions; ++i) s.next();
        for (std::int64_t r = r0; r < r1; ++r, s.next()) {
          const T* img = x + (nbase + r / g.positions) * image + cbase;
          Odometer k{g.window_extent};
          for (std::int64_t i = 0; i < k0; ++i) k.next();
          for (std::int64_t kp = k0; kp < k1; ++kp, k.next(), dst += g.cg) {
            const std::int64_t off = g.offset(s.at, k.at);
            if (off < 0)
              std::fill(dst, dst + g.cg, T(0));
            else
              std::memcpy(dst, img + off, static_cast<std::size_t>(g.cg) * sizeof(T));
          }
        }
        gemm<T>(r1 - r0, g.oq, cols, patch.data(), cols, wq + k0 * g.cg * g.oq, g.oq, k0 == 0 ? T(0) : T(1),
                out + r0 * g.o + q * g.oq, g.o);
      }
    }
  }
}

bool is_pointwise(const Conv& g, const params::ConvGeneralDilated& p) {
  if (g.groups != 1) return false;
  for (std::size_t i = 0; i < g.dims.size(); ++i)
    if (g.dims[i].window != 1 || p.window_strides[i] != 1 || p.lhs_dilation[i] != 1 || p.padding_lo[i] != 0 ||
        p.padding_hi[i] != 0)
      return false;
  return true;
}

template <class T>
void convolve(const Array& lhs_cl, const Array& rhs, const params::ConvGeneralDilated& p, const Conv& g, T* out) {
  const T* x = in_ptr<T>(lhs_cl);
  const std::vector<T> w = weight_matrices<T>(rhs, p, g);
  if (g.window == 0 || g.cg == 0) {
    std::fill(out, out + g.nout * g.positions * g.o, T(0));
  } else if (is_pointwise(g, p)) {
    gemm<T>(g.n * g.positions, g.o, g.c, x, g.c, w.data(), g.o, T(0), out, g.o);
  } else if (g.cg == 1 && !g.batch_groups && g.groups == g.c) {
    depthwise(x, depthwise_weights(w, g).data(), g, out);
  } else {
    im2col_gemm(x, w, g, out);
  }
}

}  // namespace

Array conv_general_dilated_kernel(const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p,
                                  const ShapedArray& out) {
  const Conv g = make_conv(lhs.shape(), rhs.shape(), p);
  const Array lhs_cl = in_order(lhs, channels_last_order(p.lhs_spec));
  // The output in channels-last order, then in out_spec's.
  const Ints out_order = channels_last_order(p.out_spec);
  ShapedArray cl{{}, out.dtype};
  for (auto d : out_order) cl.shape.push_back(out.shape[static_cast<std::size_t>(d)]);
  Array result = alloc_array(cl);
  if (out.dtype == DType::f32)
    convolve<float>(lhs_cl, rhs, p, g, out_ptr<float>(result));
  else if (out.dtype == DType::f64)
    convolve<double>(lhs_cl, rhs, p, g, out_ptr<double>(result));
  else
    unsupported_dtype(Primitive::conv_general_dilated, out.dtype);
  if (is_identity(out_order)) return result;
  Ints inverse(out_order.size());
  for (std::size_t i = 0; i < out_order.size(); ++i) inverse[static_cast<std::size_t>(out_order[i])] = static_cast<std::int64_t>(i);
  return transpose_kernel(result, inverse);
}

}  // namespace xjax::detail::kernels
