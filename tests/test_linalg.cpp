// test_linalg.cpp: xj::linalg's cholesky, triangular_solve and cho_solve against independent
// computations in double (the factor reconstructs a, the solution satisfies the system, written
// as plain loops), their errors, NaN for matrices that are not positive definite, batches, tril /
// triu / matrix_transpose. Derivatives and batching: the gradcheck rows (tests/gradcheck).
#include <algorithm>
#include <climits>
#include <limits>
#include <cmath>

#include "test_util.hpp"

namespace xj = xjax;
namespace linalg = xjax::linalg;

namespace {

using Matrix = std::vector<double>;  // row-major n x n (or r x c)

std::vector<double> wave(std::size_t n, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(1.3 * static_cast<double>(i) + phase);
  return v;
}

// m m^T + n I for the m x m matrix of `values`: symmetric positive definite.
Matrix spd(std::size_t n, double phase) {
  const Matrix m = wave(n * n, phase);
  Matrix a(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t k = 0; k < n; ++k) a[i * n + j] += m[i * n + k] * m[j * n + k];
      if (i == j) a[i * n + j] += static_cast<double>(n);
    }
  return a;
}

xj::Array f64(const std::vector<double>& v, const xj::Shape& s) { return xj::array<double>(v, s); }

}  // namespace

TEST_CASE("cholesky: a lower factor that reconstructs a, in f64 and f32, batched") {
  for (std::size_t n : {1u, 3u, 17u}) {
    const Matrix a = spd(n, 0.3);
    const auto l = linalg::cholesky(f64(a, {static_cast<std::int64_t>(n), static_cast<std::int64_t>(n)})).to_vector<double>();
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        if (j > i) CHECK(l[i * n + j] == 0.0);
        if (i == j) CHECK(l[i * n + j] > 0.0);
        double llt = 0;  // (L L^T)_ij
        for (std::size_t k = 0; k < n; ++k) llt += l[i * n + k] * l[j * n + k];
        CHECK(llt == doctest::Approx(a[i * n + j]).epsilon(1e-12));
      }
  }
  // A batch of two (one f32): each member is its own factorization.
  Matrix two = spd(4, 0.1), second = spd(4, 2.0);
  two.insert(two.end(), second.begin(), second.end());
  const xj::Array batch = xj::astype(f64(two, {2, 4, 4}), xj::f32);
  const xj::Array l = linalg::cholesky(batch);
  CHECK(l.dtype() == xj::f32);
  const auto lb = l.to_vector<double>();
  const auto l1 = linalg::cholesky(f64(second, {4, 4})).to_vector<double>();
  for (std::size_t i = 0; i < 16; ++i) CHECK(lb[16 + i] == doctest::Approx(l1[i]).epsilon(1e-5));
}

TEST_CASE("cholesky: symmetrize_input averages a with a^T; without it only the lower triangle is read") {
  const Matrix a = spd(3, 0.7);
  Matrix lower_only = a, skewed = a;
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = i + 1; j < 3; ++j) {
      lower_only[i * 3 + j] = 99.0;  // garbage above the diagonal
      skewed[i * 3 + j] += 0.5, skewed[j * 3 + i] -= 0.5;  // (skewed + skewed^T) / 2 = a
    }
  const auto want = linalg::cholesky(f64(a, {3, 3})).to_vector<double>();
  const auto got_lower = linalg::cholesky(f64(lower_only, {3, 3}), false).to_vector<double>();
  const auto got_sym = linalg::cholesky(f64(skewed, {3, 3})).to_vector<double>();
  for (std::size_t i = 0; i < 9; ++i) {
    CHECK(got_lower[i] == doctest::Approx(want[i]).epsilon(1e-14));
    CHECK(got_sym[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
}

TEST_CASE("cholesky: a matrix that is not positive definite gives NaNs (as JAX), its batch neighbours are unaffected") {
  Matrix two = spd(2, 0.4);
  const Matrix indefinite = {1.0, 2.0, 2.0, 1.0};  // eigenvalues 3 and -1
  two.insert(two.end(), indefinite.begin(), indefinite.end());
  const auto l = linalg::cholesky(f64(two, {2, 2, 2})).to_vector<double>();
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::isfinite(l[i]));
  for (std::size_t i = 4; i < 8; ++i) CHECK(std::isnan(l[i]));
  CHECK(std::isnan(linalg::cholesky(f64({std::nan("")}, {1, 1})).to_vector<double>()[0]));
  // An infinity on the diagonal factors without a LAPACK error (sqrt(inf)): NaNs too, decided by
  // the kernel itself, not by LAPACKE's optional NaN check (review of 2026-12-02).
  for (double e : linalg::cholesky(f64({INFINITY, 0.0, 0.0, 1.0}, {2, 2})).to_vector<double>()) CHECK(std::isnan(e));
}

TEST_CASE("triangular_solve: every side, triangle, transposition and unit diagonal satisfies its system") {
  const std::size_t m = 4, k = 3;
  Matrix a = wave(m * m, 0.2);
  for (std::size_t i = 0; i < m; ++i) a[i * m + i] += 3.0;
  for (bool left : {true, false})
    for (bool lower : {true, false})
      for (bool trans : {true, false})
        for (bool unit : {true, false}) {
          CAPTURE(left);
          CAPTURE(lower);
          CAPTURE(trans);
          CAPTURE(unit);
          // op(a) as the solve reads it: one triangle, the diagonal ones when unit, transposed.
          Matrix op(m * m, 0.0);
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < m; ++j) {
              const bool in = lower ? j <= i : j >= i;
              const double v = i == j && unit ? 1.0 : in ? a[i * m + j] : 0.0;
              (trans ? op[j * m + i] : op[i * m + j]) = v;
            }
          const std::size_t rows = left ? m : k, cols = left ? k : m;
          const Matrix b = wave(rows * cols, 1.1);
          const xj::Array x = linalg::triangular_solve(
              f64(a, {4, 4}), f64(b, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)}),
              {.left_side = left, .lower = lower, .transpose_a = trans, .unit_diagonal = unit});
          const auto xv = x.to_vector<double>();
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) {
              double r = 0;  // (op(a) x) or (x op(a)) at (i, j)
              for (std::size_t q = 0; q < m; ++q)
                r += left ? op[i * m + q] * xv[q * cols + j] : xv[i * cols + q] * op[q * m + j];
              CHECK(r == doctest::Approx(b[i * cols + j]).epsilon(1e-12));
            }
        }
}

TEST_CASE("triangular_solve: a b one rank below a is one vector per matrix, as lax.linalg (review of 2026-12-02)") {
  Matrix a = wave(9, 0.4);
  for (std::size_t i = 0; i < 3; ++i) a[i * 3 + i] += 3.0;
  const xj::Array A = f64(a, {3, 3}), b = f64({1.0, -1.0, 2.0}, {3});
  for (bool left : {true, false}) {
    const xj::Array x = linalg::triangular_solve(A, b, {.left_side = left, .lower = true});
    REQUIRE(x.shape() == xj::Shape{3});
    const xj::Array as_matrix = linalg::triangular_solve(A, left ? xj::reshape(b, {3, 1}) : xj::reshape(b, {1, 3}),
                                                         {.left_side = left, .lower = true});
    const auto xv = x.to_vector<double>(), mv = as_matrix.to_vector<double>();
    for (std::size_t i = 0; i < 3; ++i) CHECK(xv[i] == mv[i]);
  }
}

TEST_CASE("cho_solve: f32 with f64 computes in f64; integers compute in f64 (JAX's promote_dtypes_inexact); the vector rule in errors") {
  const Matrix a = spd(3, 0.2);
  const xj::Array L = linalg::cholesky(f64(a, {3, 3}));
  const xj::Array x = linalg::cho_solve(L, xj::astype(f64({1.0, 2.0, 3.0}, {3}), xj::f32));
  CHECK(x.dtype() == xj::f64);
  const auto want = linalg::cho_solve(L, f64({1.0, 2.0, 3.0}, {3})).to_vector<double>(), got = x.to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  // Review finding (twenty-fifth session): integers were a TypeError; jax.scipy.linalg.cho_solve promotes.
  const xj::Array from_ints = linalg::cho_solve(L, xj::array<std::int32_t>({1, 2, 3}, {3}));
  CHECK(from_ints.dtype() == xj::f64);
  const auto got_ints = from_ints.to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) CHECK(got_ints[i] == doctest::Approx(want[i]).epsilon(1e-12));
  // (2, 3, 3) with (3, 2): one axis less but not ending in n, so matrices (3, 2) (JAX's rule,
  // jax/_src/scipy/linalg.py _cho_solve), broadcast to each factor; (2, 3, 3) with (2, 2): neither
  CHECK(linalg::cho_solve(xj::broadcast_to(xj::eye(3, xj::f64), {2, 3, 3}), xj::ones({3, 2}, xj::f64)).shape() == xj::Shape{2, 3, 2});
  CHECK_THROWS_WITH_AS(linalg::cho_solve(xj::zeros({2, 3, 3}, xj::f64), xj::zeros({2, 2}, xj::f64)),
                       doctest::Contains("read as matrices"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::cholesky(xj::ones({2, 2}, xj::bool_)), doctest::Contains("cholesky(bool[2,2])"), xj::TypeError);
}

TEST_CASE("cho_solve: A x = b for a vector, a matrix and broadcast batches, with lower and upper factors") {
  const Matrix a = spd(3, 0.9);
  const xj::Array A = f64(a, {3, 3});
  const xj::Array L = linalg::cholesky(A);
  const xj::Array b = f64({1.0, -2.0, 0.5}, {3});
  for (bool lower : {true, false}) {
    const xj::Array x = linalg::cho_solve(lower ? L : xj::matrix_transpose(L), b, lower);
    REQUIRE(x.shape() == xj::Shape{3});
    const auto xv = x.to_vector<double>();
    for (std::size_t i = 0; i < 3; ++i) {
      double r = 0;
      for (std::size_t j = 0; j < 3; ++j) r += a[i * 3 + j] * xv[j];
      CHECK(r == doctest::Approx(b.to_vector<double>()[i]).epsilon(1e-12));
    }
  }
  // One factor, a batch of two right-hand-side matrices: broadcast.
  const xj::Array bs = f64(wave(12, 0.5), {2, 3, 2});
  const xj::Array xs = linalg::cho_solve(L, bs);
  REQUIRE(xs.shape() == xj::Shape{2, 3, 2});
  const auto xv = xs.to_vector<double>(), bv = bs.to_vector<double>();
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        double r = 0;
        for (std::size_t q = 0; q < 3; ++q) r += a[i * 3 + q] * xv[n * 6 + q * 2 + j];
        CHECK(r == doctest::Approx(bv[n * 6 + i * 2 + j]).epsilon(1e-12));
      }
}

TEST_CASE("linalg errors name the operation and the operands") {
  const xj::Array rect = xj::zeros({2, 3}, xj::f64), sq = xj::ones({3, 3}, xj::f64);
  CHECK_THROWS_WITH_AS(linalg::cholesky(rect), doctest::Contains("square matrices"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::cholesky(xj::zeros({3}, xj::f64)), doctest::Contains("cholesky(f64[3])"), xj::ShapeError);
  CHECK_THROWS_AS(linalg::cholesky(xj::zeros({2, 2}, xj::i32)), xj::TypeError);
  CHECK_THROWS_WITH_AS(linalg::triangular_solve(sq, xj::zeros({2, 3}, xj::f64), {.left_side = true}),
                       doctest::Contains("b's rows must match a's size 3"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::triangular_solve(sq, xj::zeros({1, 3, 3}, xj::f64)),
                       doctest::Contains("same batch dimensions"), xj::ShapeError);
  CHECK_THROWS_AS(linalg::triangular_solve(sq, xj::zeros({3, 3}, xj::f32)), xj::TypeError);
  CHECK_THROWS_WITH_AS(linalg::cho_solve(sq, xj::zeros({4}, xj::f64)), doctest::Contains("cho_solve(f64[3,3], f64[4])"),
                       xj::ShapeError);
  CHECK_THROWS_AS(xj::tril(xj::zeros({3}, xj::f64)), xj::ShapeError);
}

TEST_CASE("tril, triu and matrix_transpose on batches of rectangular matrices") {
  const xj::Array x = xj::astype(xj::iota(xj::i32, {2, 3, 4}, 2) + xj::iota(xj::i32, {2, 3, 4}, 1) * 10, xj::f64);
  const auto v = x.to_vector<double>();
  for (std::int64_t k : {-1, 0, 2}) {
    const auto lo = xj::tril(x, k).to_vector<double>(), up = xj::triu(x, k).to_vector<double>();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 4; ++j) {
          const std::size_t at = b * 12 + i * 4 + j;
          const auto d = static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i);
          CHECK(lo[at] == (d <= k ? v[at] : 0.0));
          CHECK(up[at] == (d >= k ? v[at] : 0.0));
        }
  }
  // Offsets beyond the matrix, up to the int64 limits (review of 2026-12-02: they wrapped).
  for (double e : xj::tril(x, INT64_MIN).to_vector<double>()) CHECK(e == 0.0);
  for (double e : xj::triu(x, INT64_MAX).to_vector<double>()) CHECK(e == 0.0);
  CHECK(xj::tril(x, INT64_MAX).to_vector<double>() == v);
  CHECK(xj::triu(x, INT64_MIN).to_vector<double>() == v);
  // The dtype is kept: a bool mask stays bool (review: it became i32).
  const xj::Array mask = xj::ones({2, 2}, xj::bool_);
  CHECK(xj::tril(mask).dtype() == xj::bool_);
  CHECK(xj::triu(xj::ones({2, 2}, xj::i32)).dtype() == xj::i32);
  const xj::Array t = xj::matrix_transpose(x);
  REQUIRE(t.shape() == xj::Shape{2, 4, 3});
  CHECK(t.to_vector<double>()[1 * 12 + 2 * 3 + 1] == v[1 * 12 + 1 * 4 + 2]);
}

namespace {

/// Entries with no low-rank structure (wave(...) alone is rank 2 as a matrix: sin(1.3 i + c)).
std::vector<double> general(std::size_t n, double phase) {
  std::vector<double> v = wave(n, phase);
  for (std::size_t i = 0; i < n; ++i) v[i] += std::cos(0.37 * static_cast<double>(i * i) + 2 * phase);
  return v;
}

/// The determinant by cofactor expansion along the first row (independent of LU; n <= 5).
double cofactor_det(const Matrix& a, std::size_t n) {
  if (n == 1) return a[0];
  double d = 0;
  for (std::size_t c = 0; c < n; ++c) {
    Matrix minor;
    for (std::size_t i = 1; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (j != c) minor.push_back(a[i * n + j]);
    d += (c % 2 == 0 ? 1.0 : -1.0) * a[c] * cofactor_det(minor, n - 1);
  }
  return d;
}

/// r x c matrix product of row-major a (r x q) and b (q x c).
Matrix product(const Matrix& a, const Matrix& b, std::size_t r, std::size_t q, std::size_t c) {
  Matrix out(r * c, 0.0);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j)
      for (std::size_t k = 0; k < q; ++k) out[i * c + j] += a[i * q + k] * b[k * c + j];
  return out;
}

}  // namespace

TEST_CASE("lu: a[permutation] = L U with L unit lower (entries <= 1 in magnitude) and U upper, square and rectangular, batched") {
  for (auto [m, n] : {std::pair<std::size_t, std::size_t>{1, 1}, {3, 3}, {5, 5}, {4, 2}, {2, 5}}) {
    CAPTURE(m);
    CAPTURE(n);
    const std::size_t k = std::min(m, n);
    const Matrix a = general(2 * m * n, 0.6);  // two matrices
    const auto [lu, pivots, permutation] =
        linalg::lu(f64(a, {2, static_cast<std::int64_t>(m), static_cast<std::int64_t>(n)}));
    REQUIRE(lu.shape() == xj::Shape{2, static_cast<std::int64_t>(m), static_cast<std::int64_t>(n)});
    REQUIRE(pivots.aval() == xj::ShapedArray{{2, static_cast<std::int64_t>(k)}, xj::i32});
    REQUIRE(permutation.aval() == xj::ShapedArray{{2, static_cast<std::int64_t>(m)}, xj::i32});
    const auto f = lu.to_vector<double>();
    const auto piv = pivots.to_vector<std::int32_t>(), perm = permutation.to_vector<std::int32_t>();
    CHECK(xj::linalg::lu_pivots_to_permutation(pivots, static_cast<std::int64_t>(m)).to_vector<std::int32_t>() == perm);
    for (std::size_t b = 0; b < 2; ++b) {
      Matrix l(m * k, 0.0), u(k * n, 0.0);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < k; ++j) l[i * k + j] = i == j ? 1.0 : i > j ? f[b * m * n + i * n + j] : 0.0;
      for (std::size_t i = 0; i < k; ++i)
        for (std::size_t j = i; j < n; ++j) u[i * n + j] = f[b * m * n + i * n + j];
      for (double e : l) CHECK(std::abs(e) <= 1.0);  // partial pivoting: |l_ij| <= 1
      std::vector<bool> seen(m, false);
      for (std::size_t i = 0; i < m; ++i) {
        REQUIRE(perm[b * m + i] >= 0);
        REQUIRE(perm[b * m + i] < static_cast<std::int32_t>(m));
        seen[static_cast<std::size_t>(perm[b * m + i])] = true;
      }
      for (bool s : seen) CHECK(s);
      for (std::size_t i = 0; i < k; ++i) CHECK(piv[b * k + i] >= static_cast<std::int32_t>(i));
      const Matrix lu_product = product(l, u, m, k, n);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j)
          CHECK(lu_product[i * n + j] ==
                doctest::Approx(a[b * m * n + static_cast<std::size_t>(perm[b * m + i]) * n + j]).epsilon(1e-12).scale(1.0));
    }
  }
}

TEST_CASE("lu: a singular matrix is factored (a zero pivot), a NaN gives NaN factors; neither throws") {
  const auto [lu, pivots, permutation] = linalg::lu(f64({1.0, 2.0, 2.0, 4.0}, {2, 2}));
  const auto f = lu.to_vector<double>();
  for (double e : f) CHECK(std::isfinite(e));
  CHECK(f[3] == 0.0);
  const auto [nan_lu, nan_pivots, nan_permutation] = linalg::lu(f64({1.0, std::nan(""), 2.0, 4.0}, {2, 2}));
  bool any_nan = false;
  for (double e : nan_lu.to_vector<double>()) any_nan = any_nan || std::isnan(e);
  CHECK(any_nan);
  for (std::int32_t p : nan_permutation.to_vector<std::int32_t>()) CHECK((p == 0 || p == 1));
  // solve of a singular system: not finite, no exception.
  const auto x = linalg::solve(f64({1.0, 2.0, 2.0, 4.0}, {2, 2}), f64({1.0, 1.0}, {2})).to_vector<double>();
  CHECK((!std::isfinite(x[0]) || !std::isfinite(x[1])));
}

TEST_CASE("solve, lu_solve (trans 0 and 1) and inv satisfy their systems; batches broadcast; integers compute in f64") {
  const std::size_t n = 4;
  Matrix a = general(n * n, 0.25), a2 = general(n * n, 1.7);
  const xj::Array A = f64(a, {4, 4});
  const Matrix bv = {1.0, -2.0, 0.5, 3.0};
  auto residual_ok = [&](const Matrix& mat, const std::vector<double>& x, const Matrix& rhs, std::size_t cols, bool transposed) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < cols; ++j) {
        double r = 0;
        for (std::size_t q = 0; q < n; ++q) r += (transposed ? mat[q * n + i] : mat[i * n + q]) * x[q * cols + j];
        CHECK(r == doctest::Approx(rhs[i * cols + j]).epsilon(1e-10).scale(1.0));
      }
  };
  residual_ok(a, linalg::solve(A, f64(bv, {4})).to_vector<double>(), bv, 1, false);
  const Matrix bm = general(n * 2, 0.9);
  residual_ok(a, linalg::solve(A, f64(bm, {4, 2})).to_vector<double>(), bm, 2, false);
  // A batch of two matrices against one right-hand side matrix: broadcast.
  Matrix both = a;
  both.insert(both.end(), a2.begin(), a2.end());
  const auto xb = linalg::solve(f64(both, {2, 4, 4}), f64(bm, {4, 2})).to_vector<double>();
  residual_ok(a, std::vector<double>(xb.begin(), xb.begin() + 8), bm, 2, false);
  residual_ok(a2, std::vector<double>(xb.begin() + 8, xb.end()), bm, 2, false);
  for (int trans : {0, 1, 2}) {
    const auto [lu, pivots] = linalg::lu_factor(A);
    residual_ok(a, linalg::lu_solve(lu, pivots, f64(bm, {4, 2}), trans).to_vector<double>(), bm, 2, trans != 0);
    residual_ok(a, linalg::lu_solve(lu, pivots, f64(bv, {4}), trans).to_vector<double>(), bv, 1, trans != 0);
  }
  // inv: A inv(A) = I.
  const auto ai = linalg::inv(A).to_vector<double>();
  const Matrix eye = product(a, Matrix(ai.begin(), ai.end()), n, n, n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) CHECK(eye[i * n + j] == doctest::Approx(i == j ? 1.0 : 0.0).epsilon(1e-12).scale(1.0));
  // Integers: f64 (jnp.linalg's inexact promotion with x64); f32 stays f32.
  const xj::Array ai32 = xj::array<std::int32_t>({2, 1, 1, 3}, {2, 2});
  CHECK(linalg::solve(ai32, xj::array<std::int32_t>({1, 2}, {2})).dtype() == xj::f64);
  CHECK(linalg::inv(xj::astype(A, xj::f32)).dtype() == xj::f32);
  const auto xi = linalg::solve(ai32, xj::array<std::int32_t>({1, 2}, {2})).to_vector<double>();
  CHECK(xi[0] == doctest::Approx(0.2));  // 2x + y = 1, x + 3y = 2
  CHECK(xi[1] == doctest::Approx(0.6));
}

TEST_CASE("det and slogdet against cofactor expansion; a singular matrix has det 0 and slogdet {0, -inf}") {
  for (std::size_t n : {1u, 2u, 3u, 5u}) {
    CAPTURE(n);
    Matrix two = general(2 * n * n, 0.8);
    const auto nn = static_cast<std::int64_t>(n);
    const auto d = linalg::det(f64(two, {2, nn, nn})).to_vector<double>();
    const auto [sign, logabsdet] = linalg::slogdet(f64(two, {2, nn, nn}));
    const auto s = sign.to_vector<double>(), l = logabsdet.to_vector<double>();
    for (std::size_t b = 0; b < 2; ++b) {
      const double want = cofactor_det(Matrix(two.begin() + static_cast<std::ptrdiff_t>(b * n * n),
                                              two.begin() + static_cast<std::ptrdiff_t>((b + 1) * n * n)), n);
      CHECK(d[b] == doctest::Approx(want).epsilon(1e-12).scale(1.0));
      CHECK(s[b] == (want > 0 ? 1.0 : -1.0));
      CHECK(l[b] == doctest::Approx(std::log(std::abs(want))).epsilon(1e-12));
    }
  }
  const xj::Array singular = f64({1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0}, {3, 3});
  CHECK(linalg::det(singular).item<double>() == 0.0);
  const auto [sign, logabsdet] = linalg::slogdet(singular);
  CHECK(sign.item<double>() == 0.0);
  CHECK(logabsdet.item<double>() == -INFINITY);
  CHECK(linalg::det(xj::array<std::int32_t>({2, 1, 1, 3}, {2, 2})).item<double>() == doctest::Approx(5.0));
}

TEST_CASE("lu, solve, det: errors name the operation and the operands") {
  CHECK_THROWS_WITH_AS(linalg::lu(xj::zeros({3}, xj::f64)), doctest::Contains("lu(f64[3])"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::lu(xj::zeros({2, 2}, xj::i32)), doctest::Contains("lu(i32[2,2])"), xj::TypeError);
  CHECK_THROWS_WITH_AS(linalg::solve(xj::zeros({2, 3}, xj::f64), xj::zeros({2}, xj::f64)), doctest::Contains("square"),
                       xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::solve(xj::zeros({3, 3}, xj::f64), xj::zeros({2}, xj::f64)),
                       doctest::Contains("solve(f64[3,3], f64[2])"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::solve(xj::zeros({2, 3, 3}, xj::f64), xj::zeros({4, 3, 1}, xj::f64)),
                       doctest::Contains("do not broadcast"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::det(xj::zeros({2, 3}, xj::f64)), doctest::Contains("det(f64[2,3])"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::lu_solve(xj::zeros({3, 3}, xj::f64), xj::zeros({3}, xj::i64), xj::zeros({3}, xj::f64)),
                       doctest::Contains("pivots must be i32"), xj::TypeError);
  CHECK_THROWS_WITH_AS(linalg::lu_solve(xj::zeros({3, 3}, xj::f64), xj::zeros({2}, xj::i32), xj::zeros({3}, xj::f64)),
                       doctest::Contains("pivots must be (..., n)"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::lu_pivots_to_permutation(xj::zeros({3}, xj::i32), 2), doctest::Contains("permutation_size 2"),
                       xj::ShapeError);
}

TEST_CASE("diagonal, trace and outer against loops: offsets, axes, batches") {
  const xj::Array x = xj::astype(xj::iota(xj::i32, {2, 3, 4}, 0) * 100 + xj::iota(xj::i32, {2, 3, 4}, 1) * 10 +
                                     xj::iota(xj::i32, {2, 3, 4}, 2), xj::f64);
  const auto v = x.to_vector<double>();
  for (std::int64_t offset : {-3, -1, 0, 1, 3, 5}) {
    CAPTURE(offset);
    // Axes (1, 2): one diagonal per leading index.
    const xj::Array d = xj::diagonal(x, offset, 1, 2);
    std::vector<double> want;
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 3; ++i)
        if (i + offset >= 0 && i + offset < 4) want.push_back(v[static_cast<std::size_t>(b * 12 + i * 4 + i + offset)]);
    CHECK(d.shape()[0] == 2);
    CHECK(d.to_vector<double>() == want);
    const auto tr = xj::trace(x, offset, 1, 2).to_vector<double>();
    for (std::size_t b = 0; b < 2; ++b) {
      double s = 0;
      for (std::size_t i = 0; i < want.size() / 2; ++i) s += want[b * want.size() / 2 + i];
      CHECK(tr[b] == s);
    }
  }
  // JAX's default axes (0, 1), and reversed axes (2, 0): out[j, i] over x[i, j, i]-like pairs.
  const xj::Array d01 = xj::diagonal(x);
  REQUIRE(d01.shape() == xj::Shape{4, 2});
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t i = 0; i < 2; ++i) CHECK(d01.to_vector<double>()[k * 2 + i] == v[i * 12 + i * 4 + k]);
  const xj::Array d20 = xj::diagonal(x, 0, 2, 0);  // x[i, j, k] with k == i, k the first matrix axis
  REQUIRE(d20.shape() == xj::Shape{3, 2});
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t i = 0; i < 2; ++i) CHECK(d20.to_vector<double>()[j * 2 + i] == v[i * 12 + j * 4 + i]);
  CHECK_THROWS_AS(xj::diagonal(x, 0, 1, 1), xj::ShapeError);
  const auto o = xj::outer(f64({1.0, 2.0}, {2}), f64({3.0, 4.0, 5.0, 6.0}, {2, 2})).to_vector<double>();
  CHECK(o == std::vector<double>{3.0, 4.0, 5.0, 6.0, 6.0, 8.0, 10.0, 12.0});
}

namespace {

/// max |(x^T x - I)_ij| for the columns of x (r x c, row-major): how far from orthonormal.
double orthonormality_error(const std::vector<double>& x, std::size_t r, std::size_t c) {
  double worst = 0;
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t j = 0; j < c; ++j) {
      double d = 0;
      for (std::size_t q = 0; q < r; ++q) d += x[q * c + i] * x[q * c + j];
      worst = std::max(worst, std::abs(d - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

std::vector<double> transposed(const std::vector<double>& x, std::size_t r, std::size_t c) {
  std::vector<double> t(r * c);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) t[j * r + i] = x[i * c + j];
  return t;
}

}  // namespace

TEST_CASE("qr: q orthonormal, r upper triangular, q r = a; reduced and complete, tall, wide and batched") {
  for (auto [m, n] : {std::pair<std::size_t, std::size_t>{4, 3}, {3, 5}, {3, 3}, {1, 1}})
    for (const char* mode : {"reduced", "complete"}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(mode);
      const std::size_t c = std::string(mode) == "complete" ? m : std::min(m, n);
      const Matrix a = general(2 * m * n, 0.4);
      const auto [q, r] = linalg::qr(f64(a, {2, static_cast<std::int64_t>(m), static_cast<std::int64_t>(n)}), mode);
      REQUIRE(q.shape() == xj::Shape{2, static_cast<std::int64_t>(m), static_cast<std::int64_t>(c)});
      REQUIRE(r.shape() == xj::Shape{2, static_cast<std::int64_t>(c), static_cast<std::int64_t>(n)});
      const auto qv = q.to_vector<double>(), rv = r.to_vector<double>();
      for (std::size_t b = 0; b < 2; ++b) {
        const Matrix qb(qv.begin() + static_cast<std::ptrdiff_t>(b * m * c), qv.begin() + static_cast<std::ptrdiff_t>((b + 1) * m * c));
        const Matrix rb(rv.begin() + static_cast<std::ptrdiff_t>(b * c * n), rv.begin() + static_cast<std::ptrdiff_t>((b + 1) * c * n));
        CHECK(orthonormality_error(qb, m, c) < 1e-13);
        for (std::size_t i = 0; i < c; ++i)
          for (std::size_t j = 0; j < std::min(i, n); ++j) CHECK(rb[i * n + j] == 0.0);
        const Matrix qr_product = product(qb, rb, m, c, n);
        for (std::size_t i = 0; i < m * n; ++i) CHECK(qr_product[i] == doctest::Approx(a[b * m * n + i]).epsilon(1e-12).scale(1.0));
      }
    }
  CHECK_THROWS_WITH_AS(linalg::qr(xj::zeros({2, 2}, xj::f64), "r"), doctest::Contains("mode must be"), xj::Error);
  CHECK_THROWS_WITH_AS(linalg::qr(xj::zeros({2}, xj::f64)), doctest::Contains("qr(f64[2]"), xj::ShapeError);
}

TEST_CASE("eigh: a v = v diag(w), w ascending, v orthonormal; the triangle read; batched; f32") {
  const std::size_t n = 5;
  const Matrix a = spd(n, 0.3);  // symmetric
  Matrix shifted = a;            // indefinite: negative eigenvalues too
  for (std::size_t i = 0; i < n; ++i) shifted[i * n + i] -= 8.0;
  Matrix both = a;
  both.insert(both.end(), shifted.begin(), shifted.end());
  const auto [w, v] = linalg::eigh(f64(both, {2, 5, 5}));
  REQUIRE(w.shape() == xj::Shape{2, 5});
  const auto wv = w.to_vector<double>(), vv = v.to_vector<double>();
  for (std::size_t b = 0; b < 2; ++b) {
    const Matrix& m = b == 0 ? a : shifted;
    const Matrix vb(vv.begin() + static_cast<std::ptrdiff_t>(b * n * n), vv.begin() + static_cast<std::ptrdiff_t>((b + 1) * n * n));
    CHECK(orthonormality_error(vb, n, n) < 1e-13);
    for (std::size_t j = 0; j + 1 < n; ++j) CHECK(wv[b * n + j] <= wv[b * n + j + 1]);
    const Matrix av = product(m, vb, n, n, n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) CHECK(av[i * n + j] == doctest::Approx(vb[i * n + j] * wv[b * n + j]).epsilon(1e-11).scale(1.0));
  }
  CHECK(wv[5] < 0.0);
  // Without symmetrize_input only the chosen triangle is read: garbage in the other changes nothing.
  Matrix lower_only = a, upper_only = a;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      if (j > i) lower_only[i * n + j] = 50.0;   // garbage above the diagonal
      if (j < i) upper_only[i * n + j] = -50.0;  // garbage below it
    }
  const auto w_lower = linalg::eigh(f64(lower_only, {5, 5}), true, false).first.to_vector<double>();
  const auto w_upper = linalg::eigh(f64(upper_only, {5, 5}), false, false).first.to_vector<double>();
  for (std::size_t j = 0; j < n; ++j) {
    CHECK(w_lower[j] == doctest::Approx(wv[j]).epsilon(1e-12));
    CHECK(w_upper[j] == doctest::Approx(wv[j]).epsilon(1e-12));
  }
  const auto w32 = linalg::eigh(xj::astype(f64(a, {5, 5}), xj::f32)).first;
  CHECK(w32.dtype() == xj::f32);
  for (std::size_t j = 0; j < n; ++j) CHECK(w32.to_vector<double>()[j] == doctest::Approx(wv[j]).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(linalg::eigh(xj::zeros({2, 3}, xj::f64)), doctest::Contains("eigh(f64[2,3])"), xj::ShapeError);
}

TEST_CASE("svd: u diag(s) vh = a, s descending and non-negative, u and v orthonormal; sum s^2 = |a|_F^2; svdvals") {
  for (auto [m, n] : {std::pair<std::size_t, std::size_t>{4, 3}, {3, 5}, {3, 3}})
    for (bool full : {false, true}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(full);
      const std::size_t k = std::min(m, n), uc = full ? m : k, vr = full ? n : k;
      const Matrix a = general(m * n, 1.1);
      const xj::Array A = f64(a, {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n)});
      const auto [u, s, vh] = linalg::svd(A, full);
      REQUIRE(u.shape() == xj::Shape{static_cast<std::int64_t>(m), static_cast<std::int64_t>(uc)});
      REQUIRE(s.shape() == xj::Shape{static_cast<std::int64_t>(k)});
      REQUIRE(vh.shape() == xj::Shape{static_cast<std::int64_t>(vr), static_cast<std::int64_t>(n)});
      const auto uv = u.to_vector<double>(), sv = s.to_vector<double>(), vv = vh.to_vector<double>();
      CHECK(orthonormality_error(uv, m, uc) < 1e-13);
      CHECK(orthonormality_error(transposed(vv, vr, n), n, vr) < 1e-13);
      double frobenius = 0, squares = 0;
      for (double e : a) frobenius += e * e;
      for (std::size_t j = 0; j < k; ++j) {
        CHECK(sv[j] >= 0.0);
        if (j + 1 < k) CHECK(sv[j] >= sv[j + 1]);
        squares += sv[j] * sv[j];
      }
      CHECK(squares == doctest::Approx(frobenius).epsilon(1e-12));
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          double e = 0;  // (u diag(s) vh)_ij over the first k singular triplets
          for (std::size_t q = 0; q < k; ++q) e += uv[i * uc + q] * sv[q] * vv[q * n + j];
          CHECK(e == doctest::Approx(a[i * n + j]).epsilon(1e-12).scale(1.0));
        }
      const auto vals = linalg::svdvals(A).to_vector<double>();
      for (std::size_t j = 0; j < k; ++j) CHECK(vals[j] == doctest::Approx(sv[j]).epsilon(1e-12));
      if (m == n) {  // prod(s) = |det a|, by cofactor expansion
        double p = 1;
        for (double e : sv) p *= e;
        CHECK(p == doctest::Approx(std::abs(cofactor_det(a, n))).epsilon(1e-12));
      }
    }
  CHECK_THROWS_WITH_AS(linalg::svd(xj::zeros({3}, xj::f64)), doctest::Contains("svd(f64[3])"), xj::ShapeError);
}

TEST_CASE("qr, eigh, svd, svdvals, lu_factor, lu_solve of integers compute in f64, as jnp.linalg / jax.scipy.linalg (review finding: a TypeError)") {
  // Each against the same call on the matrix converted to f64 by hand; the lax-level cholesky,
  // lu and triangular_solve still refuse integers (tests above).
  const xj::Array ai = xj::array<std::int32_t>({4, 1, 2, 1, 3, 0, 2, 0, 5}, {3, 3});
  const xj::Array af = xj::astype(ai, xj::f64);
  const auto same = [](const xj::Array& got, const xj::Array& want) {
    REQUIRE(got.dtype() == xj::f64);
    REQUIRE(got.shape() == want.shape());
    const auto g = got.to_vector<double>(), w = want.to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(w[i]).epsilon(1e-13).scale(1.0));
  };
  same(linalg::qr(ai).second, linalg::qr(af).second);
  same(linalg::eigh(ai).first, linalg::eigh(af).first);
  same(std::get<1>(linalg::svd(ai)), std::get<1>(linalg::svd(af)));
  same(linalg::svdvals(xj::astype(ai, xj::bool_)), linalg::svdvals(xj::astype(xj::astype(ai, xj::bool_), xj::f64)));
  const auto [lu_i, piv_i] = linalg::lu_factor(ai);
  const auto [lu_f, piv_f] = linalg::lu_factor(af);
  same(lu_i, lu_f);
  const xj::Array bi = xj::array<std::int32_t>({1, -2, 3}, {3});
  same(linalg::lu_solve(lu_f, piv_f, bi), linalg::lu_solve(lu_f, piv_f, xj::astype(bi, xj::f64)));
  // The solution itself against a x = b in double.
  const auto x = linalg::lu_solve(lu_i, piv_i, bi).to_vector<double>();
  const std::vector<double> a{4, 1, 2, 1, 3, 0, 2, 0, 5}, b{1, -2, 3};
  for (std::size_t r = 0; r < 3; ++r) CHECK(a[3 * r] * x[0] + a[3 * r + 1] * x[1] + a[3 * r + 2] * x[2] == doctest::Approx(b[r]).epsilon(1e-12));
}

// jnp.linalg.norm takes amax(..., initial=0) for the orders inf (vectors) and 1, inf, 2
// (matrices) since JAX's commit 897e1a1 (a proper norm of an empty array is 0), and amin without
// an initial value for -inf, -1, -2, which raises. xjax raised for all (NumPy's older rule) until
// a helper's hunt of the thirty-seventh session.
TEST_CASE("norm: an order that takes a minimum over an axis of size 0 is a ShapeError; a maximum over none is 0, as jnp") {
  for (double ord : {-2.0, -1.0, -HUGE_VAL})
    CHECK_THROWS_WITH_AS(linalg::norm(xj::zeros({0, 0}, xj::f64), ord), doctest::Contains("size 0"), xj::ShapeError);
  CHECK_THROWS_AS(linalg::norm(xj::zeros({0}, xj::f64), -HUGE_VAL, xj::Axes{0}), xj::ShapeError);
  for (double ord : {2.0, 1.0, HUGE_VAL}) {
    CAPTURE(ord);
    for (const xj::Shape& shape : {xj::Shape{0, 0}, xj::Shape{0, 3}, xj::Shape{3, 0}}) {
      const xj::Array r = linalg::norm(xj::zeros(shape, xj::f64), ord);
      CHECK(r.shape() == xj::Shape{});
      CHECK(r.item<double>() == 0.0);
      CHECK(linalg::norm(xj::zeros(shape, xj::f64), ord, xj::Axes{0, 1}, true).shape() == xj::Shape{1, 1});
    }
  }
  CHECK(linalg::norm(xj::zeros({0}, xj::f64), HUGE_VAL).item<double>() == 0.0);
  CHECK(linalg::norm(xj::zeros({0, 2}, xj::f64), HUGE_VAL, xj::Axes{0}).to_vector<double>() == std::vector<double>{0.0, 0.0});
  CHECK(linalg::norm(xj::zeros({2, 0, 3}, xj::f64), 2.0, xj::Axes{1, 2}).to_vector<double>() == std::vector<double>{0.0, 0.0});
  // and through grad: the derivative of a constant 0
  CHECK(xj::grad([](const xj::Array& x) { return linalg::norm(x, HUGE_VAL); })(xj::zeros({0}, xj::f64)).shape() == xj::Shape{0});
  // What has elements to reduce stays: sums of empty columns are 0, and so is their maximum.
  CHECK(linalg::norm(xj::zeros({0, 3}, xj::f64), 1.0).item<double>() == 0.0);
  CHECK(linalg::norm(xj::zeros({0, 0}, xj::f64), "fro").item<double>() == 0.0);
  CHECK(linalg::norm(xj::zeros({0, 0}, xj::f64), "nuc").item<double>() == 0.0);
}

TEST_CASE("matrix_power: repeated products in double for n = -2..5, batched; the identity for 0") {
  const Matrix a = general(9, 0.2);
  Matrix both = a;
  const Matrix second = general(9, 2.2);
  both.insert(both.end(), second.begin(), second.end());
  const xj::Array A = f64(both, {2, 3, 3});
  const auto inverse0 = linalg::inv(f64(a, {3, 3})).to_vector<double>();
  for (std::int64_t p : {-2, -1, 0, 1, 2, 5}) {
    CAPTURE(p);
    const auto got = linalg::matrix_power(A, p).to_vector<double>();
    const Matrix base = p < 0 ? Matrix(inverse0.begin(), inverse0.end()) : a;
    Matrix want = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    for (std::int64_t i = 0; i < std::abs(p); ++i) want = product(want, base, 3, 3, 3);
    for (std::size_t i = 0; i < 9; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-11).scale(1.0));
  }
  CHECK_THROWS_AS(linalg::matrix_power(xj::zeros({2, 3}, xj::f64), 2), xj::ShapeError);
}

TEST_CASE("norm: vector and matrix norms against loops (and svd's values for 2, -2, nuc); keepdims; errors") {
  const Matrix a = general(12, 0.5);  // 3 x 4
  const xj::Array A = f64(a, {3, 4});
  auto close = [](double got, double want) { CHECK(got == doctest::Approx(want).epsilon(1e-12)); };
  double fro = 0, l1 = 0, linf = 0, lninf = INFINITY, l3 = 0, nonzero = 0;
  for (double e : a) fro += e * e, l1 += std::abs(e), linf = std::max(linf, std::abs(e)), lninf = std::min(lninf, std::abs(e)),
                       l3 += std::pow(std::abs(e), 3), nonzero += e != 0;
  close(linalg::norm(A).item<double>(), std::sqrt(fro));
  const xj::Array v = xj::reshape(A, {12});
  close(linalg::norm(v, 2).item<double>(), std::sqrt(fro));
  close(linalg::norm(v, 1).item<double>(), l1);
  close(linalg::norm(v, INFINITY).item<double>(), linf);
  close(linalg::norm(v, -INFINITY).item<double>(), lninf);
  close(linalg::norm(v, 3).item<double>(), std::cbrt(l3));
  close(linalg::norm(v, 0).item<double>(), nonzero);
  // Matrix norms: column sums (1), row sums (inf), singular values (2, -2, nuc).
  std::vector<double> col(4, 0.0), row(3, 0.0);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) col[j] += std::abs(a[i * 4 + j]), row[i] += std::abs(a[i * 4 + j]);
  close(linalg::norm(A, 1).item<double>(), *std::max_element(col.begin(), col.end()));
  close(linalg::norm(A, -1).item<double>(), *std::min_element(col.begin(), col.end()));
  close(linalg::norm(A, INFINITY).item<double>(), *std::max_element(row.begin(), row.end()));
  close(linalg::norm(A, -INFINITY).item<double>(), *std::min_element(row.begin(), row.end()));
  close(linalg::norm(A, "fro").item<double>(), std::sqrt(fro));
  const auto s = linalg::svdvals(A).to_vector<double>();
  close(linalg::norm(A, 2).item<double>(), s.front());
  close(linalg::norm(A, -2).item<double>(), s.back());
  close(linalg::norm(A, "nuc").item<double>(), s[0] + s[1] + s[2]);
  // Axes: per-row vector norms; the transposed matrix's 1-norm is this one's inf-norm.
  const auto rows = linalg::norm(A, 1, xj::Axes{1}).to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) close(rows[i], row[i]);
  close(linalg::norm(A, 1, xj::Axes{1, 0}).item<double>(), *std::max_element(row.begin(), row.end()));
  const xj::Array kept = linalg::norm(xj::reshape(A, {1, 3, 4}), 2, xj::Axes{1, 2}, true);
  CHECK(kept.shape() == xj::Shape{1, 1, 1});
  close(kept.item<double>(), s.front());
  CHECK(linalg::norm(xj::array<std::int32_t>({3, 4}, {2})).item<double>() == 5.0);
  CHECK_THROWS_WITH_AS(linalg::norm(v, "fro"), doctest::Contains("matrix norm"), xj::ShapeError);
  CHECK_THROWS_WITH_AS(linalg::norm(A, 3), doctest::Contains("a matrix norm (two axes) takes"), xj::ShapeError);
  CHECK_THROWS_AS(linalg::norm(A, "max"), xj::Error);
  CHECK_THROWS_AS(linalg::norm(xj::zeros({2, 2, 2}, xj::f64), 2), xj::ShapeError);
}

TEST_CASE("check_finite: x back when finite; an Error naming the array, the counts and the first index; a TracerError under a transform") {
  const xj::Array a = f64({4, 2, 2, 3}, {2, 2});
  CHECK(linalg::check_finite(linalg::cholesky(a), "L").to_vector<double>() == linalg::cholesky(a).to_vector<double>());
  const xj::Array not_pd = f64({1, 2, 2, 1}, {2, 2});  // eigenvalues 3 and -1
  const xj::Array l = linalg::cholesky(not_pd);
  const std::string msg = test_util::message_of<xj::Error>([&] { (void)linalg::check_finite(l, "the factor"); });
  CHECK(test_util::contains(msg, "the factor"));
  CHECK(test_util::contains(msg, "f64[2,2]"));
  CHECK(test_util::contains(msg, "4 NaN"));
  CHECK(test_util::contains(msg, "[0, 0]"));
  const xj::Array inf = f64({1, 0, 2, 0, 0, std::numeric_limits<double>::infinity()}, {2, 3});
  const std::string m2 = test_util::message_of<xj::Error>([&] { (void)linalg::check_finite(inf); });
  CHECK(test_util::contains(m2, "0 NaN and 1 infinite"));
  CHECK(test_util::contains(m2, "[1, 2]"));
  CHECK(linalg::check_finite(xj::array<int>({1, 2}, {2})).to_vector<double>() == std::vector<double>{1, 2});
  const std::string m3 = test_util::message_of<xj::TracerError>([&] {
    (void)xj::grad([](const xj::Array& x) { return xj::sum(linalg::check_finite(x)); })(a);
  });
  CHECK(test_util::contains(m3, "concrete"));
}

TEST_CASE("linalg regressions from the thirtieth session's sweep: solve 'pos' / cho_solve / lu_solve read b as JAX's, svd of an infinite entry, det's +0, svd's jvp with square full matrices") {
  using xj::linalg::cho_solve;
  const auto m = [](std::vector<double> v, xj::Shape s) { return xj::array<double>(v, s); };
  // two SPD matrices; by hand: [[4,1],[1,3]]^-1 = [[3,-1],[-1,4]] / 11, [[5,2],[2,6]]^-1 = [[6,-2],[-2,5]] / 26
  const xj::Array a = m({4, 1, 1, 3, 5, 2, 2, 6}, {2, 2, 2});
  // jax.scipy.linalg.solve(assume_a="pos") with b one axis shorter than a: a vector per matrix
  const xj::Array x = xj::linalg::solve(a, m({1, 2, 3, 4}, {2, 2}), "pos");
  REQUIRE(x.shape() == xj::Shape{2, 2});
  const std::vector<double> want{1.0 / 11, 7.0 / 11, 10.0 / 26, 14.0 / 26};
  for (std::size_t i = 0; i < 4; ++i) CHECK(x.to_vector<double>()[i] == doctest::Approx(want[i]).epsilon(1e-13));
  // "sym" and "her" solve as "gen" (JAX's)
  CHECK(xj::linalg::solve(a, m({1, 2, 3, 4}, {2, 2, 1}), "sym").shape() == xj::Shape{2, 2, 1});
  CHECK_NOTHROW((void)xj::linalg::solve(a, m({1, 2, 3, 4}, {2, 2, 1}), "her"));
  // cho_solve / lu_solve: a 1-D b is one vector for every matrix
  const xj::Array shared = cho_solve(xj::linalg::cholesky(a), m({1, 2}, {2}));
  REQUIRE(shared.shape() == xj::Shape{2, 2});
  const std::vector<double> want_shared{1.0 / 11, 7.0 / 11, 2.0 / 26, 8.0 / 26};
  for (std::size_t i = 0; i < 4; ++i) CHECK(shared.to_vector<double>()[i] == doctest::Approx(want_shared[i]).epsilon(1e-13));
  auto [lu, pivots] = xj::linalg::lu_factor(a);
  const xj::Array by_lu = xj::linalg::lu_solve(lu, pivots, m({1, 2}, {2}));
  for (std::size_t i = 0; i < 4; ++i) CHECK(by_lu.to_vector<double>()[i] == doctest::Approx(want_shared[i]).epsilon(1e-13));
  // an infinite entry: NaNs throughout, as svdvals (gesdd gave finite-looking U and V)
  std::vector<double> v(9, 1.0);
  v[1] = INFINITY;
  const auto [u, s, vt] = xj::linalg::svd(m(v, {3, 3}));
  for (const xj::Array& part : {u, s, vt})
    for (double e : part.to_vector<double>()) CHECK(std::isnan(e));
  // a singular matrix with one row exchange: det +0 and sign +0 (-1 * 0 was -0)
  const xj::Array singular = m({1, 2, 2, 4}, {2, 2});
  CHECK(xj::linalg::det(singular).item<double>() == 0.0);
  CHECK_FALSE(std::signbit(xj::linalg::det(singular).item<double>()));
  CHECK_FALSE(std::signbit(xj::linalg::slogdet(singular).first.item<double>()));
  // svd's derivative with full matrices of a square matrix (the reduced ones): against finite differences
  const auto singular_values = [](const xj::Array& b) { return xj::sum(std::get<1>(xj::linalg::svd(b, true))); };
  CHECK_NOTHROW(xj::check_grads(singular_values, std::tuple{m({3, 1, 0, 1, 2, 1, 0, 1, 1}, {3, 3})}, {.order = 1}));
  CHECK_THROWS_AS((void)xj::grad(singular_values)(m({3, 1, 0, 1, 2, 1}, {2, 3})), xj::TransformError);
}

TEST_CASE("solve(a, b, \"pos\") factors a's upper triangle (jax.scipy's cho_factor(a, lower=False)) and checks b's rank") {
  // [[2, 1], [1, 2]] stored in its upper triangle: x = [1, 1] / 3 (it was solved as (a + a^T) / 2: 0.4)
  const xj::Array upper = xj::array<double>({2, 1, 0, 2}, {2, 2});
  const auto x = xj::linalg::solve(upper, xj::array<double>({1, 1}, {2}), "pos").to_vector<double>();
  CHECK(x[0] == doctest::Approx(1.0 / 3).epsilon(1e-14));
  CHECK(x[1] == doctest::Approx(1.0 / 3).epsilon(1e-14));
  CHECK_THROWS_AS((void)xj::linalg::solve(xj::broadcast_to(xj::eye(3, xj::f64), {2, 3, 3}), xj::ones({3}, xj::f64), "pos"), xj::ShapeError);
}

// jnp.linalg.eigh(a, UPLO, symmetrize_input): "U" reads the upper triangle (a string had converted
// to lower = true). Eigenvalues of [[p, q], [q, r]] in closed form: (p + r -+ sqrt((p - r)^2 + 4 q^2)) / 2.
TEST_CASE("eigh: UPLO spelled as JAX's string") {
  const xj::Array n = f64({2, 100, 1, 3}, {2, 2});
  const auto closed = [](double p, double q, double r) {
    const double d = std::sqrt((p - r) * (p - r) + 4 * q * q);
    return std::vector<double>{(p + r - d) / 2, (p + r + d) / 2};
  };
  const auto upper = linalg::eigh(n, "U", false).first.to_vector<double>(), want_upper = closed(2, 100, 3);
  const auto lower = linalg::eigh(n, "L", false).first.to_vector<double>(), want_lower = closed(2, 1, 3);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(upper[i] == doctest::Approx(want_upper[i]).epsilon(1e-13));
    CHECK(lower[i] == doctest::Approx(want_lower[i]).epsilon(1e-13));
  }
  CHECK_THROWS_WITH_AS((void)linalg::eigh(n, "X"), doctest::Contains("UPLO must be"), xj::Error);
}

// det's running product of U's diagonal can overflow or underflow where the determinant does
// not: diag(1e200, 1e200, 1e-200, 1e-200) gave inf, reversed 0 (JAX's sign * exp(log|det|) gives
// 1; a helper's hunt of the thirty-seventh session). Values against the product in long double
// of a diagonal (its determinant exactly), gradients against d det / dA = det A^-T (a diagonal's:
// det / a_ii on the diagonal).
TEST_CASE("det: no overflow or underflow where the determinant is finite; gradients there") {
  const std::vector<std::vector<double>> diagonals{
      {1e200, 1e200, 1e-200, 1e-200}, {1e-200, 1e-200, 1e200, 1e200}, {-1e250, 1e100, -1e-150, 1e-190}, {2.0, -0.5, 4.0, 1.5}};
  for (const auto& dg : diagonals) {
    CAPTURE(dg[0]);
    const std::size_t n = dg.size();
    std::vector<double> m(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) m[i * n + i] = dg[i];
    // a permuted copy too: rows 0 and 1 exchanged negate it
    std::vector<double> swapped = m;
    for (std::size_t j = 0; j < n; ++j) std::swap(swapped[j], swapped[n + j]);
    long double exact = 1.0L;
    for (double v : dg) exact *= static_cast<long double>(v);
    const xj::Array a = f64(m, {static_cast<std::int64_t>(n), static_cast<std::int64_t>(n)});
    CHECK(linalg::det(a).item<double>() == doctest::Approx(static_cast<double>(exact)).epsilon(1e-12));
    CHECK(linalg::det(f64(swapped, {4, 4})).item<double>() == doctest::Approx(-static_cast<double>(exact)).epsilon(1e-12));
    const auto g = xj::grad([](const xj::Array& x) { return linalg::det(x); })(a).to_vector<double>();
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double want = i == j ? static_cast<double>(exact / static_cast<long double>(dg[i])) : 0.0;
        CHECK(g[i * n + j] == doctest::Approx(want).epsilon(1e-12));
      }
  }
  // f32: diag(1e20, 1e20, 1e-20, 1e-20) is 1
  CHECK(linalg::det(xj::astype(f64({1e20, 0, 0, 0, 0, 1e20, 0, 0, 0, 0, 1e-20, 0, 0, 0, 0, 1e-20}, {4, 4}), xj::f32)).item<float>() ==
        doctest::Approx(1.0).epsilon(1e-5));
  // a singular matrix's determinant stays +0 (its gradient, JAX's cofactor matrix, is not
  // finite here: docs/status.md)
  CHECK(linalg::det(f64({1, 2, 3, 4, 5, 6, 1, 2, 3}, {3, 3})).item<double>() == 0.0);
}
