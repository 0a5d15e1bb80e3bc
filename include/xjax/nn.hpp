// nn.hpp: normalization layers of a training loop as functions (flax's LayerNorm and RMSNorm,
// jax.nn.standardize), each a short composition of ops over one axis.
#pragma once
#include <cstdint>
#include <optional>
#include <source_location>

#include "xjax/array.hpp"

namespace xjax {

/// jax.nn.standardize: (x - mean) / sqrt(var + epsilon) over `axis` (var the biased variance).
Array standardize(const Array& x, std::int64_t axis = -1, double epsilon = 1e-5,
                  std::source_location loc = std::source_location::current());
/// Layer normalization (flax.linen.LayerNorm over one axis): standardize(x, axis, epsilon) * scale
/// + bias, with scale and bias 1-D of x's length along `axis` (either may be left out).
Array layer_norm(const Array& x, const std::optional<Array>& scale = std::nullopt,
                 const std::optional<Array>& bias = std::nullopt, std::int64_t axis = -1, double epsilon = 1e-5,
                 std::source_location loc = std::source_location::current());
/// RMS normalization (flax.linen.RMSNorm over one axis): x / sqrt(mean(x^2) + epsilon) * scale,
/// with scale 1-D of x's length along `axis` (may be left out).
Array rms_norm(const Array& x, const std::optional<Array>& scale = std::nullopt, std::int64_t axis = -1,
               double epsilon = 1e-6, std::source_location loc = std::source_location::current());

}  // namespace xjax
