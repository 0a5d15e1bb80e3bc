// convolution.hpp: lax's convolution and window reductions (conv_general_dilated, conv,
// conv_transpose, reduce_window) and the pooling conveniences. Semantics are JAX's; every
// operation is traceable and differentiable (gradients of a convolution are convolutions).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "xjax/array.hpp"

namespace xjax {

/// Padding of a windowed operation: "SAME" (output size ceil(n / stride), the odd pad at the
/// end), "SAME_LOWER" (the odd pad at the start), "VALID" (none), or one (low, high) pair per
/// spatial (for reduce_window: per) dimension; negative values crop.
struct Padding {
  Padding(const char* m) : mode(m) {}                 // NOLINT: implicit on purpose ("SAME")
  Padding(std::string m) : mode(std::move(m)) {}      // NOLINT
  Padding(std::vector<std::pair<std::int64_t, std::int64_t>> p) : pairs(std::move(p)) {}  // NOLINT
  Padding(std::initializer_list<std::pair<std::int64_t, std::int64_t>> p) : pairs(p) {}    // NOLINT
  std::string mode;                                       ///< empty when pairs are given
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
};

/// JAX's dimension numbers as strings: lhs (batch N, feature C, spatial), rhs (output feature O,
/// input feature I, spatial), output (N, C, spatial), e.g. {"NCHW", "OIHW", "NCHW"} or
/// {"NHWC", "HWIO", "NHWC"}. Spatial letters pair the dims up; strides, dilations and padding
/// follow the order of the spatial letters in `rhs`. All empty (the default): N, C, then the
/// spatial dims in order, for every operand (JAX's default, NCHW / OIHW / NCHW for 2-D).
struct ConvDimensionNumbers {
  std::string lhs, rhs, out;
};

/// lax.conv_general_dilated: an n-D convolution (rank n + 2 operands) with window strides,
/// padding, lhs dilation (transposed convolution), rhs dilation (atrous), and feature or batch
/// groups (at most one count > 1). Empty dilations mean 1. Operands of different float dtypes
/// are promoted; f32 and f64 are supported.
Array conv_general_dilated(const Array& lhs, const Array& rhs, const std::vector<std::int64_t>& window_strides,
                           const Padding& padding, const std::vector<std::int64_t>& lhs_dilation = {},
                           const std::vector<std::int64_t>& rhs_dilation = {},
                           const ConvDimensionNumbers& dimension_numbers = {}, std::int64_t feature_group_count = 1,
                           std::int64_t batch_group_count = 1,
                           std::source_location loc = std::source_location::current());

/// lax.conv: conv_general_dilated with NCHW / OIHW / NCHW dimension numbers and no dilation.
Array conv(const Array& lhs, const Array& rhs, const std::vector<std::int64_t>& window_strides, const Padding& padding,
           std::source_location loc = std::source_location::current());

/// lax.conv_transpose: the fractionally strided convolution (strides become lhs dilation).
/// Dimension numbers default to TensorFlow's (NHWC, HWIO, NHWC for 2-D). "SAME" / "VALID" name
/// the forward convolution's padding; explicit pairs pad the transposed one (JAX's default,
/// use_consistent_padding = false). transpose_kernel flips the spatial dims of rhs and swaps its
/// input and output features, making the result the gradient of conv with respect to its input.
Array conv_transpose(const Array& lhs, const Array& rhs, const std::vector<std::int64_t>& strides, const Padding& padding,
                     const std::vector<std::int64_t>& rhs_dilation = {}, const ConvDimensionNumbers& dimension_numbers = {},
                     bool transpose_kernel = false, std::source_location loc = std::source_location::current());

/// The reduction of reduce_window.
enum class WindowOp { add, max, min };

/// lax.reduce_window for op add, max or min: each output element reduces one window of x.
/// `init` must be the identity of op (0 for add, -inf for max, +inf for min; for integers the
/// type's lowest / highest), which padding elements hold, as JAX's monoid reductions require.
/// One entry per dimension of x in each list; empty strides and dilations mean 1.
Array reduce_window(const Array& x, double init, WindowOp op, const std::vector<std::int64_t>& window_dimensions,
                    const std::vector<std::int64_t>& window_strides, const Padding& padding,
                    const std::vector<std::int64_t>& base_dilation = {},
                    const std::vector<std::int64_t>& window_dilation = {},
                    std::source_location loc = std::source_location::current());

/// flax.linen.max_pool: x is (batch..., spatial..., features), with any number of batch dims
/// (none too, as flax's); the window and strides (empty: 1) cover the spatial dims. Padding
/// "VALID" by default. The gradient flows to each window's first maximum.
Array max_pool(const Array& x, const std::vector<std::int64_t>& window_shape,
               const std::vector<std::int64_t>& strides = {}, const Padding& padding = "VALID",
               std::source_location loc = std::source_location::current());

/// flax.linen.avg_pool: the window sum divided by the window size (padding counts as zeros,
/// flax's count_include_pad = true). Layout as max_pool.
Array avg_pool(const Array& x, const std::vector<std::int64_t>& window_shape,
               const std::vector<std::int64_t>& strides = {}, const Padding& padding = "VALID",
               std::source_location loc = std::source_location::current());

}  // namespace xjax
