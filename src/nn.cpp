// nn.cpp: the normalization layers of nn.hpp as compositions of ops.
#include "xjax/nn.hpp"

#include <string>

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

Array standardize(const Array& x, std::int64_t axis, double epsilon, std::source_location loc) {
  const std::int64_t a = normalized_axis("standardize", x, axis, loc);
  // (x - mean) * rsqrt(mean((x - mean)^2) + eps): the variance of the centred values, which
  // loses no precision to cancellation as E[x^2] - E[x]^2 would.
  const Array centred = sub(x, mean(x, {a}, true, loc), loc);
  const Array var = mean(square(centred, loc), {a}, true, loc);
  return mul(centred, rsqrt(add(var, scalar_like(epsilon, var), loc), loc), loc);
}

Array layer_norm(const Array& x, const std::optional<Array>& scale, const std::optional<Array>& bias,
                 std::int64_t axis, double epsilon, std::source_location loc) {
  const std::int64_t a = normalized_axis("layer_norm", x, axis, loc);
  Array y = standardize(x, a, epsilon, loc);
  if (scale) y = mul(y, along_axis("layer_norm", "scale", *scale, x, a, loc), loc);
  if (bias) y = add(y, along_axis("layer_norm", "bias", *bias, x, a, loc), loc);
  return y;
}

Array rms_norm(const Array& x, const std::optional<Array>& scale, std::int64_t axis, double epsilon,
               std::source_location loc) {
  const std::int64_t a = normalized_axis("rms_norm", x, axis, loc);
  const Array ms = mean(square(x, loc), {a}, true, loc);
  Array y = mul(x, rsqrt(add(ms, scalar_like(epsilon, ms), loc), loc), loc);
  if (scale) y = mul(y, along_axis("rms_norm", "scale", *scale, x, a, loc), loc);
  return y;
}

}  // namespace xjax
