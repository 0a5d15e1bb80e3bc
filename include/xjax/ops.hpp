// ops.hpp: user-level operations (NumPy-like). Each is one primitive application or a short
// composition of them; all are traceable. Binary operations broadcast NumPy-style; the traced
// jaxpr shows the broadcasts as explicit broadcast_in_dim equations. Operands of different dtypes
// are promoted as JAX promotes them (promote_types, x64 enabled: convert_element_type equations
// appear in the jaxpr); a C++ number mixed with an array is weakly typed (detail::Scalar). The trailing `loc` parameter records the
// caller's source line for error messages and saved-residual reports; never pass it explicitly.
#pragma once
#include <concepts>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "xjax/detail/function.hpp"
#include "xjax/array.hpp"

namespace xjax {

#define XJAX_LOC std::source_location loc = std::source_location::current()
using Axes = std::vector<std::int64_t>;

namespace detail {
/// A C++ number mixed with an array, weakly typed (JAX's Python scalars): an integer adopts the
/// array's dtype (bool arrays become i32); a floating-point number adopts a float array's dtype
/// and makes an operation on integers or bools a float one (f32, xjax's default float). A C++
/// bool is a strong bool, as a Python bool in JAX (`b + true` is a bool; it was a float).
struct Scalar {
  double value;
  bool integer;
  bool boolean = false;
  Scalar(double v) : value(v), integer(false) {}  // NOLINT: implicit on purpose
  template <class T>
    requires std::is_same_v<T, bool>  // a template: a pointer, long double or enum must not reach it
  Scalar(T v) : value(v ? 1.0 : 0.0), integer(false), boolean(true) {}  // NOLINT: implicit on purpose
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Scalar(T v) : value(static_cast<double>(v)), integer(true) {}  // NOLINT: implicit on purpose
};
/// An operand of result_type: a dtype, strong (a DType, an array's) or weak (a C++ number, a
/// weakly typed array's: JAX's result_type reads an array's weak_type).
struct TypeOperand {
  DType dtype = f32;
  bool weak = false, integer = false;
};
TypeOperand type_operand(const Array& a);
inline TypeOperand type_operand(DType d) { return {d}; }
inline TypeOperand type_operand(Scalar s) { return s.boolean ? TypeOperand{bool_} : TypeOperand{s.integer ? i32 : f32, true, s.integer}; }
DType result_type_of(std::span<const TypeOperand> operands);
/// The dtype of a C++ number (integer or not) mixed with an array of `array_dtype`.
DType weak_result(DType array_dtype, bool integer);
/// The join of strong dtypes all at once (JAX's promote_dtypes): folding promote_types pairwise is
/// not associative where u64 and a signed integer meet at f* (i64, u64, f32 gave f64, f32 first f32).
DType promote_types_of(std::span<const DType> dtypes);
}  // namespace detail

/// JAX's result_type: the dtype an operation on these operands computes in and returns (Arrays,
/// DTypes and C++ numbers, the latter weakly typed), by promote_types' lattice.
template <class... Ts> DType result_type(const Ts&... xs) {
  const detail::TypeOperand operands[] = {detail::type_operand(xs)...};
  return detail::result_type_of(operands);
}

// ---- elementwise, unary -----------------------------------------------------------------------
Array neg(const Array& x, XJAX_LOC);
Array exp(const Array& x, XJAX_LOC);
Array log(const Array& x, XJAX_LOC);
Array log1p(const Array& x, XJAX_LOC);
Array expm1(const Array& x, XJAX_LOC);
Array sin(const Array& x, XJAX_LOC);
Array cos(const Array& x, XJAX_LOC);
Array tan(const Array& x, XJAX_LOC);
Array tanh(const Array& x, XJAX_LOC);
/// lax's inverse trigonometric and hyperbolic functions, erf / erfc, cbrt, exp2 / log2, and floor /
/// ceil (zero derivative, as JAX); floating-point operands (integers: convert with xj::astype).
Array asin(const Array& x, XJAX_LOC);
Array acos(const Array& x, XJAX_LOC);
Array atan(const Array& x, XJAX_LOC);
Array sinh(const Array& x, XJAX_LOC);
Array cosh(const Array& x, XJAX_LOC);
Array asinh(const Array& x, XJAX_LOC);
Array acosh(const Array& x, XJAX_LOC);
Array atanh(const Array& x, XJAX_LOC);
Array erf(const Array& x, XJAX_LOC);
Array erfc(const Array& x, XJAX_LOC);
Array cbrt(const Array& x, XJAX_LOC);
Array exp2(const Array& x, XJAX_LOC);
Array log2(const Array& x, XJAX_LOC);
/// lax.lgamma (log |Gamma(x)|), lax.digamma (its derivative psi; NaN at 0, -1, -2, ... as XLA)
/// and lax.erf_inv (the inverse of erf on (-1, 1); +-inf at +-1, NaN beyond); floats.
Array lgamma(const Array& x, XJAX_LOC);
Array digamma(const Array& x, XJAX_LOC);
Array erf_inv(const Array& x, XJAX_LOC);
/// lax.RoundingMethod: how round treats halfway cases.
enum class RoundingMethod { away_from_zero = 0, to_nearest_even = 1 };
/// lax.round: the nearest integer value (same float dtype); halfway cases away from zero (lax's
/// default) or to the nearest even one (jnp.round's). Zero derivative, as JAX.
Array round(const Array& x, RoundingMethod method = RoundingMethod::away_from_zero, XJAX_LOC);
/// lax.atan2(y, x) (jnp.arctan2): the angle of the point (x, y), atan(y / x) in the right
/// quadrant, in [-pi, pi]; floats.
Array atan2(const Array& y, const Array& x, XJAX_LOC);
/// lax's bitwise ops on integers and bool (and, or, xor, not) and integers (the shifts; an amount
/// that is negative or at least the bit width shifts everything out, as XLA: 0, or the sign for
/// the arithmetic right shift); population_count counts the set bits. Operands broadcast and
/// promote as the arithmetic ops do.
Array bitwise_and(const Array& a, const Array& b, XJAX_LOC);
Array bitwise_or(const Array& a, const Array& b, XJAX_LOC);
Array bitwise_xor(const Array& a, const Array& b, XJAX_LOC);
Array bitwise_not(const Array& x, XJAX_LOC);
Array shift_left(const Array& x, const Array& shift, XJAX_LOC);
Array shift_right_logical(const Array& x, const Array& shift, XJAX_LOC);
Array shift_right_arithmetic(const Array& x, const Array& shift, XJAX_LOC);
Array population_count(const Array& x, XJAX_LOC);
/// lax.rem: the remainder of the truncated quotient, with x's sign (C's fmod and %); integers
/// follow XLA at the edges: x rem 0 = x, MIN rem -1 = 0.
Array rem(const Array& x, const Array& y, XJAX_LOC);
/// lax.nextafter(x, y): the next representable float after x in the direction of y (y itself
/// when x == y; NaN when either is). Its derivative is dx (JAX defines none).
Array nextafter(const Array& x, const Array& y, XJAX_LOC);
/// jnp.floor_divide: floor(x / y) (integers: rounded toward minus infinity, x // 0 = 0 as xjax's
/// div). jnp.remainder (alias mod): x - floor_divide(x, y) y, with y's sign (Python's %).
Array floor_divide(const Array& x, const Array& y, XJAX_LOC);
Array remainder(const Array& x, const Array& y, XJAX_LOC);
Array mod(const Array& x, const Array& y, XJAX_LOC);
Array floor(const Array& x, XJAX_LOC);
Array ceil(const Array& x, XJAX_LOC);
Array sqrt(const Array& x, XJAX_LOC);
Array rsqrt(const Array& x, XJAX_LOC);
Array abs(const Array& x, XJAX_LOC);
Array sign(const Array& x, XJAX_LOC);
Array square(const Array& x, XJAX_LOC);
Array reciprocal(const Array& x, XJAX_LOC);
Array logistic(const Array& x, XJAX_LOC);
Array sigmoid(const Array& x, XJAX_LOC);
/// max(x, 0) with derivative 0 at 0 (jax.nn.relu's convention).
Array relu(const Array& x, XJAX_LOC);
/// tanh approximation, as jax.nn.gelu(approximate=True).
Array gelu(const Array& x, XJAX_LOC);
/// jax.nn.gelu(x, approximate): the tanh form above when true, else the exact
/// x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.
Array gelu(const Array& x, bool approximate, XJAX_LOC);
/// jax.nn.softplus: log(1 + e^x) (integers and bools in f64, as softmax and log_softmax).
Array softplus(const Array& x, XJAX_LOC);
Array integer_pow(const Array& x, std::int64_t n, XJAX_LOC);
Array stop_gradient(const Array& x, XJAX_LOC);
Array astype(const Array& x, DType dtype, XJAX_LOC);

// ---- elementwise, binary (broadcasting) -------------------------------------------------------
Array add(const Array& a, const Array& b, XJAX_LOC);
Array sub(const Array& a, const Array& b, XJAX_LOC);
Array mul(const Array& a, const Array& b, XJAX_LOC);
/// lax.div: integers divide with truncation toward zero (x / 0 = 0); `/` is true_divide.
Array div(const Array& a, const Array& b, XJAX_LOC);
/// jnp.true_divide (alias divide, and the operator `/`): integers and bools in f64, as jnp.
Array true_divide(const Array& a, const Array& b, XJAX_LOC);
Array divide(const Array& a, const Array& b, XJAX_LOC);
/// jnp.power: integers raised to integer powers wrap; a negative integer power of an integer is
/// 1 / x^|y| truncated (1 at x = 1, +-1 at x = -1, else 0).
Array pow(const Array& a, const Array& b, XJAX_LOC);
/// A C++ integer exponent is integer_pow in the base's dtype (jnp.power's concrete integer
/// powers; a negative one on integers is a TypeError); a double is a weak float.
Array pow(const Array& a, detail::Scalar b, XJAX_LOC);
Array maximum(const Array& a, const Array& b, XJAX_LOC);
Array minimum(const Array& a, const Array& b, XJAX_LOC);
Array eq(const Array& a, const Array& b, XJAX_LOC);
Array ne(const Array& a, const Array& b, XJAX_LOC);
Array lt(const Array& a, const Array& b, XJAX_LOC);
Array le(const Array& a, const Array& b, XJAX_LOC);
Array gt(const Array& a, const Array& b, XJAX_LOC);
Array ge(const Array& a, const Array& b, XJAX_LOC);
/// pred ? a : b elementwise, all three broadcast (jnp.where: a predicate that is not bool counts
/// where it is nonzero). `select` is its alias (API.md).
Array where(const Array& pred, const Array& a, const Array& b, XJAX_LOC);
Array where(const Array& pred, const Array& a, detail::Scalar b, XJAX_LOC);
Array where(const Array& pred, detail::Scalar a, const Array& b, XJAX_LOC);
Array select(const Array& pred, const Array& a, const Array& b, XJAX_LOC);

/// A C++ scalar as a rank-0 array of `like`'s dtype (weak typing).
Array scalar_like(double v, const Array& like);
/// NumPy broadcasting of two shapes; ShapeError when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- linear algebra ---------------------------------------------------------------------------
Array dot_general(const Array& a, const Array& b, const Axes& lhs_contracting,
                  const Axes& rhs_contracting, const Axes& lhs_batch = {},
                  const Axes& rhs_batch = {}, XJAX_LOC);
/// dot_general's options: `preferred_element_type`, the dtype of the result and of its
/// accumulation (JAX's parameter), e.g. f32 for bf16 operands. The operands are converted to it
/// first (convert_element_type in the jaxpr): products of bf16 / f16 values are exact in f32, so
/// this is accumulation in f32, and the gradients come back in the operands' dtypes.
struct DotOptions {
  std::optional<DType> preferred_element_type;
};
Array dot_general(const Array& a, const Array& b, const Axes& lhs_contracting, const Axes& rhs_contracting,
                  const Axes& lhs_batch, const Axes& rhs_batch, const DotOptions& options, XJAX_LOC);
/// One operand's side of dot_general's JAX-style dimension-number pairs below: a braced list of
/// axes (`{1}`, `{0, 2}`, `{}`). It converts from braced integers only, not from an Axes variable,
/// so `dot_general(a, b, {lc}, {rc})` with Axes variables keeps the flat overload's meaning.
struct DotAxes {
  DotAxes(std::initializer_list<std::int64_t> list) : axes(list) {}
  Axes axes;
};
/// JAX's spelling, dimension numbers as pairs (lhs axes, rhs axes): lax.dot_general(a, b,
/// ((lc, rc), (lb, rb))) is `dot_general(a, b, {{lc...}, {rc...}}, {{lb...}, {rb...}})`; an empty
/// `{}` is no axes on either side. Each list holds two axis lists or none (else xj::Error). Chosen
/// over the overload above only for nested braced integers (C++ prefers initializer_list
/// conversions), so `dot_general(a, b, {1}, {0})` stays the flat form; `{}` lists, though, take
/// this one (`dot_general(a, b, {}, {}, {}, {})`: an outer product whose sixth `{}` is the location).
Array dot_general(const Array& a, const Array& b, std::initializer_list<DotAxes> contracting,
                  std::initializer_list<DotAxes> batch = {}, const DotOptions& options = {}, XJAX_LOC);
/// NumPy matmul (1-D operands, broadcast batch dimensions).
Array matmul(const Array& a, const Array& b, XJAX_LOC);
/// NumPy dot.
Array dot(const Array& a, const Array& b, XJAX_LOC);
/// jnp.einsum: "bij,bjk->bik"; without "->" the output is the letters named once, sorted (NumPy's
/// implicit mode); "..." stands for the axes an operand's letters leave (broadcast, right-aligned;
/// an explicit output without "..." sums them); an axis of size 1 broadcasts against its label's
/// size. Operands contract pairwise in a greedy order (the smallest product next); bools give
/// the OR of ANDs.
Array einsum(const std::string& spec, const std::vector<Array>& operands, XJAX_LOC);
Array einsum(const std::string& spec, const Array& a, const Array& b, XJAX_LOC);
Array einsum(const std::string& spec, const Array& a, XJAX_LOC);

// ---- reductions (empty axes = all axes; negative axes count from the end) ---------------------
// sum and prod of integers narrower than 64 bits accumulate in i64 / u64 by signedness, bools in
// i64 (jnp's promote_integers=True: a sum of i32 does not wrap at 2^31); mean of integers and bools
// is f64 (jnp's). The primitives reduce_sum / reduce_prod (lax's) keep the dtype.
Array sum(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array mean(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
/// jnp.var: the mean of (x - mean(x))^2 over `axes` (all when empty), divided by N - ddof
/// instead of N; jnp.std: its square root.
Array var(const Array& x, const Axes& axes = {}, std::int64_t ddof = 0, bool keepdims = false, XJAX_LOC);
Array std(const Array& x, const Axes& axes = {}, std::int64_t ddof = 0, bool keepdims = false, XJAX_LOC);
/// (A bool where ddof goes is keepdims written one place early, as mean's third: refused.)
template <class B>
  requires std::same_as<B, bool>
Array var(const Array& x, const Axes& axes, B ddof, bool keepdims = false, XJAX_LOC) = delete;
template <class B>
  requires std::same_as<B, bool>
Array std(const Array& x, const Axes& axes, B ddof, bool keepdims = false, XJAX_LOC) = delete;
Array max(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array min(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array prod(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array argmax(const Array& x, std::int64_t axis, DType index_dtype = i32, XJAX_LOC);
/// The index of the first smallest element along `axis` (a NaN counts as the smallest, as JAX).
Array argmin(const Array& x, std::int64_t axis, DType index_dtype = i32, XJAX_LOC);
/// jnp.all / jnp.any: whether every / some element (non-zero) along `axes` (all axes when empty)
/// is true; bool. An empty reduction is true / false.
Array all(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array any(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
/// jnp.logical_and / or / not of any dtypes (non-zero is true), broadcasting; bool.
Array logical_and(const Array& a, const Array& b, XJAX_LOC);
Array logical_or(const Array& a, const Array& b, XJAX_LOC);
Array logical_not(const Array& x, XJAX_LOC);
/// lax.is_finite: neither infinite nor NaN, elementwise (bool; integers are always finite).
Array is_finite(const Array& x, XJAX_LOC);
/// lax.clamp(lo, x, hi) = min(max(x, lo), hi) elementwise (lo and hi broadcast; hi when lo > hi;
/// NaN when any operand is). Its derivative goes to x strictly inside the interval and to the
/// bound it equals otherwise (lax's gives 0 at a tie; a NaN x passes none). C++ numbers as bounds
/// are weakly typed, as jnp.clip's: clamp(-0.5, i32 array, 2.5) is a float, clamp(0, it, 9) i32.
Array clamp(const Array& lo, const Array& x, const Array& hi, XJAX_LOC);
Array clamp(detail::Scalar lo, const Array& x, detail::Scalar hi, XJAX_LOC);
Array logsumexp(const Array& x, const Axes& axes = {}, bool keepdims = false, XJAX_LOC);
Array softmax(const Array& x, std::int64_t axis = -1, XJAX_LOC);
Array log_softmax(const Array& x, std::int64_t axis = -1, XJAX_LOC);

// ---- shape ------------------------------------------------------------------------------------
/// One entry may be -1 (inferred).
Array reshape(const Array& x, Shape shape, XJAX_LOC);
/// Empty perm reverses the axes.
Array transpose(const Array& x, const Axes& perm = {}, XJAX_LOC);
Array broadcast_to(const Array& x, const Shape& shape, XJAX_LOC);
Array broadcast_in_dim(const Array& x, const Shape& shape, const Axes& broadcast_dimensions, XJAX_LOC);
Array expand_dims(const Array& x, std::int64_t axis, XJAX_LOC);
/// Empty axes removes every size-1 axis.
Array squeeze(const Array& x, const Axes& axes = {}, XJAX_LOC);
Array concatenate(const std::vector<Array>& xs, std::int64_t axis = 0, XJAX_LOC);
Array stack(const std::vector<Array>& xs, std::int64_t axis = 0, XJAX_LOC);
Array slice(const Array& x, const Axes& start, const Axes& limit, const Axes& strides = {}, XJAX_LOC);
/// lax.slice_in_dim: [start, limit) by `stride` along `axis` (lax's order: stride before axis; a
/// negative start or limit counts from the end, as lax's).
Array slice_in_dim(const Array& x, std::int64_t start, std::int64_t limit, std::int64_t stride = 1, std::int64_t axis = 0,
                   XJAX_LOC);
/// lax.pad: lo[d] / hi[d] copies of padding_value (a scalar, converted to x's dtype) before /
/// after dimension d (negative: that many elements cropped) and interior[d] between its elements
/// (empty interior: none).
Array pad(const Array& x, const Array& padding_value, const Axes& lo, const Axes& hi, const Axes& interior = {}, XJAX_LOC);
Array dynamic_slice(const Array& x, const std::vector<Array>& starts, const Shape& sizes, XJAX_LOC);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts, XJAX_LOC);
/// x[i] along `axis` for each index in `indices` (negative indices count from the end; others clamp).
/// Without an axis x is flattened first, as jnp.take's axis=None.
Array take(const Array& x, const Array& indices, std::optional<std::int64_t> axis = std::nullopt, XJAX_LOC);
/// NumPy's take_along_axis: out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis`.
/// indices has x's rank; the other axes broadcast (equal, or 1 on either side). Negative indices
/// count from the end; the others clamp to the axis (as take). Gathers through the flattened x,
/// so its gradient is one scatter-add (no one-hot matrix).
Array take_along_axis(const Array& x, const Array& indices, std::int64_t axis, XJAX_LOC);
/// Integers 0..n-1 along `dimension` of `shape` (traceable, unlike arange).
Array iota(DType dtype, const Shape& shape, std::int64_t dimension = 0, XJAX_LOC);
/// jnp.tril / jnp.triu: the matrices of the last two axes with the entries above diagonal k
/// (tril) or below it (triu) set to zero; k > 0 is above the main diagonal.
Array tril(const Array& x, std::int64_t k = 0, XJAX_LOC);
Array triu(const Array& x, std::int64_t k = 0, XJAX_LOC);
/// jnp.roll: the elements shifted by `shift` along `axis` (wrapping around); the flattened array
/// when axis is none, then reshaped back.
Array roll(const Array& x, std::int64_t shift, std::optional<std::int64_t> axis = std::nullopt, XJAX_LOC);
/// jnp.flip (lax.rev; its primitive prints as rev[dimensions=...]): x with the order of its
/// elements reversed along each of `axes` (negative count from the end), along one axis, or
/// along every axis. (xj::rev is check_grads' reverse mode, so lax.rev is spelled flip.)
/// (`flip(x, {})` reverses nothing, as jnp.flip(x, ()): the one-axis form takes an integer
/// argument, which a braced list is not.)
Array flip(const Array& x, const Axes& axes, XJAX_LOC);
namespace detail {
Array flip_axis(const Array& x, std::int64_t axis, std::source_location loc);
/// An integer argument: an integer type or an unscoped enum, not a bool or a floating-point
/// number (flip's and split's one-number forms, which a braced list does not choose).
template <class I>
concept IntegerArgument = std::is_convertible_v<I, std::int64_t> && !std::is_same_v<std::remove_cvref_t<I>, bool> &&
                          !std::is_floating_point_v<std::remove_cvref_t<I>>;
}  // namespace detail
template <detail::IntegerArgument I> Array flip(const Array& x, I axis, XJAX_LOC) {
  return detail::flip_axis(x, static_cast<std::int64_t>(axis), loc);
}
/// Every axis (jnp.flip's axis=None; `{}` cannot make a nullopt_t, so it stays the empty Axes).
Array flip(const Array& x, std::nullopt_t every_axis = std::nullopt, XJAX_LOC);
/// lax.sort / jnp.sort: x's elements in ascending order along `dimension`, stably (is_stable is
/// accepted for JAX's spelling; the sort is always stable). Floats in JAX's total order: -0 and 0
/// are equal, NaNs go last. The tangents move with the elements.
Array sort(const Array& x, std::int64_t dimension = -1, bool is_stable = true, XJAX_LOC);
/// lax.sort of several operands of one shape: each line ordered lexicographically by the first
/// num_keys of them, every operand permuted alike (e.g. values carried along with their keys).
std::vector<Array> sort(const std::vector<Array>& operands, std::int64_t dimension = -1, std::int64_t num_keys = 1, XJAX_LOC);
/// jnp.argsort: the (stable) order of x's elements along `axis`, as i32 indices.
Array argsort(const Array& x, std::int64_t axis = -1, XJAX_LOC);
/// lax.top_k: the k largest elements along the last axis, in descending order, and their i32
/// indices; equal elements keep their order (the lower index first), as JAX. A NaN counts as the
/// largest (first), as XLA's; -0 equals 0. One primitive: a partial sort of each line.
std::pair<Array, Array> top_k(const Array& x, std::int64_t k, XJAX_LOC);
/// lax.cumsum, cumprod, cummax, cummin, cumlogsumexp: the running sum, product, maximum,
/// minimum, log-sum-exp along `axis` (negative counts from the end), from the last element to
/// the first when `reverse`; O(n) along the axis. cummax and cummin propagate NaN (as max);
/// cumlogsumexp takes floats, the others numbers (not bool; integers wrap around). Their
/// derivatives are JAX's (those of associative_scan with the same combine).
Array cumsum(const Array& x, std::int64_t axis, bool reverse = false, XJAX_LOC);
Array cumprod(const Array& x, std::int64_t axis, bool reverse = false, XJAX_LOC);
Array cummax(const Array& x, std::int64_t axis, bool reverse = false, XJAX_LOC);
Array cummin(const Array& x, std::int64_t axis, bool reverse = false, XJAX_LOC);
Array cumlogsumexp(const Array& x, std::int64_t axis, bool reverse = false, XJAX_LOC);
/// lax.associative_scan: the inclusive prefix "sums" of x along `axis` under the associative
/// `fn(a, b)` (elementwise on two arrays of equal shape), from the end when `reverse` (then fn's
/// first argument is the later element, as JAX: the scan of the reversed x, reversed). Work O(n),
/// depth O(log n) (the odd/even recursion), built from slices, pads and selects, so every
/// transform applies.
Array associative_scan(const std::function<Array(const Array&, const Array&)>& fn, const Array& x, bool reverse = false,
                       std::int64_t axis = 0, XJAX_LOC);
/// jnp.logaddexp: log(exp(a) + exp(b)) without overflow; -inf with -inf is -inf.
Array logaddexp(const Array& a, const Array& b, XJAX_LOC);
/// jnp.tile: x repeated reps[d] times along each axis (the shorter of x's shape and reps is
/// padded with leading 1s).
Array tile(const Array& x, const Shape& reps, XJAX_LOC);
/// jnp.repeat with an int count: each element repeated `repeats` times along `axis` (the
/// flattened array when none).
Array repeat(const Array& x, std::int64_t repeats, std::optional<std::int64_t> axis = std::nullopt, XJAX_LOC);
/// jnp.split into `sections` equal parts along `axis` (a ShapeError unless they divide it), or at
/// the given indices (`split(x, {2})` splits at index 2, as jnp.split(x, [2]): the count form
/// takes an integer argument, which a braced list is not).
namespace detail {
std::vector<Array> split_sections(const Array& x, std::int64_t sections, std::int64_t axis, std::source_location loc);
}
template <detail::IntegerArgument I> std::vector<Array> split(const Array& x, I sections, std::int64_t axis = 0, XJAX_LOC) {
  return detail::split_sections(x, static_cast<std::int64_t>(sections), axis, loc);
}
std::vector<Array> split(const Array& x, const std::vector<std::int64_t>& indices, std::int64_t axis = 0, XJAX_LOC);
/// jnp.linspace: num values evenly spaced from start to stop (included when endpoint).
Array linspace(double start, double stop, std::int64_t num, DType dtype = f32, bool endpoint = true, XJAX_LOC);
/// The matrices of the last two axes transposed (jnp.matrix_transpose, x.mT).
Array matrix_transpose(const Array& x, XJAX_LOC);
/// jnp.diagonal: the diagonal `offset` (> 0 above the main one) of the matrices of axes (axis1,
/// axis2), as a last axis after the others (in order); JAX's defaults are the first two axes.
Array diagonal(const Array& x, std::int64_t offset = 0, std::int64_t axis1 = 0, std::int64_t axis2 = 1, XJAX_LOC);
/// jnp.trace: the sums of diagonal(x, offset, axis1, axis2).
Array trace(const Array& x, std::int64_t offset = 0, std::int64_t axis1 = 0, std::int64_t axis2 = 1, XJAX_LOC);
/// jnp.outer: out[i, j] = a.ravel()[i] * b.ravel()[j] (of two bool arrays, the AND).
Array outer(const Array& a, const Array& b, XJAX_LOC);

// ---- operators --------------------------------------------------------------------------------
// Operands convert implicitly to detail::Located<Array>, which records the caller's source line
// (an operator cannot take a defaulted location parameter), so errors, leaked tracers and
// saved_residuals name the user's line for `x * 2.0` as for `xj::mul(x, 2.0)`.
using ArrayOperand = detail::Located<Array>;
Array operator-(ArrayOperand x);
/// The bitwise operators on integer and bool arrays (bool: logical), as jnp's.
Array operator&(ArrayOperand a, ArrayOperand b);
Array operator|(ArrayOperand a, ArrayOperand b);
Array operator^(ArrayOperand a, ArrayOperand b);
Array operator~(ArrayOperand x);
Array operator+(ArrayOperand a, ArrayOperand b);
Array operator-(ArrayOperand a, ArrayOperand b);
Array operator*(ArrayOperand a, ArrayOperand b);
Array operator/(ArrayOperand a, ArrayOperand b);
Array operator+(ArrayOperand a, detail::Scalar b);
Array operator-(ArrayOperand a, detail::Scalar b);
Array operator*(ArrayOperand a, detail::Scalar b);
Array operator/(ArrayOperand a, detail::Scalar b);
Array operator+(detail::Scalar a, ArrayOperand b);
Array operator-(detail::Scalar a, ArrayOperand b);
Array operator*(detail::Scalar a, ArrayOperand b);
Array operator/(detail::Scalar a, ArrayOperand b);
Array operator==(ArrayOperand a, ArrayOperand b);
Array operator!=(ArrayOperand a, ArrayOperand b);
Array operator<(ArrayOperand a, ArrayOperand b);
Array operator<=(ArrayOperand a, ArrayOperand b);
Array operator>(ArrayOperand a, ArrayOperand b);
Array operator>=(ArrayOperand a, ArrayOperand b);
Array operator==(ArrayOperand a, detail::Scalar b);
Array operator!=(ArrayOperand a, detail::Scalar b);
Array operator<(ArrayOperand a, detail::Scalar b);
Array operator<=(ArrayOperand a, detail::Scalar b);
Array operator>(ArrayOperand a, detail::Scalar b);
Array operator>=(ArrayOperand a, detail::Scalar b);
Array operator==(detail::Scalar a, ArrayOperand b);
Array operator!=(detail::Scalar a, ArrayOperand b);
Array operator<(detail::Scalar a, ArrayOperand b);
Array operator<=(detail::Scalar a, ArrayOperand b);
Array operator>(detail::Scalar a, ArrayOperand b);
Array operator>=(detail::Scalar a, ArrayOperand b);
Array& operator+=(Array& a, ArrayOperand b);
Array& operator-=(Array& a, ArrayOperand b);
Array& operator*=(Array& a, ArrayOperand b);
Array& operator/=(Array& a, ArrayOperand b);
Array& operator+=(Array& a, detail::Located<detail::Scalar> b);
Array& operator-=(Array& a, detail::Located<detail::Scalar> b);
Array& operator*=(Array& a, detail::Located<detail::Scalar> b);
Array& operator/=(Array& a, detail::Located<detail::Scalar> b);

std::ostream& operator<<(std::ostream& os, const Array& x);

}  // namespace xjax
