// linalg.hpp: linear algebra, `xj::linalg` (lax.linalg / jax.scipy.linalg names and semantics):
// cholesky, triangular_solve and cho_solve so far. Matrices are the last two axes; leading axes
// are batch dimensions. float32 and float64, on LAPACK and BLAS. A matrix that is not positive
// definite gives a factor of NaNs (as JAX), never an exception or a crash.
#pragma once
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
/// c a Cholesky factor (..., n, n); b is read as vectors (..., n) when it has one axis less than
/// c (JAX's rule), else as matrices (..., n, k); the batch axes broadcast (JAX requires them
/// equal), f32 with f64 computes in f64. (JAX passes (c, lower) as a tuple; here they are two
/// arguments.)
Array cho_solve(const Array& c, const Array& b, bool lower = true, XJAX_LOC);

}  // namespace xjax::linalg
