// lean_composites.cpp: relu, softmax, log_softmax, gelu and softplus as custom_jvp functions (JAX's softmax is
// one too), so reverse mode keeps what PyTorch's autograd keeps for them: softmax its output,
// log_softmax exp(output), gelu one array the size of its input (its derivative), relu its output. Differentiated
// as compositions they kept three to four arrays each (issue 32). The rules are written with
// ordinary ops, so they are differentiable again (higher orders), batch and jit. Each rule is
// made with a key naming what it computes (rule_key), so grad without jit remembers the programs
// that use these functions (transforms/transform_memo.cpp) instead of transforming them per call.
#include <cmath>
#include <numbers>

#include "internal.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/ops.hpp"

namespace xjax {
namespace {

using Loc = std::source_location;

/// The composites whose rules this file makes.
enum class Composite : std::uint64_t { relu = 1, softmax, log_softmax, gelu_tanh, gelu_erf, softplus };

/// The key of a composite's rule (custom_jvp_call_flat's rule_key): the composite and its axis.
/// With the location of its equation, which the memo compares too, it fixes what the rule does.
std::uint64_t rule_key(Composite c, std::int64_t axis = 0) {
  return static_cast<std::uint64_t>(c) | (static_cast<std::uint64_t>(axis) << 8);
}

Array plain_softmax(const Array& x, std::int64_t axis, const Loc& loc) {
  const Array m = stop_gradient(max(x, {axis}, true, loc), loc);
  const Array e = exp(sub(x, m, loc), loc);
  return div(e, sum(e, {axis}, true, loc), loc);
}

Array plain_log_softmax(const Array& x, std::int64_t axis, const Loc& loc) {
  const Array shifted = sub(x, stop_gradient(max(x, {axis}, true, loc), loc), loc);
  return sub(shifted, log(sum(exp(shifted, loc), {axis}, true, loc), loc), loc);
}

// f(x) with derivative f'(x) elementwise: a custom_jvp whose tangent is dx * f'(x), so reverse
// mode keeps f'(x) alone.
template <class F, class D> Array elementwise_with_derivative(const Array& x, F f, D deriv, Composite c, const Loc& loc) {
  return detail::keyed_custom_jvp(f, [f, deriv](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const Array& v = std::get<0>(p);
    return std::pair{f(v), mul(std::get<0>(t), deriv(v))};
  }, loc, rule_key(c))(x);
}

}  // namespace

// d softmax(x) = y (dx - sum(y dx)), y = softmax(x): the output is all the derivative needs.
// Integers and bools in f64, as jax.nn.softmax's jnp.exp (so log_softmax, softplus).
Array softmax(const Array& x, std::int64_t axis, Loc loc) {
  if (!is_floating(x.dtype())) return softmax(detail::as_inexact(x, loc), axis, loc);
  auto f = [axis, loc](const Array& v) { return plain_softmax(v, axis, loc); };
  return detail::keyed_custom_jvp(f, [f, axis, loc](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const Array y = f(std::get<0>(p));
    const Array& dx = std::get<0>(t);
    return std::pair{y, mul(y, sub(dx, sum(mul(y, dx, loc), {axis}, true, loc), loc), loc)};
  }, loc, rule_key(Composite::softmax, axis))(x);
}

// d log_softmax(x) = dx - sum(exp(y) dx), y = log_softmax(x) (exp(y) = softmax(x)).
Array log_softmax(const Array& x, std::int64_t axis, Loc loc) {
  if (!is_floating(x.dtype())) return log_softmax(detail::as_inexact(x, loc), axis, loc);
  auto f = [axis, loc](const Array& v) { return plain_log_softmax(v, axis, loc); };
  return detail::keyed_custom_jvp(f, [f, axis, loc](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const Array y = f(std::get<0>(p));
    const Array& dx = std::get<0>(t);
    return std::pair{y, sub(dx, sum(mul(exp(y, loc), dx, loc), {axis}, true, loc), loc)};
  }, loc, rule_key(Composite::log_softmax, axis))(x);
}

// relu(x) = max(x, 0) (NaN stays NaN, as jax.nn.relu); d relu = select(relu(x) > 0, dx, 0):
// x > 0 exactly where relu(x) > 0, so the mask is read from the output, which the next layer's
// product keeps anyway, and partial eval rebuilds the mask from it instead of keeping one
// (PyTorch's relu keeps its output alone; jax.nn.relu's rule reads x, whose mask JAX keeps).
// A fused chain that recomputes the output for the mask compares x itself (simplify_program).
Array relu(const Array& x, Loc loc) {
  auto f = [loc](const Array& v) { return maximum(v, broadcast_to(scalar_like(0.0, v), v.shape(), loc), loc); };
  if (!is_floating(x.dtype())) return f(x);
  return detail::keyed_custom_jvp(f, [f, loc](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const Array y = f(std::get<0>(p));
    const Array& dx = std::get<0>(t);
    const Array zero = broadcast_to(scalar_like(0.0, y), y.shape(), loc);
    return std::pair{y, where(gt(y, zero, loc), dx, broadcast_to(scalar_like(0.0, dx), dx.shape(), loc), loc)};
  }, loc, rule_key(Composite::relu))(x);
}

// softplus(x) = log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|) (no overflow); its
// derivative is logistic(x), given as the rule: the composition's kinks at 0 cancel in value and
// slope but not in curvature (differentiated twice it gave 0 at x = 0, not 1/4; fuzzer seed
// 600004). JAX's softplus is logaddexp(x, 0), a custom_jvp for the same reason.
Array softplus(const Array& x, Loc loc) {
  auto f = [loc](const Array& v) {
    return add(maximum(v, scalar_like(0.0, v), loc), log1p(exp(neg(abs(v, loc), loc), loc), loc), loc);
  };
  if (!is_floating(x.dtype())) return softplus(detail::as_inexact(x, loc), loc);
  return detail::rounded_once_when_eager(x, [&](const Array& u) {
    return elementwise_with_derivative(u, f, [loc](const Array& v) { return logistic(v, loc); }, Composite::softplus, loc);
  }, loc);
}

// gelu(x) = h (1 + t), h = x/2, t = tanh(u), u = x (c + c k x^2), c = sqrt(2/pi), k = 0.044715:
// gelu'(x) = (1 + t)/2 + h ((du (1 + t)) (1 - t)), du = c + 3 c k x^2.
// du (1 + t) is taken first, as JAX's tanh rule (g + g t)(1 - t): where t rounds to -1 it is 0
// while du is finite, so the derivative is 0 for large negative x (h du overflowed first from
// |x| about 1.5e13 in f32, and 0 times -inf gave NaN). Written with x^2 once and (1 + t) shared,
// the forward pass that keeps the derivative is 16 elementwise ops (the expanded forms took 22:
// its fused chain ran about a third longer).
Array gelu(const Array& x, Loc loc) {
  // integers and bools in f64, as the float functions of integers (their constants rounded to
  // the integer dtype gave zeros once tanh took integers)
  if (!is_floating(x.dtype())) return gelu(detail::as_inexact(x, loc), loc);
  const double c = std::sqrt(2.0 / std::numbers::pi), k = 0.044715;
  // t and the pieces the derivative reuses: x^2, h = x/2 and 1 + t
  struct Pieces {
    Array square, half, one_plus_t, t;
  };
  auto pieces = [=](const Array& v) {
    const Array v2 = square(v, loc);
    // c strong, as JAX's np.sqrt(2 / np.pi).astype(x.dtype): gelu of a weak value is strong
    const Array t = tanh(mul(v, add(mul(v2, scalar_like(c * k, v), loc), scalar(c, v.dtype()), loc), loc), loc);
    return Pieces{v2, mul(v, scalar_like(0.5, v), loc), add(t, scalar_like(1.0, v), loc), t};
  };
  auto f = [=](const Array& v) {
    const Pieces p = pieces(v);
    return mul(p.half, p.one_plus_t, loc);
  };
  // The rule computes t once for the output and the derivative (a forward pass that keeps the
  // derivative evaluates one tanh per element, not two).
  const auto gelu_with_rule = detail::keyed_custom_jvp(f, [=](const std::tuple<Array>& primals, const std::tuple<Array>& tangents) {
    const Array& v = std::get<0>(primals);
    const Pieces p = pieces(v);
    const Array du = add(mul(p.square, scalar_like(3 * c * k, v), loc), scalar_like(c, v), loc);
    const Array one_minus_t = sub(scalar_like(1.0, v), p.t, loc);
    const Array tanh_part = mul(p.half, mul(mul(du, p.one_plus_t, loc), one_minus_t, loc), loc);
    const Array deriv = add(mul(p.one_plus_t, scalar_like(0.5, v), loc), tanh_part, loc);
    return std::pair{mul(p.half, p.one_plus_t, loc), mul(std::get<0>(tangents), deriv, loc)};
  }, loc, rule_key(Composite::gelu_tanh));
  return detail::rounded_once_when_eager(x, [&](const Array& u) { return gelu_with_rule(u); }, loc);
}

// gelu(x) = x Phi(x) exactly: gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
// Phi(x) = erfc(-x / sqrt 2) / 2, as JAX computes it: (1 + erf(x / sqrt 2)) / 2 cancels for
// negative x (gelu(-6) was 0 in f32, its value -5.9e-9).
Array gelu(const Array& x, bool approximate, Loc loc) {
  if (approximate) return gelu(x, loc);
  if (!is_floating(x.dtype())) return gelu(detail::as_inexact(x, loc), false, loc);
  auto phi_cdf = [=](const Array& v) {
    // strong, as JAX's (jnp.array(..., dtype=x.dtype)): gelu of a weak value is strong
    return mul(erfc(mul(v, scalar(-M_SQRT1_2, v.dtype()), loc), loc), scalar_like(0.5, v), loc);
  };
  auto f = [=](const Array& v) { return mul(v, phi_cdf(v), loc); };
  auto deriv = [=](const Array& v) {
    const Array density = mul(exp(mul(square(v, loc), scalar_like(-0.5, v), loc), loc), scalar_like(1.0 / std::sqrt(2.0 * std::numbers::pi), v), loc);
    return add(phi_cdf(v), mul(v, density, loc), loc);
  };
  return detail::rounded_once_when_eager(x, [&](const Array& u) { return elementwise_with_derivative(u, f, deriv, Composite::gelu_erf, loc); }, loc);
}

}  // namespace xjax
