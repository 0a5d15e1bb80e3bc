// test_linalg.cpp: xj::linalg's cholesky, triangular_solve and cho_solve against independent
// computations in double (the factor reconstructs a, the solution satisfies the system, written
// as plain loops), their errors, NaN for matrices that are not positive definite, batches, tril /
// triu / matrix_transpose. Derivatives and batching: the gradcheck rows (tests/gradcheck).
#include <climits>
#include <cmath>

#include "test_util.hpp"

namespace xj = xjax;
namespace linalg = xjax::linalg;

namespace {

using Matrix = std::vector<double>;  // row-major n x n (or r x c)

std::vector<double> values(std::size_t n, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(1.3 * static_cast<double>(i) + phase);
  return v;
}

// m m^T + n I for the m x m matrix of `values`: symmetric positive definite.
Matrix spd(std::size_t n, double phase) {
  const Matrix m = values(n * n, phase);
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
  Matrix a = values(m * m, 0.2);
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
          const Matrix b = values(rows * cols, 1.1);
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
  Matrix a = values(9, 0.4);
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

TEST_CASE("cho_solve: f32 with f64 computes in f64; integers are a TypeError naming cho_solve; the vector rule in errors") {
  const Matrix a = spd(3, 0.2);
  const xj::Array L = linalg::cholesky(f64(a, {3, 3}));
  const xj::Array x = linalg::cho_solve(L, xj::astype(f64({1.0, 2.0, 3.0}, {3}), xj::f32));
  CHECK(x.dtype() == xj::f64);
  const auto want = linalg::cho_solve(L, f64({1.0, 2.0, 3.0}, {3})).to_vector<double>(), got = x.to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(linalg::cho_solve(L, xj::zeros({3}, xj::i32)), doctest::Contains("cho_solve(f64[3,3], i32[3])"),
                       xj::TypeError);
  // (2, 3, 3) with (3, 2): b has one axis less, so it is vectors of length 2, not n = 3.
  CHECK_THROWS_WITH_AS(linalg::cho_solve(xj::zeros({2, 3, 3}, xj::f64), xj::zeros({3, 2}, xj::f64)),
                       doctest::Contains("read as vectors"), xj::ShapeError);
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
  const xj::Array bs = f64(values(12, 0.5), {2, 3, 2});
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
