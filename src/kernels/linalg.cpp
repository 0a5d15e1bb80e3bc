// linalg.cpp: the kernels of cholesky and triangular_solve, on LAPACK (potrf, through LAPACKE)
// and BLAS (trsm, through CBLAS), one call per matrix of the leading batch dimensions.
//
// Both work on row-major matrices without copying them into column-major order: a row-major
// matrix is the column-major transpose, so
// - cholesky: the row-major lower triangle is the column-major upper one, and potrf('U') of that
//   (A = U^T U, column-major) leaves U^T = L, the row-major lower factor, in place;
// - trsm has a row-major CBLAS entry.
#include <cblas.h>
#include <lapacke.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace xjax::detail::kernels {

namespace {

/// The number of matrices of an aval whose last two dims are (r, c), and r * c.
std::pair<std::int64_t, std::int64_t> batch_and_size(const ShapedArray& a) {
  const std::int64_t r = a.shape[a.shape.size() - 2], c = a.shape.back();
  const std::int64_t n = r * c;
  return {n == 0 ? 0 : shape_size(a.shape) / n, n};
}

template <class T> lapack_int potrf_upper_col_major(lapack_int n, T* a) {
  const BlasCall blas_call("cholesky");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', n, a, n);
  else return LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', n, a, n);
}

template <class T> lapack_int getrf_row_major(lapack_int m, lapack_int n, T* a, lapack_int* ipiv) {
  const BlasCall blas_call("lu");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_sgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
  else return LAPACKE_dgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
}

template <class T> lapack_int geqrf_row_major(lapack_int m, lapack_int n, T* a, T* tau) {
  const BlasCall blas_call("qr");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
  else return LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
}

template <class T> lapack_int orgqr_row_major(lapack_int m, lapack_int n, lapack_int k, T* a, const T* tau) {
  const BlasCall blas_call("qr");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_sorgqr(LAPACK_ROW_MAJOR, m, n, k, a, n, tau);
  else return LAPACKE_dorgqr(LAPACK_ROW_MAJOR, m, n, k, a, n, tau);
}

template <class T> lapack_int syevd_row_major(char uplo, lapack_int n, T* a, T* w) {
  const BlasCall blas_call("eigh");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, 'V', uplo, n, a, n, w);
  else return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', uplo, n, a, n, w);
}

template <class T>
lapack_int gesdd_row_major(char jobz, lapack_int m, lapack_int n, T* a, T* s, T* u, lapack_int ldu, T* vt, lapack_int ldvt) {
  const BlasCall blas_call("svd");
  if constexpr (std::is_same_v<T, float>) return LAPACKE_sgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
  else return LAPACKE_dgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
}

template <class T>
void trsm_row_major(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, CBLAS_DIAG diag, blasint m, blasint n,
                    const T* a, blasint lda, T* b, blasint ldb) {
  const BlasCall blas_call("triangular_solve");
  if constexpr (std::is_same_v<T, float>) cblas_strsm(CblasRowMajor, side, uplo, trans, diag, m, n, 1.0f, a, lda, b, ldb);
  else cblas_dtrsm(CblasRowMajor, side, uplo, trans, diag, m, n, 1.0, a, lda, b, ldb);
}

/// Calls f(std::type_identity<T>{}) with T float or double for an f32 or f64 `dtype`; any other
/// dtype is unsupported by `p`.
template <class F> void visit_float(Primitive p, DType dtype, F&& f) {
  if (dtype == DType::f32) f(std::type_identity<float>{});
  else if (dtype == DType::f64) f(std::type_identity<double>{});
  else unsupported_dtype(p, dtype);
}

/// The row exchanges i <-> pivots[i], i = 0..k-1, applied in order to 0..n-1 (a pivot outside
/// 0..n-1 exchanges nothing).
void permutation_of_pivots(const std::int32_t* pivots, std::int64_t k, std::int32_t* permutation, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) permutation[i] = static_cast<std::int32_t>(i);
  for (std::int64_t i = 0; i < k; ++i)
    if (pivots[i] >= 0 && pivots[i] < n) std::swap(permutation[i], permutation[pivots[i]]);
}

/// The outputs of factorization p of `a`, allocated (avals from p's shape rule).
std::vector<Array> alloc_outputs(Primitive p, const Array& a, const Params& ps) {
  std::vector<Array> out;
  for (const auto& aval : abstract_eval(p, std::vector<ShapedArray>{a.aval()}, ps)) out.push_back(alloc_array(aval));
  return out;
}

/// The elements of x's k-th matrix (of `size` elements).
template <class T> T* matrix(const Array& x, std::int64_t k, std::int64_t size) { return static_cast<T*>(mutable_data(x)) + k * size; }

/// Fills each (pointer, count) range with NaN (a factorization that failed).
template <class T> void fill_nan(std::initializer_list<std::pair<T*, std::int64_t>> parts) {
  for (auto [p, n] : parts) std::fill(p, p + n, std::numeric_limits<T>::quiet_NaN());
}

/// The identity's first `cols` columns in a rows x cols row-major block.
template <class T> void identity_columns(T* q, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) q[i * cols + j] = i == j ? T(1) : T(0);
}

}  // namespace

Array cholesky_kernel(const Array& x, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.nbytes() > 0) std::memcpy(mutable_data(result), x.raw_data(), out.nbytes());
  const auto [count, size] = batch_and_size(out);
  const std::int64_t n = out.shape.back();
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    T* m = static_cast<T*>(mutable_data(result));
    for (std::int64_t k = 0; k < count; ++k, m += size) {
      // Not positive definite (info > 0), or a NaN or infinity reaching the diagonal (potrf need
      // not report those: LAPACKE's NaN check can be turned off, LAPACK's potrf does not test):
      // NaN everywhere, as JAX.
      bool failed = potrf_upper_col_major<T>(static_cast<lapack_int>(n), m) != 0;
      for (std::int64_t i = 0; i < n && !failed; ++i) failed = !std::isfinite(m[i * n + i]);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j)
          if (failed) m[i * n + j] = std::numeric_limits<T>::quiet_NaN();
          else if (j > i) m[i * n + j] = T(0);  // the strict upper triangle: zeros, not a's entries
    }
  };
  visit_float(Primitive::cholesky, out.dtype, run);
  return result;
}

Array triangular_solve_kernel(const Array& a, const Array& b, const params::TriangularSolve& ps, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.nbytes() > 0) std::memcpy(mutable_data(result), b.raw_data(), out.nbytes());
  const auto [count, b_size] = batch_and_size(out);
  const std::int64_t m = a.shape().back(), rows = out.shape[out.shape.size() - 2], cols = out.shape.back();
  const CBLAS_SIDE side = ps.left_side ? CblasLeft : CblasRight;
  const CBLAS_UPLO uplo = ps.lower ? CblasLower : CblasUpper;
  const CBLAS_TRANSPOSE trans = ps.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_DIAG diag = ps.unit_diagonal ? CblasUnit : CblasNonUnit;
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    const T* am = in_ptr<T>(a);
    T* bm = static_cast<T*>(mutable_data(result));
    for (std::int64_t k = 0; k < count; ++k, am += m * m, bm += b_size)
      trsm_row_major<T>(side, uplo, trans, diag, static_cast<blasint>(rows), static_cast<blasint>(cols), am,
                        static_cast<blasint>(m), bm, static_cast<blasint>(cols));
  };
  visit_float(Primitive::triangular_solve, out.dtype, run);
  return result;
}

std::vector<Array> lu_kernel(std::span<const Array> in, const params::None&) {
  const Array& a = in[0];
  std::vector<Array> out = alloc_outputs(Primitive::lu, a, {});
  if (out[0].aval().nbytes() > 0) std::memcpy(mutable_data(out[0]), a.raw_data(), out[0].aval().nbytes());
  const std::int64_t m = a.dim(-2), n = a.dim(-1), k = std::min(m, n);
  const std::int64_t count = shape_size(Shape(a.shape().begin(), a.shape().end() - 2));
  std::int32_t* pivots = static_cast<std::int32_t*>(mutable_data(out[1]));
  std::int32_t* permutation = static_cast<std::int32_t*>(mutable_data(out[2]));
  std::vector<lapack_int> ipiv(static_cast<std::size_t>(count == 0 ? 0 : k));  // nothing for an empty batch
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    T* lu = static_cast<T*>(mutable_data(out[0]));
    for (std::int64_t b = 0; b < count; ++b, lu += m * n, pivots += k, permutation += m) {
      // info > 0 (a zero pivot: singular) still completes the factorization (JAX returns it as is);
      // info < 0 is LAPACKE's NaN check refusing the matrix: NaN factors, no row exchanges.
      const lapack_int info = k == 0 ? 0 : getrf_row_major<T>(static_cast<lapack_int>(m), static_cast<lapack_int>(n), lu, ipiv.data());
      if (info < 0) std::fill(lu, lu + m * n, std::numeric_limits<T>::quiet_NaN());
      for (std::int64_t i = 0; i < k; ++i) pivots[i] = info < 0 ? static_cast<std::int32_t>(i) : static_cast<std::int32_t>(ipiv[static_cast<std::size_t>(i)] - 1);
      // a[permutation[i], :] is row i of L U.
      permutation_of_pivots(pivots, k, permutation, m);
    }
  };
  visit_float(Primitive::lu, a.dtype(), run);
  return out;
}

std::vector<Array> qr_kernel(std::span<const Array> in, const params::Qr& ps) {
  const Array& a = in[0];
  std::vector<Array> out = alloc_outputs(Primitive::qr, a, ps);
  const std::int64_t m = a.dim(-2), n = a.dim(-1), k = std::min(m, n), c = ps.full_matrices ? m : k;
  const std::int64_t count = shape_size(Shape(a.shape().begin(), a.shape().end() - 2));
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    if (count == 0) return;  // an empty batch: no scratch sized by the matrices
    std::vector<T> work(static_cast<std::size_t>(m * n)), tau(static_cast<std::size_t>(std::max<std::int64_t>(k, 1)));
    for (std::int64_t b = 0; b < count; ++b) {
      T* q = matrix<T>(out[0], b, m * c);
      T* r = matrix<T>(out[1], b, c * n);
      std::copy(in_ptr<T>(a) + b * m * n, in_ptr<T>(a) + (b + 1) * m * n, work.begin());
      // A = Q R: geqrf leaves R on and above the diagonal and the reflectors below it; orgqr
      // forms Q's first c columns from the reflectors (the identity's when there are none).
      lapack_int info = k == 0 ? 0 : geqrf_row_major<T>(static_cast<lapack_int>(m), static_cast<lapack_int>(n), work.data(), tau.data());
      for (std::int64_t i = 0; i < c; ++i)
        for (std::int64_t j = 0; j < n; ++j) r[i * n + j] = j >= i ? work[static_cast<std::size_t>(i * n + j)] : T(0);
      identity_columns(q, m, c);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < std::min(c, n); ++j) q[i * c + j] = work[static_cast<std::size_t>(i * n + j)];
      if (info == 0 && k > 0) info = orgqr_row_major<T>(static_cast<lapack_int>(m), static_cast<lapack_int>(c), static_cast<lapack_int>(k), q, tau.data());
      if (info != 0) fill_nan<T>({{q, m * c}, {r, c * n}});
    }
  };
  visit_float(Primitive::qr, a.dtype(), run);
  return out;
}

std::vector<Array> eigh_kernel(std::span<const Array> in, const params::Eigh& ps) {
  const Array& a = in[0];
  std::vector<Array> out = alloc_outputs(Primitive::eigh, a, ps);
  if (out[0].aval().nbytes() > 0) std::memcpy(mutable_data(out[0]), a.raw_data(), out[0].aval().nbytes());
  const std::int64_t n = a.dim(-1);
  const std::int64_t count = shape_size(Shape(a.shape().begin(), a.shape().end() - 2));
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    for (std::int64_t b = 0; b < count; ++b) {
      T* v = matrix<T>(out[0], b, n * n);
      T* w = matrix<T>(out[1], b, n);
      // syevd overwrites the triangle it reads with the eigenvectors (columns), w ascending.
      const lapack_int info = n == 0 ? 0 : syevd_row_major<T>(ps.lower ? 'L' : 'U', static_cast<lapack_int>(n), v, w);
      if (info != 0) fill_nan<T>({{v, n * n}, {w, n}});
    }
  };
  visit_float(Primitive::eigh, a.dtype(), run);
  return out;
}

std::vector<Array> svd_kernel(std::span<const Array> in, const params::Svd& ps) {
  const Array& a = in[0];
  std::vector<Array> out = alloc_outputs(Primitive::svd, a, ps);
  const std::int64_t m = a.dim(-2), n = a.dim(-1), k = std::min(m, n);
  const std::int64_t u_cols = ps.full_matrices ? m : k, vt_rows = ps.full_matrices ? n : k;
  const std::int64_t count = shape_size(Shape(a.shape().begin(), a.shape().end() - 2));
  const char jobz = !ps.compute_uv ? 'N' : ps.full_matrices ? 'A' : 'S';
  auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    if (count == 0) return;  // an empty batch: no scratch sized by the matrices
    std::vector<T> work(static_cast<std::size_t>(m * n)), no_u(1), no_vt(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
    for (std::int64_t b = 0; b < count; ++b) {
      T* s = matrix<T>(out[0], b, k);
      T* u = ps.compute_uv ? matrix<T>(out[1], b, m * u_cols) : no_u.data();
      T* vt = ps.compute_uv ? matrix<T>(out[2], b, vt_rows * n) : no_vt.data();
      std::copy(in_ptr<T>(a) + b * m * n, in_ptr<T>(a) + (b + 1) * m * n, work.begin());
      if (k == 0) {  // no singular values; U and V^T are identities (or empty)
        if (ps.compute_uv) identity_columns(u, m, u_cols), identity_columns(vt, vt_rows, n);
        continue;
      }
      // An infinite or NaN entry: NaNs, as svdvals gives (gesdd returned finite-looking U and V
      // with NaN / inf values, and printed DLASCL's parameter error)
      if (!std::all_of(work.begin(), work.end(), [](T x) { return std::isfinite(x); })) {
        fill_nan<T>({{s, k}});
        if (ps.compute_uv) fill_nan<T>({{u, m * u_cols}, {vt, vt_rows * n}});
        continue;
      }
      const lapack_int info = gesdd_row_major<T>(jobz, static_cast<lapack_int>(m), static_cast<lapack_int>(n), work.data(), s, u,
                                                 static_cast<lapack_int>(ps.compute_uv ? u_cols : 1), vt,
                                                 static_cast<lapack_int>(std::max<std::int64_t>(n, 1)));
      if (info != 0) {
        fill_nan<T>({{s, k}});
        if (ps.compute_uv) fill_nan<T>({{u, m * u_cols}, {vt, vt_rows * n}});
      }
    }
  };
  visit_float(Primitive::svd, a.dtype(), run);
  return out;
}

Array lu_pivots_to_permutation_kernel(const Array& pivots, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::int64_t k = pivots.dim(-1), n = out.shape.back();
  const std::int64_t count = shape_size(Shape(out.shape.begin(), out.shape.end() - 1));
  const std::int32_t* p = in_ptr<std::int32_t>(pivots);
  std::int32_t* permutation = static_cast<std::int32_t*>(mutable_data(result));
  for (std::int64_t b = 0; b < count; ++b, p += k, permutation += n) permutation_of_pivots(p, k, permutation, n);
  return result;
}

}  // namespace xjax::detail::kernels
