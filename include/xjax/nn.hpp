// nn.hpp: jax.nn's activations (silu, elu, leaky_relu, log_sigmoid, glu), one_hot, and the
// normalization layers of a training loop as functions (flax's LayerNorm and RMSNorm,
// jax.nn.standardize); each a short composition of ops (relu, gelu, softplus, softmax are in
// ops.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <source_location>

#include "xjax/array.hpp"
#include "xjax/ops.hpp"

namespace xjax {

/// jax.nn.standardize: (x - mean) / sqrt(variance + epsilon) over `axis`, with the mean and the
/// (biased) variance given or computed. Both computed: the variance is mean((x - mean)^2) (JAX's
/// algorithm="stable"; its default "fast" mean(x^2) - mean^2 cancels: a documented difference);
/// a mean given without a variance: JAX's default, max(mean(x^2) - mean^2, 0), which differs
/// from the other where the mean is not x's.
Array standardize(const Array& x, std::int64_t axis = -1, const std::optional<Array>& mean = std::nullopt,
                  const std::optional<Array>& variance = std::nullopt, double epsilon = 1e-5,
                  std::source_location loc = std::source_location::current());
/// Layer normalization (flax.linen.LayerNorm over one axis): standardize(x, axis) * scale
/// + bias, with scale and bias 1-D of x's length along `axis` (either may be left out). epsilon
/// defaults to 1e-5, PyTorch's LayerNorm's and jax.nn.standardize's (flax's LayerNorm uses 1e-6).
/// A bf16 / f16 x is normalized, scaled and shifted in f32 and rounded once (flax's).
Array layer_norm(const Array& x, const std::optional<Array>& scale = std::nullopt,
                 const std::optional<Array>& bias = std::nullopt, std::int64_t axis = -1, double epsilon = 1e-5,
                 std::source_location loc = std::source_location::current());
/// RMS normalization (flax.linen.RMSNorm over one axis): x / sqrt(mean(x^2) + epsilon) * scale,
/// with scale 1-D of x's length along `axis` (may be left out); bf16 / f16 in f32, rounded once.
Array rms_norm(const Array& x, const std::optional<Array>& scale = std::nullopt, std::int64_t axis = -1,
               double epsilon = 1e-6, std::source_location loc = std::source_location::current());

/// jax.nn.silu: x * logistic(x).
Array silu(const Array& x, XJAX_LOC);
/// jax.nn.swish: silu.
Array swish(const Array& x, XJAX_LOC);
/// jax.nn.elu: x where x > 0, else alpha (exp(x) - 1) (integers and bools in f64).
Array elu(const Array& x, double alpha = 1.0, XJAX_LOC);
/// jax.nn.leaky_relu: x where x >= 0, else negative_slope x.
Array leaky_relu(const Array& x, double negative_slope = 0.01, XJAX_LOC);
/// jax.nn.log_sigmoid: log(logistic(x)) = -softplus(-x), finite for every finite x.
Array log_sigmoid(const Array& x, XJAX_LOC);
/// jax.nn.glu: a * logistic(b), a and b the two halves of x along `axis` (its length even).
Array glu(const Array& x, std::int64_t axis = -1, XJAX_LOC);
/// jax.nn.one_hot: 1 where an integer index equals the class, along a new axis `axis` of length
/// num_classes (-1: last); indices outside [0, num_classes) give a row of zeros, as JAX.
Array one_hot(const Array& indices, std::int64_t num_classes, DType dtype = f32, std::int64_t axis = -1, XJAX_LOC);

}  // namespace xjax
