// small_gemm.hpp: products of small float matrices without BLAS (small_gemm.cpp; not installed).
#pragma once
#include <cstdint>

namespace xjax::detail::kernels {

/// One product C[m, n] = A[m, k] B[k, n] of contiguous row-major matrices; A is stored as [k, m]
/// when a_transposed, B as [n, k] when b_transposed. small_gemm_f32 / small_gemm_f64
/// (kernel_sets.hpp) write C and return true when the product is small enough for the
/// register-blocked loops and the kernel set's registers hold them; otherwise they write nothing
/// and return false (use BLAS).
struct SmallGemm {
  std::int64_t m, n, k;
  bool a_transposed, b_transposed;
};

/// The most rows of one group when a product's rows are split over the threads (for_row_groups):
/// a group's rows of A stay in L2 while its blocks sweep B.
constexpr std::int64_t kMaxGroupRows = 64;

}  // namespace xjax::detail::kernels
