// linalg.hpp: linear algebra, `xj::linalg` (lax.linalg / jax.scipy.linalg names and semantics):
// cholesky, triangular_solve, cho_solve, lu (lu_factor, lu_solve), solve, inv, det, slogdet, qr,
// eigh, svd (svdvals), matrix_power, norm; and xj::sparse::cg. Matrices are the last two axes; leading axes
// are batch dimensions. float32 and float64, on LAPACK and BLAS. A matrix that is not positive
// definite gives a factor of NaNs (as JAX), never an exception or a crash.
#pragma once
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "xjax/detail/function.hpp"
#include "xjax/ops.hpp"

namespace xjax::linalg {

/// The lower Cholesky factor L of each matrix (a = L L^T). symmetrize_input (JAX's default):
/// factor (a + a^T) / 2, so that the derivative is that of a symmetric function of a; otherwise
/// only a's lower triangle is read. Not positive definite: a matrix of NaNs. f32 or f64 (integers
/// and bools are a TypeError, as lax.linalg; convert with xj::astype).
Array cholesky(const Array& a, bool symmetrize_input = true, XJAX_LOC);

/// lax.linalg.triangular_solve's options (its defaults: all false).
struct TriangularSolveOptions {
  bool left_side = false;      // solve op(a) x = b; otherwise x op(a) = b
  bool lower = false;          // read a's lower triangle; otherwise its upper one
  bool transpose_a = false;    // op(a) = a^T; otherwise a
  bool unit_diagonal = false;  // take a's diagonal as ones (not read)
};
/// x with op(a) x = b (left_side) or x op(a) = b, for a (..., m, m) triangular and b
/// (..., m, n) or (..., n, m) with a's batch dimensions (no broadcasting, as lax.linalg); a b one
/// rank below a is one vector (..., m) per matrix, as lax.linalg. Operands f32 or f64 (no
/// implicit conversion: a TypeError).
Array triangular_solve(const Array& a, const Array& b, const TriangularSolveOptions& options = {}, XJAX_LOC);

/// jax.scipy.linalg.cho_solve((c, lower), b): x with A x = b, for A = c c^T (lower) or c^T c,
/// c a Cholesky factor (..., n, n); b is one vector (n) for every matrix when 1-D, vectors
/// (..., n) when it has one axis less than c and ends in n (JAX's rule, which JAX deprecates), else
/// matrices (..., n, k); the batch axes broadcast (JAX requires them
/// equal), f32 with f64 computes in f64, integers and bools in f64. (JAX passes (c, lower) as a tuple; here they are two
/// arguments.)
Array cho_solve(const Array& c, const Array& b, bool lower = true, XJAX_LOC);

/// lax.linalg.lu: the LU factorization with partial pivoting of each matrix (..., m, n):
/// {lu, pivots, permutation} with a[..., permutation, :] = L U, L (m, k) unit lower triangular
/// and U (k, n) upper triangular packed into lu (m, n), k = min(m, n); pivots (..., k) i32 (row i
/// was exchanged with row pivots[i], in order), permutation (..., m) i32. A singular matrix is
/// factored all the same (U has a zero on its diagonal), as JAX. f32 or f64.
std::tuple<Array, Array, Array> lu(const Array& a, XJAX_LOC);

/// lax.linalg.lu_pivots_to_permutation: the row order (..., permutation_size) that pivots
/// (..., k) i32 describe (row i exchanged with row pivots[i], i = 0..k-1, in order).
Array lu_pivots_to_permutation(const Array& pivots, std::int64_t permutation_size, XJAX_LOC);

/// jax.scipy.linalg.lu_factor: {lu, pivots} of lu(a) for square matrices (..., n, n); integers
/// and bools are factored in f64.
std::pair<Array, Array> lu_factor(const Array& a, XJAX_LOC);

/// jax.scipy.linalg.lu_solve((lu, pivots), b, trans): x with a x = b (trans 0) or a^T x = b
/// (trans 1 or 2: real matrices), lu and pivots as lu_factor gives them. b is one vector (n) for
/// every matrix when 1-D, vectors (..., n) when it has one axis less than lu and ends in n (JAX's
/// rule, which JAX deprecates), else matrices (..., n, k); batch axes broadcast; integers and
/// bools compute in f64.
Array lu_solve(const Array& lu, const Array& pivots, const Array& b, int trans = 0, XJAX_LOC);

/// jnp.linalg.solve: x with a x = b, a (..., n, n); b is one vector (n) when it is 1-D, else
/// matrices (..., n, k) (NumPy 2's rule, as JAX); batch axes broadcast. Integers and bools compute
/// in f64, f32 with f64 in f64. A singular a gives infinities or NaNs (LAPACK), not an error.
/// As JAX, a custom_linear_solve over a's LU factors: derivatives come from the solution
/// (da gets -A^-T ct x^T), never through the factorization.
Array solve(const Array& a, const Array& b, XJAX_LOC);
/// jax.scipy.linalg.solve with assume_a: "gen", "sym" or "her" (solve(a, b) above, as JAX's) or
/// "pos" (symmetric positive definite: Cholesky factors, and the symmetric custom_linear_solve, so
/// the gradient costs one more cho_solve; b is read as vectors (..., n) when it has one axis less
/// than a, as jax.scipy.linalg.solve reads it then). Any other value is an Error.
Array solve(const Array& a, const Array& b, std::string_view assume_a, XJAX_LOC);

/// jnp.linalg.inv: the inverse of each matrix (..., n, n) (solve(a, I)).
Array inv(const Array& a, XJAX_LOC);

/// jnp.linalg.det: the determinant of each matrix (..., n, n), from its LU factors. Its
/// derivative is the LU factors' (d det = det tr(a^-1 da)), not finite at a singular matrix (JAX's
/// custom rule gives the cofactor matrix there).
Array det(const Array& a, XJAX_LOC);

/// jnp.linalg.slogdet: {sign, logabsdet} of each matrix (..., n, n): det = sign exp(logabsdet);
/// a singular matrix gives {0, -inf}.
std::pair<Array, Array> slogdet(const Array& a, XJAX_LOC);

/// jnp.linalg.qr(a, mode): {q, r} with a = q r, q's columns orthonormal and r upper triangular;
/// mode "reduced" (q (..., m, k), r (..., k, n), k = min(m, n)) or "complete" (q (..., m, m),
/// r (..., m, n)). Differentiable where JAX's is: m >= n, and "complete" only for square a.
/// Here and in eigh, svd and svdvals integers and bools compute in f64 (jnp's inexact promotion).
std::pair<Array, Array> qr(const Array& a, const std::string& mode = "reduced", XJAX_LOC);

/// jnp.linalg.eigh: {w, v} of each symmetric matrix (..., n, n), a = v diag(w) v^T, the
/// eigenvalues w ascending and the eigenvectors v's columns (LAPACK syevd; each column's sign is
/// LAPACK's, not normalized, as JAX). symmetrize_input (JAX's default): (a + a^T) / 2 is
/// decomposed; otherwise only a's lower (or upper) triangle is read. A repeated eigenvalue makes
/// the eigenvectors' derivative infinite (as JAX); w's stays finite.
std::pair<Array, Array> eigh(const Array& a, bool lower = true, bool symmetrize_input = true, XJAX_LOC);
/// jnp.linalg.eigh's spelling: UPLO "L" (lower) or "U" (upper); a string had converted to
/// `lower = true`.
std::pair<Array, Array> eigh(const Array& a, const char* uplo, bool symmetrize_input = true, XJAX_LOC);
/// (A character, 'U', would convert to `lower = true`: refused; write "U".)
template <class C>
  requires(std::is_integral_v<C> && !std::is_same_v<C, bool>)
std::pair<Array, Array> eigh(const Array& a, C uplo, bool symmetrize_input = true, XJAX_LOC) = delete;

/// jnp.linalg.svd(a, full_matrices): {u, s, vh} with a = u diag(s) vh, s descending (..., k), u
/// (..., m, k) and vh (..., k, n), or (..., m, m) and (..., n, n) with full_matrices (jnp's
/// default is true; API.md's, here, false). Singular vectors' signs are LAPACK's (gesdd). The
/// derivative is defined for full_matrices = false (as JAX), infinite for repeated singular values.
std::tuple<Array, Array, Array> svd(const Array& a, bool full_matrices = false, XJAX_LOC);
/// jnp.linalg.svdvals (svd with compute_uv = false): the singular values (..., k), descending.
Array svdvals(const Array& a, XJAX_LOC);

/// jnp.linalg.norm. Over one axis (or a 1-D x), a vector norm: ord none or 2 the Euclidean
/// norm, inf max |x|, -inf min |x|, 0 the count of non-zeros, any other p (sum |x|^p)^(1/p). Over
/// two axes (or a 2-D x), a matrix norm: none or "fro" Frobenius, "nuc" the sum of singular
/// values, 1 / -1 the max / min column sum of |x|, inf / -inf the max / min row sum, 2 / -2 the
/// largest / smallest singular value. No axes and no ord: the Euclidean norm of all elements.
/// Integers compute in f64 (jnp's inexact promotion). A ShapeError for an ord the axes do not
/// take (e.g. "fro" over one axis, 3 over two). JAX's ord=None is the first form, or std::nullopt
/// with axes (a literal 0 is the order 0, not a null string).
Array norm(const Array& x, XJAX_LOC);
Array norm(const Array& x, double ord, std::optional<Axes> axes = std::nullopt, bool keepdims = false, XJAX_LOC);
Array norm(const Array& x, std::string_view ord, std::optional<Axes> axes = std::nullopt, bool keepdims = false, XJAX_LOC);
Array norm(const Array& x, std::nullopt_t, std::optional<Axes> axes, bool keepdims = false, XJAX_LOC);

/// scipy's check_finite, for users who want an error where LAPACK gives NaN (a matrix that is not
/// positive definite, a singular one): x unchanged when every element is finite, else an
/// xj::Error naming `name`, x's type, the count of NaN and infinite elements and the first one's
/// index. Needs a concrete x (a TracerError under jit or grad: check the transform's result).
Array check_finite(const Array& x, std::string_view name = "array", XJAX_LOC);

/// jnp.linalg.matrix_power: a^n by repeated squaring for square matrices (..., m, m); n = 0 gives
/// the identity, n < 0 inv(a)^-n.
Array matrix_power(const Array& a, std::int64_t n, XJAX_LOC);

}  // namespace xjax::linalg

namespace xjax::sparse {

/// cg's options (jax.scipy.sparse.linalg.cg's keywords). Iteration stops when |r| <= max(tol |b|,
/// atol) or after maxiter steps (default 10 n, n the size of b).
struct CgOptions {
  std::optional<Array> x0{};  // the initial guess (zeros by default); not differentiated
  double tol = 1e-5;
  double atol = 0.0;
  std::optional<std::int64_t> maxiter{};
  std::function<Array(const Array&)> M{};  // a preconditioner approximating A^-1 (none by default)
};

/// jax.scipy.sparse.linalg.cg: x with A(x) = b by conjugate gradients, for a symmetric positive
/// definite linear map A (a function, e.g. a stencil or a matrix product) and b of any shape.
/// Iterates under while_loop inside custom_linear_solve (symmetric), so jit, vmap, jvp and grad
/// all work and a derivative solves again with cg instead of differentiating the iterations.
/// Returns x alone (JAX returns (x, None)).
Array cg(const std::function<Array(const Array&)>& A, const Array& b, const CgOptions& options = {}, XJAX_LOC);

}  // namespace xjax::sparse
