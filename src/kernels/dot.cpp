// dot.cpp: the dot_general kernel, as a batch of matrix products C[b] = A[b] * B[b].
//
// Read in order: GemmOperand (an operand seen as a [batch, rows, cols] matrix stack, possibly
// transposed), operand_as_matrix (which picks a layout the operand already has, or transposes it
// into one), then the two back ends: for f32/f64 per batch entry the register-blocked loops of
// small_gemm.cpp where the product is small, BLAS (cblas_sgemm/dgemm) otherwise; and a plain
// loop for integers. Output dims are batch..., lhs free..., rhs free..., i.e. C is
// [batch, M, N] row-major: exactly the output's layout.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "kernels/transpose_block.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

// An operand viewed as `batch` matrices stored consecutively. Logically each is rows x cols
// (M x K for the lhs, K x N for the rhs); when `transposed`, each is stored as cols x rows.
struct GemmOperand {
  Array storage;  // the operand itself, or a transposed copy
  bool transposed = false;
};

Ints concat(const Ints& a, const Ints& b, const Ints& c) {
  Ints out(a);
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::int64_t product_of_dims(const Shape& shape, const Ints& dims) {
  std::int64_t p = 1;
  for (auto d : dims) p *= shape[static_cast<std::size_t>(d)];
  return p;
}

// True when permuting x by `perm` would not move any byte: the dims of size > 1 stay in order.
bool is_free_permutation(const Shape& shape, const Ints& perm) {
  std::int64_t last = -1;
  for (auto d : perm) {
    if (shape[static_cast<std::size_t>(d)] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

/// How a dot_general operand is read as a stack of matrices: as it is, as it is but transposed
/// (the GEMM's transpose flag), or through a copy transposed by `perm` into the plain order.
struct OperandLayout {
  enum class Mode { plain, swapped, copy } mode = Mode::plain;
  Ints perm;  // copy: the permutation into (batch, row dims, col dims)
};

// The layout of an operand of shape `shape` read in the order `plain` (batch, row dims, col dims),
// or `swapped` (batch, col dims, row dims) when it is stored so; otherwise a copy into `plain`.
OperandLayout operand_layout(const Shape& shape, const Ints& plain, const Ints& swapped) {
  if (is_free_permutation(shape, plain)) return {OperandLayout::Mode::plain, {}};
  if (is_free_permutation(shape, swapped)) return {OperandLayout::Mode::swapped, {}};
  return {OperandLayout::Mode::copy, plain};
}

// `x` as a GEMM operand under `layout`.
GemmOperand operand_as_matrix(const Array& x, const OperandLayout& layout) {
  switch (layout.mode) {
    case OperandLayout::Mode::plain: return {x, false};
    case OperandLayout::Mode::swapped: return {x, true};
    case OperandLayout::Mode::copy: break;
  }
  return {transpose_kernel(x, layout.perm), false};
}

struct GemmShape {
  std::int64_t batch, m, n, k;
};

template <class T> void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, const GemmShape& s,
                                  const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c) {
  const BlasCall blas_call("dot_general");
  const auto m = static_cast<blasint>(s.m), n = static_cast<blasint>(s.n),
             k = static_cast<blasint>(s.k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), 0.0f, c, n);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), 0.0, c, n);
  note_blas_product(s.m * s.n * s.k);
}

// Outer products (a contraction of size 1): c[bi, i, :] = a[bi, i] * b[bi, :], each output row
// written once. BLAS would first zero C (beta = 0) and then accumulate into it: two passes over an
// output that, batched (per-example gradients of a dense layer), is far larger than the cache.
// With k = 1 both layouts of an operand store its vector contiguously. Each product is added to
// +0, as a sum starting from zero (and BLAS, for every k) does: a -0 product gives +0.
template <class T> void outer_products(const T* a, const T* b, const GemmShape& s, T* c) {
  for (std::int64_t bi = 0; bi < s.batch; ++bi, a += s.m, b += s.n)
    for (std::int64_t i = 0; i < s.m; ++i, c += s.n) {
      const T ai = a[i];
      simd::map1(b, c, static_cast<std::size_t>(s.n), [ai](const simd::Batch<T>& x) { return x * ai + T(0); });
    }
}

// Floats: one product per batch entry (small_gemm's loops, or BLAS), using the transpose flags
// instead of copies. a_t / b_t: the operand is stored transposed.
template <class T>
void gemm_floats(const T* pa, bool a_t, const T* pb, bool b_t, const GemmShape& s, T* c) {
  if (s.k == 1) return outer_products(pa, pb, s, c);
  const std::int64_t lda = a_t ? s.m : s.k;
  const std::int64_t ldb = b_t ? s.k : s.n;
  const auto ta = a_t ? CblasTrans : CblasNoTrans;
  const auto tb = b_t ? CblasTrans : CblasNoTrans;
  const SmallGemm small{s.m, s.n, s.k, a_t, b_t};
  if (s.batch > 1 && small_gemm_takes<T>(small)) {
    // A stack of small products (attention's heads): the entries over the threads, a chunk at
    // least kParallelProduct multiply-adds (each entry is its own chains: any split, same bits).
    constexpr std::int64_t kParallelProduct = std::int64_t{1} << 20;
    parallel_for(s.batch, std::max<std::int64_t>(1, kParallelProduct / std::max<std::int64_t>(s.m * s.n * s.k, 1)),
                 [&](std::int64_t i0, std::int64_t i1) {
                   for (std::int64_t i = i0; i < i1; ++i) small_gemm<T>(small, pa + i * s.m * s.k, pb + i * s.k * s.n, c + i * s.m * s.n);
                 }, ChunkCalls::no_blas);
    return;
  }
  for (std::int64_t i = 0; i < s.batch; ++i) {
    const T *ai = pa + i * s.m * s.k, *bi = pb + i * s.k * s.n;
    T* ci = c + i * s.m * s.n;
    if (!small_gemm<T>(small, ai, bi, ci) && !blocked_gemm<T>(small, ai, bi, ci)) blas_gemm<T>(ta, tb, s, ai, lda, bi, ldb, ci);
  }
}

// Integers: c[i, j] = sum_k a[i, k] * b[k, j] with wrap-around arithmetic, strided by layout.
template <class T>
void gemm_loops(const GemmOperand& a, const GemmOperand& b, const GemmShape& s, T* c) {
  const std::int64_t a_row = a.transposed ? 1 : s.k, a_col = a.transposed ? s.m : 1;
  const std::int64_t b_row = b.transposed ? 1 : s.n, b_col = b.transposed ? s.k : 1;
  std::fill(c, c + s.batch * s.m * s.n, T{0});
  for (std::int64_t bi = 0; bi < s.batch; ++bi) {
    const T* pa = in_ptr<T>(a.storage) + bi * s.m * s.k;
    const T* pb = in_ptr<T>(b.storage) + bi * s.k * s.n;
    T* pc = c + bi * s.m * s.n;
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t kk = 0; kk < s.k; ++kk) {
        const T aik = pa[i * a_row + kk * a_col];
        for (std::int64_t j = 0; j < s.n; ++j)
          pc[i * s.n + j] = wrap_add(pc[i * s.n + j], wrap_mul(aik, pb[kk * b_row + j * b_col]));
      }
  }
}

/// dot_general resolved for fixed operand shapes: the GEMM sizes and each operand's layout.
struct DotLayout {
  GemmShape s;
  OperandLayout lhs, rhs;
};

DotLayout dot_layout(const Shape& lhs, const Shape& rhs, const params::DotGeneral& dn) {
  const Ints &lc = dn.lhs_contracting, &rc = dn.rhs_contracting;
  const Ints &lb = dn.lhs_batch, &rb = dn.rhs_batch;
  // A product of two matrices (the common eager case), without building dim lists: the lhs is
  // read as stored when it contracts its dim 1, transposed when dim 0; the rhs when it contracts
  // its dim 0, transposed when dim 1.
  if (lhs.size() == 2 && rhs.size() == 2 && lb.empty() && rb.empty() && lc.size() == 1 && rc.size() == 1) {
    const auto cl = static_cast<std::size_t>(lc[0]), cr = static_cast<std::size_t>(rc[0]);
    using Mode = OperandLayout::Mode;
    return {GemmShape{1, lhs[1 - cl], rhs[1 - cr], lhs[cl]}, {cl == 1 ? Mode::plain : Mode::swapped, {}},
            {cr == 0 ? Mode::plain : Mode::swapped, {}}};
  }
  const auto lrank = static_cast<std::int64_t>(lhs.size()), rrank = static_cast<std::int64_t>(rhs.size());
  const Ints lf = free_dims(lrank, lc, lb);
  const Ints rf = free_dims(rrank, rc, rb);
  return {GemmShape{product_of_dims(lhs, lb), product_of_dims(lhs, lf), product_of_dims(rhs, rf), product_of_dims(lhs, lc)},
          operand_layout(lhs, concat(lb, lf, lc), concat(lb, lc, lf)),
          operand_layout(rhs, concat(rb, rc, rf), concat(rb, rf, rc))};
}

// ---- bf16 / f16 operands: the product in f32, a panel at a time ------------------------------
//
// The product is split along its largest dimension (rows of A, columns of B, or the contraction,
// whose partial products accumulate in f32). Each panel of the split operand is widened into a
// buffer of about kNarrowPanel f32 elements, the other operand is widened whole once per matrix,
// and each finished panel of the result is narrowed straight into the output. So no full-size f32
// copy of the larger operand or of the result is made (except the m x n accumulator when the
// contraction is split and the output is narrow: then the result is the small side), and the
// widened data is read back from the caches (a 3 MiB panel from the last level). The buffers are
// arrays, so memory statistics count them.
//
// The panel size trades memory for calls: each panel is one sgemm call, and with two OpenBLAS
// threads each call wakes its worker. When another process competes for the cores, each wake-up
// can wait for the scheduler, so a P3 step in bf16 (benchmark B1, 6 products of 2048 x 256 x 1024
// per layer) measured 1.45-1.69x the f32 step with 1 MiB panels (8 calls a product), 1.14-1.22x
// with 3 MiB (3 calls), 1.09-1.13x with 4 MiB, for peaks of 0.535x, 0.547x and 0.553x of f32's
// (issue 27's bound: 0.55x, so B1 has about 0.6 MiB of headroom: a larger panel or another
// buffer alive at the backward pass's peak breaks it). In the fast phases of that VM, without
// competition, 1 MiB and 3 MiB ran at 1.05-1.10x; in its slow phases 1 MiB at 1.37-1.45x and
// 3 MiB at 1.28-1.31x (docs/performance.md).
constexpr std::int64_t kNarrowPanel = std::int64_t{3} << 18;  // f32 elements of a widened panel (3 MiB)

// One bf16 / f16 matrix, logically rows x cols, stored row-major (cols x rows when transposed).
struct NarrowMatrix {
  const std::uint16_t* data;
  DType dtype;
  bool transposed;
  std::int64_t rows, cols;
};

// An f32 block of a NarrowMatrix as BLAS reads it: dense, transposed as the matrix is stored.
struct WideBlock {
  const float* data;
  bool transposed;
  std::int64_t ld;
};

// rows x width elements converted from `from` (dtype from_type, a row every from_ld elements)
// into `to` (to_type, a row every to_ld elements), the rows split over the threads.
void convert_rows(DType from_type, const void* from, std::int64_t from_ld, DType to_type, void* to, std::int64_t to_ld,
                  std::int64_t rows, std::int64_t width) {
  const std::size_t from_row = static_cast<std::size_t>(from_ld) * itemsize(from_type), to_row = static_cast<std::size_t>(to_ld) * itemsize(to_type);
  parallel_for(rows, std::max<std::int64_t>(1, parallel_elements(rows * width) / std::max<std::int64_t>(width, 1)), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      convert_narrow(from_type, to_type, static_cast<const char*>(from) + static_cast<std::size_t>(r) * from_row,
                     static_cast<char*>(to) + static_cast<std::size_t>(r) * to_row, static_cast<std::size_t>(width));
  }, ChunkCalls::no_blas);
}

// Rows [r0, r0 + nr) x cols [c0, c0 + nc) of x, widened into buf (nr * nc elements).
WideBlock widen_block(const NarrowMatrix& x, std::int64_t r0, std::int64_t nr, std::int64_t c0, std::int64_t nc, float* buf) {
  const std::int64_t ld = x.transposed ? x.rows : x.cols;
  const std::int64_t first = x.transposed ? c0 : r0, lines = x.transposed ? nc : nr;  // stored rows
  const std::int64_t skip = x.transposed ? r0 : c0, width = x.transposed ? nr : nc;   // stored cols
  convert_rows(x.dtype, x.data + first * ld + skip, ld, DType::f32, buf, width, lines, width);
  return {buf, x.transposed, width};
}

// c (mi x nj, leading dim ldc) = a * b + beta c, beta 0 or 1. Dense tiles take gemm_floats
// without accumulation (its small-product loops where they apply), blocked_gemm with it; others
// go to BLAS with their leading dims.
void gemm_tile(const WideBlock& a, const WideBlock& b, std::int64_t mi, std::int64_t nj, std::int64_t ki, float beta,
               float* c, std::int64_t ldc) {
  // The loops read dense operands: a's rows ki long (mi when stored transposed), b's nj (ki).
  const bool dense = ldc == nj && a.ld == (a.transposed ? mi : ki) && b.ld == (b.transposed ? ki : nj);
  if (dense && beta == 0.0f) return gemm_floats<float>(a.data, a.transposed, b.data, b.transposed, GemmShape{1, mi, nj, ki}, c);
  if (dense && beta == 1.0f && blocked_gemm<float>(SmallGemm{mi, nj, ki, a.transposed, b.transposed}, a.data, b.data, c, true)) return;
  const BlasCall blas_call("dot_general");
  cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(mi), static_cast<blasint>(nj), static_cast<blasint>(ki), 1.0f, a.data,
              static_cast<blasint>(a.ld), b.data, static_cast<blasint>(b.ld), beta, c, static_cast<blasint>(ldc));
  note_blas_product(mi * nj * ki);
}

float* f32_buffer(std::vector<ArenaScratch<float>>& keep, std::int64_t n) { return keep.emplace_back(n).data; }

// narrow_gemm where xjax's f32 loops run the product (blocked_gemm_runs) and A has the most
// rows: B widened once into [k, n], then groups of A's rows over the threads (for_row_groups), each widened,
// multiplied and narrowed into the output while its rows are in cache (no panels: the 3 MiB
// panel buffers and their serial widening cost bf16 products a fifth of their speed at two
// threads against f32's). Each output element is the loops' chain over k in order: the same bits
// at any thread count.
void narrow_gemm_by_row_groups(const NarrowMatrix& a, const NarrowMatrix& b, DType out, char* c) {
  const std::int64_t m = a.rows, k = a.cols, n = b.cols;
  const bool wide_out = out == DType::f32;
  std::vector<ArenaScratch<float>> keep;
  float* const wb = f32_buffer(keep, k * n);  // B widened, [k, n]
  if (!b.transposed) {
    widen_block(b, 0, k, 0, n, wb);
  } else {  // widened as stored ([n, k]) into a buffer freed once transposed into wb
    const ArenaScratch<float> stored(k * n);
    widen_block(b, 0, k, 0, n, stored.data);
    transpose_block(stored.data, k, wb, n, n, k);  // wb[p n + j] = stored[j k + p]
  }
  const std::int64_t per_task = kMaxGroupRows * (k + (wide_out ? 0 : n));  // a group's A rows, then its C rows
  const RowGroups groups = row_groups(m);
  float* scratch = f32_buffer(keep, groups.tasks * per_task);
  for_row_groups(groups, [&](std::int64_t task, std::int64_t r0, std::int64_t nr) {
    float* abuf = scratch + task * per_task;
    const WideBlock wa = widen_block(a, r0, nr, 0, k, abuf);  // [nr, k], or [k, nr] when a is transposed
    float* cbuf = wide_out ? reinterpret_cast<float*>(c) + r0 * n : abuf + kMaxGroupRows * k;
    looped_gemm<float>(nr, n, k, wa.data, a.transposed ? 1 : k, a.transposed ? nr : 1, wb, cbuf, false);
    if (!wide_out) convert_narrow(DType::f32, out, cbuf, c + static_cast<std::size_t>(r0 * n) * itemsize(out), static_cast<std::size_t>(nr * n));
  });
}

// c (m x n, row-major, of dtype out) = a * b for bf16 / f16 a (m x k) and b (k x n), k >= 1.
void narrow_gemm(const NarrowMatrix& a, const NarrowMatrix& b, DType out, char* c) {
  const std::int64_t m = a.rows, k = a.cols, n = b.cols;
  const bool wide_out = out == DType::f32;
  const std::size_t out_size = itemsize(out);
  std::vector<ArenaScratch<float>> keep;
  auto narrow_rows = [&](const float* from, std::int64_t rows, std::int64_t cols, std::int64_t ld_from, char* to) {
    convert_rows(DType::f32, from, ld_from, out, to, n, rows, cols);
  };
  auto tile = [](std::int64_t split_len, std::int64_t across) {
    return std::clamp<std::int64_t>(kNarrowPanel / std::max<std::int64_t>(across, 1), 1, split_len);
  };
  const bool by_rows = m >= n && m >= k;
  if (by_rows && blocked_gemm_runs<float>(SmallGemm{m, n, k, a.transposed, b.transposed})) return narrow_gemm_by_row_groups(a, b, out, c);
  if (by_rows || n >= k) {  // panels of A's rows (B whole) or of B's columns (A whole)
    const std::int64_t len = by_rows ? m : n, step = tile(len, by_rows ? std::max(k, n) : std::max(k, m));
    const WideBlock whole = by_rows ? widen_block(b, 0, k, 0, n, f32_buffer(keep, k * n))
                                    : widen_block(a, 0, m, 0, k, f32_buffer(keep, m * k));
    float* pbuf = f32_buffer(keep, step * k);
    float* cbuf = wide_out ? nullptr : f32_buffer(keep, by_rows ? step * n : m * step);
    for (std::int64_t p0 = 0; p0 < len; p0 += step) {
      const std::int64_t pn = std::min(step, len - p0), mi = by_rows ? pn : m, nj = by_rows ? n : pn;
      const WideBlock wa = by_rows ? widen_block(a, p0, pn, 0, k, pbuf) : whole;
      const WideBlock wb = by_rows ? whole : widen_block(b, 0, k, p0, pn, pbuf);
      char* corner = c + static_cast<std::size_t>(by_rows ? p0 * n : p0) * out_size;  // the tile's first output
      if (wide_out) {
        gemm_tile(wa, wb, mi, nj, k, 0.0f, reinterpret_cast<float*>(corner), n);
      } else {
        gemm_tile(wa, wb, mi, nj, k, 0.0f, cbuf, nj);
        narrow_rows(cbuf, mi, nj, nj, corner);
      }
    }
  } else {  // panels of the contraction, accumulated in f32
    const std::int64_t kb = tile(k, std::max(m, n));
    float* acc = wide_out ? reinterpret_cast<float*>(c) : f32_buffer(keep, m * n);
    float* abuf = f32_buffer(keep, m * kb);
    float* bbuf = f32_buffer(keep, kb * n);
    for (std::int64_t k0 = 0; k0 < k; k0 += kb) {
      const std::int64_t ki = std::min(kb, k - k0);
      gemm_tile(widen_block(a, 0, m, k0, ki, abuf), widen_block(b, k0, ki, 0, n, bbuf), m, n, ki, k0 == 0 ? 0.0f : 1.0f, acc, n);
    }
    if (!wide_out) narrow_rows(acc, m, n, n, c);
  }
}

bool is_narrow_float(DType d) { return d == DType::bf16 || d == DType::f16; }

void run_narrow_dot(const GemmOperand& a, const GemmOperand& b, const GemmShape& s, DType dtype, const ShapedArray& out, char* c) {
  for (std::int64_t bi = 0; bi < s.batch; ++bi)
    narrow_gemm(NarrowMatrix{in_ptr<std::uint16_t>(a.storage) + bi * s.m * s.k, dtype, a.transposed, s.m, s.k},
                NarrowMatrix{in_ptr<std::uint16_t>(b.storage) + bi * s.k * s.n, dtype, b.transposed, s.k, s.n}, out.dtype,
                c + static_cast<std::size_t>(bi * s.m * s.n) * itemsize(out.dtype));
}

Array run_dot(const DotLayout& l, const Array& lhs, const Array& rhs, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  if (l.s.k == 0) {  // empty sums
    std::memset(mutable_data(result), 0, out.nbytes());
    return result;
  }
  const GemmOperand a = operand_as_matrix(lhs, l.lhs);
  const GemmOperand b = operand_as_matrix(rhs, l.rhs);
  if (is_narrow_float(lhs.dtype())) {
    run_narrow_dot(a, b, l.s, lhs.dtype(), out, out_ptr<char>(result));
    return result;
  }
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>)
      gemm_floats<T>(in_ptr<T>(a.storage), a.transposed, in_ptr<T>(b.storage), b.transposed, l.s, out_ptr<T>(result));
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      unsupported_dtype(Primitive::dot_general, DType::bool_);
    else
      gemm_loops<T>(a, b, l.s, out_ptr<T>(result));
  });
  return result;
}

// dot_general_into's kernel: the layout it was resolved for (its dtype is dot_into's T).
struct DotInto {
  DotLayout layout;
};

template <class T> void dot_into(const void* ctx, const void* const* ins, void* const* outs) {
  const auto& d = *static_cast<const DotInto*>(ctx);
  const GemmShape& s = d.layout.s;
  T* c = static_cast<T*>(outs[0]);
  if (s.batch * s.m * s.n == 0) return;
  if (s.k == 0) return std::fill(c, c + s.batch * s.m * s.n, T{0});  // empty sums
  gemm_floats<T>(static_cast<const T*>(ins[0]), d.layout.lhs.mode == OperandLayout::Mode::swapped,
                 static_cast<const T*>(ins[1]), d.layout.rhs.mode == OperandLayout::Mode::swapped, s, c);
}

}  // namespace

Array dot_general_kernel(const Array& lhs, const Array& rhs, const params::DotGeneral& dn,
                         const ShapedArray& out) {
  return run_dot(dot_layout(lhs.shape(), rhs.shape(), dn), lhs, rhs, out);
}

KernelFn resolved_dot_general(const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs,
                              const ShapedArray& out) {
  return [layout = dot_layout(lhs.shape, rhs.shape, dn), out](std::span<const Array> in) {
    return run_dot(layout, in[0], in[1], out);
  };
}

IntoKernel dot_general_into(const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs,
                            const ShapedArray& out) {
  IntoKernel k;
  if (lhs.dtype != out.dtype || rhs.dtype != out.dtype) return k;  // narrow operands: run_kernel widens them
  auto ctx = std::make_shared<DotInto>(DotInto{dot_layout(lhs.shape, rhs.shape, dn)});
  if (ctx->layout.lhs.mode == OperandLayout::Mode::copy || ctx->layout.rhs.mode == OperandLayout::Mode::copy) return k;
  if (out.dtype == DType::f32) k.fn = dot_into<float>;
  else if (out.dtype == DType::f64) k.fn = dot_into<double>;
  else return k;
  k.ctx = std::move(ctx);
  return k;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE
