// windows.hpp: the geometry shared by the windowed primitives (conv_general_dilated,
// reduce_window_*, select_and_gather_add, select_and_scatter_add): dilated sizes, how many
// window positions fit, and which operand element a window position reads. Used by their shape
// rules (windows.cpp), their kernels and their transformation rules, so all agree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "xjax/array.hpp"
#include "xjax/params.hpp"
#include "xjax/primitives.hpp"

namespace xjax::detail {

using Ints = std::vector<std::int64_t>;

/// A dimension of size n with d - 1 holes between neighbours: (n - 1) d + 1 (0 stays 0).
inline std::int64_t dilated(std::int64_t n, std::int64_t d) { return n == 0 ? 0 : (n - 1) * d + 1; }
/// The same, or nothing when it exceeds 2^63 - 1 (it would wrap to a small or negative size).
inline std::optional<std::int64_t> checked_dilated(std::int64_t n, std::int64_t d) {
  std::int64_t extent = 0;
  if (n > 0 && (__builtin_mul_overflow(n - 1, d, &extent) || __builtin_add_overflow(extent, 1, &extent))) return std::nullopt;
  return extent;
}

/// How many windows of extent w fit in n with stride s: floor((n - w) / s) + 1, or 0.
inline std::int64_t window_count(std::int64_t n, std::int64_t w, std::int64_t s) {
  return n < w ? 0 : (n - w) / s + 1;
}

/// One dimension of a windowed operation: output position o and window position k read the
/// operand at o * stride + k * window_dilation - pad_lo of the base-dilated operand, which is an
/// element only where it falls on a multiple of base_dilation inside the operand.
struct WindowDim {
  std::int64_t in_size = 0, window = 1, stride = 1, pad_lo = 0, base_dilation = 1, window_dilation = 1, out_size = 0;

  /// The operand index read by (o, k), or -1 for padding or a hole of the base dilation.
  std::int64_t input_index(std::int64_t o, std::int64_t k) const {
    std::int64_t q = o * stride + k * window_dilation - pad_lo;
    if (q < 0 || q % base_dilation != 0) return -1;
    q /= base_dilation;
    return q < in_size ? q : -1;
  }
  /// The output positions [first, second) whose whole window reads the operand (no padding, no
  /// hole of a base dilation): there window position k of o reads o * stride + k *
  /// window_dilation - pad_lo. Empty when the base is dilated.
  std::pair<std::int64_t, std::int64_t> interior() const {
    if (base_dilation != 1 || out_size == 0) return {0, 0};
    const std::int64_t first = pad_lo <= 0 ? 0 : (pad_lo + stride - 1) / stride;  // o * stride - pad_lo >= 0
    const std::int64_t room = in_size - 1 + pad_lo - (window - 1) * window_dilation;  // o * stride <= room
    const std::int64_t last = room < 0 ? -1 : room / stride;
    const std::int64_t lo = std::min(first, out_size), hi = std::clamp<std::int64_t>(last + 1, lo, out_size);
    return {lo, hi};
  }
  /// input_index for every (o, k), o-major: one table per dimension, computed once per kernel.
  /// (Out of line, in the core: the kernel sets and the core share it.)
  std::vector<std::int64_t> index_table() const;
};

/// The window of a reduce_window or select_and_* equation on an operand of shape `in`, one
/// WindowDim per dimension (params already checked by the shape rule).
template <class W> std::vector<WindowDim> window_dims(const Shape& in, const W& w) {
  std::vector<WindowDim> dims;
  for (std::size_t i = 0; i < in.size(); ++i) {
    WindowDim d{in[i], w.window_dimensions[i], w.window_strides[i], w.padding_lo[i], w.base_dilation[i],
                w.window_dilation[i], 0};
    const std::int64_t padded = dilated(d.in_size, d.base_dilation) + w.padding_lo[i] + w.padding_hi[i];
    d.out_size = window_count(padded, dilated(d.window, d.window_dilation), d.stride);
    dims.push_back(d);
  }
  return dims;
}

/// The window of a max (select_max) or min reduction, as the select pair's params.
inline params::SelectWindow select_window(const params::ReduceWindow& w, bool select_max) {
  return {w.window_dimensions, w.window_strides, w.padding_lo, w.padding_hi, w.base_dilation, w.window_dilation,
          select_max};
}

/// The spatial dims of a convolution, in rhs_spec's order: lhs sizes against rhs window sizes.
std::vector<WindowDim> conv_window_dims(const Shape& lhs, const Shape& rhs, const params::ConvGeneralDilated& p);

/// Shape rules (windows.cpp): the output avals, or a ShapeError / TypeError naming the
/// application and the mismatching dimensions.
std::vector<ShapedArray> conv_general_dilated_shape_rule(std::span<const ShapedArray> in,
                                                         const params::ConvGeneralDilated& p);
std::vector<ShapedArray> reduce_window_shape_rule(Primitive prim, std::span<const ShapedArray> in,
                                                  const params::ReduceWindow& w);
std::vector<ShapedArray> select_window_shape_rule(Primitive prim, std::span<const ShapedArray> in,
                                                  const params::SelectWindow& w);

/// x with dim `src` merged into dim `dst` as its major part (`dst` counts dims without src).
Array reshape_axis_into(std::int64_t src, std::int64_t dst, const Array& x);
/// x with dim `src` split into (size1, rest).
Array reshape_axis_out_of(std::int64_t src, std::int64_t size1, const Array& x);

/// The padding of the convolution that transposes a windowed op with respect to its operand
/// (JAX's _conv_general_vjp_lhs_padding), per spatial dim: before = W - lo - 1 and
/// after = L + W - 1 - O - before, for the dilated sizes L (operand), W (window), O (output,
/// dilated by the strides).
void vjp_lhs_padding(const Shape& in, const Shape& window, const Shape& out, const Ints& strides, const Ints& padding_lo,
                     const Ints& base_dilation, const Ints& window_dilation, Ints& lo, Ints& hi);

/// The (lo, hi) padding of JAX's "SAME" (output size ceil(n / stride), the extra pad at the end)
/// or "VALID" (none) for operand size n, dilated window extent w and stride s; the mode's case
/// does not matter (JAX upper-cases it).
std::pair<std::int64_t, std::int64_t> padding_for(std::string mode, std::int64_t n, std::int64_t w,
                                                  std::int64_t s, const std::string& op);

/// Row-major position counter over `extent` (the odometer of a nested loop of any depth): the
/// kernels' walk over output positions and window positions.
struct Odometer {
  const std::vector<std::int64_t>& extent;
  std::vector<std::int64_t> at = std::vector<std::int64_t>(extent.size(), 0);
  void next() {
    for (std::size_t i = extent.size(); i-- > 0;) {
      if (++at[i] < extent[i]) return;
      at[i] = 0;
    }
  }
  /// Jumps to row-major position `flat`.
  void seek(std::int64_t flat) {
    for (std::size_t i = extent.size(); i-- > 0;) {
      at[i] = extent[i] > 0 ? flat % extent[i] : 0;
      flat = extent[i] > 0 ? flat / extent[i] : 0;
    }
  }
};

}  // namespace xjax::detail
