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
//   - multiplies the input rows in place (direct_rows: small windows, at least 8 outputs a row),
//   - im2col: gathers tiles of the patch matrix (rows: output positions; columns: kernel
//     position x channel, each a contiguous run of the channels-last lhs) and multiplies each tile
//     into the output (the product loops where they take the output channels, else BLAS),
//     accumulating over column tiles, so the patch matrix is never whole in memory.
// The output is produced channels-last (N, spatial..., O) and transposed to out_spec's order.
// Layouts that need no transposes are read in place instead (conv_general_dilated_kernel's first
// branches): a 1x1 convolution with the channels leading (one product per image), a depthwise one
// with the channels leading (each plane filtered by its window), the depthwise kernel gradient in
// either layout, the dense kernel gradient with the channels last (products of input rows by
// cotangent rows), the 1x1 kernel gradients (per image, or in chunks of positions), and a single
// output position (dot_general).
// The transposes of a convolution (its gradients) are convolutions too (transforms/transpose.cpp),
// so they run through the same code.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernels/kernels.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "kernels/transpose_block.hpp"
#include "windows.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

// c (m x n, leading dim ldc) = op(a) (m x k) op(b) (k x n) + beta c, row-major; op transposes
// when the flag says the operand is stored transposed.
template <class T> void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
                             std::int64_t ldb, T beta, T* c, std::int64_t ldc, bool a_t = false, bool b_t = false) {
  if (m == 0 || n == 0) return;
  const BlasCall blas_call("conv_general_dilated");
  for (std::int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > std::numeric_limits<blasint>::max())
      throw Error("conv_general_dilated: a matrix product dimension of " + std::to_string(v) +
                  " exceeds the BLAS interface's " + std::to_string(std::numeric_limits<blasint>::max()) +
                  "; split the batch");
  const auto bi = [](std::int64_t v) { return static_cast<blasint>(v); };
  const CBLAS_TRANSPOSE ta = a_t ? CblasTrans : CblasNoTrans, tb = b_t ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, bi(m), bi(n), bi(k), 1.0f, a, bi(lda), b, bi(ldb), beta, c, bi(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, bi(m), bi(n), bi(k), 1.0, a, bi(lda), b, bi(ldb), beta, c, bi(ldc));
  note_blas_product(m * n * k);
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

// Everything the loops need, worked out once per call.
struct Conv {
  std::vector<WindowDim> dims;              // spatial dims, rhs_spec's order
  std::vector<std::vector<std::int64_t>> table;  // per dim: input index of (out, window) or -1
  std::vector<std::int64_t> in_stride;      // channels-last lhs stride of each spatial dim
  std::vector<std::int64_t> out_extent, window_extent;
  std::int64_t n = 0, c = 0, cg = 0, o = 0, groups = 0, oq = 0, nout = 0, positions = 0, window = 0;
  std::int64_t image = 0;  // elements of one channels-last lhs image (spatial..., C)
  bool batch_groups = false;

  // Offset (elements) of window position kpos at output position opos in an image whose spatial
  // dims have the given strides, or -1 when it reads padding.
  std::int64_t offset(const Ints& strides, const Ints& opos, const Ints& kpos) const {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const std::int64_t idx = table[i][static_cast<std::size_t>(opos[i] * dims[i].window + kpos[i])];
      if (idx < 0) return -1;
      off += idx * strides[i];
    }
    return off;
  }
  // The same in one channels-last lhs image.
  std::int64_t offset(const Ints& opos, const Ints& kpos) const { return offset(in_stride, opos, kpos); }
};

// The strides of the spatial dims of a (spatial..., channels) image, `channels` elements per position.
Ints spatial_strides(const std::vector<WindowDim>& dims, std::int64_t channels) {
  Ints strides(dims.size());
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = channels;
    channels *= dims[i].in_size;
  }
  return strides;
}

Conv make_conv(const Shape& lhs, const Shape& rhs, const params::ConvGeneralDilated& p) {
  Conv g;
  g.dims = conv_window_dims(lhs, rhs, p);
  for (const auto& d : g.dims) {
    g.table.push_back(d.index_table());
    g.out_extent.push_back(d.out_size);
    g.window_extent.push_back(d.window);
  }
  g.n = lhs[static_cast<std::size_t>(p.lhs_spec[0])];
  g.c = lhs[static_cast<std::size_t>(p.lhs_spec[1])];
  g.in_stride = spatial_strides(g.dims, g.c);
  g.o = rhs[static_cast<std::size_t>(p.rhs_spec[0])];
  g.cg = rhs[static_cast<std::size_t>(p.rhs_spec[1])];
  g.groups = p.feature_group_count * p.batch_group_count;
  g.batch_groups = p.batch_group_count > 1;
  g.oq = g.o / g.groups;
  g.nout = g.n / p.batch_group_count;
  g.positions = shape_size(g.out_extent);
  g.window = shape_size(g.window_extent);
  g.image = g.dims.empty() ? g.c : g.in_stride[0] * g.dims[0].in_size;
  return g;
}

/// Which index of window_offsets' table runs fastest.
enum class OffsetOrder { window_position_fastest, output_position_fastest };

// The offset in one (spatial..., channels) image, `channels` elements per position, that window
// position kpos of output position pos reads, or -1 for padding, for the output positions
// [first, last) and the window positions [k0, k1): offsets[(pos - first) * (k1 - k0) + kpos - k0]
// (window_position_fastest) or offsets[(kpos - k0) * (last - first) + pos - first].
Ints window_offsets(const Conv& g, std::int64_t channels, std::int64_t first, std::int64_t last, std::int64_t k0,
                    std::int64_t k1, OffsetOrder order) {
  const Ints strides = spatial_strides(g.dims, channels);
  // The loop nest follows the table's order, so the table is written in sequence.
  struct Range {
    const Ints& extent;
    std::int64_t begin, end;
  };
  const Range positions{g.out_extent, first, last}, window{g.window_extent, k0, k1};
  const bool window_fastest = order == OffsetOrder::window_position_fastest;
  const Range& outer_range = window_fastest ? positions : window;
  const Range& inner_range = window_fastest ? window : positions;
  Ints offsets(static_cast<std::size_t>((last - first) * (k1 - k0)));
  std::size_t at = 0;
  Odometer outer{outer_range.extent};
  outer.seek(outer_range.begin);
  for (std::int64_t i = outer_range.begin; i < outer_range.end; ++i, outer.next()) {
    Odometer inner{inner_range.extent};
    inner.seek(inner_range.begin);
    const Ints& pos_at = window_fastest ? outer.at : inner.at;
    const Ints& k_at = window_fastest ? inner.at : outer.at;
    for (std::int64_t j = inner_range.begin; j < inner_range.end; ++j, inner.next(), ++at)
      offsets[at] = g.offset(strides, pos_at, k_at);
  }
  return offsets;
}

// window_offsets of the output positions [first, last) and every window position.
Ints window_offsets(const Conv& g, std::int64_t channels, std::int64_t first, std::int64_t last) {
  return window_offsets(g, channels, first, last, 0, g.window, OffsetOrder::window_position_fastest);
}

/// The most (output position, window position) offsets a kernel tabulates at once (8 MiB).
constexpr std::int64_t kMaxOffsets = std::int64_t{1} << 20;

/// window_offsets of every output position: tabulated once when there are at most kMaxOffsets of
/// them (the same for every image), else computed per position when asked.
class OffsetTable {
 public:
  OffsetTable(const Conv& g, std::int64_t channels)
      : g_(g), channels_(channels), tabulated_(g.positions * g.window <= kMaxOffsets),
        all_(tabulated_ ? window_offsets(g, channels, 0, g.positions) : Ints{}) {}

  /// Output position pos's g.window offsets; valid until the next call with the same scratch.
  const std::int64_t* row(std::int64_t pos, Ints& scratch) const {
    if (tabulated_) return all_.data() + pos * g_.window;
    scratch = window_offsets(g_, channels_, pos, pos + 1);
    return scratch.data();
  }

  /// Output position pos's offsets where they are tabulated, else null (nothing computed).
  const std::int64_t* tabulated_row(std::int64_t pos) const { return tabulated_ ? all_.data() + pos * g_.window : nullptr; }

 private:
  const Conv& g_;
  std::int64_t channels_;
  bool tabulated_;
  Ints all_;
};

// rhs as one (window position, input channel) x (output channel) matrix per group, contiguous:
// w[q][kpos][c][oq] = rhs[q*Oq + oq, c, kpos...]: rhs viewed with its O dim split into (Q, Oq),
// transposed (a tiled copy) into (Q, spatial..., I, Oq).
Array weight_matrices(const Array& rhs, const params::ConvGeneralDilated& p, const Conv& g) {
  const std::int64_t odim = p.rhs_spec[0];
  const auto at = [odim](std::int64_t d) { return d > odim ? d + 1 : d; };
  ShapedArray split{{}, rhs.dtype()};
  for (std::int64_t d = 0; d < rhs.ndim(); ++d) {
    if (d == odim) {
      split.shape.push_back(g.groups);
      split.shape.push_back(g.oq);
    } else {
      split.shape.push_back(rhs.shape()[static_cast<std::size_t>(d)]);
    }
  }
  Ints perm{odim};
  for (std::size_t i = 2; i < p.rhs_spec.size(); ++i) perm.push_back(at(p.rhs_spec[i]));
  perm.push_back(at(p.rhs_spec[1]));
  perm.push_back(odim + 1);
  return transpose_kernel(share_buffer(rhs, split), perm);
}

// out[i] = partial[0][i] + partial[1][i] + ... in block order (partial: blocks x size, the
// partial sums of fixed blocks of a kernel's work), the elements split over the threads: the
// result does not depend on the thread count.
template <class T> void add_in_block_order(const T* partial, std::int64_t blocks, std::int64_t size, T* out) {
  parallel_for(size, 4096, [&](std::int64_t i0, std::int64_t i1) {
    std::copy(partial + i0, partial + i1, out + i0);
    for (std::int64_t block = 1; block < blocks; ++block)
      for (std::int64_t i = i0; i < i1; ++i) out[i] += partial[block * size + i];
  }, ChunkCalls::no_blas);
}

// How many fixed blocks of images a kernel gradient sums separately (then add_in_block_order):
// at most 8, whatever the thread count, fewer when their partial sums (part elements each) would
// pass 4M elements (16 MiB of floats), at least 1.
std::int64_t image_blocks(std::int64_t images, std::int64_t part) {
  return std::max<std::int64_t>(1, std::min({images, std::int64_t{8}, (std::int64_t{1} << 22) / std::max<std::int64_t>(part, 1)}));
}

// Asks the caches for the count elements from p (a hint: no fault, nothing waited on).
template <class T> void prefetch_run(const T* p, std::int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(p);
  const std::int64_t size = count * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t b = 0; b < size; b += 64) __builtin_prefetch(bytes + b);
}

/// How many output rows ahead the depthwise loop asks for its input (8 to 32 measured alike).
constexpr std::int64_t kDepthwiseAhead = 12;

// One input channel per group (depthwise): out[n, s, o] = sum_k x[n, pos(s, k), o / m] w[k, o],
// m = Oq output channels per input channel. Vectorizes along the channels when m = 1.
template <class T> void depthwise(const T* x, const T* w, const Conv& g, T* out) {
  const std::int64_t image = g.image;
  const std::int64_t m = g.oq;
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size), block = 4 * width;
  // Each window position's offset (-1: padding, read as zeros times the weights, so a non-finite
  // weight gives NaN there as in im2col's product), per output position; the same for every image.
  const OffsetTable table(g, g.c);
  // Output rows (n, position) in chunks, each row written by one thread.
  const std::int64_t rows = g.nout * g.positions;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(g.window * g.o, 1));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    Ints scratch;
    for (std::int64_t row = begin; row < end; ++row) {
      T* y = out + row * g.o;
      // The input that the row kDepthwiseAhead rows on reads at its last window position (its
      // other positions were read by the rows before it), asked for now: the hardware's
      // prefetchers do not follow the several input rows a window spans (forward 1.2-1.4x at C2's
      // depthwise size on a Zen 5).
      if (g.window > 0 && row + kDepthwiseAhead < rows)
        if (const std::int64_t* ahead = table.tabulated_row((row + kDepthwiseAhead) % g.positions); ahead && ahead[g.window - 1] >= 0)
          prefetch_run(x + ((row + kDepthwiseAhead) / g.positions) * image + ahead[g.window - 1], g.c);
      const std::int64_t* offsets = table.row(row % g.positions, scratch);
      const T* img = x + (row / g.positions) * image;
      std::int64_t c0 = 0;
      if (m == 1)  // four batches of channels held in registers across the window
        for (; c0 + block <= g.o; c0 += block) {
          B a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0));
          for (std::int64_t kp = 0; kp < g.window; ++kp) {
            const std::int64_t off = offsets[kp];
            const T* ws = w + kp * g.o + c0;
            const T* xs = img + (off < 0 ? 0 : off) + c0;
            const B zero(T(0));
            a0 = xsimd::fma(off < 0 ? zero : B::load_unaligned(xs), B::load_unaligned(ws), a0);
            a1 = xsimd::fma(off < 0 ? zero : B::load_unaligned(xs + width), B::load_unaligned(ws + width), a1);
            a2 = xsimd::fma(off < 0 ? zero : B::load_unaligned(xs + 2 * width), B::load_unaligned(ws + 2 * width), a2);
            a3 = xsimd::fma(off < 0 ? zero : B::load_unaligned(xs + 3 * width), B::load_unaligned(ws + 3 * width), a3);
          }
          a0.store_unaligned(y + c0);
          a1.store_unaligned(y + c0 + width);
          a2.store_unaligned(y + c0 + 2 * width);
          a3.store_unaligned(y + c0 + 3 * width);
        }
      std::fill(y + c0, y + g.o, T(0));
      for (std::int64_t kp = 0; kp < g.window; ++kp) {
        const std::int64_t off = offsets[kp];
        const T* ws = w + kp * g.o;
        for (std::int64_t j = c0; j < g.o; ++j) y[j] += (off < 0 ? T(0) : img[off + j / m]) * ws[j];
      }
    }
  }, ChunkCalls::no_blas);
}

// The depthwise weights: w[kpos][o] = rhs[o, 0, kpos...] (the general matrices with Cg = 1,
// regrouped so that one window position's weights for every channel are contiguous).
template <class T> std::vector<T> depthwise_weights(const T* w, const Conv& g) {
  std::vector<T> out(static_cast<std::size_t>(g.groups * g.window * g.oq));
  for (std::int64_t q = 0; q < g.groups; ++q)
    for (std::int64_t kp = 0; kp < g.window; ++kp)
      for (std::int64_t j = 0; j < g.oq; ++j)
        out[static_cast<std::size_t>(kp * g.o + q * g.oq + j)] = w[(q * g.window + kp) * g.oq + j];
  return out;
}

// The patch matrix's tile of rows [r0, r1) and window positions [k0, k1) of group q, row-major
// into dst ((k1 - k0) * Cg columns). With one group and a plain last spatial dim (no dilation),
// each row's window positions along that dim read one contiguous run of the channels-last lhs:
// one copy per run instead of one per window position.
template <class T>
void fill_patches(const T* x, const Conv& g, std::int64_t q, std::int64_t r0, std::int64_t r1, std::int64_t k0,
                  std::int64_t k1, T* dst) {
  const std::int64_t image = g.image;
  const std::int64_t cbase = g.batch_groups ? 0 : q * g.cg, nbase = g.batch_groups ? q * g.nout : 0;
  const WindowDim* last = g.dims.empty() ? nullptr : &g.dims.back();
  const bool runs = last && g.cg == g.c && last->window_dilation == 1 && last->base_dilation == 1 &&
                    k0 % last->window == 0 && k1 % last->window == 0;
  Odometer s{g.out_extent};
  s.seek(r0 % g.positions);
  for (std::int64_t r = r0; r < r1; ++r, s.next()) {
    const T* img = x + (nbase + r / g.positions) * image + cbase;
    Odometer k{g.window_extent};
    k.seek(k0);
    if (!runs) {
      for (std::int64_t kp = k0; kp < k1; ++kp, k.next(), dst += g.cg) {
        const std::int64_t off = g.offset(s.at, k.at);
        if (off < 0) std::fill(dst, dst + g.cg, T(0));
        else std::memcpy(dst, img + off, static_cast<std::size_t>(g.cg) * sizeof(T));
      }
      continue;
    }
    // Whole runs along the last dim: its valid window positions are [lo, hi), the others padding.
    const std::int64_t kw = last->window, o = s.at.back();
    const std::int64_t first = o * last->stride - last->pad_lo;  // input index of window position 0
    const std::int64_t lo = std::clamp<std::int64_t>(-first, 0, kw), hi = std::clamp<std::int64_t>(last->in_size - first, lo, kw);
    for (std::int64_t kp = k0; kp < k1; kp += kw, dst += kw * g.cg) {
      std::int64_t off = 0;
      bool inside = true;
      for (std::size_t i = 0; i + 1 < g.dims.size() && inside; ++i) {
        const std::int64_t idx = g.table[i][static_cast<std::size_t>(s.at[i] * g.dims[i].window + k.at[i])];
        inside = idx >= 0;
        off += idx * g.in_stride[i];
      }
      k.seek(kp + kw);
      if (!inside || lo == hi) {
        std::fill(dst, dst + kw * g.cg, T(0));
        continue;
      }
      std::fill(dst, dst + lo * g.cg, T(0));
      std::memcpy(dst + lo * g.cg, img + off + (first + lo) * g.in_stride.back(),
                  static_cast<std::size_t>((hi - lo) * g.cg) * sizeof(T));
      std::fill(dst + hi * g.cg, dst + kw * g.cg, T(0));
    }
  }
}

// c = a b for row-major a (m x k), b (k x n) and c (m x n) in the small-product loops, at most
// per_call rows a product (small_gemm_rows).
template <class T>
void small_products_by_rows(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t per_call, const T* a, const T* b, T* c) {
  for (std::int64_t i = 0; i < m; i += per_call)
    if (!small_gemm<T>(SmallGemm{std::min(per_call, m - i), n, k, false, false}, a + i * k, b, c + i * n))
      throw Error("conv_general_dilated: internal error: the small-product loops refused a product they take");
}

// The products below split their rows over the kernel threads, each block multiplied by the
// thread that takes it in the small-product loops (no BLAS: called from several threads at once it
// would split each product again), for output channels the loops take (a multiple of half the
// SIMD width: small_gemm_rows). Each output element is one chain over k in order, so the result
// does not depend on the thread count. They take a product only where the loops accept at least
// kMinRowsPerProduct rows at a time (fewer: BLAS's blocking wins).
constexpr std::int64_t kMinRowsPerProduct = 8;

// A 1x1 convolution with channels-last data: c = a b with a (m x k) the lhs, b (k x n) the
// weights; false (nothing written) where the loops do not take n.
template <class T> bool pointwise_small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c) {
  const std::int64_t per_call = small_gemm_rows<T>(n, k);
  if (per_call < kMinRowsPerProduct) return false;
  parallel_for((m + per_call - 1) / per_call, 1, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t r0 = b0 * per_call, r1 = std::min(m, b1 * per_call);
    small_products_by_rows(r1 - r0, n, k, per_call, a + r0 * k, b, c + r0 * n);
  }, ChunkCalls::no_blas);
  return true;
}

// The patch matrix's rows in tiles small enough to stay in L2 while they are multiplied, the
// tiles split into one contiguous share per kernel thread, each share filled and multiplied by the
// thread that takes it in a tile buffer of its own. For one group whose whole window fits a tile's
// columns; false (nothing written) otherwise.
template <class T> bool im2col_small_gemm(const T* x, const T* w, const Conv& g, T* out) {
  const std::int64_t rows = g.nout * g.positions, cols = g.window * g.cg;
  const std::int64_t per_call = small_gemm_rows<T>(g.oq, cols);
  if (g.groups != 1 || cols > 8192 || per_call < kMinRowsPerProduct) return false;
  // at most 64K elements and 16M multiply-adds a tile (many output channels: more, smaller tiles)
  const std::int64_t tile_rows = std::clamp<std::int64_t>(std::min(65536 / cols, (std::int64_t{1} << 24) / (cols * g.oq)),
                                                          kMinRowsPerProduct, std::max(rows, kMinRowsPerProduct));
  const std::int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  const std::int64_t shares = std::min<std::int64_t>(kernel_threads(), tiles);
  const ArenaScratch<T> patches(shares * tile_rows * cols);  // the shares' tiles
  parallel_for(shares, 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t share = s0; share < s1; ++share) {
      T* const patch = patches.data + share * tile_rows * cols;
      for (std::int64_t t = share * tiles / shares; t < (share + 1) * tiles / shares; ++t) {
        const std::int64_t r0 = t * tile_rows, r1 = std::min(rows, r0 + tile_rows);
        fill_patches(x, g, 0, r0, r1, 0, g.window, patch);
        small_products_by_rows(r1 - r0, g.oq, cols, per_call, patch, w, out + r0 * g.oq);
      }
    }
  }, ChunkCalls::no_blas);
  return true;
}

// The general case: for each group, tiles of the patch matrix times the group's weights. A tile
// spans every row when there are few (a weight gradient's shape: few output positions, a large
// window), so the weights are packed once; otherwise rows are tiled and the window taken whole
// where it fits. Column tiles are whole rows of the window's last dim where possible.
template <class T> void im2col_gemm(const T* x, const T* w, const Conv& g, T* out) {
  if (im2col_small_gemm(x, w, g, out)) return;
  constexpr std::int64_t tile_elements = std::int64_t{1} << 20;
  const std::int64_t rows = g.nout * g.positions;
  const std::int64_t kw = g.dims.empty() ? 1 : g.dims.back().window;
  std::int64_t kpos_per_tile = std::clamp<std::int64_t>(8192 / std::max<std::int64_t>(g.cg, 1), 1, g.window);
  if (rows <= 2048) kpos_per_tile = std::clamp<std::int64_t>(tile_elements / std::max<std::int64_t>(rows * g.cg, 1), 1, g.window);
  if (kpos_per_tile >= kw) kpos_per_tile -= kpos_per_tile % kw;
  const std::int64_t cols_max = kpos_per_tile * g.cg;
  const std::int64_t rows_per_tile = std::clamp<std::int64_t>(tile_elements / std::max<std::int64_t>(cols_max, 1), 1,
                                                              std::max<std::int64_t>(rows, 1));
  const ArenaScratch<T> tile(rows_per_tile * cols_max);  // fill_patches writes every element
  T* const patch = tile.data;
  if (g.groups == 1 && small_gemm_rows<T>(g.oq, 1) > 0 && rows >= kMinRowsPerProduct) {
    // The product loops, each tile's rows split into one share per kernel thread, each share
    // filled and multiplied by the thread that takes it (a weight gradient's 576 x 64 by 1792 tiles
    // ran in OpenBLAS, whose Haswell kernels Debian 12's 0.3.21 picks on AMD's AVX-512 CPUs, while
    // the fill ran on one thread). Each output element is one chain over the window in order.
    for (std::int64_t r0 = 0; r0 < rows; r0 += rows_per_tile) {
      const std::int64_t r1 = std::min(rows, r0 + rows_per_tile);
      const std::int64_t blocks = (r1 - r0 + kMinRowsPerProduct - 1) / kMinRowsPerProduct;
      for (std::int64_t k0 = 0; k0 < g.window; k0 += kpos_per_tile) {
        const std::int64_t k1 = std::min(g.window, k0 + kpos_per_tile), cols = (k1 - k0) * g.cg;
        const std::int64_t per_thread = std::max<std::int64_t>(1, blocks / kernel_threads());
        parallel_for(blocks, per_thread, [&](std::int64_t b0, std::int64_t b1) {
          const std::int64_t s0 = r0 + b0 * kMinRowsPerProduct, s1 = std::min(r1, r0 + b1 * kMinRowsPerProduct);
          T* const share = patch + (s0 - r0) * cols;
          fill_patches(x, g, 0, s0, s1, k0, k1, share);
          looped_gemm<T>(s1 - s0, g.oq, cols, share, cols, 1, w + k0 * g.cg * g.oq, out + s0 * g.o, k0 > 0);
        }, ChunkCalls::no_blas);
      }
    }
    return;
  }
  for (std::int64_t q = 0; q < g.groups; ++q) {
    const T* wq = w + q * g.window * g.cg * g.oq;
    for (std::int64_t r0 = 0; r0 < rows; r0 += rows_per_tile) {
      const std::int64_t r1 = std::min(rows, r0 + rows_per_tile);
      for (std::int64_t k0 = 0; k0 < g.window; k0 += kpos_per_tile) {
        const std::int64_t k1 = std::min(g.window, k0 + kpos_per_tile), cols = (k1 - k0) * g.cg;
        fill_patches(x, g, q, r0, r1, k0, k1, patch);
        gemm<T>(r1 - r0, g.oq, cols, patch, cols, wq + k0 * g.cg * g.oq, g.oq, k0 == 0 ? T(0) : T(1),
                out + r0 * g.o + q * g.oq, g.o);
      }
    }
  }
}

// One output channel per group and many input channels (a depthwise convolution's weight
// gradient: batch groups, one output channel each): each output element is a sum of dot products
// of the channels-last lhs's channel runs with the weights', no patch matrix.
template <class T> void direct(const T* x, const T* w, const Conv& g, T* out) {
  const std::int64_t image = g.image;
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  // (image, group) pairs in chunks, each output element written by one thread (a batch of one
  // image splits over its groups).
  const std::int64_t per_pair = g.positions * g.window * g.cg;
  const OffsetTable table(g, g.c);
  parallel_for(g.nout * g.groups, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(per_pair, 1)), [&](std::int64_t begin, std::int64_t end) {
    Ints scratch;
    for (std::int64_t pair = begin; pair < end; ++pair) {
      const std::int64_t n = pair / g.groups, q = pair % g.groups;
      const std::int64_t cbase = g.batch_groups ? 0 : q * g.cg, nbase = g.batch_groups ? q * g.nout : 0;
      const T* img = x + (nbase + n) * image + cbase;
      for (std::int64_t pos = 0; pos < g.positions; ++pos) {
        const std::int64_t* offsets = table.row(pos, scratch);
        T tail = 0;
        // Window position kp's dot product of x's and the weights' channel runs into two chains
        // (even and odd batches of channels).
        const auto add = [&](std::int64_t kp, B& even, B& odd) {
          const std::int64_t off = offsets[kp];
          const T* ws = w + (q * g.window + kp) * g.cg;
          if (off < 0) {  // padding: zeros times the weights, as in the other paths
            for (std::int64_t c = 0; c < g.cg; ++c) tail += T(0) * ws[c];
            return;
          }
          const T* xs = img + off;
          std::int64_t c = 0;
          for (; c + 2 * width <= g.cg; c += 2 * width) {
            even = xsimd::fma(B::load_unaligned(xs + c), B::load_unaligned(ws + c), even);
            odd = xsimd::fma(B::load_unaligned(xs + c + width), B::load_unaligned(ws + c + width), odd);
          }
          if (c + width <= g.cg) {
            even = xsimd::fma(B::load_unaligned(xs + c), B::load_unaligned(ws + c), even);
            c += width;
          }
          for (; c < g.cg; ++c) tail += xs[c] * ws[c];
        };
        // four independent chains (window position parity x batch parity) hide the multiply-add
        // latency; the order is fixed, so the result does not depend on the thread count
        B a0(T(0)), a1(T(0)), b0(T(0)), b1(T(0));
        std::int64_t kp = 0;
        for (; kp + 2 <= g.window; kp += 2) {
          add(kp, a0, a1);
          add(kp + 1, b0, b1);
        }
        if (kp < g.window) add(kp, a0, a1);
        const B acc = (a0 + a1) + (b0 + b1);
        out[(n * g.positions + pos) * g.o + q] = xsimd::hadd(acc) + tail;
      }
    }
  }, ChunkCalls::no_blas);
}

// The operand spec of a kernel gradient as JAX's transpose rule writes it (the layer's images its
// feature dim, the layer's channels its batch / output-feature dim), for rank r operands stored
// channels-last, (images, spatial..., channels): (r-1, 0, 1, ..., r-2); or channels-first,
// (images, channels, spatial...): (1, 0, 2, ..., r-1).
Ints filter_grad_spec(std::int64_t r, bool channels_last) {
  Ints spec{channels_last ? r - 1 : 1, 0};
  for (std::int64_t i = 1; i + 1 < r; ++i) spec.push_back(channels_last ? i : i + 1);
  return spec;
}

// A depthwise convolution's kernel gradient with channels-last data, as JAX's transpose rule
// writes it: lhs (the layer's input) and rhs (the output cotangent) both stored (images,
// spatial..., channels), the channels their batch / output-feature dim, the images their feature
// dim, one batch group per channel. Read in place (no transposes into the general layout):
// out[kpos, c] = sum over images f and cotangent positions k of lhs[f, in(kpos, k), c] rhs[f, k, c].
bool is_channels_last_depthwise_filter_grad(const Conv& g, const params::ConvGeneralDilated& p) {
  const Ints spec = filter_grad_spec(static_cast<std::int64_t>(p.lhs_spec.size()), true);
  return p.feature_group_count == 1 && p.batch_group_count == g.n && g.o == g.n && g.oq == 1 && p.lhs_spec == spec &&
         p.rhs_spec == spec;
}

// a[p * a_stride + b * width ...] += sum over kp in [0, n) of x[offs[kp * positions + p] + c + b * width ...]
// ct[kp * channels + c + b * width ...] for the NP kernel positions p and NB batches of channels b
// from c (offset -1: padding, zeros times the cotangent, so an infinite one gives NaN as in the
// other paths). The NP NB sums stay in registers across the cotangent positions, each one chain in
// kp order whatever NP and NB are (so the result does not depend on how positions and channels are
// grouped): each cotangent row is loaded once, contiguously, for NP kernel positions.
template <int NB, int NP, class T>
void sum_taps(const T* x, const T* ct, const std::int64_t* offs, std::int64_t positions, std::int64_t n,
              std::int64_t channels, std::int64_t c, T* a, std::int64_t a_stride) {
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  B sum[NP][NB];
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p)
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) sum[p][b] = B(T(0));
  for (std::int64_t kp = 0; kp < n; ++kp) {
    B g[NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) g[b] = B::load_unaligned(ct + kp * channels + c + b * width);
    const std::int64_t* o = offs + kp * positions;
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      const T* xs = x + (o[p] < 0 ? 0 : o[p]) + c;
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b)
        sum[p][b] = xsimd::fma(o[p] < 0 ? B(T(0)) : B::load_unaligned(xs + b * width), g[b], sum[p][b]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p)
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      T* at = a + p * a_stride + b * width;
      (B::load_unaligned(at) + sum[p][b]).store_unaligned(at);
    }
}

/// The most kernel positions sum_taps keeps in registers at once with NB batches of channels:
/// NP NB sums, NB cotangent batches and one operand in the vector registers.
template <int NB> constexpr int kMaxTapPositions = std::min(8, (simd::kVectorRegisters - 2 - NB) / NB);

template <int NB, class T>
void sum_taps(std::int64_t np, const T* x, const T* ct, const std::int64_t* offs, std::int64_t positions, std::int64_t n,
              std::int64_t channels, std::int64_t c, T* a, std::int64_t a_stride) {
  constexpr int most = kMaxTapPositions<NB>;
  switch (np) {  // (cases beyond `most` are never asked for)
    case 1: return sum_taps<NB, 1>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 2: return sum_taps<NB, std::min(2, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 3: return sum_taps<NB, std::min(3, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 4: return sum_taps<NB, std::min(4, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 5: return sum_taps<NB, std::min(5, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 6: return sum_taps<NB, std::min(6, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    case 7: return sum_taps<NB, std::min(7, most)>(x, ct, offs, positions, n, channels, c, a, a_stride);
    default: return sum_taps<NB, most>(x, ct, offs, positions, n, channels, c, a, a_stride);
  }
}

// sum_taps over every kernel position, in balanced groups of at most kMaxTapPositions<NB>.
template <int NB, class T>
void sum_all_taps(const T* x, const T* ct, const std::int64_t* offs, std::int64_t positions, std::int64_t n,
                  std::int64_t channels, std::int64_t c, T* a, std::int64_t a_stride) {
  const std::int64_t groups = (positions + kMaxTapPositions<NB> - 1) / kMaxTapPositions<NB>;
  for (std::int64_t q = 0, p0 = 0; q < groups; ++q) {
    const std::int64_t np = positions / groups + (q < positions % groups ? 1 : 0);
    sum_taps<NB, T>(np, x, ct, offs + p0, positions, n, channels, c, a + p0 * a_stride, a_stride);
    p0 += np;
  }
}

template <class T> void channels_last_depthwise_filter_grad(const T* x, const T* ct, const Conv& g, T* out) {
  const std::int64_t channels = g.n, images = g.c, window = g.window, positions = g.positions;
  std::int64_t image = channels;  // elements of one lhs image
  for (const auto& d : g.dims) image *= d.in_size;
  // Cotangent positions in tiles whose offsets are tabulated together (all of them when the table
  // is at most kMaxOffsets), each tile's offsets computed once and its tasks run in parallel.
  const std::int64_t tile = positions * window <= kMaxOffsets ? std::max<std::int64_t>(window, 1)
                                                              : std::max<std::int64_t>(1, kMaxOffsets / positions);
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  // Tasks: (block of images, chunk of channels), both of sizes that do not depend on the thread
  // count. Each task sums its images into a partial sum of its own (tiles in order, then images in
  // order); the blocks' partial sums are added in block order at the end, so the result has the
  // same bits at any thread count. (Images, not only channels, are split: two threads reading
  // different channels of the same rows pull each other's cache lines in, and the loop is bound by
  // memory.)
  // (At most 64 blocks, fewer when their partial sums would pass kMaxPartialSums elements; one
  // block, whose buffer is then larger, when a single block's positions x channels passes it.)
  constexpr std::int64_t kMaxPartialSums = std::int64_t{1} << 22;
  const std::int64_t blocks = std::max<std::int64_t>(
      1, std::min({images, std::int64_t{64}, kMaxPartialSums / std::max<std::int64_t>(1, positions * channels)}));
  const std::int64_t chunk = 4 * width;
  const std::int64_t chunks = (channels + chunk - 1) / chunk;
  const ArenaScratch<T> partial_sums(blocks * positions * channels);  // [block][pos][c], up to 16 MiB
  T* const partial = partial_sums.data;
  std::fill_n(partial, blocks * positions * channels, T(0));
  for (std::int64_t k0 = 0; k0 < window; k0 += tile) {
    const std::int64_t k1 = std::min(window, k0 + tile);
    const Ints offs = window_offsets(g, channels, 0, positions, k0, k1, OffsetOrder::output_position_fastest);
    const std::int64_t task_work = std::max<std::int64_t>(1, (images / blocks) * (k1 - k0) * positions * chunk);
    parallel_for(blocks * chunks, std::max<std::int64_t>(1, 65536 / task_work), [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t task = t0; task < t1; ++task) {
        const std::int64_t block = task / chunks, c0 = task % chunks * chunk, c1 = std::min(channels, c0 + chunk);
        const std::int64_t vector_end = c0 + (c1 - c0) / width * width;
        T* acc = partial + block * positions * channels;  // acc[pos * channels + c]
        for (std::int64_t f = block * images / blocks; f < (block + 1) * images / blocks; ++f) {
          const T* cf = ct + (f * window + k0) * channels;
          const T* xf = x + f * image;
          // runs of kRun cotangent positions (the input rows they read stay in cache across the
          // chunk's channels and position groups)
          constexpr std::int64_t kRun = 64;
          for (std::int64_t r0 = 0; r0 < k1 - k0; r0 += kRun) {
            const std::int64_t n = std::min(kRun, k1 - k0 - r0);
            const T* cr = cf + r0 * channels;
            const std::int64_t* offr = offs.data() + r0 * positions;
            std::int64_t c = c0;
            for (; c + 4 * width <= vector_end; c += 4 * width) sum_all_taps<4>(xf, cr, offr, positions, n, channels, c, acc + c, channels);
            for (; c + 2 * width <= vector_end; c += 2 * width) sum_all_taps<2>(xf, cr, offr, positions, n, channels, c, acc + c, channels);
            for (; c < vector_end; c += width) sum_all_taps<1>(xf, cr, offr, positions, n, channels, c, acc + c, channels);
          }
          for (std::int64_t c = vector_end; c < c1; ++c)
            for (std::int64_t pos = 0; pos < positions; ++pos) {
              T sum(0);
              for (std::int64_t kp = 0; kp < k1 - k0; ++kp) {
                const std::int64_t off = offs[static_cast<std::size_t>(kp * positions + pos)];
                sum += (off < 0 ? T(0) : xf[off + c]) * cf[kp * channels + c];
              }
              acc[pos * channels + c] += sum;
            }
        }
      }
    }, ChunkCalls::no_blas);
  }
  add_in_block_order(partial, blocks, positions * channels, out);
}

// The rows of a channels-first plane (one image, one channel: spatial dims in order, the last
// contiguous): which input row the window row `win_at` of the output row `out_at` reads, both
// odometer positions over the spatial dims before the last. Used by the channels-first loops,
// which then run along the last dim themselves.
struct LeadRows {
  Ints out_extent, win_extent;  // the dims before the last: output rows, window rows
  Ints row_strides;             // input rows per step of each of those dims
  std::int64_t out_rows, win_rows;

  explicit LeadRows(const Conv& g) {
    const std::size_t lead = g.dims.size() - 1;
    for (std::size_t i = 0; i < lead; ++i) {
      out_extent.push_back(g.dims[i].out_size);
      win_extent.push_back(g.dims[i].window);
      row_strides.push_back(1);
    }
    for (std::size_t i = lead; i-- > 1;) row_strides[i - 1] = row_strides[i] * g.dims[i].in_size;
    out_rows = shape_size(out_extent);
    win_rows = shape_size(win_extent);
  }

  /// The input row (its index among the plane's rows), or -1 when it is padding.
  std::int64_t input_row(const Conv& g, const Ints& out_at, const Ints& win_at) const {
    std::int64_t row = 0;
    for (std::size_t i = 0; i < row_strides.size(); ++i) {
      const std::int64_t idx = g.table[i][static_cast<std::size_t>(out_at[i] * g.dims[i].window + win_at[i])];
      if (idx < 0) return -1;
      row += idx * row_strides[i];
    }
    return row;
  }
};

// A dense convolution's kernel gradient with channels-last data, as JAX's transpose rule writes
// it (the depthwise one's layout with one group): lhs (the layer's input) stored (images,
// spatial..., channels), rhs (the output cotangent) (images, spatial..., output channels), no base
// dilation. out[c, kpos, o] = sum over images f and cotangent positions s of
// x[f, in(kpos, s), c] ct[f, s, o]. For set kernel position and cotangent row, the positions s along
// the last dim that read the input form one run, and the input rows they read are evenly spaced
// runs of channels: one product (channels x run) (run x output channels) per (image, cotangent
// row, kernel position), both operands read in place (no transposes into the general layout, no
// patch matrix).
bool is_dense_filter_grad(const Conv& g, const params::ConvGeneralDilated& p, bool channels_last) {
  const Ints spec = filter_grad_spec(static_cast<std::int64_t>(p.lhs_spec.size()), channels_last);
  const bool undilated = std::all_of(g.dims.begin(), g.dims.end(), [](const WindowDim& d) { return d.base_dilation == 1; });
  return p.feature_group_count == 1 && p.batch_group_count == 1 && !g.dims.empty() && undilated && p.lhs_spec == spec &&
         p.rhs_spec == spec;
}

template <class T> void channels_last_dense_filter_grad(const T* x, const T* ct, const Conv& g, T* out) {
  const std::int64_t channels = g.n, images = g.c, outs = g.o, positions = g.positions, window = g.window;
  const std::size_t r = g.dims.size();
  const WindowDim& last = g.dims.back();
  const Ints x_stride = spatial_strides(g.dims, channels);  // of x's spatial dims
  const std::int64_t image = x_stride[0] * g.dims[0].in_size;
  const std::int64_t ct_rows = window / std::max<std::int64_t>(last.window, 1);  // cotangent positions but the last dim
  // Per kernel position along the last dim: the cotangent positions [lo, hi) that read the input
  // (an interval: no base dilation).
  std::vector<std::pair<std::int64_t, std::int64_t>> run(static_cast<std::size_t>(last.out_size), {0, 0});
  for (std::int64_t k = 0; k < last.out_size; ++k) {
    std::int64_t lo = 0;
    while (lo < last.window && last.input_index(k, lo) < 0) ++lo;
    std::int64_t hi = lo;
    while (hi < last.window && last.input_index(k, hi) >= 0) ++hi;
    run[static_cast<std::size_t>(k)] = {lo, hi};
  }
  // Each kernel position's and each cotangent row's index along every dim.
  const auto unravel = [](std::int64_t flat, const Ints& extent, std::int64_t* idx, std::size_t dims) {
    for (std::size_t i = dims; i-- > 0;) {
      idx[i] = flat % extent[i];
      flat /= extent[i];
    }
  };
  Ints kernel_index(static_cast<std::size_t>(positions) * r), row_index(static_cast<std::size_t>(ct_rows) * (r - 1) + 1);
  for (std::int64_t k = 0; k < positions; ++k) unravel(k, g.out_extent, kernel_index.data() + k * r, r);
  for (std::int64_t s = 0; s < ct_rows; ++s) unravel(s, g.window_extent, row_index.data() + s * (r - 1), r - 1);
  const std::int64_t step = last.window_dilation * x_stride[r - 1];  // between the inputs of s and s + 1
  // Fixed blocks of images (at most 8, never depending on the thread count) split over the threads, each
  // summing its images into a partial sum of its own ([block][kpos][c][o]); the partial sums are
  // added in block order at the end, so the result has the same bits at any thread count. (Split
  // by channels instead, every thread read every cotangent row: 1.2x from one thread to two.)
  // (Fewer blocks when their partial sums would pass 4M elements, 16 MiB of floats.)
  const std::int64_t size = positions * channels * outs;
  const std::int64_t blocks = image_blocks(images, size);
  const ArenaScratch<T> sum_buffer(blocks * size);
  T* const sums_of_blocks = sum_buffer.data;
  parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t block = b0; block < b1; ++block) {
      T* const sums = sums_of_blocks + block * size;
      std::fill_n(sums, size, T(0));
      // zeros (padding) times the cotangent: nothing, except NaN where the cotangent is not
      // finite, as in the other paths (XLA's products)
      const auto add_padding = [&](std::int64_t k, const T* ct_at, std::int64_t count) {
        for (std::int64_t i = 0; i < count * outs; ++i)
          if (!std::isfinite(ct_at[i]))
            for (std::int64_t c = 0; c < channels; ++c) sums[(k * channels + c) * outs + i % outs] += T(0) * ct_at[i];
      };
      for (std::int64_t f = block * images / blocks; f < (block + 1) * images / blocks; ++f)
        for (std::int64_t s = 0; s < ct_rows; ++s) {
          const T* ct_row = ct + (f * window + s * last.window) * outs;
          for (std::int64_t k = 0; k < positions; ++k) {
            const std::int64_t* kidx = kernel_index.data() + k * r;
            std::int64_t offset = f * image;
            bool padding = false;
            for (std::size_t i = 0; i + 1 < r; ++i) {
              const std::int64_t idx = g.dims[i].input_index(kidx[i], row_index[static_cast<std::size_t>(s) * (r - 1) + i]);
              padding = padding || idx < 0;
              offset += idx * x_stride[i];
            }
            const auto [lo, hi] = padding ? std::pair<std::int64_t, std::int64_t>{0, 0} : run[static_cast<std::size_t>(kidx[r - 1])];
            if (hi > lo)
              looped_gemm<T>(channels, outs, hi - lo, x + offset + last.input_index(kidx[r - 1], lo) * x_stride[r - 1], 1, step,
                             ct_row + lo * outs, sums + k * channels * outs, true);
            add_padding(k, ct_row, lo);
            add_padding(k, ct_row + hi * outs, last.window - hi);
          }
        }
    }
  }, ChunkCalls::no_blas);
  // out[c, kpos, o] = the blocks' partial sums in block order
  parallel_for(channels, std::max<std::int64_t>(1, channels / kernel_threads()), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c)
      for (std::int64_t k = 0; k < positions; ++k) {
        T* const to = out + (c * positions + k) * outs;
        std::copy_n(sums_of_blocks + (k * channels + c) * outs, outs, to);
        for (std::int64_t block = 1; block < blocks; ++block) {
          const T* from = sums_of_blocks + block * size + (k * channels + c) * outs;
          for (std::int64_t o = 0; o < outs; ++o) to[o] += from[o];
        }
      }
  }, ChunkCalls::no_blas);
}

// The same kernel gradient with channels-first data (lhs and rhs stored (images, channels,
// spatial...)): both transposed into channels-last order, then channels_last_dense_filter_grad
// (the general path transposes them too, into (channels, spatial..., images), and multiplies
// patch tiles: as fast at one thread at C1's size, 1.3x slower at two).
template <class T> void channels_first_dense_filter_grad(const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p, T* out) {
  const auto r = static_cast<std::int64_t>(p.lhs_spec.size());
  Ints to_channels_last{0};
  for (std::int64_t i = 2; i < r; ++i) to_channels_last.push_back(i);
  to_channels_last.push_back(1);
  const Array x = transpose_kernel(lhs, to_channels_last), ct = transpose_kernel(rhs, to_channels_last);
  params::ConvGeneralDilated q = p;
  q.lhs_spec = q.rhs_spec = filter_grad_spec(r, true);
  channels_last_dense_filter_grad(in_ptr<T>(x), in_ptr<T>(ct), make_conv(x.shape(), ct.shape(), q), out);
}

// The depthwise kernel gradient with the data channels-first (NCHW: JAX's transpose rule makes lhs and
// rhs specs (1, 0, spatial...)): out[kpos, c] = sum over images f, cotangent positions k of
// lhs[f, c, in(kpos, k)] rhs[f, c, k], plane by plane in place. Along the last spatial dim each
// kernel column's reads of a cotangent row are one contiguous run of the input row (no stride in
// the forward, no lhs dilation): a vectorized dot product; the cotangent positions that meet
// padding go through the index table (zeros times the cotangent).
bool is_channels_first_depthwise_filter_grad(const Conv& g, const params::ConvGeneralDilated& p) {
  const Ints spec = filter_grad_spec(static_cast<std::int64_t>(p.lhs_spec.size()), false);
  return p.feature_group_count == 1 && p.batch_group_count == g.n && g.o == g.n && g.oq == 1 && !g.dims.empty() &&
         p.lhs_spec == spec && p.rhs_spec == spec;
}

// The plain 2-D case of channels_first_depthwise_filter_grad (stride, dilations 1: kernel
// position (o0, o1) meets cotangent element (k0, k1) at input (o0 + k0 - pad0, o1 + k1 - pad1)):
// each input plane is copied once into rows with its padding as zeros, so every kernel
// position's sum over a cotangent row is whole vectors read from two L1-resident planes (the
// general loop's vector dot had a scalar tail and edge cases per row: 5x slower on 56-wide rows).
// The cotangent's last vector is zero past the row and the input lanes there are dropped (a
// select, not a product with zero: an infinite input read by no cotangent element stays out).
// Planes (with the sums) past kMaxPaddedPlaneBytes go to the general loop.
constexpr std::size_t kMaxPaddedPlaneBytes = 256 * 1024;

bool plain_2d_filter_grad(const Conv& g) {
  if (g.dims.size() != 2) return false;
  for (const WindowDim& d : g.dims)
    if (d.stride != 1 || d.window_dilation != 1 || d.base_dilation != 1) return false;
  return true;
}

template <class T> bool channels_first_depthwise_filter_grad_2d(const T* x, const T* ct, const Conv& g, T* out) {
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  if (!plain_2d_filter_grad(g) || g.dims[0].window == 0 || g.dims[1].window == 0) return false;
  const WindowDim &d0 = g.dims[0], &d1 = g.dims[1];
  const std::int64_t channels = g.n, images = g.c;
  const std::int64_t vectors = (d1.window + width - 1) / width;            // per cotangent row
  const std::int64_t ct_stride = vectors * width;                          // a padded cotangent row
  const std::int64_t x_rows = d0.out_size + d0.window - 1;                 // input rows any position reads
  const std::int64_t x_stride = d1.out_size - 1 + ct_stride;               // a padded input row
  const std::size_t plane_bytes =  // the two padded planes and the kernel positions' vector sums
      static_cast<std::size_t>(x_rows * x_stride + d0.window * ct_stride) * sizeof(T) + static_cast<std::size_t>(g.positions) * sizeof(B);
  if (plane_bytes > kMaxPaddedPlaneBytes) return false;
  const std::int64_t last = (vectors - 1) * width, tail = d1.window - last;  // the last vector: its offset, its lanes inside the row
  alignas(64) T lane_index[64];
  for (std::int64_t k = 0; k < width; ++k) lane_index[k] = T(k);
  const auto in_tail = B::load_unaligned(lane_index) < B(T(tail));
  const std::int64_t in_plane = d0.in_size * d1.in_size, ct_plane = d0.window * d1.window;
  // the padded rows and columns that hold input elements: [pad_lo, pad_lo + in_size) clipped
  auto inside = [](const WindowDim& d, std::int64_t extent) {
    const std::int64_t lo = std::clamp<std::int64_t>(d.pad_lo, 0, extent);
    return std::pair{lo, std::clamp<std::int64_t>(d.pad_lo + d.in_size, lo, extent)};
  };
  const auto rows_inside = inside(d0, x_rows), cols_inside = inside(d1, x_stride);
  parallel_for(channels, 1, [&](std::int64_t c0, std::int64_t c1) {
    // zeros written once: every plane fills the same inside part of each
    std::vector<T> xpad(static_cast<std::size_t>(x_rows * x_stride), T(0)), cpad(static_cast<std::size_t>(d0.window * ct_stride), T(0));
    std::vector<B> sums(static_cast<std::size_t>(g.positions));
    for (std::int64_t c = c0; c < c1; ++c) {
      std::fill(sums.begin(), sums.end(), B(T(0)));
      for (std::int64_t f = 0; f < images; ++f) {
        const T* xp = x + (f * channels + c) * in_plane;
        const T* cp = ct + (f * channels + c) * ct_plane;
        for (std::int64_t r = rows_inside.first; r < rows_inside.second; ++r)  // padded (r, col): input (r - pad0, col - pad1)
          std::copy(xp + (r - d0.pad_lo) * d1.in_size + cols_inside.first - d1.pad_lo,
                    xp + (r - d0.pad_lo) * d1.in_size + cols_inside.second - d1.pad_lo, xpad.data() + r * x_stride + cols_inside.first);
        for (std::int64_t k0 = 0; k0 < d0.window; ++k0)
          std::copy(cp + k0 * d1.window, cp + (k0 + 1) * d1.window, cpad.data() + k0 * ct_stride);
        for (std::int64_t o0 = 0; o0 < d0.out_size; ++o0)
          for (std::int64_t o1 = 0; o1 < d1.out_size; ++o1) {
            B sum = sums[static_cast<std::size_t>(o0 * d1.out_size + o1)];
            for (std::int64_t k0 = 0; k0 < d0.window; ++k0) {
              const T* xr = xpad.data() + (o0 + k0) * x_stride + o1;
              const T* cr = cpad.data() + k0 * ct_stride;
              B row_sum(T(0));
              for (std::int64_t v = 0; v + 1 < vectors; ++v)
                row_sum = xsimd::fma(B::load_unaligned(xr + v * width), B::load_unaligned(cr + v * width), row_sum);
              const B x_last = xsimd::select(in_tail, B::load_unaligned(xr + last), B(T(0)));
              sum += xsimd::fma(x_last, B::load_unaligned(cr + last), row_sum);
            }
            sums[static_cast<std::size_t>(o0 * d1.out_size + o1)] = sum;
          }
      }
      for (std::int64_t pos = 0; pos < g.positions; ++pos) out[pos * channels + c] = xsimd::hadd(sums[static_cast<std::size_t>(pos)]);
    }
  }, ChunkCalls::no_blas);
  return true;
}

template <class T> void channels_first_depthwise_filter_grad(const T* x, const T* ct, const Conv& g, T* out) {
  if (channels_first_depthwise_filter_grad_2d(x, ct, g, out)) return;
  const std::int64_t channels = g.n, images = g.c;
  const WindowDim& last = g.dims.back();
  const Ints last_table = last.index_table();
  const std::int64_t n_k = last.out_size, n_w = last.window;  // kernel columns, cotangent columns
  const bool runs = last.window_dilation == 1 && last.base_dilation == 1;
  const std::int64_t in_plane = g.image / images, ct_plane = g.window;
  const LeadRows rows(g);  // kernel rows (the output's) and cotangent rows (the window's)
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  // channels in chunks, each kernel column summed by one thread in a fixed order
  parallel_for(channels, 1, [&](std::int64_t c0, std::int64_t c1) {
    // per kernel position: the vectorized runs' lanes and the scalar rest, added at the end
    std::vector<B> lanes(static_cast<std::size_t>(g.positions));
    std::vector<T> acc(static_cast<std::size_t>(g.positions));
    Odometer krow{rows.out_extent}, wrow{rows.win_extent};  // each back at its start after a full cycle
    for (std::int64_t c = c0; c < c1; ++c) {
      std::fill(lanes.begin(), lanes.end(), B(T(0)));
      std::fill(acc.begin(), acc.end(), T(0));
      for (std::int64_t f = 0; f < images; ++f) {
        const T* xp = x + (f * channels + c) * in_plane;
        const T* cp = ct + (f * channels + c) * ct_plane;
        for (std::int64_t kr = 0; kr < rows.out_rows; ++kr, krow.next()) {
          for (std::int64_t wr = 0; wr < rows.win_rows; ++wr, wrow.next()) {
            const std::int64_t row = rows.input_row(g, krow.at, wrow.at);
            const std::int64_t off = row < 0 ? -1 : row * last.in_size;  // -1 over padding
            const T* cr = cp + wr * n_w;
            for (std::int64_t o = 0; o < n_k; ++o) {
              // cotangent columns [k_lo, k_hi) read input columns o * stride - pad_lo + k
              const std::int64_t first = o * last.stride - last.pad_lo;
              const std::int64_t k_lo = runs && off >= 0 ? std::clamp<std::int64_t>(-first, 0, n_w) : n_w;
              const std::int64_t k_hi = runs && off >= 0 ? std::clamp<std::int64_t>(last.in_size - first, k_lo, n_w) : n_w;
              T sum(0);
              for (std::int64_t k = 0; k < k_lo; ++k) {
                const std::int64_t at = last_table[static_cast<std::size_t>(o * n_w + k)];
                sum += (off < 0 || at < 0 ? T(0) : xp[off + at]) * cr[k];
              }
              std::int64_t k = k_lo;
              if (k_hi - k_lo >= width) {
                const T* xr = xp + off + first + k_lo;  // input column of cotangent column k_lo
                B dot = lanes[static_cast<std::size_t>(kr * n_k + o)];
                for (; k + width <= k_hi; k += width)
                  dot = xsimd::fma(B::load_unaligned(xr + (k - k_lo)), B::load_unaligned(cr + k), dot);
                lanes[static_cast<std::size_t>(kr * n_k + o)] = dot;
              }
              for (; k < k_hi; ++k) sum += xp[off + first + k] * cr[k];
              for (k = k_hi; k < n_w; ++k) {
                const std::int64_t at = last_table[static_cast<std::size_t>(o * n_w + k)];
                sum += (off < 0 || at < 0 ? T(0) : xp[off + at]) * cr[k];
              }
              acc[static_cast<std::size_t>(kr * n_k + o)] += sum;
            }
          }
        }
      }
      for (std::int64_t pos = 0; pos < g.positions; ++pos)
        out[pos * channels + c] = xsimd::hadd(lanes[static_cast<std::size_t>(pos)]) + acc[static_cast<std::size_t>(pos)];
    }
  }, ChunkCalls::no_blas);
}

bool is_pointwise(const Conv& g, const params::ConvGeneralDilated& p) {
  if (g.groups != 1) return false;
  for (std::size_t i = 0; i < g.dims.size(); ++i)
    if (g.dims[i].window != 1 || p.window_strides[i] != 1 || p.lhs_dilation[i] != 1 || p.padding_lo[i] != 0 ||
        p.padding_hi[i] != 0)
      return false;
  return true;
}

// Every window covers its whole (unpadded, undilated) operand dim, so there is one output
// position per image (a weight gradient of a 1x1 convolution has this shape); feature groups
// excluded (their channels are not contiguous runs).
bool is_full_window(const Conv& g, const params::ConvGeneralDilated& p) {
  if (p.feature_group_count != 1) return false;
  for (std::size_t i = 0; i < g.dims.size(); ++i)
    if (g.dims[i].window != g.dims[i].in_size || p.padding_lo[i] != 0 || p.padding_hi[i] != 0 || p.lhs_dilation[i] != 1 ||
        p.rhs_dilation[i] != 1)
      return false;
  return true;
}

// out (C x O) = sum over rows k of x[k, :]^T ct[k, :] for x (K x C) and ct (K x O) stored
// row-major, K = images x positions (a channels-last 1x1 convolution's kernel gradient). The
// contraction is cut into a fixed number of chunks (whatever the thread count), each chunk's
// product computed by one thread in the product loops into a partial sum of its own, and the
// partial sums added in chunk order: the result has the same bits at any thread count.
template <class T> void channels_last_weight_grad(const T* x, const T* ct, const Conv& g, T* out) {
  const std::int64_t rows = g.c * g.window, channels = g.nout, outs = g.o;
  const std::int64_t chunks = std::clamp<std::int64_t>(rows / 4096, 1, 32);
  const ArenaScratch<T> partial_sums(chunks * channels * outs);
  T* const partial = partial_sums.data;
  parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t chunk = c0; chunk < c1; ++chunk) {
      const std::int64_t k0 = chunk * rows / chunks, k1 = (chunk + 1) * rows / chunks;
      looped_gemm<T>(channels, outs, k1 - k0, x + k0 * channels, 1, channels, ct + k0 * outs, partial + chunk * channels * outs,
                     false);
    }
  }, ChunkCalls::no_blas);
  add_in_block_order(partial, chunks, channels * outs, out);
}

// A convolution whose lhs and rhs are both stored (feature, batch, spatial...) (their specs list
// the batch dim second, the feature dim first): a channels-first convolution's kernel gradient,
// the images the contracted feature dim.
bool is_channels_first_weight_grad(const params::ConvGeneralDilated& p) {
  Ints spec{1, 0};
  for (std::size_t i = 2; i < p.lhs_spec.size(); ++i) spec.push_back(static_cast<std::int64_t>(i));
  return p.batch_group_count == 1 && p.lhs_spec == spec && p.rhs_spec == spec;
}

// out (nout x o) = sum over images f of x[f] (nout x window) ct[f]^T (window x o) (is_full_window:
// the window is the whole image). Where the product loops take o: fixed blocks of images (at most
// 8, fewer past 4M partial sums; never depending on the thread count) split over the threads,
// each block's images summed into a partial sum of its own, ct[f]^T formed a piece of positions at
// a time in a buffer of the thread's, the partial sums added in block order (the same bits at any
// thread count). Otherwise one BLAS product per image into the output (OpenBLAS gained nothing
// from a second thread on C2's 64 x 64 products of depth 3136).
template <class T> void channels_first_weight_grad(const T* x, const T* ct, const Conv& g, T* out) {
  const std::int64_t images = g.c, size = g.window, rows = g.nout, outs = g.o;
  if (images == 0 || size == 0) {  // (BLAS refuses a leading dimension of 0)
    std::fill_n(out, rows * outs, T(0));
    return;
  }
  if (small_gemm_rows<T>(outs, 1) <= 0) {
    for (std::int64_t f = 0; f < images; ++f)
      gemm<T>(rows, outs, size, x + f * rows * size, size, ct + f * outs * size, size, f == 0 ? T(0) : T(1), out, outs,
              false, true);
    return;
  }
  constexpr std::int64_t kPiece = 512;  // positions of ct[f]^T formed at a time
  const std::int64_t part = rows * outs, blocks = image_blocks(images, part);
  const ArenaScratch<T> partial_sums(blocks * part);
  T* const partial = partial_sums.data;
  parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<T> piece(static_cast<std::size_t>(std::min(kPiece, size) * outs));
    for (std::int64_t block = b0; block < b1; ++block) {
      T* const sums = partial + block * part;
      std::fill_n(sums, part, T(0));
      for (std::int64_t f = block * images / blocks; f < (block + 1) * images / blocks; ++f)
        for (std::int64_t p0 = 0; p0 < size; p0 += kPiece) {
          const std::int64_t len = std::min(kPiece, size - p0);
          transpose_block(ct + f * outs * size + p0, size, piece.data(), outs, outs, len);  // piece[p][o]
          looped_gemm<T>(rows, outs, len, x + f * rows * size + p0, size, 1, piece.data(), sums, true);
        }
    }
  }, ChunkCalls::no_blas);
  add_in_block_order(partial, blocks, part, out);
}

// A 1x1 convolution with the batch and feature dims leading in lhs and out (NCHW) and O, I
// leading in rhs in either order: per image, out (O x spatial) = w (O x C) x (C x spatial), no
// transposes of the data.
bool is_channels_first_pointwise(const Conv& g, const params::ConvGeneralDilated& p) {
  const Ints lead{p.rhs_spec[0], p.rhs_spec[1]};
  return is_pointwise(g, p) && is_identity(p.lhs_spec) && is_identity(p.out_spec) &&
         ((lead[0] == 0 && lead[1] == 1) || (lead[0] == 1 && lead[1] == 0)) &&
         std::is_sorted(p.rhs_spec.begin() + 2, p.rhs_spec.end());
}

template <class T> void channels_first_pointwise(const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p,
                                                 const Conv& g, T* out) {
  const T* x = in_ptr<T>(lhs);
  const T* w = in_ptr<T>(rhs);
  const bool w_t = p.rhs_spec[0] == 1;  // stored (I, O): w^T
  if (small_gemm_rows<T>(g.positions, 1) > 0) {
    // the product loops, the images split over the kernel threads (one small BLAS call per image
    // split each product over the threads again: 1.1-1.2x faster at two threads than at one)
    parallel_for(g.n, std::max<std::int64_t>(1, g.n / kernel_threads()), [&](std::int64_t n0, std::int64_t n1) {
      for (std::int64_t n = n0; n < n1; ++n)
        looped_gemm<T>(g.o, g.positions, g.c, w, w_t ? 1 : g.c, w_t ? g.o : 1, x + n * g.c * g.positions,
                       out + n * g.o * g.positions, false);
    }, ChunkCalls::no_blas);
    return;
  }
  for (std::int64_t n = 0; n < g.n; ++n)
    gemm<T>(g.o, g.positions, g.c, w, w_t ? g.o : g.c, x + n * g.c * g.positions, g.positions, T(0),
            out + n * g.o * g.positions, g.positions, w_t);
}

// A depthwise convolution (one input channel per group, any multiplier) with the batch and
// feature dims leading in lhs and out (NCHW): each output plane is its input channel's plane
// filtered by one window, no transposes of the data. Along the last spatial dim, outputs whose
// whole window is inside the row with stride 1 go a batch at a time (the batch held in a register
// across the window), the others one at a time through the index table; both sum each output's
// window in window order with fused multiply-adds, so an output's value does not depend on
// which path took it. Padding reads zeros (times the weight: NaN for a non-finite one).
bool is_channels_first_depthwise(const Conv& g, const params::ConvGeneralDilated& p) {
  return g.cg == 1 && !g.batch_groups && g.groups == g.c && !g.dims.empty() && g.window > 0 && is_identity(p.lhs_spec) &&
         is_identity(p.out_spec);  // an empty window: convolve's zeros
}

// NB batches of consecutive outputs y[0 ..) of channels_first_depthwise's interior: window row kl
// reads input row rows[kl] (-1: padding, zeros) from column `first`, window position kk of the
// last dim kk wd further; the batches stay in registers across the window.
template <int NB, class T>
void interior_batches(const T* xp, const T* wp, const std::int64_t* rows, std::int64_t lead_windows, std::int64_t kw,
                      std::int64_t wd, std::int64_t first, T* y) {
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  B acc[NB];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) acc[b] = B(T(0));
  for (std::int64_t kl = 0; kl < lead_windows; ++kl) {
    const std::int64_t off = rows[kl];
    const T* xr = xp + (off < 0 ? 0 : off + first);
    for (std::int64_t kk = 0; kk < kw; ++kk) {
      const B wk(wp[kl * kw + kk]);
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b)
        acc[b] = xsimd::fma(off < 0 ? B(T(0)) : B::load_unaligned(xr + kk * wd + b * width), wk, acc[b]);
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) acc[b].store_unaligned(y + b * width);
}

// Outputs y[i0, i1) (at least one batch of them) by interior_batches, reading from column
// i + shift for output i; the last batch overlaps the one before when the run is not a multiple
// of the width (same values).
template <class T>
void batch_run(const T* xp, const T* wp, const std::int64_t* rows, std::int64_t lead_windows, std::int64_t kw,
               std::int64_t wd, std::int64_t shift, std::int64_t i0, std::int64_t i1, T* y) {
  constexpr std::int64_t width = static_cast<std::int64_t>(simd::Batch<T>::size);
  std::int64_t i = i0;
  for (; i + 4 * width <= i1; i += 4 * width) interior_batches<4>(xp, wp, rows, lead_windows, kw, wd, i + shift, y + i);
  for (; i + 2 * width <= i1; i += 2 * width) interior_batches<2>(xp, wp, rows, lead_windows, kw, wd, i + shift, y + i);
  for (; i + width <= i1; i += width) interior_batches<1>(xp, wp, rows, lead_windows, kw, wd, i + shift, y + i);
  if (i < i1) interior_batches<1>(xp, wp, rows, lead_windows, kw, wd, i1 - width + shift, y + (i1 - width));
}

// The plane's n_rows rows of length `length`, each copied into `row_length` elements with `pad_lo`
// zeros before it (pad_lo >= 0) and zeros after.
template <class T>
void copy_padded_rows(const T* plane, std::int64_t n_rows, std::int64_t length, std::int64_t pad_lo,
                      std::int64_t row_length, T* padded) {
  using B = simd::Batch<T>;
  constexpr std::int64_t width = static_cast<std::int64_t>(B::size);
  const std::int64_t copied = std::clamp<std::int64_t>(row_length - pad_lo, 0, length);
  const std::int64_t before = std::min(pad_lo, row_length);
  for (std::int64_t r = 0; r < n_rows; ++r) {
    T* dst = padded + r * row_length;
    const T* src = plane + r * length;
    std::fill(dst, dst + before, T(0));
    T* run = dst + before;  // short rows: a copy loop, not a memmove call per row
    std::int64_t c = 0;
    for (; c + width <= copied; c += width) B::load_unaligned(src + c).store_unaligned(run + c);
    for (; c < copied; ++c) run[c] = src[c];
    std::fill(dst + before + copied, dst + row_length, T(0));
  }
}

template <class T> void channels_first_depthwise(const T* x, const T* w, const Conv& g, T* out) {
  const WindowDim& last = g.dims.back();
  const Ints last_table = last.index_table();
  const auto [lo, hi] = last.interior();
  const std::int64_t n_out = last.out_size, kw = last.window, wd = last.window_dilation, m = g.oq;
  const bool unit_stride = last.stride == 1;
  const std::int64_t in_plane = g.image / g.c;
  const LeadRows rows(g);  // output rows and window rows
  constexpr std::int64_t width = static_cast<std::int64_t>(simd::Batch<T>::size);
  // With stride 1, no lhs dilation and no cropping along the last dim, each input row is first
  // copied with its padding as zeros (row_length elements: output i, window position kk reads
  // element i + kk wd), so every output runs in batches, the edges too.
  const bool padded_rows = unit_stride && last.base_dilation == 1 && last.pad_lo >= 0 && n_out >= width && last.in_size > 0;
  const std::int64_t row_length = n_out + (kw - 1) * wd, in_rows = last.in_size == 0 ? 0 : in_plane / last.in_size;
  // (image, input channel) planes in chunks, each plane's m output planes written by one thread
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(g.positions * g.window * m, 1));
  parallel_for(g.n * g.c, grain, [&](std::int64_t begin, std::int64_t end) {
    Ints row_offsets(static_cast<std::size_t>(rows.win_rows));  // per window row: the input row's offset, -1 over padding
    std::vector<T> weights(static_cast<std::size_t>(g.window));  // the output plane's window, contiguous
    std::vector<T> padded(padded_rows ? static_cast<std::size_t>(in_rows * row_length) : 0);
    Ints padded_offsets(padded_rows ? static_cast<std::size_t>(rows.win_rows) : 0);
    Odometer orow{rows.out_extent}, k{rows.win_extent};  // each back at its start after a full cycle
    for (std::int64_t in = begin; in < end; ++in) {
      const std::int64_t q = in % g.c;  // the input channel
      const T* xp = x + in * in_plane;
      if (padded_rows) copy_padded_rows(xp, in_rows, last.in_size, last.pad_lo, row_length, padded.data());  // once for m planes
      for (std::int64_t j = 0; j < m; ++j) {
        const std::int64_t plane = in * m + j;  // (image, output channel q m + j)
        for (std::int64_t kp = 0; kp < g.window; ++kp) weights[static_cast<std::size_t>(kp)] = w[(q * g.window + kp) * m + j];
        const T* wp = weights.data();
        for (std::int64_t row = 0; row < rows.out_rows; ++row, orow.next()) {
          T* y = out + plane * g.positions + row * n_out;
          for (std::int64_t kl = 0; kl < rows.win_rows; ++kl, k.next()) {
            const std::int64_t input_row = rows.input_row(g, orow.at, k.at);
            row_offsets[static_cast<std::size_t>(kl)] = input_row < 0 ? -1 : input_row * last.in_size;
            if (padded_rows) padded_offsets[static_cast<std::size_t>(kl)] = input_row < 0 ? -1 : input_row * row_length;
          }
          if (padded_rows) {
            batch_run(padded.data(), wp, padded_offsets.data(), rows.win_rows, kw, wd, 0, 0, n_out, y);
            continue;
          }
          std::int64_t i = 0;
          const auto one = [&](std::int64_t at_out) {  // one output through the table
            T sum(0);
            for (std::int64_t kl = 0; kl < rows.win_rows; ++kl) {
              const std::int64_t off = row_offsets[static_cast<std::size_t>(kl)];
              for (std::int64_t kk = 0; kk < kw; ++kk) {
                const std::int64_t at = last_table[static_cast<std::size_t>(at_out * kw + kk)];
                sum = std::fma(off < 0 || at < 0 ? T(0) : xp[off + at], wp[kl * kw + kk], sum);
              }
            }
            y[at_out] = sum;
          };
          if (unit_stride)
            for (; i < lo; ++i) one(i);
          if (unit_stride && hi - i >= width) {
            batch_run(xp, wp, row_offsets.data(), rows.win_rows, kw, wd, -last.pad_lo, i, hi, y);
            i = hi;
          }
          for (; i < n_out; ++i) one(i);
        }
      }
    }
  }, ChunkCalls::no_blas);
}

// A dense convolution of channels-last data with a small window and at least 8 outputs along the
// last dim, no base dilation: for each output row (image, output position along the leading
// dims) and window position, one product of the input row's channels (the outputs that read
// inside the row, evenly spaced runs of channels) by the window position's weights, added into
// the output row in the product loops; the rows split over the threads. The input is read in
// place (im2col copied every window position's channels into a patch matrix first). Each output
// element is one chain over (window position, input channel) in order, as im2col's patch columns:
// the same bits. Padding adds nothing, except NaN where a weight is not finite (0 times it, as in
// im2col's zeros).
bool is_direct_rows(const Conv& g) {
  const bool undilated = std::all_of(g.dims.begin(), g.dims.end(), [](const WindowDim& d) { return d.base_dilation == 1; });
  return g.groups == 1 && !g.dims.empty() && undilated && g.dims.back().out_size >= kMinRowsPerProduct && g.window <= 64 &&
         g.cg >= 16;
}

template <class T> void direct_rows(const T* x, const T* w, const Conv& g, T* out) {
  const WindowDim& last = g.dims.back();
  const LeadRows rows(g);
  const std::int64_t n_out = last.out_size, kw = last.window, channels = g.c, outs = g.o;
  const std::int64_t in_row = last.in_size * channels;  // elements of one input row
  // per window position along the last dim: the outputs [lo, hi) that read inside the row
  std::vector<std::pair<std::int64_t, std::int64_t>> run(static_cast<std::size_t>(kw));
  for (std::int64_t kk = 0; kk < kw; ++kk) {
    std::int64_t lo = 0;
    while (lo < n_out && last.input_index(lo, kk) < 0) ++lo;
    std::int64_t hi = lo;
    while (hi < n_out && last.input_index(hi, kk) >= 0) ++hi;
    run[static_cast<std::size_t>(kk)] = {lo, hi};
  }
  // the outputs that read inside the row at every window position
  std::pair<std::int64_t, std::int64_t> interior{0, n_out};
  for (const auto& [lo, hi] : run) interior = {std::max(interior.first, lo), std::min(interior.second, hi)};
  if (interior.second < interior.first) interior = {0, 0};
  // per window position: 0 times its weights summed over the channels, where one is not finite
  std::vector<std::vector<T>> padding_terms(static_cast<std::size_t>(g.window));
  for (std::int64_t kp = 0; kp < g.window; ++kp) {
    const T* wk = w + kp * channels * outs;
    if (std::all_of(wk, wk + channels * outs, [](T v) { return std::isfinite(v); })) continue;
    auto& terms = padding_terms[static_cast<std::size_t>(kp)];
    terms.assign(static_cast<std::size_t>(outs), T(0));
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t o = 0; o < outs; ++o) terms[static_cast<std::size_t>(o)] += T(0) * wk[c * outs + o];
  }
  const auto add_padding = [&](std::int64_t kp, T* y, std::int64_t count) {
    const auto& terms = padding_terms[static_cast<std::size_t>(kp)];
    if (terms.empty()) return;
    for (std::int64_t i = 0; i < count; ++i)
      for (std::int64_t o = 0; o < outs; ++o) y[i * outs + o] += terms[static_cast<std::size_t>(o)];
  };
  const std::int64_t tasks = g.nout * rows.out_rows;
  const std::int64_t per_task = std::max<std::int64_t>(1, n_out * outs * channels * g.window);
  parallel_for(tasks, std::max<std::int64_t>(1, (std::int64_t{1} << 20) / per_task), [&](std::int64_t t0, std::int64_t t1) {
    Ints out_at(rows.out_extent.size()), win_at(rows.win_extent.size());
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t image = t / rows.out_rows;
      for (std::size_t i = out_at.size(), r = static_cast<std::size_t>(t % rows.out_rows); i-- > 0;) {
        out_at[i] = static_cast<std::int64_t>(r) % rows.out_extent[i];
        r /= static_cast<std::size_t>(rows.out_extent[i]);
      }
      T* y = out + t * n_out * outs;
      std::fill_n(y, n_out * outs, T(0));
      for (std::int64_t kl = 0; kl < rows.win_rows; ++kl) {
        for (std::size_t i = win_at.size(), r = static_cast<std::size_t>(kl); i-- > 0;) {
          win_at[i] = static_cast<std::int64_t>(r) % rows.win_extent[i];
          r /= static_cast<std::size_t>(rows.win_extent[i]);
        }
        const std::int64_t input_row = rows.input_row(g, out_at, win_at);
        const T* x_row = input_row < 0 ? x : x + image * g.image + input_row * in_row;  // (unread over padding)
        // Without dilation the outputs whose whole window row is inside the input row read one run
        // of kw x channels elements each: one product of depth kw x channels for all of them.
        const std::int64_t whole_lo = input_row < 0 || last.window_dilation != 1 ? 0 : interior.first;
        const std::int64_t whole_hi = input_row < 0 || last.window_dilation != 1 ? 0 : interior.second;
        if (whole_hi > whole_lo)
          looped_gemm<T>(whole_hi - whole_lo, outs, kw * channels, x_row + last.input_index(whole_lo, 0) * channels,
                         last.stride * channels, 1, w + kl * kw * channels * outs, y + whole_lo * outs, true);
        for (std::int64_t kk = 0; kk < kw; ++kk) {
          const std::int64_t kp = kl * kw + kk;
          const auto [lo, hi] = input_row < 0 ? std::pair<std::int64_t, std::int64_t>{0, 0} : run[static_cast<std::size_t>(kk)];
          // the outputs of [lo, hi) outside [whole_lo, whole_hi), one window position at a time
          const auto part = [&](std::int64_t a, std::int64_t b) {
            if (b > a)
              looped_gemm<T>(b - a, outs, channels, x_row + last.input_index(a, kk) * channels, last.stride * channels, 1,
                             w + kp * channels * outs, y + a * outs, true);
          };
          if (whole_hi > whole_lo) {
            part(lo, std::min(hi, whole_lo));
            part(std::max(lo, whole_hi), hi);
          } else {
            part(lo, hi);
          }
          add_padding(kp, y, lo);
          add_padding(kp, y + hi * outs, n_out - hi);
        }
      }
    }
  }, ChunkCalls::no_blas);
}

template <class T>
void convolve(const Array& lhs_cl, const Array& rhs, const params::ConvGeneralDilated& p, const Conv& g, T* out) {
  const T* x = in_ptr<T>(lhs_cl);
  const Array w_array = weight_matrices(rhs, p, g);
  const T* w = in_ptr<T>(w_array);
  if (g.window == 0 || g.cg == 0) {
    std::fill(out, out + g.nout * g.positions * g.o, T(0));
  } else if (is_pointwise(g, p)) {
    if (!pointwise_small_gemm(g.n * g.positions, g.o, g.c, x, w, out)) gemm<T>(g.n * g.positions, g.o, g.c, x, g.c, w, g.o, T(0), out, g.o);
  } else if (is_full_window(g, p)) {
    // The patch matrix of each (batch-)group is the channels-last lhs itself.
    const std::int64_t k = g.window * g.cg, image = g.image;
    for (std::int64_t q = 0; q < g.groups; ++q)
      gemm<T>(g.nout, g.oq, k, x + q * g.nout * image, image, w + q * k * g.oq, g.oq, T(0), out + q * g.oq, g.o);
  } else if (g.cg == 1 && !g.batch_groups && g.groups == g.c) {
    depthwise(x, depthwise_weights(w, g).data(), g, out);
  } else if (g.oq == 1 && g.cg >= 8) {
    direct(x, w, g, out);
  } else if (is_direct_rows(g) && small_gemm_rows<T>(g.o, 1) > 0) {
    direct_rows(x, w, g, out);
  } else {
    im2col_gemm(x, w, g, out);
  }
}

}  // namespace

Array conv_general_dilated_kernel(const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p,
                                  const ShapedArray& out) {
  if (out.size() == 0 || lhs.size() == 0 || rhs.size() == 0) {  // zeros, without index tables sized by the other dimensions
    Array result = alloc_array(out);
    if (out.size() > 0) std::memset(out_ptr<unsigned char>(result), 0, static_cast<std::size_t>(out.nbytes()));
    return result;
  }
  const Conv g = make_conv(lhs.shape(), rhs.shape(), p);
  if (out.dtype == DType::f32 || out.dtype == DType::f64) {  // layouts that need no transposes
    const bool f32 = out.dtype == DType::f32;
    if (is_channels_first_pointwise(g, p)) {
      Array result = alloc_array(out);
      if (f32) channels_first_pointwise<float>(lhs, rhs, p, g, out_ptr<float>(result));
      else channels_first_pointwise<double>(lhs, rhs, p, g, out_ptr<double>(result));
      return result;
    }
    if (is_channels_first_depthwise(g, p)) {
      Array result = alloc_array(out);
      const Array w = weight_matrices(rhs, p, g);
      if (f32) channels_first_depthwise<float>(in_ptr<float>(lhs), in_ptr<float>(w), g, out_ptr<float>(result));
      else channels_first_depthwise<double>(in_ptr<double>(lhs), in_ptr<double>(w), g, out_ptr<double>(result));
      return result;
    }
    if (g.groups == 1 && is_full_window(g, p) && is_channels_first_weight_grad(p)) {
      // A channels-first 1x1 convolution's kernel gradient: per image f, out (C x O) +=
      // x[f] (C x spatial) ct[f]^T (spatial x O), both read in place (as one dot_general, both
      // operands were copied into (channels, images x spatial) order first).
      Array result = alloc_array(ShapedArray{{g.nout, g.o}, out.dtype});
      if (f32) channels_first_weight_grad<float>(in_ptr<float>(lhs), in_ptr<float>(rhs), g, out_ptr<float>(result));
      else channels_first_weight_grad<double>(in_ptr<double>(lhs), in_ptr<double>(rhs), g, out_ptr<double>(result));
      if (p.out_spec[0] > p.out_spec[1]) result = transpose_kernel(result, Ints{1, 0});
      return share_buffer(result, out);
    }
    if (g.groups == 1 && is_full_window(g, p) && is_dense_filter_grad(g, p, true) &&
        (f32 ? small_gemm_rows<float>(g.o, 1) : small_gemm_rows<double>(g.o, 1)) > 0) {
      // A channels-last 1x1 convolution's kernel gradient: out (C x O) = x^T ct over every image
      // and position, in fixed chunks of the contraction split over the threads (one skinny BLAS
      // product split its long contraction poorly: 1.6x libtorch's step at two threads).
      Array result = alloc_array(ShapedArray{{g.nout, g.o}, out.dtype});
      if (f32) channels_last_weight_grad<float>(in_ptr<float>(lhs), in_ptr<float>(rhs), g, out_ptr<float>(result));
      else channels_last_weight_grad<double>(in_ptr<double>(lhs), in_ptr<double>(rhs), g, out_ptr<double>(result));
      if (p.out_spec[0] > p.out_spec[1]) result = transpose_kernel(result, Ints{1, 0});
      return share_buffer(result, out);
    }
    if (g.groups == 1 && is_full_window(g, p)) {
      // One output position: a contraction of lhs's features and spatial dims with rhs's input
      // features and spatial dims, which dot_general runs in any layout (a 1x1 convolution's
      // weight gradient). The result (batch, O) is out with its spatial dims of size 1.
      Ints lc{p.lhs_spec[1]}, rc{p.rhs_spec[1]};
      for (std::size_t i = 2; i < p.lhs_spec.size(); ++i) lc.push_back(p.lhs_spec[i]), rc.push_back(p.rhs_spec[i]);
      const ShapedArray pair{{g.nout, g.o}, out.dtype};
      Array result = dot_general_kernel(lhs, rhs, params::DotGeneral{.lhs_contracting = lc, .rhs_contracting = rc, .lhs_batch = {}, .rhs_batch = {}}, pair);
      if (p.out_spec[0] > p.out_spec[1]) result = transpose_kernel(result, Ints{1, 0});
      return share_buffer(result, out);
    }
  }
  // The output in channels-last order, then in out_spec's.
  const Ints out_order = channels_last_order(p.out_spec);
  ShapedArray cl{{}, out.dtype};
  for (auto d : out_order) cl.shape.push_back(out.shape[static_cast<std::size_t>(d)]);
  Array result = alloc_array(cl);
  const auto run = [&]<class T>(std::type_identity<T>) {
    if (is_channels_last_depthwise_filter_grad(g, p))
      channels_last_depthwise_filter_grad(in_ptr<T>(lhs), in_ptr<T>(rhs), g, out_ptr<T>(result));
    else if (is_dense_filter_grad(g, p, true) && small_gemm_rows<T>(g.o, 1) > 0)
      channels_last_dense_filter_grad(in_ptr<T>(lhs), in_ptr<T>(rhs), g, out_ptr<T>(result));
    else if (is_dense_filter_grad(g, p, false) && small_gemm_rows<T>(g.o, 1) > 0)
      channels_first_dense_filter_grad<T>(lhs, rhs, p, out_ptr<T>(result));
    else if (is_channels_first_depthwise_filter_grad(g, p))
      channels_first_depthwise_filter_grad(in_ptr<T>(lhs), in_ptr<T>(rhs), g, out_ptr<T>(result));
    else
      convolve<T>(in_order(lhs, channels_last_order(p.lhs_spec)), rhs, p, g, out_ptr<T>(result));
  };
  if (out.dtype == DType::f32)
    run(std::type_identity<float>{});
  else if (out.dtype == DType::f64)
    run(std::type_identity<double>{});
  else
    unsupported_dtype(Primitive::conv_general_dilated, out.dtype);
  if (is_identity(out_order)) return result;
  Ints inverse(out_order.size());
  for (std::size_t i = 0; i < out_order.size(); ++i) inverse[static_cast<std::size_t>(out_order[i])] = static_cast<std::int64_t>(i);
  return transpose_kernel(result, inverse);
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE
