// nn.cpp: jax.nn's activations, one_hot and the normalization layers of nn.hpp, as compositions of ops.
#include "xjax/nn.hpp"

#include <algorithm>
#include <string>

#include "internal.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/ops.hpp"

namespace xjax {
namespace {

std::int64_t normalized_axis(const char* fn, const Array& x, std::int64_t axis, const std::source_location& loc) {
  if (x.ndim() == 0 || axis < -x.ndim() || axis >= x.ndim())
    throw ShapeError(std::string(fn) + "(" + x.aval().str() + "): axis " + std::to_string(axis) +
                     " is not an axis of the operand (at " + format_location(loc) + ")");
  return axis < 0 ? axis + x.ndim() : axis;
}

// A per-feature parameter (1-D, x's length along `axis`) shaped to broadcast against x.
Array along_axis(const char* fn, const char* what, const Array& p, const Array& x, std::int64_t axis,
                 const std::source_location& loc) {
  const std::int64_t n = x.shape()[static_cast<std::size_t>(axis)];
  if (p.shape() != Shape{n})
    throw ShapeError(std::string(fn) + "(" + x.aval().str() + ", " + what + " " + p.aval().str() + "): the " + what +
                     " must be 1-D of length " + std::to_string(n) + " (the operand's axis " + std::to_string(axis) +
                     ") (at " + format_location(loc) + ")");
  Shape s(static_cast<std::size_t>(x.ndim()), 1);
  s[static_cast<std::size_t>(axis)] = n;
  return reshape(p, s, loc);
}

}  // namespace

// standardize(x) = (x - mean) r, r = (var + eps)^(-1/2), a custom_jvp so that reverse mode keeps
// the output and r (PyTorch's layer_norm keeps its input, mean and r):
// d y = r (dx - mean(dx) - y mean(y dx)).
Array standardize(const Array& x, std::int64_t axis, const std::optional<Array>& given_mean,
                  const std::optional<Array>& given_variance, double epsilon, std::source_location loc) {
  const std::int64_t a = normalized_axis("standardize", x, axis, loc);
  if (given_mean || given_variance) {  // (x - m) rsqrt(v + eps), whatever is not given computed
    const Array m = given_mean ? *given_mean : mean(x, {a}, true, loc);
    const Array v = given_variance ? *given_variance
                                   : maximum(sub(mean(square(x, loc), {a}, true, loc), square(m, loc), loc),
                                             scalar_like(0.0, m), loc);
    return mul(sub(x, m, loc), rsqrt(add(v, scalar_like(epsilon, v), loc), loc), loc);
  }
  // bf16 / f16: the statistics in f32, as flax computes them (in bf16 the mean of 1000, 1000,
  // 1000, 1004 rounds to 1000), the result rounded once to x's dtype.
  if (x.dtype() == bf16 || x.dtype() == f16)
    return astype(standardize(astype(x, f32, loc), a, std::nullopt, std::nullopt, epsilon, loc), x.dtype(), loc);
  // (x - mean) * rsqrt(mean((x - mean)^2) + eps): the variance of the centred values, which
  // loses no precision to cancellation as E[x^2] - E[x]^2 would.
  const auto rstd_and_y = [a, epsilon, loc](const Array& v) {
    const Array centred = sub(v, mean(v, {a}, true, loc), loc);
    const Array var = mean(square(centred, loc), {a}, true, loc);
    const Array r = rsqrt(add(var, scalar_like(epsilon, var), loc), loc);
    return std::pair{r, mul(centred, r, loc)};
  };
  auto f = [rstd_and_y](const Array& v) { return rstd_and_y(v).second; };
  return custom_jvp(f, [rstd_and_y, a, loc](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const auto [r, y] = rstd_and_y(std::get<0>(p));
    const Array& dx = std::get<0>(t);
    const Array inner = sub(sub(dx, mean(dx, {a}, true, loc), loc), mul(y, mean(mul(y, dx, loc), {a}, true, loc), loc), loc);
    return std::pair{y, mul(r, inner, loc)};
  }, loc)(x);
}

namespace {
// A bf16 / f16 layer is computed in f32 (or the parameters' wider float) and rounded once to the
// result's dtype, as flax's _normalize: rounding after the standardization, the scale and the bias
// each lost up to 2 ulps (every digit of outputs near zero). The dtypes, or nullopt where x
// is not narrow, or where strict promotion is to refuse mixed parameters (mul raises then).
struct LayerDtypes {
  DType compute;  // the wide dtype the layer runs in
  DType result;   // x's promoted with the parameters'
};
std::optional<LayerDtypes> narrow_layer_dtypes(const Array& x, const std::optional<Array>& scale, const std::optional<Array>& bias) {
  if (x.dtype() != bf16 && x.dtype() != f16) return std::nullopt;
  DType result = x.dtype();
  for (const std::optional<Array>* p : {&scale, &bias})
    if (*p) result = promote_types(result, (*p)->dtype());
  if (promotion_mode() == PromotionMode::strict && result != x.dtype()) return std::nullopt;
  return LayerDtypes{promote_types(result, f32), result};
}
std::optional<Array> converted(const std::optional<Array>& p, DType d, const std::source_location& loc) {
  return p ? std::optional<Array>(astype(*p, d, loc)) : std::nullopt;
}
}  // namespace

Array layer_norm(const Array& x, const std::optional<Array>& scale, const std::optional<Array>& bias,
                 std::int64_t axis, double epsilon, std::source_location loc) {
  const std::int64_t a = normalized_axis("layer_norm", x, axis, loc);
  if (const auto narrow = narrow_layer_dtypes(x, scale, bias)) {
    const DType wide = narrow->compute;
    return astype(layer_norm(astype(x, wide, loc), converted(scale, wide, loc), converted(bias, wide, loc), a, epsilon, loc),
                  narrow->result, loc);
  }
  Array y = standardize(x, a, std::nullopt, std::nullopt, epsilon, loc);
  if (scale) y = mul(y, along_axis("layer_norm", "scale", *scale, x, a, loc), loc);
  if (bias) y = add(y, along_axis("layer_norm", "bias", *bias, x, a, loc), loc);
  return y;
}

// rms_norm(x) = x r, r = (mean(x^2) + eps)^(-1/2), a custom_jvp keeping the output and r:
// d y = r (dx - y mean(y dx)).
Array rms_norm(const Array& x, const std::optional<Array>& scale, std::int64_t axis, double epsilon,
               std::source_location loc) {
  const std::int64_t a = normalized_axis("rms_norm", x, axis, loc);
  if (!is_floating(x.dtype())) return rms_norm(detail::as_inexact(x, loc), scale, a, epsilon, loc);  // x^2 wrapped in i8
  if (const auto narrow = narrow_layer_dtypes(x, scale, std::nullopt))
    return astype(rms_norm(astype(x, narrow->compute, loc), converted(scale, narrow->compute, loc), a, epsilon, loc),
                  narrow->result, loc);
  const auto rstd_and_y = [a, epsilon, loc](const Array& v) {
    const Array ms = mean(square(v, loc), {a}, true, loc);
    const Array r = rsqrt(add(ms, scalar_like(epsilon, ms), loc), loc);
    return std::pair{r, mul(v, r, loc)};
  };
  auto f = [rstd_and_y](const Array& v) { return rstd_and_y(v).second; };
  Array y = custom_jvp(f, [rstd_and_y, a, loc](const std::tuple<Array>& p, const std::tuple<Array>& t) {
    const auto [r, out] = rstd_and_y(std::get<0>(p));
    const Array& dx = std::get<0>(t);
    return std::pair{out, mul(r, sub(dx, mul(out, mean(mul(out, dx, loc), {a}, true, loc), loc), loc), loc)};
  }, loc)(x);
  if (scale) y = mul(y, along_axis("rms_norm", "scale", *scale, x, a, loc), loc);
  return y;
}

Array silu(const Array& x, std::source_location loc) {
  return detail::rounded_once_when_eager(x, [&](const Array& v) { return mul(v, logistic(v, loc), loc); }, loc);
}

Array swish(const Array& x, std::source_location loc) { return silu(x, loc); }

Array elu(const Array& x, double alpha, std::source_location loc) {
  if (!is_floating(x.dtype())) return elu(detail::as_inexact(x, loc), alpha, loc);  // jnp.where(x > 0, 0., x): f64
  const Array positive = gt(x, zeros_like(x), loc);
  // expm1 of the non-positive part only: no overflow (and no inf * 0 in the derivative) for large x
  const Array negative_part = mul(expm1(where(positive, zeros_like(x), x, loc), loc), scalar_like(alpha, x), loc);
  return where(positive, x, negative_part, loc);
}

Array leaky_relu(const Array& x, double negative_slope, std::source_location loc) {
  // The slope as a C++ number (weak): integers become floats, as jnp's negative_slope * x.
  return where(ge(x, zeros_like(x), loc), x, x * negative_slope, loc);
}

Array log_sigmoid(const Array& x, std::source_location loc) { return neg(softplus(neg(x, loc), loc), loc); }

Array glu(const Array& x, std::int64_t axis, std::source_location loc) {
  const std::int64_t a = normalized_axis("glu", x, axis, loc);
  const std::int64_t n = x.shape()[static_cast<std::size_t>(a)];
  if (n % 2 != 0)
    throw ShapeError("glu(" + x.aval().str() + "): axis " + std::to_string(a) + " has odd length " + std::to_string(n) +
                     "; it is split in two halves (at " + format_location(loc) + ")");
  return mul(slice_in_dim(x, 0, n / 2, 1, a, loc), logistic(slice_in_dim(x, n / 2, n, 1, a, loc), loc), loc);
}

Array one_hot(const Array& indices, std::int64_t num_classes, DType dtype, std::int64_t axis, std::source_location loc) {
  const std::string call = "one_hot(" + indices.aval().str() + ", " + std::to_string(num_classes) + ")";
  if (indices.dtype() == bool_)
    throw TypeError(call + ": indices must be integers (or floats), not bool (at " + format_location(loc) + ")");
  if (num_classes < 0) throw ShapeError(call + ": num_classes must be non-negative (at " + format_location(loc) + ")");
  const std::int64_t rank = indices.ndim() + 1;
  if (axis < -rank || axis >= rank)
    throw ShapeError(call + ": axis " + std::to_string(axis) + " is not an axis of the result (rank " +
                     std::to_string(rank) + ") (at " + format_location(loc) + ")");
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  Shape out = indices.shape();
  out.insert(out.begin() + a, num_classes);
  // 1 where the index equals the class: an index outside [0, num_classes) matches none
  return astype(eq(expand_dims(indices, a, loc), iota(indices.dtype(), out, a, loc), loc), dtype, loc);
}

}  // namespace xjax
