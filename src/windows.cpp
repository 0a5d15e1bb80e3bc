// windows.cpp: the shape rules of the windowed primitives (conv_general_dilated, reduce_window_*,
// select_and_gather_add, select_and_scatter_add) and the geometry helpers of windows.hpp. Each
// error names the application and the dimensions that disagree.
#include "windows.hpp"

#include <algorithm>
#include <cctype>

#include "shape_errors.hpp"

namespace xjax::detail {
namespace {

using Avals = std::span<const ShapedArray>;
using Ints = std::vector<std::int64_t>;


std::string str(std::int64_t v) { return std::to_string(v); }

void expect_count(Primitive p, Avals in, const Ints& v, std::size_t n, const char* what) {
  if (v.size() != n)
    shape_fail(p, in, std::string(what) + " needs " + str(static_cast<std::int64_t>(n)) + " entries (one per " +
                          (n + 2 == in[0].shape.size() ? "spatial dimension" : "dimension") + "), got " +
                          str(static_cast<std::int64_t>(v.size())));
}

// A dimension's padded, base-dilated operand extent and its dilated window must fit in an int64
// (past it they wrapped: a window dilation of 2^63 - 1 gave a negative output size, a huge
// padding a small one).
void expect_representable(Primitive p, Avals in, std::size_t i, std::int64_t n, std::int64_t base_dilation,
                          std::int64_t lo, std::int64_t hi, std::int64_t window, std::int64_t window_dilation) {
  const std::optional<std::int64_t> base = checked_dilated(n, base_dilation);
  std::int64_t extent = 0, pads = 0;  // the pads summed first: (-big, big) cancels
  const bool wraps = !base || __builtin_add_overflow(lo, hi, &pads) || __builtin_add_overflow(*base, pads, &extent) ||
                     !checked_dilated(window, window_dilation);
  if (wraps)
    shape_fail(p, in, "the padded or dilated extent of dimension " + str(static_cast<std::int64_t>(i)) + " exceeds 2^63 - 1");
}

void expect_positive(Primitive p, Avals in, const Ints& v, const char* what) {
  for (auto x : v)
    if (x < 1) shape_fail(p, in, std::string(what) + " must be >= 1, got " + str(x));
}

void expect_permutation(Primitive p, Avals in, const Ints& spec, std::int64_t rank, const char* what) {
  Ints sorted = spec;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<std::int64_t>(spec.size()) == rank;
  for (std::int64_t i = 0; ok && i < rank; ++i) ok = sorted[static_cast<std::size_t>(i)] == i;
  if (!ok) shape_fail(p, in, std::string(what) + " must list each of the " + str(rank) + " dimensions once");
}

// The window checks shared by reduce_window_* and select_and_*: one entry per operand dim.
template <class W> void check_window(Primitive p, Avals in, const W& w) {
  const std::size_t r = in[0].shape.size();
  expect_count(p, in, w.window_dimensions, r, "window_dimensions");
  expect_count(p, in, w.window_strides, r, "window_strides");
  expect_count(p, in, w.padding_lo, r, "padding (low)");
  expect_count(p, in, w.padding_hi, r, "padding (high)");
  expect_count(p, in, w.base_dilation, r, "base_dilation");
  expect_count(p, in, w.window_dilation, r, "window_dilation");
  expect_positive(p, in, w.window_strides, "window_strides");
  expect_positive(p, in, w.base_dilation, "base_dilation");
  expect_positive(p, in, w.window_dilation, "window_dilation");
  for (std::size_t i = 0; i < r; ++i) {
    if (w.window_dimensions[i] < 1) shape_fail(p, in, "window_dimensions must be >= 1, got " + str(w.window_dimensions[i]));
    expect_representable(p, in, i, in[0].shape[i], w.base_dilation[i], w.padding_lo[i], w.padding_hi[i], w.window_dimensions[i],
                         w.window_dilation[i]);
    if (dilated(in[0].shape[i], w.base_dilation[i]) + w.padding_lo[i] + w.padding_hi[i] < 0)
      shape_fail(p, in, "negative padding of dimension " + str(static_cast<std::int64_t>(i)) + " is larger than its size");
  }
}

template <class W> Shape window_out_shape(const Shape& in, const W& w) {
  Shape out;
  for (const auto& d : window_dims(in, w)) out.push_back(d.out_size);
  return out;
}

}  // namespace

std::vector<std::int64_t> WindowDim::index_table() const {
  std::vector<std::int64_t> t(static_cast<std::size_t>(out_size * window));
  for (std::int64_t o = 0; o < out_size; ++o)
    for (std::int64_t k = 0; k < window; ++k) t[static_cast<std::size_t>(o * window + k)] = input_index(o, k);
  return t;
}

std::vector<WindowDim> conv_window_dims(const Shape& lhs, const Shape& rhs, const params::ConvGeneralDilated& p) {
  std::vector<WindowDim> dims;
  for (std::size_t i = 0; i < p.window_strides.size(); ++i) {
    WindowDim d{lhs[static_cast<std::size_t>(p.lhs_spec[i + 2])], rhs[static_cast<std::size_t>(p.rhs_spec[i + 2])],
                p.window_strides[i], p.padding_lo[i], p.lhs_dilation[i], p.rhs_dilation[i], 0};
    const std::int64_t padded = dilated(d.in_size, d.base_dilation) + p.padding_lo[i] + p.padding_hi[i];
    d.out_size = window_count(padded, dilated(d.window, d.window_dilation), d.stride);
    dims.push_back(d);
  }
  return dims;
}

std::vector<ShapedArray> conv_general_dilated_shape_rule(Avals in, const params::ConvGeneralDilated& p) {
  const Primitive prim = Primitive::conv_general_dilated;
  if (in.size() != 2) shape_fail(prim, in, "expects 2 operands (lhs, rhs), got " + str(static_cast<std::int64_t>(in.size())));
  const ShapedArray &lhs = in[0], &rhs = in[1];
  if (lhs.dtype != rhs.dtype) type_fail(prim, in, "lhs and rhs must have the same dtype");
  if (!is_floating(lhs.dtype))
    type_fail(prim, in, "needs floating-point operands (f64, f32, bf16 or f16); convert with xj::astype");
  const std::int64_t rank = lhs.ndim();
  if (rhs.ndim() != rank)
    shape_fail(prim, in, "lhs and rhs must have the same rank, got " + str(rank) + " and " + str(rhs.ndim()));
  if (rank < 2) shape_fail(prim, in, "needs operands of rank >= 2 (batch, feature, spatial...)");
  expect_permutation(prim, in, p.lhs_spec, rank, "lhs_spec");
  expect_permutation(prim, in, p.rhs_spec, rank, "rhs_spec");
  expect_permutation(prim, in, p.out_spec, rank, "out_spec");
  const auto nsp = static_cast<std::size_t>(rank - 2);
  expect_count(prim, in, p.window_strides, nsp, "window_strides");
  expect_count(prim, in, p.padding_lo, nsp, "padding (low)");
  expect_count(prim, in, p.padding_hi, nsp, "padding (high)");
  expect_count(prim, in, p.lhs_dilation, nsp, "lhs_dilation");
  expect_count(prim, in, p.rhs_dilation, nsp, "rhs_dilation");
  expect_positive(prim, in, p.window_strides, "window_strides");
  expect_positive(prim, in, p.lhs_dilation, "lhs_dilation");
  expect_positive(prim, in, p.rhs_dilation, "rhs_dilation");
  const std::int64_t G = p.feature_group_count, B = p.batch_group_count;
  if (G < 1 || B < 1) shape_fail(prim, in, "feature_group_count and batch_group_count must be >= 1");
  if (G > 1 && B > 1) shape_fail(prim, in, "at most one of feature_group_count and batch_group_count may be > 1");
  auto dim = [](const ShapedArray& a, std::int64_t d) { return a.shape[static_cast<std::size_t>(d)]; };
  const std::int64_t n = dim(lhs, p.lhs_spec[0]), c = dim(lhs, p.lhs_spec[1]);
  const std::int64_t o = dim(rhs, p.rhs_spec[0]), i = dim(rhs, p.rhs_spec[1]);
  const std::string lhs_c = "lhs feature dimension (dim " + str(p.lhs_spec[1]) + ", size " + str(c) + ")";
  const std::string rhs_o = "rhs output-feature dimension (dim " + str(p.rhs_spec[0]) + ", size " + str(o) + ")";
  if (c % G != 0) shape_fail(prim, in, lhs_c + " is not divisible by feature_group_count " + str(G));
  if (c / G != i)
    shape_fail(prim, in, lhs_c + " / feature_group_count " + str(G) + " must equal the rhs input-feature dimension (dim " +
                             str(p.rhs_spec[1]) + ", size " + str(i) + ")");
  if (o % G != 0) shape_fail(prim, in, rhs_o + " is not divisible by feature_group_count " + str(G));
  if (n % B != 0)
    shape_fail(prim, in, "lhs batch dimension (dim " + str(p.lhs_spec[0]) + ", size " + str(n) +
                             ") is not divisible by batch_group_count " + str(B));
  if (o % B != 0) shape_fail(prim, in, rhs_o + " is not divisible by batch_group_count " + str(B));
  Shape out(static_cast<std::size_t>(rank));
  out[static_cast<std::size_t>(p.out_spec[0])] = n / B;
  out[static_cast<std::size_t>(p.out_spec[1])] = o;
  for (std::size_t s = 0; s < nsp; ++s)
    expect_representable(prim, in, static_cast<std::size_t>(p.lhs_spec[s + 2]), lhs.shape[static_cast<std::size_t>(p.lhs_spec[s + 2])],
                         p.lhs_dilation[s], p.padding_lo[s], p.padding_hi[s], rhs.shape[static_cast<std::size_t>(p.rhs_spec[s + 2])],
                         p.rhs_dilation[s]);
  const auto dims = conv_window_dims(lhs.shape, rhs.shape, p);
  for (std::size_t s = 0; s < nsp; ++s) {
    if (dilated(dims[s].in_size, dims[s].base_dilation) + p.padding_lo[s] + p.padding_hi[s] < 0)
      shape_fail(prim, in, "negative padding of spatial dimension " + str(static_cast<std::int64_t>(s)) +
                               " (lhs dim " + str(p.lhs_spec[s + 2]) + ") is larger than its size");
    out[static_cast<std::size_t>(p.out_spec[s + 2])] = dims[s].out_size;
  }
  return {ShapedArray{out, lhs.dtype}};
}

std::vector<ShapedArray> reduce_window_shape_rule(Primitive prim, Avals in, const params::ReduceWindow& w) {
  if (in.size() != 1) shape_fail(prim, in, "expects 1 operand");
  if (in[0].dtype == DType::bool_)
    type_fail(prim, in, "does not accept bool operands; convert with xj::astype");
  check_window(prim, in, w);
  return {ShapedArray{window_out_shape(in[0].shape, w), in[0].dtype}};
}

// select_and_gather_add(t, x): t and x of one shape, the result of the window reduction's shape.
// select_and_scatter_add(ct, x): ct of the window reduction's shape, the result of x's shape.
std::vector<ShapedArray> select_window_shape_rule(Primitive prim, Avals in, const params::SelectWindow& w) {
  if (in.size() != 2) shape_fail(prim, in, "expects 2 operands");
  if (in[0].dtype != in[1].dtype)
    type_fail(prim, in, "operands must have the same dtype");
  if (!is_floating(in[0].dtype))
    type_fail(prim, in, "needs floating-point operands (f64, f32, bf16 or f16)");
  const ShapedArray x = in[1];
  const ShapedArray xs[] = {x};
  check_window(prim, xs, w);
  const Shape reduced = window_out_shape(x.shape, w);
  if (prim == Primitive::select_and_gather_add) {
    if (in[0].shape != x.shape) shape_fail(prim, in, "the tangent must have the operand's shape");
    return {ShapedArray{reduced, x.dtype}};
  }
  if (in[0].shape != reduced) shape_fail(prim, in, "the cotangent must have the window reduction's shape");
  return {x};
}

std::pair<std::int64_t, std::int64_t> padding_for(std::string mode, std::int64_t n, std::int64_t w,
                                                  std::int64_t s, const std::string& op) {
  if (s < 1) throw ShapeError(op + ": window strides must be >= 1, got " + std::to_string(s));
  for (char& ch : mode) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));  // JAX's padding.upper()
  if (mode == "VALID") return {0, 0};
  if (mode != "SAME" && mode != "SAME_LOWER")
    throw ShapeError(op + ": padding must be \"SAME\", \"SAME_LOWER\", \"VALID\" or explicit (low, high) pairs, got \"" +
                     mode + "\"");
  const std::int64_t out = (n + s - 1) / s;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * s + w - n, 0);
  const std::int64_t small = total / 2, large = total - small;
  return mode == "SAME" ? std::pair{small, large} : std::pair{large, small};
}

}  // namespace xjax::detail
