// small_gemm.hpp: products of small float matrices without BLAS (small_gemm.cpp; not installed).
#pragma once
#include <cstdint>

namespace xjax::detail::kernels {

/// One product C[m, n] = A[m, k] B[k, n] of contiguous row-major matrices; A is stored as [k, m]
/// when a_transposed, B as [n, k] when b_transposed.
struct SmallGemm {
  std::int64_t m, n, k;
  bool a_transposed, b_transposed;
};

/// Writes C and returns true when the product is small enough for the register-blocked loops
/// (and this build has 64-byte SIMD); otherwise writes nothing and returns false (use BLAS).
/// T: float or double.
template <class T> bool small_gemm(const SmallGemm& s, const T* a, const T* b, T* c);

}  // namespace xjax::detail::kernels
