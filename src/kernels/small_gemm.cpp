// small_gemm.cpp: products of small float matrices, C = A B, in register-blocked xsimd loops
// instead of BLAS.
//
// Why: for the small GEMMs of overhead-bound workloads (xjax-bench P2: 16x32 by 32x32), BLAS
// spends a third of its time packing both operands into its own layouts and the rest in a kernel
// tuned for large panels. Here no operand is packed when B is stored as [K, N]: a block of R rows
// of C by two SIMD batches of columns is kept in 2R registers, and every step over k broadcasts
// R elements of A and loads two batches of B's row k (both stay in L1 at these sizes). A B
// stored transposed ([N, K]) is first transposed into a buffer on the stack, while that is
// small. Each element of C is one fused multiply-add chain over k in order (as a scalar loop
// would compute it, with FMA).
//
// The block is sized to the vector registers: with 32 (AVX-512, NEON) R = 8 rows by two batches
// (16 accumulators); with 16 (AVX2) R = 6 (12 accumulators, two batches of B and one broadcast:
// 15 registers, nothing spills). AVX-512: 2-3x faster than Debian's OpenBLAS up to 128^3 (measured
// 2026-12-01: 16x32x32 0.16 us against 0.46 us); AVX2 figures in docs/performance.md. Where the
// registers hold less than 512 bytes (SSE2's 16 x 16 bytes) BLAS stays: a 6 x 8 block of floats
// is too small to beat it. This file is compiled once per kernel set (kernel_sets.hpp).
//
// Larger products (blocked_gemm) run in the same loops, rows split over the threads, only where
// OpenBLAS's kernels are narrower than the set's batches (Debian's OpenBLAS 0.3.21 runs its
// Haswell kernels on AMD's AVX-512 CPUs, and its SSE3 Prescott ones on Intel CPUs newer than it):
// at one thread on Zen 5, 1.3-2.0x the Haswell kernels' speed from 1024 x 128 x 128 to 1024^3
// (docs/performance.md, "Products past 128^3"; the Prescott figures there too). Where BLAS runs
// kernels as wide as the set's, its packed blocking wins and these products stay with it.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/kernel_sets.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "kernels/transpose_block.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

template <class T> using Batch = xsimd::batch<T>;
template <class T> constexpr std::int64_t kWidth = static_cast<std::int64_t>(Batch<T>::size);
/// A batch of half the width (the AVX-512 set: AVX2's; the AVX2 set: SSE's) for a last block of
/// columns, so that n need only be a multiple of half the width (8 channels take the loops on
/// both sets); void where the set has none.
template <class T> using HalfBatch = xsimd::make_sized_batch_t<T, Batch<T>::size / 2>;
template <class T> constexpr bool kHasHalf = !std::is_void_v<HalfBatch<T>>;
/// What n must be a multiple of.
template <class T> constexpr std::int64_t kColumnStep = kHasHalf<T> ? kWidth<T> / 2 : kWidth<T>;
using simd::kVectorRegisters;
constexpr bool kWideSimd = kVectorRegisters * sizeof(Batch<float>) >= 512;
/// Rows of C per block: 2 R accumulators + 2 batches of B + 1 broadcast fit the registers.
constexpr int kBlockRows = kVectorRegisters >= 32 ? 8 : 6;

constexpr std::int64_t kMaxMultiplyAdds = std::int64_t{128} * 128 * 128;  // m n k: beyond, BLAS's blocking wins
constexpr std::size_t kMaxPackedBytes = 16384;  // B transposed into a stack buffer

/// A as the kernel reads it: element (i, k) at a[i * row + k * col].
template <class T> struct Lhs {
  const T* a;
  std::int64_t row, col;
  T at(std::int64_t i, std::int64_t k) const { return a[i * row + k * col]; }
};

/// c[i0 .. i0 + R, j0 .. j0 + C * width) of A B in batches B of T, where b is [K, N] row-major;
/// added to what c holds when `accumulate` (each element's chain goes on from it).
// The loops over r and q are unrolled (GCC at -O2 would not), so acc stays in registers.
template <class B, int R, int C, class T>
void block(const Lhs<T>& a, const T* b, T* c, std::int64_t n, std::int64_t k, std::int64_t i0, std::int64_t j0,
           bool accumulate) {
  constexpr auto width = static_cast<std::int64_t>(B::size);
  B acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < C; ++q)
      acc[r][q] = accumulate ? B::load_unaligned(c + (i0 + r) * n + j0 + q * width) : B(T(0));
  for (std::int64_t p = 0; p < k; ++p) {
    B bp[C];
#pragma GCC unroll 2
    for (int q = 0; q < C; ++q) bp[q] = B::load_unaligned(b + p * n + j0 + q * width);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B ar(a.at(i0 + r, p));
#pragma GCC unroll 2
      for (int q = 0; q < C; ++q) acc[r][q] = xsimd::fma(ar, bp[q], acc[r][q]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < C; ++q) acc[r][q].store_unaligned(c + (i0 + r) * n + j0 + q * width);
}

/// Rows i0 .. i0 + R of C: pairs of batches of columns, then one batch if n is odd in batches,
/// then one half batch if n is odd in half batches.
template <class T, int R>
void rows(const Lhs<T>& a, const T* b, T* c, std::int64_t n, std::int64_t k, std::int64_t i0, bool accumulate) {
  std::int64_t j0 = 0;
  for (; j0 + 2 * kWidth<T> <= n; j0 += 2 * kWidth<T>) block<Batch<T>, R, 2>(a, b, c, n, k, i0, j0, accumulate);
  if (j0 + kWidth<T> <= n) {
    block<Batch<T>, R, 1>(a, b, c, n, k, i0, j0, accumulate);
    j0 += kWidth<T>;
  }
  if constexpr (kHasHalf<T>)
    if (j0 < n) block<HalfBatch<T>, R, 1>(a, b, c, n, k, i0, j0, accumulate);
}

/// C = A B (C += A B when `accumulate`) with b [K, N] row-major and n a multiple of kColumnStep.
template <class T>
void product(const Lhs<T>& a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate = false) {
  std::int64_t i0 = 0;
  for (; i0 + kBlockRows <= m; i0 += kBlockRows) rows<T, kBlockRows>(a, b, c, n, k, i0, accumulate);
  if (i0 + 4 <= m) {
    rows<T, 4>(a, b, c, n, k, i0, accumulate);
    i0 += 4;
  }
  if (i0 + 2 <= m) {
    rows<T, 2>(a, b, c, n, k, i0, accumulate);
    i0 += 2;
  }
  if (i0 < m) rows<T, 1>(a, b, c, n, k, i0, accumulate);
}

}  // namespace

template <class T> bool small_gemm_takes(const SmallGemm& s) {
  if constexpr (!kWideSimd) return false;
  else
    return s.n % kColumnStep<T> == 0 && s.m * s.n * s.k <= kMaxMultiplyAdds &&
           (!s.b_transposed || static_cast<std::size_t>(s.k * s.n) * sizeof(T) <= kMaxPackedBytes);
}

template <class T>
bool small_gemm(const SmallGemm& s, const T* a, const T* b, T* c) {
  if constexpr (!kWideSimd) {
    return false;
  } else {
    if (!small_gemm_takes<T>(s)) return false;
    const Lhs<T> lhs{a, s.a_transposed ? 1 : s.k, s.a_transposed ? s.m : 1};
    if (!s.b_transposed) {
      product(lhs, b, c, s.m, s.n, s.k);
      return true;
    }
    alignas(64) T packed[kMaxPackedBytes / sizeof(T)];
    transpose_block(b, s.k, packed, s.n, s.n, s.k);  // packed[p n + j] = b[j k + p]
    product(lhs, packed, c, s.m, s.n, s.k);
    return true;
  }
}

template <class T>
void looped_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t a_row, std::int64_t a_col, const T* b,
                 T* c, bool accumulate) {
  if constexpr (!kWideSimd) {
    throw Error("internal error: looped_gemm called in a kernel set without product loops");
  } else {
    if (n % kColumnStep<T> != 0) throw Error("internal error: looped_gemm called with n = " + std::to_string(n));
    // Depth chunks whose rows of b fill about 32 KiB (L1) and at least 64 rows: every block of c
    // reads the chunk again, so it stays in cache; c is read back and written once a chunk.
    const std::int64_t chunk = std::clamp<std::int64_t>(32768 / (n * std::int64_t{sizeof(T)}), 64, 512);
    for (std::int64_t p0 = 0; p0 < k; p0 += chunk)
      product(Lhs<T>{a + p0 * a_col, a_row, a_col}, b + p0 * n, c, m, n, std::min(chunk, k - p0), accumulate || p0 > 0);
    if (k == 0 && !accumulate) std::fill(c, c + m * n, T(0));
  }
}

// B stored [n, k] is transposed once into scratch memory ([k, n]) read by every row group; past
// kMaxTransposedBytes BLAS keeps it (it packs a block at a time: a vocabulary's output
// projection, 768 x 50257, would otherwise be copied whole in the backward pass).
constexpr std::size_t kMaxTransposedBytes = std::size_t{16} << 20;

/// Whether this set's batches of T are wider than the vectors of the BLAS's kernels (a known
/// core's): then looped_gemm outruns the BLAS at any size (AVX-512 batches against Haswell's
/// 32-byte kernels, AVX2 or AVX-512 ones against Prescott's 16-byte SSE3 fallback).
namespace {
bool wider_than_blas() {
  if constexpr (!kWideSimd) return false;
  const int blas = blas_vector_bytes();
  return blas > 0 && static_cast<int>(sizeof(Batch<float>)) > blas;  // double's batches are as wide
}
}  // namespace

template <class T> bool blocked_gemm_runs(const SmallGemm& s) {
  return s.n % kColumnStep<T> == 0 && wider_than_blas() &&
         !(s.b_transposed && static_cast<std::size_t>(s.k * s.n) * sizeof(T) > kMaxTransposedBytes);
}

bool large_products_in_loops() { return wider_than_blas(); }

// Groups of at most kMaxGroupRows rows, a whole number of register blocks, as many groups as
// threads where the rows allow; the thread count read once.
RowGroups row_groups(std::int64_t m) {
  const std::int64_t threads = kernel_threads(), per_thread = (m + threads - 1) / threads;
  const std::int64_t group = std::clamp<std::int64_t>((per_thread + kBlockRows - 1) / kBlockRows * kBlockRows, kBlockRows,
                                                      kMaxGroupRows / kBlockRows * kBlockRows);
  const std::int64_t groups = (m + group - 1) / group;
  return {m, group, groups, std::clamp<std::int64_t>(groups, 1, threads)};
}

void for_row_groups(const RowGroups& g, const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& body) {
  parallel_for(g.tasks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      for (std::int64_t i = t * g.groups / g.tasks; i < (t + 1) * g.groups / g.tasks; ++i)
        body(t, i * g.group, std::min(g.group, g.rows - i * g.group));
  }, ChunkCalls::no_blas);
}

template <class T> bool blocked_gemm(const SmallGemm& s, const T* a, const T* b, T* c, bool accumulate) {
  if constexpr (!kWideSimd) {
    return false;
  } else {
    if (!blocked_gemm_runs<T>(s)) return false;
    std::optional<ArenaScratch<T>> packed;
    if (s.b_transposed) {
      packed.emplace(s.k * s.n);
      transpose_block(b, s.k, packed->data, s.n, s.n, s.k);  // packed[p n + j] = b[j k + p]
      b = packed->data;
    }
    const std::int64_t a_row = s.a_transposed ? 1 : s.k, a_col = s.a_transposed ? s.m : 1;
    for_row_groups(row_groups(s.m), [&](std::int64_t, std::int64_t i0, std::int64_t rows) {
      looped_gemm<T>(rows, s.n, s.k, a + i0 * a_row, a_row, a_col, b, c + i0 * s.n, accumulate);
    });
    return true;
  }
}

template <class T> std::int64_t small_gemm_rows(std::int64_t n, std::int64_t k) {
  if constexpr (!kWideSimd) return 0;
  else return n <= 0 || k <= 0 || n % kColumnStep<T> != 0 ? 0 : kMaxMultiplyAdds / (n * k);
}

template std::int64_t small_gemm_rows<float>(std::int64_t, std::int64_t);
template std::int64_t small_gemm_rows<double>(std::int64_t, std::int64_t);
template bool small_gemm<float>(const SmallGemm&, const float*, const float*, float*);
template bool small_gemm<double>(const SmallGemm&, const double*, const double*, double*);
template bool small_gemm_takes<float>(const SmallGemm&);
template bool small_gemm_takes<double>(const SmallGemm&);
template bool blocked_gemm_runs<float>(const SmallGemm&);
template bool blocked_gemm_runs<double>(const SmallGemm&);
template bool blocked_gemm<float>(const SmallGemm&, const float*, const float*, float*, bool);
template bool blocked_gemm<double>(const SmallGemm&, const double*, const double*, double*, bool);
template void looped_gemm<float>(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, const float*,
                                 float*, bool);
template void looped_gemm<double>(std::int64_t, std::int64_t, std::int64_t, const double*, std::int64_t, std::int64_t,
                                  const double*, double*, bool);

bool small_gemm_f32(const SmallGemm& s, const float* a, const float* b, float* c) { return small_gemm(s, a, b, c); }
bool small_gemm_f64(const SmallGemm& s, const double* a, const double* b, double* c) { return small_gemm(s, a, b, c); }

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE
