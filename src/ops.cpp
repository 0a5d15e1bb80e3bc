// ops.cpp: user-level operations as compositions of primitives (see ops.hpp).
// Read: helpers (broadcasting, axes) first, then one section per family as in ops.hpp.
#include "xjax/ops.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <ostream>

#include "internal.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/indexing.hpp"

namespace xjax {
namespace {

using P = Primitive;
using detail::bind1;

// Axis errors name the operation, the operand's type and the caller's line.
[[noreturn]] void axis_fail(const char* op, const Array& x, const std::string& why, const std::source_location& loc) {
  throw ShapeError(std::string(op) + "(" + x.aval().str() + "): " + why + " (at " + format_location(loc) + ")");
}

std::int64_t norm_axis(std::int64_t axis, std::int64_t rank, const char* op, const Array& x,
                       const std::source_location& loc) {
  if (axis < -rank || axis >= rank)
    axis_fail(op, x, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank), loc);
  return axis < 0 ? axis + rank : axis;
}

Axes norm_axes(const Axes& axes, std::int64_t rank, const char* op, const Array& x, const std::source_location& loc) {
  Axes out;
  if (axes.empty()) {
    out.resize(static_cast<std::size_t>(rank));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (auto a : axes) out.push_back(norm_axis(a, rank, op, x, loc));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) axis_fail(op, x, "repeated axis", loc);
  return out;
}

// jnp's float functions (exp, sqrt, sin ...) of integers and bools compute in f64
// (promote_args_inexact); floor and ceil give an integer back as it is.
Array unary(P p, const Array& x, const std::source_location& loc) {
  if (family_of(p) == Family::float_unary && !is_floating(x.dtype())) {
    if (p == P::floor || p == P::ceil) return x;
    return bind1(p, {detail::as_inexact(x, loc)}, {}, loc);
  }
  return bind1(p, {x}, {}, loc);
}

// The NumPy broadcast of the shapes of p's operands xs. A mismatch is a ShapeError naming p, the
// operand types and the caller's line, like the errors of the shape rules.
Shape broadcast_operands(P p, std::initializer_list<const Shape*> shapes, std::initializer_list<const Array*> xs,
                         const std::source_location& loc) {
  Shape s;
  try {
    for (const Shape* sh : shapes) s = broadcast_shapes(s, *sh);
  } catch (const ShapeError& e) {
    std::vector<ShapedArray> avals;
    for (const Array* x : xs) avals.push_back(x->aval());
    throw ShapeError(detail::describe_application(p, avals) + ": " + e.what() + " (at " + format_location(loc) + ")");
  }
  return s;
}

// Broadcasts a and b to their common shape (explicit broadcast_in_dim where needed).
std::pair<Array, Array> broadcast_pair(P p, const Array& a, const Array& b, const std::source_location& loc) {
  if (a.shape() == b.shape()) return {a, b};  // nothing to broadcast (an eager op's common case)
  Shape s = broadcast_operands(p, {&a.shape(), &b.shape()}, {&a, &b}, loc);
  auto fit = [&](const Array& x) { return x.shape() == s ? x : broadcast_to(x, s, loc); };
  return {fit(a), fit(b)};
}

// The dtype the operands promote to (result_type's: weakly typed operands, C++ numbers and values
// computed from them only, adopt the strong operands' dtype as JAX's weak types do) and whether
// the result is weak.
detail::Promotion promoted_dtype(std::span<const Array> xs) {
  std::vector<detail::TypeOperand> operands;
  for (const auto& x : xs) operands.push_back(detail::type_operand(x));
  return detail::promotion_of(operands);
}

// x converted to dtype by a convert_element_type (weakly typed when `weak`).
Array converted(const Array& x, DType dtype, bool weak, const std::source_location& loc) {
  return bind1(P::convert_element_type, {x}, params::ConvertElementType{.new_dtype = dtype, .weak_type = weak}, loc);
}

// The operands converted to their promoted dtype (convert_element_type equations where a dtype
// changes), or, in strict mode, a TypeError naming both dtypes (a weak operand still converts).
std::vector<Array> promoted(P p, std::vector<Array> xs, const std::source_location& loc) {
  // JAX's rule: each conversion is weakly typed when the result is
  const auto [t, weak_result] = promoted_dtype(xs);
  for (auto& x : xs)
    if (x.dtype() != t) {
      if (promotion_mode() == PromotionMode::strict && !detail::is_weak(x)) {
        std::vector<ShapedArray> avals;
        std::string dtypes;  // "f32 and f64", "f32, f32 and f64"
        for (std::size_t i = 0; i < xs.size(); ++i) {
          avals.push_back(xs[i].aval());
          dtypes += (i == 0 ? "" : i + 1 == xs.size() ? " and " : ", ") + std::string(dtype_name(xs[i].dtype()));
        }
        throw TypeError(detail::describe_application(p, avals) + ": operands of dtypes " + dtypes +
                        " under strict dtype promotion; convert one with xj::astype (at " + format_location(loc) + ")");
      }
      // (a C++ integer times a C++ double is a weak float)
      x = converted(x, t, weak_result, loc);
    }
  return xs;
}

// True when two operands need no promotion: one dtype, neither weakly typed. The common case,
// taken without building an operand list or copying the operands (an eager op's cost).
bool same_strong_dtype(const Array& a, const Array& b) {
  return a.dtype() == b.dtype() && !detail::is_weak(a) && !detail::is_weak(b);
}

// f(a, b) with a and b promoted to their common dtype.
template <class F> Array with_promoted(P p, const Array& a, const Array& b, const std::source_location& loc, F f) {
  if (same_strong_dtype(a, b)) return f(a, b);
  const auto ab = promoted(p, {a, b}, loc);
  return f(ab[0], ab[1]);
}

Array binary(P p, const Array& a, const Array& b, const std::source_location& loc) {
  return with_promoted(p, a, b, loc, [&](const Array& pa, const Array& pb) {
    if (pa.shape() == pb.shape()) return bind1(p, {pa, pb}, {}, loc);  // nothing to broadcast
    const auto [x, y] = broadcast_pair(p, pa, pb, loc);
    return bind1(p, {x, y}, {}, loc);
  });
}

// A C++ integer that an integer dtype cannot hold is an error, as JAX's OverflowError (300 added
// to a u8 array wrapped to 44; -1 to a u32 array to 2^32 - 1).
void require_representable(detail::Scalar s, DType d) {
  if (!s.integer || !is_integer(d)) return;
  const IntInfo r = iinfo(d);
  if (s.value >= static_cast<double>(r.min) && s.value <= static_cast<double>(r.max)) return;
  char value[32];
  std::snprintf(value, sizeof value, "%.0f", s.value);  // s.value may lie past long long's range
  throw TypeError(std::string("the C++ integer ") + value + " is out of " + dtype_name(d) +
                  "'s range [" + std::to_string(r.min) + ", " + std::to_string(r.max) +
                  "] (JAX raises OverflowError); convert the array or the number first");
}

// A C++ number mixed with `other` (weak typing); in strict mode it adopts other's dtype within
// its kind only (JAX's strict lattice: a float with an integer array, or an integer with a bool
// one, has no join; 0.5 on an i32 array was truncated to 0).
Array weak_scalar(detail::Scalar s, const Array& other) {
  if (s.boolean) return scalar(s.value, bool_);  // a strong bool: promoted as any bool array
  const bool strict = promotion_mode() == PromotionMode::strict;
  if (strict && ((!s.integer && !is_floating(other.dtype())) || other.dtype() == bool_))
    throw TypeError(std::string("a C++ ") + (s.integer ? "integer" : "floating-point number") + " mixed with a " +
                    dtype_name(other.dtype()) + " array under strict dtype promotion; convert one with xj::astype");
  const DType d = strict ? other.dtype() : detail::weak_result(other.dtype(), s.integer);
  require_representable(s, d);
  return detail::weakly_typed(scalar(s.value, d));
}

Array reduce(P p, const Array& x, const Axes& axes, bool keepdims, const std::source_location& loc) {
  Axes ax = norm_axes(axes, x.ndim(), std::string(primitive_name(p)).c_str(), x, loc);
  if (ax.empty()) return x;  // rank 0: nothing to reduce
  Array r = bind1(p, {x}, params::Reduce{.axes = ax}, loc);
  if (!keepdims) return r;
  Shape kept = x.shape();
  for (auto a : ax) kept[static_cast<std::size_t>(a)] = 1;
  return reshape(r, kept, loc);
}

std::int64_t reduced_count(const Array& x, const Axes& axes, const std::source_location& loc) {
  std::int64_t n = 1;
  for (auto a : norm_axes(axes, x.ndim(), "mean", x, loc)) n *= x.shape()[static_cast<std::size_t>(a)];
  return n;
}

}  // namespace

// ---- helpers ----------------------------------------------------------------------------------

// Weakly typed, as a Python float beside a jnp array: a weak `like` gives a weak result.
Array scalar_like(double v, const Array& like) { return detail::weakly_typed(scalar(v, like.dtype())); }

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da < 0 || db < 0) throw ShapeError("broadcast_shapes: a negative dimension in " + shape_str(a) + " or " + shape_str(b));
    if (da != db && da != 1 && db != 1)
      throw ShapeError("cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- unary ------------------------------------------------------------------------------------

Array neg(const Array& x, std::source_location loc) { return unary(P::neg, x, loc); }
Array exp(const Array& x, std::source_location loc) { return unary(P::exp, x, loc); }
Array log(const Array& x, std::source_location loc) { return unary(P::log, x, loc); }
Array log1p(const Array& x, std::source_location loc) { return unary(P::log1p, x, loc); }
Array expm1(const Array& x, std::source_location loc) { return unary(P::expm1, x, loc); }
Array sin(const Array& x, std::source_location loc) { return unary(P::sin, x, loc); }
Array cos(const Array& x, std::source_location loc) { return unary(P::cos, x, loc); }
Array tan(const Array& x, std::source_location loc) { return unary(P::tan, x, loc); }
Array tanh(const Array& x, std::source_location loc) { return unary(P::tanh, x, loc); }
Array sqrt(const Array& x, std::source_location loc) { return unary(P::sqrt, x, loc); }
Array asin(const Array& x, std::source_location loc) { return unary(P::asin, x, loc); }
Array acos(const Array& x, std::source_location loc) { return unary(P::acos, x, loc); }
Array atan(const Array& x, std::source_location loc) { return unary(P::atan, x, loc); }
Array sinh(const Array& x, std::source_location loc) { return unary(P::sinh, x, loc); }
Array cosh(const Array& x, std::source_location loc) { return unary(P::cosh, x, loc); }
Array asinh(const Array& x, std::source_location loc) { return unary(P::asinh, x, loc); }
Array acosh(const Array& x, std::source_location loc) { return unary(P::acosh, x, loc); }
Array atanh(const Array& x, std::source_location loc) { return unary(P::atanh, x, loc); }
Array erf(const Array& x, std::source_location loc) { return unary(P::erf, x, loc); }
Array erfc(const Array& x, std::source_location loc) { return unary(P::erfc, x, loc); }
Array cbrt(const Array& x, std::source_location loc) { return unary(P::cbrt, x, loc); }
Array exp2(const Array& x, std::source_location loc) { return unary(P::exp2, x, loc); }
Array log2(const Array& x, std::source_location loc) { return unary(P::log2, x, loc); }
Array lgamma(const Array& x, std::source_location loc) { return unary(P::lgamma, x, loc); }
Array digamma(const Array& x, std::source_location loc) { return unary(P::digamma, x, loc); }
Array erf_inv(const Array& x, std::source_location loc) { return unary(P::erf_inv, x, loc); }
Array floor(const Array& x, std::source_location loc) { return unary(P::floor, x, loc); }
Array ceil(const Array& x, std::source_location loc) { return unary(P::ceil, x, loc); }
Array rsqrt(const Array& x, std::source_location loc) { return unary(P::rsqrt, x, loc); }
Array abs(const Array& x, std::source_location loc) {
  if (x.dtype() == bool_) return x;  // jnp.abs of bool is x
  return unary(P::abs, x, loc);
}
Array sign(const Array& x, std::source_location loc) { return unary(P::sign, x, loc); }
Array logistic(const Array& x, std::source_location loc) { return unary(P::logistic, x, loc); }
Array sigmoid(const Array& x, std::source_location loc) { return unary(P::logistic, x, loc); }
Array stop_gradient(const Array& x, std::source_location loc) { return unary(P::stop_gradient, x, loc); }
Array square(const Array& x, std::source_location loc) { return integer_pow(x, 2, loc); }
Array reciprocal(const Array& x, std::source_location loc) { return integer_pow(detail::as_inexact(x, loc), -1, loc); }

Array integer_pow(const Array& x, std::int64_t n, std::source_location loc) {
  return bind1(P::integer_pow, {x}, params::IntegerPow{.y = n}, loc);
}

Array astype(const Array& x, DType dtype, std::source_location loc) {
  // A weak array to its own dtype: a conversion that only makes it strong (JAX's astype), an
  // equation when traced so that the jaxpr records it.
  if (x.dtype() == dtype && !detail::is_weak(x)) return x;
  return converted(x, dtype, false, loc);
}

// ---- binary -----------------------------------------------------------------------------------

// jnp.add / jnp.multiply of two bool arrays: logical or / and (lax's add and mul refuse bools).
Array add(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == bool_ && b.dtype() == bool_) return bitwise_or(a, b, loc);
  return binary(P::add, a, b, loc);
}
Array sub(const Array& a, const Array& b, std::source_location loc) { return binary(P::sub, a, b, loc); }
Array mul(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == bool_ && b.dtype() == bool_) return bitwise_and(a, b, loc);
  return binary(P::mul, a, b, loc);
}
Array div(const Array& a, const Array& b, std::source_location loc) { return binary(P::div, a, b, loc); }
// jnp.true_divide: integers and bools divide in f64 (promote_args_inexact), floats as div.
Array true_divide(const Array& a, const Array& b, std::source_location loc) {
  if (is_floating(a.dtype()) && is_floating(b.dtype())) return div(a, b, loc);
  const auto ab = promoted(P::div, {a, b}, loc);
  if (is_floating(ab[0].dtype())) return div(ab[0], ab[1], loc);
  return div(detail::as_inexact(ab[0], loc), detail::as_inexact(ab[1], loc), loc);
}
Array divide(const Array& a, const Array& b, std::source_location loc) { return true_divide(a, b, loc); }
// A float base with an integer exponent array keeps the exponent exact (jnp.power passes it to
// lax.pow unconverted): both in f64, the result rounded once to the base's dtype (converting the
// exponent to a bf16 base's dtype made 257 into 256, flipping (-1)^257).
Array pow(const Array& a, const Array& b, std::source_location loc) {
  if (is_floating(a.dtype()) && is_integer(b.dtype()) && !detail::is_weak(a) && a.dtype() != f64)
    return astype(binary(P::pow, astype(a, f64, loc), astype(b, f64, loc), loc), a.dtype(), loc);
  return binary(P::pow, a, b, loc);
}
Array atan2(const Array& y, const Array& x, std::source_location loc) { return binary(P::atan2, y, x, loc); }
Array rem(const Array& x, const Array& y, std::source_location loc) { return binary(P::rem, x, y, loc); }
Array nextafter(const Array& x, const Array& y, std::source_location loc) { return binary(P::nextafter, x, y, loc); }
Array round(const Array& x, RoundingMethod method, std::source_location loc) {
  return bind1(P::round, {x}, params::Round{.rounding_method = static_cast<std::int64_t>(method)}, loc);
}
Array bitwise_and(const Array& a, const Array& b, std::source_location loc) { return binary(P::bitwise_and, a, b, loc); }
Array bitwise_or(const Array& a, const Array& b, std::source_location loc) { return binary(P::bitwise_or, a, b, loc); }
Array bitwise_xor(const Array& a, const Array& b, std::source_location loc) { return binary(P::bitwise_xor, a, b, loc); }
Array bitwise_not(const Array& x, std::source_location loc) { return unary(P::bitwise_not, x, loc); }
Array shift_left(const Array& x, const Array& s, std::source_location loc) { return binary(P::shift_left, x, s, loc); }
Array shift_right_logical(const Array& x, const Array& s, std::source_location loc) {
  return binary(P::shift_right_logical, x, s, loc);
}
Array shift_right_arithmetic(const Array& x, const Array& s, std::source_location loc) {
  return binary(P::shift_right_arithmetic, x, s, loc);
}
Array population_count(const Array& x, std::source_location loc) { return unary(P::population_count, x, loc); }

namespace {
/// Where rem(x, y) is non-zero with the sign opposite to y's: the truncated quotient is one above
/// the floored one there.
Array floor_differs(const Array& r, const Array& y, std::source_location loc) {
  const Array zero = scalar(0.0, r.dtype());
  const Array differs = logical_and(ne(r, zero, loc), ne(lt(r, zero, loc), lt(y, zero, loc), loc), loc);
  return logical_and(differs, ne(y, scalar(0.0, y.dtype()), loc), loc);  // x // 0 and x mod 0 stay as div and rem give them
}
}  // namespace

// Integers: the truncated quotient, one less where the remainder's sign differs from y's. Floats:
// (x - rem) / y is an integer up to rounding, rounded, then the same correction (jnp's divmod).
Array floor_divide(const Array& x, const Array& y, std::source_location loc) {
  const Array r = rem(x, y, loc);
  const Array one = scalar(1.0, r.dtype());
  if (!is_floating(r.dtype())) return where(floor_differs(r, y, loc), sub(div(x, y, loc), one, loc), div(x, y, loc), loc);
  // x / 0 is +-inf or NaN as the division gives it (jnp's divmod; x - rem(x, 0) was NaN)
  const Array q = div(where(eq(y, scalar(0.0, y.dtype()), loc), x, sub(x, r, loc), loc), y, loc);
  const Array rounded = round(q, RoundingMethod::away_from_zero, loc);  // q is an integer up to rounding (floor(q + 0.5) rounded odd q past 2^23 up)
  return where(floor_differs(r, y, loc), sub(rounded, one, loc), rounded, loc);
}

// Integers: x mod 0 = 0, as jnp's (it reads a zero divisor as 1; rem gives x there).
Array remainder(const Array& x, const Array& y, std::source_location loc) {
  auto xy = promoted(P::rem, {x, y}, loc);
  if (!is_floating(xy[1].dtype()))
    xy[1] = where(eq(xy[1], scalar(0.0, xy[1].dtype()), loc), scalar(1.0, xy[1].dtype()), xy[1], loc);
  const Array r = rem(xy[0], xy[1], loc);
  return where(floor_differs(r, xy[1], loc), add(r, xy[1], loc), r, loc);
}
Array mod(const Array& x, const Array& y, std::source_location loc) { return remainder(x, y, loc); }
Array pow(const Array& a, detail::Scalar exponent, std::source_location loc) {
  const double b = exponent.value;
  // A C++ integer is jnp.power's concrete integer power: integer_pow in the base's dtype (a bool
  // base as an integer); a negative one on an integer base is integer_pow's error, as JAX's.
  if ((exponent.integer || exponent.boolean) && std::abs(b) <= 9.2e18) {  // a bool is operator.index's 0 / 1
    const DType d = a.dtype() == bool_ ? detail::weak_result(bool_, true) : a.dtype();  // jnp: a bool base as an integer
    return integer_pow(d == a.dtype() ? a : astype(a, d, loc), static_cast<std::int64_t>(b), loc);
  }
  if (b == std::floor(b) && std::abs(b) <= 64) {
    // A C++ double is a weak float: an integer or bool base is promoted to the float dtype first
    // (jnp.power takes integer_pow for Python ints only), whole exponent or not. Strict mode
    // keeps the base's dtype.
    const DType d = is_floating(a.dtype()) ? a.dtype() : weak_scalar(b, a).dtype();
    return integer_pow(d == a.dtype() ? a : astype(a, d, loc), static_cast<std::int64_t>(b), loc);
  }
  return pow(a, weak_scalar(b, a), loc);
}
Array maximum(const Array& a, const Array& b, std::source_location loc) { return binary(P::max, a, b, loc); }
Array minimum(const Array& a, const Array& b, std::source_location loc) { return binary(P::min, a, b, loc); }
Array eq(const Array& a, const Array& b, std::source_location loc) { return binary(P::eq, a, b, loc); }
Array ne(const Array& a, const Array& b, std::source_location loc) { return binary(P::ne, a, b, loc); }
Array lt(const Array& a, const Array& b, std::source_location loc) { return binary(P::lt, a, b, loc); }
Array le(const Array& a, const Array& b, std::source_location loc) { return binary(P::le, a, b, loc); }
Array gt(const Array& a, const Array& b, std::source_location loc) { return binary(P::gt, a, b, loc); }
Array ge(const Array& a, const Array& b, std::source_location loc) { return binary(P::ge, a, b, loc); }

// jnp.where: a predicate of any other dtype is pred != 0.
Array where(const Array& pred, const Array& a, const Array& b, std::source_location loc) {
  if (pred.dtype() != bool_) return where(ne(pred, scalar_like(0.0, pred), loc), a, b, loc);
  return with_promoted(P::select_n, a, b, loc, [&](const Array& pa, const Array& pb) {
    Shape s = broadcast_operands(P::select_n, {&pred.shape(), &a.shape(), &b.shape()}, {&pred, &b, &a}, loc);
    auto fit = [&](const Array& x) { return x.shape() == s ? x : broadcast_to(x, s, loc); };
    return bind1(P::select_n, {fit(pred), fit(pb), fit(pa)}, {}, loc);
  });
}
Array where(const Array& pred, const Array& a, detail::Scalar b, std::source_location loc) {
  return where(pred, a, weak_scalar(b, a), loc);
}
Array where(const Array& pred, detail::Scalar a, const Array& b, std::source_location loc) {
  return where(pred, weak_scalar(a, b), b, loc);
}
// where's alias (API.md).
Array select(const Array& pred, const Array& a, const Array& b, std::source_location loc) { return where(pred, a, b, loc); }

// ---- linear algebra ---------------------------------------------------------------------------

Array dot_general(const Array& a, const Array& b, const Axes& lc, const Axes& rc, const Axes& lb,
                  const Axes& rb, std::source_location loc) {
  return with_promoted(P::dot_general, a, b, loc, [&](const Array& pa, const Array& pb) {
    return bind1(P::dot_general, {pa, pb},
                 params::DotGeneral{.lhs_contracting = lc, .rhs_contracting = rc, .lhs_batch = lb, .rhs_batch = rb}, loc);
  });
}

Array dot_general(const Array& a, const Array& b, const Axes& lc, const Axes& rc, const Axes& lb, const Axes& rb,
                  const DotOptions& options, std::source_location loc) {
  if (!options.preferred_element_type) return dot_general(a, b, lc, rc, lb, rb, loc);
  const DType to = *options.preferred_element_type;
  // JAX's _validate_preferred_element_type: an integer (or bool) operand may ask for a float, an
  // unsigned one for a signed integer; a float operand needs a float, a signed one a signed
  // integer or a float; and the type may not be narrower
  // (these converted the operands: an f32 product asked for i32 truncated them first).
  for (const Array* x : {&a, &b}) {
    const DType in = x->dtype();
    const bool in_float = is_floating(in), to_float = is_floating(to);
    std::string why;
    if (to == bool_ && in != bool_) why = "bool is not a wider type";
    else if (in == bool_) why = "";
    else if (in_float && !to_float) why = "a floating-point operand needs a floating-point one";
    else if (is_signed_integer(in) && !to_float && !is_signed_integer(to)) why = "a signed operand needs a signed one";
    else if (itemsize(to) < itemsize(in)) why = "it must not be narrower than the operand";
    if (!why.empty())
      throw TypeError(std::string("dot_general(") + a.aval().str() + ", " + b.aval().str() + "): preferred_element_type " +
                      dtype_name(to) + " for a " + dtype_name(in) + " operand: " + why + " (at " + format_location(loc) + ")");
  }
  return dot_general(a.dtype() == to ? a : astype(a, to, loc), b.dtype() == to ? b : astype(b, to, loc), lc, rc, lb, rb, loc);
}

Array dot_general(const Array& a, const Array& b, std::initializer_list<DotAxes> contracting, std::initializer_list<DotAxes> batch,
                  const DotOptions& options, std::source_location loc) {
  auto sides = [&](std::initializer_list<DotAxes> pair, const char* what) {
    if (pair.size() == 0) return std::pair<Axes, Axes>{};
    if (pair.size() != 2)
      throw Error(std::string("dot_general(") + a.aval().str() + ", " + b.aval().str() + "): the " + what +
                  " dimension numbers are a pair {lhs axes, rhs axes}, got " + std::to_string(pair.size()) +
                  " lists (at " + format_location(loc) + ")");
    return std::pair<Axes, Axes>{pair.begin()->axes, (pair.begin() + 1)->axes};
  };
  const auto [lc, rc] = sides(contracting, "contracting");
  const auto [lb, rb] = sides(batch, "batch");
  return dot_general(a, b, lc, rc, lb, rb, options, loc);
}

Array matmul(const Array& a, const Array& b, std::source_location loc) {
  if (a.ndim() == 0 || b.ndim() == 0) throw ShapeError("matmul: operands must have rank >= 1 (at " + format_location(loc) + ")");
  if (b.ndim() == 1) return dot_general(a, b, {a.ndim() - 1}, {0}, {}, {}, loc);
  if (a.ndim() == 1) return dot_general(a, b, {0}, {b.ndim() - 2}, {}, {}, loc);
  // A stack of matrices times one matrix, as jnp.matmul lowers it: one contraction of the last
  // dim without batch dims (one GEMM over every row; b's gradient is one GEMM too, never a
  // (batch..., k, n) array summed over the batch).
  if (b.ndim() == 2) return dot_general(a, b, {a.ndim() - 1}, {0}, {}, {}, loc);
  if (a.ndim() == 2) {  // one matrix times a stack: (m, batch..., n), the batch dims then moved first
    const Array r = dot_general(a, b, {1}, {b.ndim() - 2}, {}, {}, loc);
    Axes perm;
    for (std::int64_t i = 1; i < b.ndim() - 1; ++i) perm.push_back(i);
    perm.push_back(0);
    perm.push_back(b.ndim() - 1);
    return transpose(r, perm, loc);
  }
  // Broadcast the batch dimensions, then one dot_general with them as batch dims.
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_operands(P::dot_general, {&ab, &bb}, {&a, &b}, loc);
  auto fit = [&](const Array& x) {
    Shape s = batch;
    s.push_back(x.dim(-2));
    s.push_back(x.dim(-1));
    return x.shape() == s ? x : broadcast_to(x, s, loc);
  };
  Array x = fit(a), y = fit(b);
  auto nb = static_cast<std::int64_t>(batch.size());
  Axes bd(batch.size());
  std::iota(bd.begin(), bd.end(), 0);
  return dot_general(x, y, {nb + 1}, {nb}, bd, bd, loc);
}

Array dot(const Array& a, const Array& b, std::source_location loc) {
  if (a.ndim() == 0 || b.ndim() == 0) return mul(a, b, loc);
  std::int64_t rc = b.ndim() == 1 ? 0 : b.ndim() - 2;
  return dot_general(a, b, {a.ndim() - 1}, {rc}, {}, {}, loc);
}

// ---- reductions -------------------------------------------------------------------------------

namespace {
// jnp.sum and jnp.prod accumulate integers in the default integer of their signedness (i64 / u64
// with x64: promote_integers=True), so that a sum of i32 does not wrap at 2^31; bools count in i64
// (the true entries of a mask; lax's reduce_sum takes no bool). Strong, as every jnp reduction's
// operand (below).
Array widened_for_sum(const Array& x, const std::source_location& loc) {
  const DType dt = x.dtype();
  if (dt == bool_ || (is_signed_integer(dt) && dt != i64)) return astype(x, i64, loc);
  if (is_integer(dt) && !is_signed_integer(dt) && dt != u64) return astype(x, u64, loc);
  return astype(x, dt, loc);
}
// jnp's reductions convert their operand to the computation dtype first (a weakly typed one
// becomes strong: lax.convert_element_type, an equation when traced), so their results are
// strong: jnp.sum(3.0) + an f16 array is f32, not f16.
Array strong(const Array& x, const std::source_location& loc) { return astype(x, x.dtype(), loc); }
}  // namespace

Array sum(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_sum, widened_for_sum(x, loc), axes, keepdims, loc);
}
Array max(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_max, strong(x, loc), axes, keepdims, loc);
}
Array min(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_min, strong(x, loc), axes, keepdims, loc);
}
Array prod(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_prod, widened_for_sum(x, loc), axes, keepdims, loc);
}
namespace detail {
TypeOperand type_operand(const Array& a) { return {a.dtype(), is_weak(a) && a.dtype() != bool_, !is_floating(a.dtype())}; }
Array rounded_once_when_eager(std::vector<Array> xs, const std::function<Array(const std::vector<Array>&)>& f,
                              const std::source_location& loc) {
  const DType dt = xs.at(0).dtype();
  if ((dt != bf16 && dt != f16) || tracing_active()) return f(xs);
  const bool weak = std::all_of(xs.begin(), xs.end(), [](const Array& x) { return is_weak(x); });
  for (Array& x : xs) x = astype(x, f32, loc);
  const Array y = astype(f(xs), dt, loc);
  return weak ? weakly_typed(y) : y;
}
Array rounded_once_when_eager(const Array& x, const std::function<Array(const Array&)>& f, const std::source_location& loc) {
  return rounded_once_when_eager(std::vector<Array>{x}, [&](const std::vector<Array>& u) { return f(u[0]); }, loc);
}
Array as_inexact(const Array& x, const std::source_location& loc) {
  if (is_floating(x.dtype())) return x;
  // weak when x is, recorded in the conversion (JAX's promote_dtypes_inexact), so a jaxpr
  // evaluated again inside a trace, or a call's body read for its weak types, agrees
  return converted(x, f64, is_weak(x), loc);
}
std::vector<Array> promoted_operands(Primitive p, std::vector<Array> xs, const std::source_location& loc) {
  return promoted(p, std::move(xs), loc);
}
}  // namespace detail

Array mean(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  // Integers and bools in f64, as jnp's (an i8 sum wrapped before the division: mean(100, 100) was -28).
  if (!is_floating(x.dtype())) return mean(detail::as_inexact(x, loc), axes, keepdims, loc);
  // bf16 / f16: the sum and the division in f32, rounded once (JAX upcasts them too; the count
  // itself may not be representable in the narrow type)
  if (x.dtype() == bf16 || x.dtype() == f16) return astype(mean(astype(x, f32, loc), axes, keepdims, loc), x.dtype(), loc);
  auto n = static_cast<double>(reduced_count(x, axes, loc));
  Array s = sum(x, axes, keepdims, loc);
  return div(s, scalar(n, s.dtype()), loc);  // a strong count: jnp.mean of a weak value is strong
}
// var = sum((x - mean x)^2) / (N - ddof), the centred form (no cancellation as in
// E[x^2] - E[x]^2), NaN where N - ddof <= 0 (JAX's rule); integers and bools are computed in
// f64, as JAX's inexact promotion (x64)
Array var(const Array& x, const Axes& axes, std::int64_t ddof, bool keepdims, std::source_location loc) {
  // bf16 / f16 in f32, rounded once (JAX's _var_promote_types): the centring lost the spread.
  if (x.dtype() == bf16 || x.dtype() == f16) return astype(var(astype(x, f32, loc), axes, ddof, keepdims, loc), x.dtype(), loc);
  const Array xf = detail::as_inexact(x, loc);
  const auto n = static_cast<double>(reduced_count(xf, axes, loc));
  const Array centred = sub(xf, mean(xf, axes, true, loc), loc);
  const Array squares = sum(square(centred, loc), axes, keepdims, loc);
  const double dof = n - static_cast<double>(ddof);
  // a strong count, as mean's (jnp.var of a weak value is strong)
  return div(squares, scalar(dof > 0 ? dof : std::numeric_limits<double>::quiet_NaN(), squares.dtype()), loc);
}
Array std(const Array& x, const Axes& axes, std::int64_t ddof, bool keepdims, std::source_location loc) {
  return sqrt(var(x, axes, ddof, keepdims, loc), loc);
}
namespace {
// argmax / argmin in any integer index_dtype, as JAX's: the primitive writes i32 or i64, and a
// narrower or unsigned index type is converted from i64 (a float index_dtype stays the rule's
// TypeError).
Array arg_reduce(P p, const char* who, const Array& x, std::int64_t axis, DType index_dtype, const std::source_location& loc) {
  const bool converted = is_integer(index_dtype) && index_dtype != i32 && index_dtype != i64;
  const params::Argmax ps{.axes = Axes{norm_axis(axis, x.ndim(), who, x, loc)}, .index_dtype = converted ? i64 : index_dtype};
  if (converted && !detail::numbers_positions(index_dtype, x.shape(), ps.axes[0]))  // astype would wrap
    throw ShapeError(std::string(who) + ": the axis has " + std::to_string(x.shape()[static_cast<std::size_t>(ps.axes[0])]) +
                     " elements, more than " +
                     dtype_name(index_dtype) + " indices can number; ask for a wider index_dtype (at " +
                     format_location(loc) + ")");
  const Array r = bind1(p, {x}, ps, loc);
  return converted ? astype(r, index_dtype, loc) : r;
}
}  // namespace

Array argmax(const Array& x, std::int64_t axis, DType index_dtype, std::source_location loc) {
  return arg_reduce(P::argmax, "argmax", x, axis, index_dtype, loc);
}

// logsumexp(x) = m + log(sum(exp(x - m))), m = max(x) held constant (it cancels in the derivative);
// m is 0 where the max is not finite (JAX's rule: all -inf gives -inf, an inf gives inf, not NaN)
Array logsumexp(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  // Integers and bools in f64, as jnp's promote_dtypes_inexact (x64).
  if (!is_floating(x.dtype())) return logsumexp(detail::as_inexact(x, loc), axes, keepdims, loc);
  const Array top = max(x, axes, true, loc);
  Array m = stop_gradient(where(is_finite(top, loc), top, zeros_like(top), loc), loc);
  Array r = add(log(sum(exp(sub(x, m, loc), loc), axes, true, loc), loc), m, loc);
  if (keepdims) return r;
  return squeeze(r, norm_axes(axes, x.ndim(), "logsumexp", x, loc), loc);
}

// ---- shape ------------------------------------------------------------------------------------

Array reshape(const Array& x, Shape shape, std::source_location loc) {
  auto inferred = std::count(shape.begin(), shape.end(), -1);
  if (inferred > 1) throw ShapeError("reshape: at most one dimension may be -1 (at " + format_location(loc) + ")");
  if (inferred == 1) {
    std::int64_t known = 1;
    for (auto d : shape)
      if (d != -1) known *= d;
    if (known == 0 || x.size() % known != 0)
      throw ShapeError("reshape: cannot reshape " + x.aval().str() + " into " + shape_str(shape) + " (at " + format_location(loc) + ")");
    *std::find(shape.begin(), shape.end(), -1) = x.size() / known;
  }
  if (shape == x.shape()) return x;
  return bind1(P::reshape, {x}, params::Reshape{.new_sizes = shape}, loc);
}

Array transpose(const Array& x, const Axes& perm, std::source_location loc) {
  Axes p = perm;
  if (p.empty())
    for (std::int64_t i = x.ndim() - 1; i >= 0; --i) p.push_back(i);
  else
    for (auto& a : p) a = norm_axis(a, x.ndim(), "transpose", x, loc);
  return bind1(P::transpose, {x}, params::Transpose{.permutation = p}, loc);
}

Array broadcast_in_dim(const Array& x, const Shape& shape, const Axes& bd, std::source_location loc) {
  // the same shape with the identity dims is x itself; other dims go to the shape rule's checks
  // (they were accepted unchecked: {1, 0} on a [2, 3] target)
  bool identity = x.shape() == shape && bd.size() == shape.size();
  for (std::size_t i = 0; identity && i < bd.size(); ++i) identity = bd[i] == static_cast<std::int64_t>(i);
  if (identity) return x;
  return bind1(P::broadcast_in_dim, {x}, params::BroadcastInDim{.shape = shape, .broadcast_dimensions = bd}, loc);
}

Array broadcast_to(const Array& x, const Shape& shape, std::source_location loc) {
  if (x.shape() == shape) return x;
  bool ok = static_cast<std::size_t>(x.ndim()) <= shape.size();
  for (std::size_t i = 0; ok && i < x.shape().size(); ++i) {
    std::int64_t d = x.shape()[x.shape().size() - 1 - i];
    ok = d == 1 || d == shape[shape.size() - 1 - i];
  }
  if (!ok)
    throw ShapeError("broadcast_to: cannot broadcast " + x.aval().str() + " to " + shape_str(shape) + " (at " + format_location(loc) + ")");
  Axes bd;
  for (std::int64_t i = 0; i < x.ndim(); ++i) bd.push_back(static_cast<std::int64_t>(shape.size()) - x.ndim() + i);
  return broadcast_in_dim(x, shape, bd, loc);
}

Array expand_dims(const Array& x, std::int64_t axis, std::source_location loc) {
  return bind1(P::expand_dims, {x}, params::ExpandDims{.dimensions = Axes{norm_axis(axis, x.ndim() + 1, "expand_dims", x, loc)}}, loc);
}

Array squeeze(const Array& x, const Axes& axes, std::source_location loc) {
  Axes ax;
  if (axes.empty()) {
    for (std::int64_t i = 0; i < x.ndim(); ++i)
      if (x.shape()[static_cast<std::size_t>(i)] == 1) ax.push_back(i);
  } else {
    ax = norm_axes(axes, x.ndim(), "squeeze", x, loc);
  }
  if (ax.empty()) return x;
  return bind1(P::squeeze, {x}, params::Squeeze{.dimensions = ax}, loc);
}

Array concatenate(const std::vector<Array>& xs, std::int64_t axis, std::source_location loc) {
  if (xs.empty()) throw ShapeError("concatenate: needs at least one array (at " + format_location(loc) + ")");
  return bind1(P::concatenate, promoted(P::concatenate, xs, loc),
               params::Concatenate{.dimension = norm_axis(axis, xs[0].ndim(), "concatenate", xs[0], loc)}, loc);
}

Array stack(const std::vector<Array>& xs, std::int64_t axis, std::source_location loc) {
  if (xs.empty()) throw ShapeError("stack: needs at least one array (at " + format_location(loc) + ")");
  std::int64_t ax = norm_axis(axis, xs[0].ndim() + 1, "stack", xs[0], loc);
  std::vector<Array> parts;
  for (const auto& x : xs) parts.push_back(expand_dims(x, ax, loc));
  return concatenate(parts, ax, loc);
}

Array slice(const Array& x, const Axes& start, const Axes& limit, const Axes& strides, std::source_location loc) {
  return bind1(P::slice, {x}, params::Slice{.start_indices = start, .limit_indices = limit, .strides = strides}, loc);
}

Array slice_in_dim(const Array& x, std::int64_t start, std::int64_t limit, std::int64_t stride, std::int64_t axis,
                   std::source_location loc) {
  axis = norm_axis(axis, x.ndim(), "slice_in_dim", x, loc);
  const std::int64_t n = x.dim(axis);
  if (start < 0) start += n;
  if (limit < 0) limit += n;
  Axes s(static_cast<std::size_t>(x.ndim()), 0), l = x.shape(), st(static_cast<std::size_t>(x.ndim()), 1);
  s[static_cast<std::size_t>(axis)] = start;
  l[static_cast<std::size_t>(axis)] = limit;
  st[static_cast<std::size_t>(axis)] = stride;
  return slice(x, s, l, stride == 1 ? Axes{} : st, loc);
}

namespace {
// JAX's _dynamic_slice_indices: a negative start counts from the end of its axis (start + dim);
// the primitives then clamp it into range. A concrete start is mapped here, a traced one by a
// select in the program. (The transpose rules bind the primitives on starts mapped already.)
std::vector<Array> starts_from_end(const Array& x, const std::vector<Array>& starts, const std::source_location& loc) {
  std::vector<Array> out;
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const Array& s = starts[k];
    if (k >= static_cast<std::size_t>(x.ndim()) || !s.valid() || !is_signed_integer(s.dtype()) || s.ndim() != 0) {
      out.push_back(s);  // the shape rule names what is wrong with it
      continue;
    }
    const auto dim = static_cast<double>(x.shape()[k]);
    if (!s.is_tracer()) {
      const auto v = s.item<std::int64_t>();
      out.push_back(v < 0 ? scalar(static_cast<double>(v) + dim, s.dtype()) : s);
    } else {
      out.push_back(where(lt(s, scalar(0, s.dtype()), loc), add(s, scalar(dim, s.dtype()), loc), s, loc));
    }
  }
  return out;
}
}  // namespace

Array dynamic_slice(const Array& x, const std::vector<Array>& starts, const Shape& sizes, std::source_location loc) {
  std::vector<Array> ins{x};
  const std::vector<Array> mapped = starts_from_end(x, starts, loc);
  ins.insert(ins.end(), mapped.begin(), mapped.end());
  return bind1(P::dynamic_slice, ins, params::DynamicSlice{.slice_sizes = sizes}, loc);
}

Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts, std::source_location loc) {
  std::vector<Array> ins{x, update};
  const std::vector<Array> mapped = starts_from_end(x, starts, loc);
  ins.insert(ins.end(), mapped.begin(), mapped.end());
  return bind1(P::dynamic_update_slice, ins, {}, loc);
}

Array pad(const Array& x, const Array& padding_value, const Axes& lo, const Axes& hi, const Axes& interior,
          std::source_location loc) {
  const Array v = padding_value.dtype() == x.dtype() ? padding_value : astype(padding_value, x.dtype(), loc);
  const Axes inner = interior.empty() ? Axes(static_cast<std::size_t>(x.ndim()), 0) : interior;
  return bind1(P::pad, {x, v}, params::Pad{.lo = lo, .hi = hi, .interior = inner}, loc);
}

Array take(const Array& x, const Array& indices, std::optional<std::int64_t> axis, std::source_location loc) {
  if (!axis) return take(x.ndim() == 1 ? x : reshape(x, {x.size()}, loc), indices, 0, loc);
  const std::int64_t a = norm_axis(*axis, x.ndim(), "take", x, loc);
  detail::require_takeable("take", x, a, indices.size(), loc);
  return bind1(P::gather, {x, detail::gather_index(indices, loc)}, params::Gather{.axis = a, .fill_or_drop = false}, loc);
}

Array take_along_axis(const Array& x, const Array& indices, std::int64_t axis, std::source_location loc) {
  axis = norm_axis(axis, x.ndim(), "take_along_axis", x, loc);
  auto fail = [&](const std::string& why) {
    throw ShapeError("take_along_axis(" + x.aval().str() + ", " + indices.aval().str() + "): " + why + " (at " +
                     format_location(loc) + ")");
  };
  if (!is_integer(indices.dtype()))
    throw TypeError("take_along_axis(" + x.aval().str() + ", " + indices.aval().str() + "): indices must be integers (at " +
                    format_location(loc) + ")");
  if (indices.ndim() != x.ndim()) fail("indices must have the operand's rank");
  const auto a = static_cast<std::size_t>(axis);
  Shape out = indices.shape();
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (d == a) continue;
    const std::int64_t xd = x.shape()[d], id = indices.shape()[d];
    if (xd != id && xd != 1 && id != 1) fail("axis " + std::to_string(d) + " does not broadcast");
    out[d] = xd == 1 ? id : xd;
  }
  // The flat position in x of each output element: its coordinates on the other axes (0 where x
  // has size 1) and the index, normalized and clamped, on `axis`.
  const DType it = x.size() > std::int64_t{1} << 30 ? i64 : i32;
  const std::int64_t n = x.shape()[a];
  // Normalized and clamped in i32 or i64 (u32 / u64 widened, u64 capped: gather_index), then
  // narrowed: an i64 index past i32's range had been narrowed first and wrapped.
  Array idx = detail::gather_index(indices, loc);
  if (it == i64 && idx.dtype() != i64) idx = astype(idx, i64, loc);
  const DType wide = idx.dtype();
  idx = where(idx < 0, idx + n, idx, loc);
  idx = minimum(maximum(idx, scalar(0, wide), loc), scalar(static_cast<double>(std::max<std::int64_t>(n - 1, 0)), wide), loc);
  if (wide != it) idx = astype(idx, it, loc);
  std::int64_t stride = 1;
  Array flat = scalar(0, it);
  for (std::size_t d = out.size(); d-- > 0;) {
    Array coordinate = d == a ? broadcast_to(idx, out, loc) : iota(it, out, static_cast<std::int64_t>(d), loc);
    if (d == a || x.shape()[d] != 1) flat = flat + coordinate * stride;
    stride *= x.shape()[d];
  }
  flat = broadcast_to(flat, out, loc);
  // the clamped gather itself: take refuses an empty axis, where take_along_axis reads zeros
  const Array rows = reshape(x, {x.size()}, loc), index = detail::gather_index(reshape(flat, {shape_size(out)}, loc), loc);
  return reshape(bind1(P::gather, {rows, index}, params::Gather{.axis = 0, .fill_or_drop = false}, loc), out, loc);
}

Array iota(DType dtype, const Shape& shape, std::int64_t dimension, std::source_location loc) {
  return detail::bind1(P::iota, std::span<const Array>{}, params::Iota{.dtype = dtype, .shape = shape, .dimension = dimension}, loc);
}

namespace {
/// x's matrices (last two axes) with the entries where `keep(column - row)` fails set to zero.
template <class Keep> Array triangle(const char* name, const Array& x, Keep keep, std::source_location loc) {
  if (x.ndim() < 2)
    throw ShapeError(std::string(name) + "(" + x.aval().str() + "): needs at least two dimensions (at " + format_location(loc) + ")");
  const Shape s{x.dim(-2), x.dim(-1)};
  const Array offset = sub(iota(i64, s, 1, loc), iota(i64, s, 0, loc), loc);  // column - row
  return where(keep(offset), x, zeros_like(x), loc);  // zeros of x's dtype: bool stays bool
}
/// k as an i64 scalar, clamped to [-rows, cols] (beyond those every entry is on one side; a k
/// near the int64 limits would not survive the round trip through double).
Array diagonal_offset(const Array& x, std::int64_t k) {
  return scalar(static_cast<double>(std::clamp<std::int64_t>(k, -x.dim(-2), x.dim(-1))), i64);
}
}  // namespace

Array tril(const Array& x, std::int64_t k, std::source_location loc) {
  return triangle("tril", x, [&](const Array& d) { return le(d, diagonal_offset(x, k), loc); }, loc);
}

Array triu(const Array& x, std::int64_t k, std::source_location loc) {
  return triangle("triu", x, [&](const Array& d) { return ge(d, diagonal_offset(x, k), loc); }, loc);
}

Array matrix_transpose(const Array& x, std::source_location loc) {
  if (x.ndim() < 2)
    throw ShapeError("matrix_transpose(" + x.aval().str() + "): needs at least two dimensions (at " + format_location(loc) + ")");
  Axes perm(static_cast<std::size_t>(x.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm, loc);
}

// The diagonal of an (n, m) matrix is every (m + 1)-th element of its n * m elements, from
// `offset` (above the main diagonal) or -offset * m (below it): one strided slice of the
// flattened matrices, so its transpose is a pad (no gather).
Array diagonal(const Array& x, std::int64_t offset, std::int64_t axis1, std::int64_t axis2, std::source_location loc) {
  axis1 = norm_axis(axis1, x.ndim(), "diagonal", x, loc);
  axis2 = norm_axis(axis2, x.ndim(), "diagonal", x, loc);
  if (axis1 == axis2)
    throw ShapeError("diagonal(" + x.aval().str() + "): axis1 and axis2 are both " + std::to_string(axis1) + " (at " + format_location(loc) + ")");
  Axes perm;
  for (std::int64_t d = 0; d < x.ndim(); ++d)
    if (d != axis1 && d != axis2) perm.push_back(d);
  Shape flat;
  for (std::int64_t d : perm) flat.push_back(x.dim(d));
  perm.push_back(axis1);
  perm.push_back(axis2);
  const std::int64_t n = x.dim(axis1), m = x.dim(axis2);
  const std::int64_t count = std::max<std::int64_t>(0, offset >= 0 ? std::min(n, m - offset) : std::min(n + offset, m));
  std::int64_t matrix_size = 0;
  if (__builtin_mul_overflow(n, m, &matrix_size)) {  // only an empty x has such matrices
    Shape out = flat;
    out.push_back(count);
    return zeros(out, x.dtype());
  }
  flat.push_back(matrix_size);
  const Array rows = reshape(transpose(x, perm, loc), flat, loc);
  const std::int64_t start = count == 0 ? 0 : (offset >= 0 ? offset : -offset * m);
  const std::int64_t limit = count == 0 ? 0 : start + (count - 1) * (m + 1) + 1;
  Axes starts(flat.size(), 0), limits = flat, strides(flat.size(), 1);
  starts.back() = start;
  limits.back() = limit;
  strides.back() = m + 1;
  return slice(rows, starts, limits, strides, loc);
}

Array trace(const Array& x, std::int64_t offset, std::int64_t axis1, std::int64_t axis2, std::source_location loc) {
  return sum(diagonal(x, offset, axis1, axis2, loc), {-1}, false, loc);
}

// Of two bool arrays, the AND (jnp.multiply of bools; mul takes no bools, as lax.mul).
Array outer(const Array& a, const Array& b, std::source_location loc) {
  const Array column = reshape(a, {a.size(), 1}, loc), row = reshape(b, {1, b.size()}, loc);
  if (a.dtype() == bool_ && b.dtype() == bool_) return logical_and(column, row, loc);
  return mul(column, row, loc);
}

Array Array::operator[](detail::Located<std::int64_t> index) const {
  if (valid() && ndim() == 0)
    throw ShapeError("x[i] indexes the leading axis; " + aval().str() + " has none (at " + format_location(index.loc) + ")");
  std::int64_t i = index.value, n = dim(0);
  if (i < -n || i >= n)
    throw ShapeError("index " + std::to_string(i) + " out of range for " + aval().str() + " (at " + format_location(index.loc) + ")");
  if (i < 0) i += n;
  return squeeze(slice_in_dim(*this, i, i + 1, 1, 0, index.loc), {0}, index.loc);
}

Array Array::operator[](detail::Located<Array> index) const {
  const Array& i = index.value;
  if (valid() && ndim() == 0)  // a rank-0 x wrote sizes[0] of an empty shape (a crash)
    throw ShapeError("x[i] indexes the leading axis; " + aval().str() + " has none (at " + format_location(index.loc) + ")");
  // an array of integer indices gathers rows, as jnp's x[idx] (negative ones from the end, the
  // rest clamped); a bool mask is an error there (its shape depends on its values)
  if (i.valid() && i.ndim() > 0) {
    if (is_integer(i.dtype())) return at(*this, i, index.loc).get(index.loc);
    throw TypeError("x[idx] takes an array of integer indices; got " + i.aval().str() +
                    (i.dtype() == bool_ ? " (a boolean mask's result shape depends on its values: where(mask, x, 0) keeps the shape)" : "") +
                    " (at " + format_location(index.loc) + ")");
  }
  std::vector<Array> starts{i};
  for (std::int64_t d = 1; d < ndim(); ++d) starts.push_back(scalar(0, i.dtype()));
  Shape sizes = shape();
  sizes[0] = 1;
  return squeeze(dynamic_slice(*this, starts, sizes, index.loc), {0}, index.loc);
}

// ---- operators: each is the named op at the operand's recorded location ----------------------

namespace {
/// The operand's array; an empty handle is an error naming the operator's line.
const Array& checked(const ArrayOperand& x) {
  if (!x.value.valid())
    throw Error("an operand of an operator is an empty xj::Array (default-constructed, no value) (at " + format_location(x.loc) + ")");
  return x.value;
}
}  // namespace

Array operator-(ArrayOperand x) { return neg(checked(x), x.loc); }
Array operator&(ArrayOperand a, ArrayOperand b) { return bitwise_and(checked(a), checked(b), a.loc); }
Array operator|(ArrayOperand a, ArrayOperand b) { return bitwise_or(checked(a), checked(b), a.loc); }
Array operator^(ArrayOperand a, ArrayOperand b) { return bitwise_xor(checked(a), checked(b), a.loc); }
Array operator~(ArrayOperand x) { return bitwise_not(checked(x), x.loc); }
Array operator+(ArrayOperand a, ArrayOperand b) { return add(checked(a), checked(b), a.loc); }
Array operator-(ArrayOperand a, ArrayOperand b) { return sub(checked(a), checked(b), a.loc); }
Array operator*(ArrayOperand a, ArrayOperand b) { return mul(checked(a), checked(b), a.loc); }
Array operator/(ArrayOperand a, ArrayOperand b) { return true_divide(checked(a), checked(b), a.loc); }
Array operator+(ArrayOperand a, detail::Scalar b) { return add(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator-(ArrayOperand a, detail::Scalar b) { return sub(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator*(ArrayOperand a, detail::Scalar b) { return mul(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator/(ArrayOperand a, detail::Scalar b) { return true_divide(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator+(detail::Scalar a, ArrayOperand b) { return add(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator-(detail::Scalar a, ArrayOperand b) { return sub(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator*(detail::Scalar a, ArrayOperand b) { return mul(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator/(detail::Scalar a, ArrayOperand b) { return true_divide(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator==(ArrayOperand a, ArrayOperand b) { return eq(checked(a), checked(b), a.loc); }
Array operator!=(ArrayOperand a, ArrayOperand b) { return ne(checked(a), checked(b), a.loc); }
Array operator<(ArrayOperand a, ArrayOperand b) { return lt(checked(a), checked(b), a.loc); }
Array operator<=(ArrayOperand a, ArrayOperand b) { return le(checked(a), checked(b), a.loc); }
Array operator>(ArrayOperand a, ArrayOperand b) { return gt(checked(a), checked(b), a.loc); }
Array operator>=(ArrayOperand a, ArrayOperand b) { return ge(checked(a), checked(b), a.loc); }
Array operator==(ArrayOperand a, detail::Scalar b) { return eq(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator!=(ArrayOperand a, detail::Scalar b) { return ne(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator<(ArrayOperand a, detail::Scalar b) { return lt(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator<=(ArrayOperand a, detail::Scalar b) { return le(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator>(ArrayOperand a, detail::Scalar b) { return gt(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator>=(ArrayOperand a, detail::Scalar b) { return ge(checked(a), weak_scalar(b, checked(a)), a.loc); }
Array operator==(detail::Scalar a, ArrayOperand b) { return eq(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator!=(detail::Scalar a, ArrayOperand b) { return ne(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator<(detail::Scalar a, ArrayOperand b) { return lt(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator<=(detail::Scalar a, ArrayOperand b) { return le(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator>(detail::Scalar a, ArrayOperand b) { return gt(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array operator>=(detail::Scalar a, ArrayOperand b) { return ge(weak_scalar(a, checked(b)), checked(b), b.loc); }
Array& operator+=(Array& a, ArrayOperand b) { return a = add(a, checked(b), b.loc); }
Array& operator-=(Array& a, ArrayOperand b) { return a = sub(a, checked(b), b.loc); }
Array& operator*=(Array& a, ArrayOperand b) { return a = mul(a, checked(b), b.loc); }
Array& operator/=(Array& a, ArrayOperand b) { return a = true_divide(a, checked(b), b.loc); }
Array& operator+=(Array& a, detail::Located<detail::Scalar> b) { return a = add(a, weak_scalar(b.value, a), b.loc); }
Array& operator-=(Array& a, detail::Located<detail::Scalar> b) { return a = sub(a, weak_scalar(b.value, a), b.loc); }
Array& operator*=(Array& a, detail::Located<detail::Scalar> b) { return a = mul(a, weak_scalar(b.value, a), b.loc); }
Array& operator/=(Array& a, detail::Located<detail::Scalar> b) { return a = true_divide(a, weak_scalar(b.value, a), b.loc); }

// ---- logic, clamp, argmin (compositions) ------------------------------------------------------

namespace {
/// x != 0 as bool (x itself when bool).
Array truth(const Array& x, const std::source_location& loc) { return x.dtype() == bool_ ? x : ne(x, scalar(0.0, x.dtype()), loc); }
}  // namespace

Array argmin(const Array& x, std::int64_t axis, DType index_dtype, std::source_location loc) {
  return arg_reduce(P::argmin, "argmin", x, axis, index_dtype, loc);
}

// all / any: reduce_and / reduce_or of x != 0 (an empty reduction is true / false).
Array all(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_and, truth(x, loc), axes, keepdims, loc);
}
Array any(const Array& x, const Axes& axes, bool keepdims, std::source_location loc) {
  return reduce(P::reduce_or, truth(x, loc), axes, keepdims, loc);
}

Array logical_not(const Array& x, std::source_location loc) {
  return eq(x, scalar(0.0, x.dtype()), loc);
}
Array logical_and(const Array& a, const Array& b, std::source_location loc) {
  const Array tb = truth(b, loc);
  return where(truth(a, loc), tb, scalar(0.0, bool_), loc);
}
Array logical_or(const Array& a, const Array& b, std::source_location loc) {
  const Array tb = truth(b, loc);
  return where(truth(a, loc), scalar(1.0, bool_), tb, loc);
}

Array is_finite(const Array& x, std::source_location loc) {
  if (!is_floating(x.dtype())) return full(x.shape(), 1.0, bool_);
  return bind1(P::is_finite, {x}, {}, loc);
}

// The primitive takes bounds of x's dtype that are scalars or of x's shape: the three operands
// promoted, x broadcast to the common shape, and each bound of another shape broadcast to it.
Array clamp(const Array& lo, const Array& x, const Array& hi, std::source_location loc) {
  auto ops = promoted(P::clamp, {lo, x, hi}, loc);
  const Shape shape = broadcast_shapes(broadcast_shapes(ops[0].shape(), ops[1].shape()), ops[2].shape());
  for (std::size_t i = 0; i < 3; ++i)
    if ((i == 1 || ops[i].ndim() != 0) && ops[i].shape() != shape) ops[i] = broadcast_to(ops[i], shape, loc);
  return bind1(P::clamp, ops, {}, loc);
}
// The bounds weakly typed (they were converted to x's dtype: -0.5 on an i32 array became 0).
// Integer bounds on a narrow integer x (the result x's dtype) saturate to its range (clamping a
// u8 to 300 is clamping it to 255; the bound wrapped to 44); with a float bound the result is a
// float and the bounds stand. 64-bit ranges are not exact in a double: those bounds are checked
// as any C++ number mixed with an array (outside the range, an error).
Array clamp(detail::Scalar lo, const Array& x, detail::Scalar hi, std::source_location loc) {
  // a float bound on an integer x: both bounds made in the float dtype the result has (an
  // integer bound made in x's dtype first wrapped: 200 on i8 was -56)
  const auto is_float = [](const detail::Scalar& s) { return !s.integer && !s.boolean; };  // a C++ bool is a bool
  if (!is_floating(x.dtype()) && (is_float(lo) || is_float(hi)) && promotion_mode() == PromotionMode::standard) {
    const DType d = detail::weak_result(x.dtype(), false);
    return clamp(detail::weakly_typed(scalar(lo.value, d)), x, detail::weakly_typed(scalar(hi.value, d)), loc);
  }
  const bool keeps_dtype = lo.integer && hi.integer && is_integer(x.dtype()) && itemsize(x.dtype()) < 8;
  const auto in_range = [&x, keeps_dtype](detail::Scalar s) {
    if (!keeps_dtype) return s;
    const IntInfo r = iinfo(x.dtype());
    return detail::Scalar(static_cast<std::int64_t>(std::clamp(s.value, static_cast<double>(r.min), static_cast<double>(r.max))));
  };
  return clamp(weak_scalar(in_range(lo), x), x, weak_scalar(in_range(hi), x), loc);
}

// ---- roll, tile, repeat, split, linspace (compositions) ---------------------------------------

Array roll(const Array& x, std::int64_t shift, std::optional<std::int64_t> axis, std::source_location loc) {
  if (!axis) return reshape(roll(reshape(x, {x.size()}, loc), shift, 0, loc), x.shape(), loc);
  const std::int64_t a = norm_axis(*axis, x.ndim(), "roll", x, loc), n = x.dim(a);
  if (n == 0) return x;
  const std::int64_t s = ((shift % n) + n) % n;  // out[i] = x[(i - s) mod n]
  if (s == 0) return x;
  return concatenate({slice_in_dim(x, n - s, n, 1, a, loc), slice_in_dim(x, 0, n - s, 1, a, loc)}, a, loc);
}

// No axes flip nothing (jnp.flip(x, axis=())); flip(x) flips every axis (axis=None).
Array flip(const Array& x, const Axes& axes, std::source_location loc) {
  const Axes dims = axes.empty() ? Axes{} : norm_axes(axes, x.ndim(), "flip", x, loc);
  return bind1(P::rev, {x}, params::Rev{.dimensions = dims}, loc);
}

Array detail::flip_axis(const Array& x, std::int64_t axis, std::source_location loc) { return flip(x, Axes{axis}, loc); }

Array flip(const Array& x, std::nullopt_t, std::source_location loc) {
  return bind1(P::rev, {x}, params::Rev{.dimensions = norm_axes({}, x.ndim(), "flip", x, loc)}, loc);
}

std::vector<Array> sort(const std::vector<Array>& operands, std::int64_t dimension, std::int64_t num_keys,
                        std::source_location loc) {
  if (operands.empty()) throw TypeError("sort: no operands (at " + format_location(loc) + ")");
  const std::int64_t d = norm_axis(dimension, operands[0].ndim(), "sort", operands[0], loc);
  return detail::bind(P::sort, operands, params::Sort{.dimension = d, .is_stable = true, .num_keys = num_keys}, loc);
}

Array sort(const Array& x, std::int64_t dimension, bool, std::source_location loc) {
  return sort(std::vector<Array>{x}, dimension, 1, loc)[0];
}

Array argsort(const Array& x, std::int64_t axis, std::source_location loc) {
  const std::int64_t a = norm_axis(axis, x.ndim(), "argsort", x, loc);
  // i32 indices, as xjax's argsort has always returned; an axis they cannot number is an error
  // (its indices wrapped; a hunt of the thirty-fifth session)
  if (!detail::numbers_positions(i32, x.shape(), a))
    throw ShapeError("argsort: the axis has " + std::to_string(x.shape()[static_cast<std::size_t>(a)]) +
                     " elements, more than i32 indices can number (at " + format_location(loc) + ")");
  return sort(std::vector<Array>{x, iota(i32, x.shape(), a, loc)}, a, 1, loc)[1];
}

// lax.top_k: one primitive (a partial sort per line).
std::pair<Array, Array> top_k(const Array& x, std::int64_t k, std::source_location loc) {
  const std::vector<Array> out = detail::bind(P::top_k, std::span<const Array>(&x, 1), params::TopK{.k = k}, loc);
  return {out[0], out[1]};
}

#define XJAX_CUMULATIVE_OP(name)                                                                              \
  Array name(const Array& x, std::int64_t axis, bool reverse, std::source_location loc) {                     \
    return bind1(P::name, {x}, params::Cumulative{.axis = norm_axis(axis, x.ndim(), #name, x, loc), .reverse = reverse}, \
                 loc);                                                                                        \
  }
XJAX_CUMULATIVE_OP(cumsum)
XJAX_CUMULATIVE_OP(cumprod)
XJAX_CUMULATIVE_OP(cummax)
XJAX_CUMULATIVE_OP(cummin)
XJAX_CUMULATIVE_OP(cumlogsumexp)
#undef XJAX_CUMULATIVE_OP

namespace {

/// x[start], x[start + 2], ... (below `limit`) along `axis`.
Array every_other(const Array& x, std::int64_t start, std::int64_t limit, std::int64_t axis, std::source_location loc) {
  Axes lo(static_cast<std::size_t>(x.ndim()), 0), hi(x.shape().begin(), x.shape().end()), step(lo.size(), 1);
  const auto a = static_cast<std::size_t>(axis);
  lo[a] = start;
  hi[a] = std::max(start, limit);
  step[a] = 2;
  return slice(x, lo, hi, step, loc);
}

/// even[0], odd[0], even[1], odd[1], ... along `axis` (even has as many elements as odd, or one
/// more): each spread out by interior padding, then selected by position (no arithmetic, so
/// -0, infinities and NaN come through unchanged).
Array interleave(const Array& even, const Array& odd, std::int64_t axis, std::source_location loc) {
  const auto a = static_cast<std::size_t>(axis);
  const bool same = even.dim(axis) == odd.dim(axis);
  const auto spread = [&](const Array& v, std::int64_t lo, std::int64_t hi) {
    params::Pad ps{.lo = Axes(static_cast<std::size_t>(v.ndim()), 0), .hi = Axes(static_cast<std::size_t>(v.ndim()), 0),
                   .interior = Axes(static_cast<std::size_t>(v.ndim()), 0)};
    ps.lo[a] = lo;
    ps.hi[a] = hi;
    ps.interior[a] = 1;
    return bind1(P::pad, {v, scalar(0.0, v.dtype())}, ps, loc);
  };
  const Array at_even = spread(full(even.shape(), 1.0, bool_), 0, same ? 1 : 0);
  return select(at_even, spread(even, 0, same ? 1 : 0), spread(odd, 1, same ? 0 : 1), loc);
}

// Inclusive prefix scan along `axis` by the odd/even recursion: combine neighbouring pairs, scan
// those (the results at odd positions), then each even position is the previous odd result
// combined with its own element.
Array prefix_scan(const std::function<Array(const Array&, const Array&)>& fn, const Array& x, std::int64_t axis,
                  std::source_location loc) {
  const std::int64_t n = x.dim(axis);
  if (n < 2) return x;
  const Array pairs = fn(every_other(x, 0, n - 1, axis, loc), every_other(x, 1, n, axis, loc));
  const Array odd = prefix_scan(fn, pairs, axis, loc);
  const Array later_evens = every_other(x, 2, n, axis, loc);
  const Array odd_before = n % 2 == 0 ? slice_in_dim(odd, 0, odd.dim(axis) - 1, 1, axis, loc) : odd;
  const Array even = concatenate({slice_in_dim(x, 0, 1, 1, axis, loc), fn(odd_before, later_evens)}, axis, loc);
  return interleave(even, odd, axis, loc);
}

}  // namespace

Array associative_scan(const std::function<Array(const Array&, const Array&)>& fn, const Array& x, bool reverse,
                       std::int64_t axis, std::source_location loc) {
  const std::int64_t a = norm_axis(axis, x.ndim(), "associative_scan", x, loc);
  const auto checked = [&](const Array& l, const Array& r) {
    Array out = fn(l, r);
    if (out.aval() != l.aval())
      throw TypeError("associative_scan: fn returns " + out.aval().str() + " for operands " + l.aval().str() +
                      " (slices of x, " + x.aval().str() + "); it must keep their shape and dtype (at " + format_location(loc) + ")");
    return out;
  };
  if (!reverse) return prefix_scan(checked, x, a, loc);
  return flip(prefix_scan(checked, flip(x, a, loc), a, loc), a, loc);
}

namespace {

// log(e^a + e^b) = max + log1p(e^-|a - b|); a - b is NaN for two infinities of one sign (their
// sum is the answer) or a NaN operand (NaN either way).
Array logaddexp_value(const Array& a, const Array& b, const std::source_location& loc) {
  const Array m = maximum(a, b, loc);
  const Array d = sub(a, b, loc);
  const Array nan_d = ne(d, d, loc);
  // d made finite where it is NaN before the branch that is not taken there, so that its
  // derivative is not NaN either (reverse mode multiplies the unselected branch's by zero).
  const Array safe_d = where(nan_d, 0.0, d, loc);
  const Array finite = add(m, log1p(exp(neg(abs(safe_d, loc), loc), loc), loc), loc);
  return where(nan_d, add(a, b, loc), finite, loc);
}

// d logaddexp(a, b) = da e^(a - out) + db e^(b - out) = da logistic(d) + db logistic(-d),
// d = a - b: from the difference (exact for operands far larger than their difference, where
// out's rounding would spoil e^(a - out), and smooth at a == b to every order). d is NaN for two
// equal infinities (out = a + b: weights 1) or a NaN operand (NaN); made finite first there, so
// that no branch not taken holds a NaN.
Array logaddexp_tangent(const Array& a, const Array& b, const Array& out, const Array& da, const Array& db,
                        const std::source_location& loc) {
  const Array d = sub(a, b, loc);
  const Array nan_d = ne(d, d, loc);
  const Array safe_d = where(nan_d, 0.0, d, loc);
  const Array at_nan_d = where(ne(out, out, loc), out, ones_like(out), loc);
  const Array wa = where(nan_d, at_nan_d, logistic(safe_d, loc), loc);
  const Array wb = where(nan_d, at_nan_d, logistic(neg(safe_d, loc), loc), loc);
  return add(mul(da, wa, loc), mul(db, wb, loc), loc);
}

}  // namespace

// The value's composition is smooth, but its pieces' kinks at a == b (max, |a - b|) cancel only
// in value and slope: differentiated twice it gave 0 there instead of 1/4 (as softplus did;
// src/lean_composites.cpp). So the derivative is a rule, as JAX's logaddexp's is.
// Integers and bools in f64 (jnp's promote_args_inexact: a - b wrapped in i8).
Array logaddexp(const Array& a, const Array& b, std::source_location loc) {
  auto ab = promoted(P::max, {a, b}, loc);
  if (!is_floating(ab[0].dtype())) ab = {detail::as_inexact(ab[0], loc), detail::as_inexact(ab[1], loc)};
  const auto [x, y] = broadcast_pair(P::max, ab[0], ab[1], loc);
  auto f = [loc](const Array& u, const Array& v) { return logaddexp_value(u, v, loc); };
  const auto with_rule = custom_jvp(f, [f, loc](const std::tuple<Array, Array>& p, const std::tuple<Array, Array>& t) {
    const auto& [u, v] = p;
    const auto& [du, dv] = t;
    const Array out = f(u, v);
    return std::pair{out, logaddexp_tangent(u, v, out, du, dv, loc)};
  }, loc);
  return detail::rounded_once_when_eager({x, y}, [&](const std::vector<Array>& uv) { return with_rule(uv[0], uv[1]); }, loc);
}

// x (a_0 .. a_k) broadcast to (r_0, a_0, r_1, a_1, ...), then merged pairwise to (r_0 a_0, ...).
Array tile(const Array& x, const Shape& reps_in, std::source_location loc) {
  for (std::int64_t r : reps_in)
    if (r < 0) axis_fail("tile", x, "reps must be non-negative", loc);
  const std::size_t rank = std::max(reps_in.size(), static_cast<std::size_t>(x.ndim()));
  Shape reps(rank - reps_in.size(), 1), shape(rank - static_cast<std::size_t>(x.ndim()), 1);
  reps.insert(reps.end(), reps_in.begin(), reps_in.end());
  shape.insert(shape.end(), x.shape().begin(), x.shape().end());
  Shape wide, merged;
  Axes dims;
  for (std::size_t d = 0; d < rank; ++d) {
    wide.push_back(reps[d]);
    wide.push_back(shape[d]);
    dims.push_back(static_cast<std::int64_t>(2 * d + 1));
    merged.push_back(reps[d] * shape[d]);
  }
  return reshape(broadcast_in_dim(reshape(x, shape, loc), wide, dims, loc), merged, loc);
}

// x (.., n, ..) broadcast to (.., n, r, ..) along a new axis after `axis`, then merged to n r.
Array repeat(const Array& x, std::int64_t repeats, std::optional<std::int64_t> axis, std::source_location loc) {
  if (repeats < 0) axis_fail("repeat", x, "repeats must be non-negative", loc);
  if (!axis) return repeat(reshape(x, {x.size()}, loc), repeats, 0, loc);
  const std::int64_t a = norm_axis(*axis, x.ndim(), "repeat", x, loc);
  Shape wide = x.shape(), merged = x.shape();
  wide.insert(wide.begin() + a + 1, repeats);
  merged[static_cast<std::size_t>(a)] *= repeats;
  Axes dims;
  for (std::int64_t d = 0; d < x.ndim(); ++d) dims.push_back(d <= a ? d : d + 1);
  return reshape(broadcast_in_dim(x, wide, dims, loc), merged, loc);
}

std::vector<Array> detail::split_sections(const Array& x, std::int64_t sections, std::int64_t axis, std::source_location loc) {
  const std::int64_t a = norm_axis(axis, x.ndim(), "split", x, loc), n = x.dim(a);
  if (sections <= 0 || n % sections != 0)
    axis_fail("split", x, std::to_string(sections) + " sections do not divide axis " + std::to_string(a) + " of size " + std::to_string(n) +
                              " equally",
              loc);
  std::vector<std::int64_t> at;
  for (std::int64_t k = 1; k < sections; ++k) at.push_back(k * (n / sections));
  return split(x, at, a, loc);
}

// The pieces between consecutive split points, clipped to the axis (NumPy: a point past the end
// gives empty pieces, a point before the previous one an empty piece, and the next piece starts
// at it).
std::vector<Array> split(const Array& x, const std::vector<std::int64_t>& indices, std::int64_t axis, std::source_location loc) {
  const std::int64_t a = norm_axis(axis, x.ndim(), "split", x, loc), n = x.dim(a);
  std::vector<Array> out;
  std::int64_t from = 0;
  auto clip = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  for (std::size_t k = 0; k <= indices.size(); ++k) {
    const std::int64_t to = k < indices.size() ? clip(indices[k]) : n;
    out.push_back(slice_in_dim(x, from, std::max(from, to), 1, a, loc));
    from = to;
  }
  return out;
}

// start + i (stop - start) / (num - 1) in double (numpy's form: exact integers for integer
// steps), the last value stop itself (endpoint), or start + i (stop - start) / num; where
// stop - start overflows, JAX's start (1 - t) + stop t with t = i / (num - 1) (or i / num).
Array linspace(double start, double stop, std::int64_t num, DType dtype, bool endpoint, std::source_location loc) {
  if (num < 0)
    throw ShapeError("linspace(" + std::to_string(start) + ", " + std::to_string(stop) + ", " + std::to_string(num) +
                     "): num must be non-negative (at " + format_location(loc) + ")");
  if (static_cast<std::uint64_t>(num) > std::vector<double>().max_size())  // std::length_error escaped
    throw Error("linspace: " + std::to_string(num) + " elements exceed any memory (at " + format_location(loc) + ")");
  std::vector<double> v(static_cast<std::size_t>(num));
  const double div = endpoint ? static_cast<double>(num - 1) : static_cast<double>(num);
  const bool span_overflows = !std::isfinite(stop - start) && std::isfinite(start) && std::isfinite(stop);
  for (std::int64_t i = 0; i < num; ++i) {
    const double k = static_cast<double>(i);
    v[static_cast<std::size_t>(i)] = div <= 0        ? start
                                     : span_overflows ? start * (1.0 - k / div) + stop * (k / div)
                                                      : start + k * ((stop - start) / div);
  }
  if (endpoint && num > 1) v.back() = stop;
  if (is_integer(dtype))
    for (double& e : v) e = std::floor(e);  // JAX floors into an integer dtype (astype truncates)
  return astype(array<double>(v, {num}), dtype, loc);
}

std::ostream& operator<<(std::ostream& os, const Array& x) {
  if (!x.valid()) return os << "Array(empty)";
  if (x.is_tracer()) return os << "Traced<" << x.aval() << ">";
  os << x.aval() << " [";
  // At most 64 elements; integers exactly (through double they printed 2147483647 as 2.14748e+09).
  const auto print_all = [&](const auto& v) {
    for (std::size_t i = 0; i < v.size() && i < 64; ++i) os << (i ? ", " : "") << v[i];
  };
  if (x.dtype() == u64) print_all(x.to_vector<std::uint64_t>());
  else if (is_integer(x.dtype())) print_all(x.to_vector<std::int64_t>());
  else if (!is_floating(x.dtype())) print_all(x.to_vector<double>());
  else {
    // floats in their shortest round-trip form (6 significant digits made 1.0000001 print as 1),
    // NaN unsigned ("nan", as numpy; glibc printed "-nan")
    std::vector<std::string> shown;
    for (double v : x.to_vector<double>()) {
      char buf[64];
      const auto end = x.dtype() == f64 ? std::to_chars(buf, buf + sizeof buf, v).ptr : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v)).ptr;
      std::string text(buf, end);
      // bf16 / f16: the fewest digits that read back to the same narrow value (0.1, not 0.100097656)
      if (x.dtype() == bf16 || x.dtype() == f16)
        for (int digits = 1; digits <= 9; ++digits) {
          const auto [short_end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, digits);
          const double back = std::strtod(std::string(buf, short_end).c_str(), nullptr);
          const bool same = x.dtype() == bf16 ? bfloat16_t(back).bits == bfloat16_t(v).bits : float16_t(back).bits == float16_t(v).bits;
          if (ec == std::errc() && same) {
            text.assign(buf, short_end);
            break;
          }
        }
      shown.push_back(std::isnan(v) ? "nan" : text);
      if (shown.size() == 64) break;
    }
    print_all(shown);
  }
  if (x.size() > 64) os << ", ...";
  return os << "]";
}

}  // namespace xjax
