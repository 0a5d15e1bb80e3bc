// linalg.cpp: the user-level linear algebra of xj::linalg (linalg.hpp): binds of the cholesky and
// triangular_solve primitives and compositions of them.
#include "xjax/linalg.hpp"

#include "internal.hpp"

namespace xjax::linalg {

using P = Primitive;

namespace {

/// A TypeError naming the call unless every operand is f32 or f64 (as lax.linalg: no implicit
/// conversion of integers or bools; the caller converts with xj::astype).
void expect_floats(const std::string& call, std::initializer_list<const Array*> xs, std::source_location loc) {
  for (const Array* x : xs)
    if (!is_floating(x->dtype()))
      throw TypeError(call + ": needs floating-point operands (f32 or f64); convert with xj::astype (at " +
                      format_location(loc) + ")");
}

}  // namespace

Array cholesky(const Array& a, bool symmetrize_input, std::source_location loc) {
  const std::string call = "cholesky(" + a.aval().str() + ")";
  if (a.ndim() < 2 || a.dim(-1) != a.dim(-2))
    throw ShapeError(call + ": needs square matrices in the last two dimensions (..., n, n) (at " + format_location(loc) + ")");
  expect_floats(call, {&a}, loc);
  const Array x = symmetrize_input ? mul(add(a, matrix_transpose(a, loc), loc), scalar_like(0.5, a), loc) : a;
  return detail::bind1(P::cholesky, {x}, {}, loc);
}

Array triangular_solve(const Array& a, const Array& b, const TriangularSolveOptions& o, std::source_location loc) {
  const params::TriangularSolve ps{.left_side = o.left_side, .lower = o.lower, .transpose_a = o.transpose_a,
                                   .unit_diagonal = o.unit_diagonal};
  // b one rank below a: one vector per matrix (lax.linalg's rule), a column (left side) or a row.
  if (a.ndim() >= 2 && b.ndim() == a.ndim() - 1) {
    const std::int64_t axis = o.left_side ? b.ndim() : b.ndim() - 1;
    return squeeze(detail::bind1(P::triangular_solve, {a, expand_dims(b, axis, loc)}, ps, loc), {axis}, loc);
  }
  return detail::bind1(P::triangular_solve, {a, b}, ps, loc);
}

Array cho_solve(const Array& c, const Array& b, bool lower, std::source_location loc) {
  const auto fail = [&](const std::string& why) {
    throw ShapeError("cho_solve(" + c.aval().str() + ", " + b.aval().str() + "): " + why + " (at " + format_location(loc) + ")");
  };
  if (c.ndim() < 2 || c.dim(-1) != c.dim(-2)) fail("c must be square matrices in the last two dimensions (..., n, n)");
  expect_floats("cho_solve(" + c.aval().str() + ", " + b.aval().str() + ")", {&c, &b}, loc);
  // JAX's rule: b one rank below c is one vector per matrix (..., n); otherwise matrices (..., n, k).
  const bool vector = b.ndim() == c.ndim() - 1;
  Array rhs = vector ? expand_dims(b, b.ndim(), loc) : b;
  if (rhs.ndim() < 2 || rhs.dim(-2) != c.dim(-1))
    fail(vector ? "b has one axis less than c, so it is read as vectors (..., n) (JAX's rule), and its last axis is not n = " +
                      std::to_string(c.dim(-1))
                : "b is read as matrices (..., n, k), and its second-to-last axis is not n = " + std::to_string(c.dim(-1)));
  // f32 with f64: both f64 (the solves need one dtype).
  const DType dtype = promote_types(c.dtype(), b.dtype());
  const Array cc = astype(c, dtype, loc);
  rhs = astype(rhs, dtype, loc);
  // The batch axes broadcast: c and b both become (batch..., n, n) and (batch..., n, k).
  Shape batch;
  try {
    batch = broadcast_shapes(Shape(cc.shape().begin(), cc.shape().end() - 2), Shape(rhs.shape().begin(), rhs.shape().end() - 2));
  } catch (const ShapeError&) {
    fail("the batch dimensions do not broadcast");
  }
  auto with_batch = [&](const Array& x) {
    Shape s = batch;
    s.push_back(x.dim(-2));
    s.push_back(x.dim(-1));
    return x.shape() == s ? x : broadcast_to(x, s, loc);
  };
  const Array cf = with_batch(cc);
  rhs = with_batch(rhs);
  // A = c c^T: c y = b, then c^T x = y (lower); A = c^T c: c^T y = b, then c x = y.
  const Array y = triangular_solve(cf, rhs, {.left_side = true, .lower = lower, .transpose_a = !lower}, loc);
  const Array x = triangular_solve(cf, y, {.left_side = true, .lower = lower, .transpose_a = lower}, loc);
  return vector ? squeeze(x, {x.ndim() - 1}, loc) : x;
}

}  // namespace xjax::linalg
