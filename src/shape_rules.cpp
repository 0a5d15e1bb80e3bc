// shape_rules.cpp: abstract evaluation. For each primitive, the avals of its outputs given the
// avals of its operands and its params, or a ShapeError / TypeError that names the application.
// Read abstract_eval() at the bottom first: one case per primitive, most a one-line call to a
// family rule above it.
#include <algorithm>
#include <numeric>

#include "loops/loops.hpp"
#include "internal.hpp"
#include "shape_errors.hpp"
#include "windows.hpp"

namespace xjax::detail {
namespace {

using Avals = std::span<const ShapedArray>;
using Ints = std::vector<std::int64_t>;


void expect_arity(Primitive p, Avals in, std::size_t n) {
  if (in.size() != n)
    shape_fail(p, in, "expects " + std::to_string(n) + " operand(s), got " + std::to_string(in.size()));
}

enum class Kinds { floats, numeric, any, integers, ints };

void expect_kind(Primitive p, Avals in, const ShapedArray& a, Kinds k) {
  if (k == Kinds::floats && !is_floating(a.dtype))
    type_fail(p, in, "needs a floating-point operand (f64, f32, bf16 or f16); convert with xj::astype");
  if (k == Kinds::numeric && a.dtype == bool_)
    type_fail(p, in, "does not accept bool operands; convert with xj::astype");
  if ((k == Kinds::integers || k == Kinds::ints) && is_floating(a.dtype))
    type_fail(p, in, k == Kinds::ints ? "needs integer operands" : "needs integer or bool operands");
  if (k == Kinds::ints && a.dtype == bool_) type_fail(p, in, "needs integer operands, not bool; convert with xj::astype");
}

std::vector<ShapedArray> elementwise(Primitive p, Avals in, std::size_t arity, Kinds k,
                                     DType out_dtype_or_same = DType::bool_, bool same = true) {
  expect_arity(p, in, arity);
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype)
      type_fail(p, in, "operands must have the same dtype; convert one with xj::astype");
    if (in[i].shape != in[0].shape)
      shape_fail(p, in, "operands must have the same shape (the user-level ops broadcast: "
                        "xj::add, operator+, ... insert broadcast_in_dim)");
  }
  expect_kind(p, in, in[0], k);
  return {ShapedArray{in[0].shape, same ? in[0].dtype : out_dtype_or_same}};
}

std::int64_t norm_axis(Primitive p, Avals in, std::int64_t axis, std::int64_t rank) {
  if (axis < 0 || axis >= rank)
    shape_fail(p, in, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return axis;
}

void check_unique_axes(Primitive p, Avals in, const Ints& axes, std::int64_t rank) {
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  for (auto a : axes) {
    norm_axis(p, in, a, rank);
    if (seen[static_cast<std::size_t>(a)]) shape_fail(p, in, "repeated axis " + std::to_string(a));
    seen[static_cast<std::size_t>(a)] = true;
  }
}

Shape remove_axes(const Shape& s, const Ints& axes) {
  Shape out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(i)) == axes.end()) out.push_back(s[i]);
  return out;
}

std::vector<ShapedArray> reduce(Primitive p, Avals in, const params::Reduce& ps, Kinds k) {
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], k);
  const Ints& axes = ps.axes;
  check_unique_axes(p, in, axes, in[0].ndim());
  return {ShapedArray{remove_axes(in[0].shape, axes), in[0].dtype}};
}

// An index into an axis of n elements in `index`'s dtype: past its range the kernel wrapped (an
// argmax of 2^31 + 4 elements in i32 was negative; a hunt of the thirty-fifth session).
// An operand without elements computes no index.
void check_index_range(Primitive p, Avals in, std::int64_t axis, DType index, const char* remedy) {
  if (!numbers_positions(index, in[0].shape, axis))
    shape_fail(p, in, "the axis has " + std::to_string(in[0].shape[static_cast<std::size_t>(axis)]) +
                          " elements, more than " + std::string(dtype_name(index)) + " indices can number" + remedy);
}

// argmax, argmin: one axis removed, an index dtype out.
std::vector<ShapedArray> arg_reduce_shape_rule(Primitive p, Avals in, const params::Argmax& ps) {
  expect_arity(p, in, 1);
  const Ints& axes = ps.axes;
  if (axes.size() != 1) shape_fail(p, in, "takes exactly one axis");
  check_unique_axes(p, in, axes, in[0].ndim());
  if (in[0].shape[static_cast<std::size_t>(axes[0])] == 0) shape_fail(p, in, "the axis is empty: there is no index to return");
  DType idx = ps.index_dtype;
  if (idx != i32 && idx != i64)  // (xj::argmax converts to the other integer types from i64)
    type_fail(p, in, "index_dtype must be an integer type (the primitive writes i32 or i64; xj::argmax converts to the others)");
  check_index_range(p, in, axes[0], idx, idx == i64 ? "" : "; ask for i64 indices");
  return {ShapedArray{remove_axes(in[0].shape, axes), idx}};
}

// clamp(lo, x, hi): x's aval; lo and hi of x's dtype, each rank 0 or x's shape (lax.clamp).
std::vector<ShapedArray> clamp_shape_rule(Avals in) {
  const Primitive p = Primitive::clamp;
  expect_arity(p, in, 3);
  for (std::size_t b : {std::size_t{0}, std::size_t{2}}) {
    if (in[b].dtype != in[1].dtype) type_fail(p, in, "the bounds must have the operand's dtype; convert with xj::astype");
    if (in[b].ndim() != 0 && in[b].shape != in[1].shape) shape_fail(p, in, "each bound must be a scalar or have the operand's shape");
  }
  return {in[1]};
}

// cumsum, cumprod, cummax, cummin (numbers) and cumlogsumexp (floats): x's aval, along one axis.
std::vector<ShapedArray> cumulative_shape_rule(Primitive p, Avals in, const params::Cumulative& ps) {
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], p == Primitive::cumlogsumexp ? Kinds::floats : Kinds::numeric);
  if (ps.axis < 0 || ps.axis >= in[0].ndim())
    shape_fail(p, in, "axis " + std::to_string(ps.axis) + " is outside the operand's " + std::to_string(in[0].ndim()) +
                          " dimensions");
  return {in[0]};
}

std::vector<ShapedArray> select_n_shape_rule(Avals in) {
  const Primitive p = Primitive::select_n;
  if (in.size() < 2) shape_fail(p, in, "needs a predicate and at least one case");
  const ShapedArray& which = in[0];
  if (which.dtype != bool_ && which.dtype != i32)
    type_fail(p, in, "the predicate must be bool or i32");
  if (which.dtype == bool_ && in.size() > 3) type_fail(p, in, "a bool predicate selects between 2 cases");
  for (std::size_t i = 2; i < in.size(); ++i)
    if (in[i] != in[1]) type_fail(p, in, "all cases must have the same shape and dtype");
  if (which.ndim() != 0 && which.shape != in[1].shape)
    shape_fail(p, in, "the predicate must be a scalar or have the cases' shape");
  return {in[1]};
}

std::vector<ShapedArray> dot_general_shape_rule(Avals in, const params::DotGeneral& ps) {
  const Primitive p = Primitive::dot_general;
  expect_arity(p, in, 2);
  const auto &lhs = in[0], &rhs = in[1];
  if (lhs.dtype != rhs.dtype) type_fail(p, in, "operands must have the same dtype");
  expect_kind(p, in, lhs, Kinds::numeric);
  const Ints &lc = ps.lhs_contracting, &rc = ps.rhs_contracting;
  const Ints &lb = ps.lhs_batch, &rb = ps.rhs_batch;
  if (lc.size() != rc.size()) shape_fail(p, in, "contracting dimension lists differ in length");
  if (lb.size() != rb.size()) shape_fail(p, in, "batch dimension lists differ in length");
  Ints lall = lb, rall = rb;
  lall.insert(lall.end(), lc.begin(), lc.end());
  rall.insert(rall.end(), rc.begin(), rc.end());
  check_unique_axes(p, in, lall, lhs.ndim());
  check_unique_axes(p, in, rall, rhs.ndim());
  auto dim = [](const ShapedArray& a, std::int64_t i) { return a.shape[static_cast<std::size_t>(i)]; };
  for (std::size_t i = 0; i < lc.size(); ++i)
    if (dim(lhs, lc[i]) != dim(rhs, rc[i]))
      shape_fail(p, in, "contracting dimensions differ: " + std::to_string(dim(lhs, lc[i])) + " vs " +
                            std::to_string(dim(rhs, rc[i])));
  Shape out;
  out.reserve(lb.size() + (static_cast<std::size_t>(lhs.ndim()) - lall.size()) + (static_cast<std::size_t>(rhs.ndim()) - rall.size()));
  for (std::size_t i = 0; i < lb.size(); ++i) {
    if (dim(lhs, lb[i]) != dim(rhs, rb[i])) shape_fail(p, in, "batch dimensions differ");
    out.push_back(dim(lhs, lb[i]));
  }
  for (std::int64_t i = 0; i < lhs.ndim(); ++i)
    if (std::find(lall.begin(), lall.end(), i) == lall.end()) out.push_back(dim(lhs, i));
  for (std::int64_t i = 0; i < rhs.ndim(); ++i)
    if (std::find(rall.begin(), rall.end(), i) == rall.end()) out.push_back(dim(rhs, i));
  return {ShapedArray{out, lhs.dtype}};
}

std::vector<ShapedArray> broadcast_in_dim_shape_rule(Avals in, const params::BroadcastInDim& ps) {
  const Primitive p = Primitive::broadcast_in_dim;
  expect_arity(p, in, 1);
  const Ints& shape = ps.shape;
  const Ints& bd = ps.broadcast_dimensions;
  if (static_cast<std::int64_t>(bd.size()) != in[0].ndim())
    shape_fail(p, in, "broadcast_dimensions needs one entry per operand dimension");
  for (std::size_t i = 0; i < bd.size(); ++i) {
    if (bd[i] < 0 || bd[i] >= static_cast<std::int64_t>(shape.size()) || (i && bd[i] <= bd[i - 1]))
      shape_fail(p, in, "broadcast_dimensions must be increasing and within the target rank");
    auto d = in[0].shape[i];
    if (d != 1 && d != shape[static_cast<std::size_t>(bd[i])])
      shape_fail(p, in, "cannot broadcast to " + shape_str(shape));
  }
  for (auto d : shape)
    if (d < 0) shape_fail(p, in, "negative dimension in " + shape_str(shape));
  return {ShapedArray{shape, in[0].dtype}};
}

std::vector<ShapedArray> reshape_shape_rule(Avals in, const params::Reshape& ps) {
  const Primitive p = Primitive::reshape;
  expect_arity(p, in, 1);
  const Ints& sizes = ps.new_sizes;
  for (auto d : sizes)
    if (d < 0) shape_fail(p, in, "negative dimension in " + shape_str(sizes));
  if (shape_size(sizes) != in[0].size())
    shape_fail(p, in, "cannot reshape " + std::to_string(in[0].size()) + " elements into " + shape_str(sizes));
  return {ShapedArray{sizes, in[0].dtype}};
}

std::vector<ShapedArray> transpose_shape_rule(Avals in, const params::Transpose& ps) {
  const Primitive p = Primitive::transpose;
  expect_arity(p, in, 1);
  const Ints& perm = ps.permutation;
  if (static_cast<std::int64_t>(perm.size()) != in[0].ndim()) shape_fail(p, in, "permutation has the wrong length");
  check_unique_axes(p, in, perm, in[0].ndim());
  Shape out;
  for (auto a : perm) out.push_back(in[0].shape[static_cast<std::size_t>(a)]);
  return {ShapedArray{out, in[0].dtype}};
}

std::vector<ShapedArray> squeeze_shape_rule(Avals in, const params::Squeeze& ps) {
  const Primitive p = Primitive::squeeze;
  expect_arity(p, in, 1);
  const Ints& dims = ps.dimensions;
  check_unique_axes(p, in, dims, in[0].ndim());
  for (auto d : dims)
    if (in[0].shape[static_cast<std::size_t>(d)] != 1)
      shape_fail(p, in, "cannot squeeze dimension " + std::to_string(d) + " whose size is not 1");
  return {ShapedArray{remove_axes(in[0].shape, dims), in[0].dtype}};
}

std::vector<ShapedArray> expand_dims_shape_rule(Avals in, const params::ExpandDims& ps) {
  const Primitive p = Primitive::expand_dims;
  expect_arity(p, in, 1);
  const Ints& dims = ps.dimensions;
  std::int64_t rank = in[0].ndim() + static_cast<std::int64_t>(dims.size());
  check_unique_axes(p, in, dims, rank);
  Shape out;
  std::size_t k = 0;
  for (std::int64_t i = 0; i < rank; ++i)
    out.push_back(std::find(dims.begin(), dims.end(), i) != dims.end() ? 1 : in[0].shape[k++]);
  return {ShapedArray{out, in[0].dtype}};
}

std::vector<ShapedArray> slice_shape_rule(Avals in, const params::Slice& ps) {
  const Primitive p = Primitive::slice;
  expect_arity(p, in, 1);
  const Ints &start = ps.start_indices, &limit = ps.limit_indices;
  const Ints& strides = ps.strides;
  auto r = static_cast<std::size_t>(in[0].ndim());
  if (start.size() != r || limit.size() != r || (!strides.empty() && strides.size() != r))
    shape_fail(p, in, "start_indices, limit_indices and strides need one entry per dimension");
  Shape out;
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t s = strides.empty() ? 1 : strides[i];
    if (s <= 0) shape_fail(p, in, "strides must be positive");
    if (start[i] < 0 || limit[i] > in[0].shape[i] || start[i] > limit[i])
      shape_fail(p, in, "slice [" + std::to_string(start[i]) + ":" + std::to_string(limit[i]) +
                            "] out of bounds for dimension " + std::to_string(i) + " of size " +
                            std::to_string(in[0].shape[i]));
    out.push_back(limit[i] == start[i] ? 0 : (limit[i] - start[i] - 1) / s + 1);  // (l - s0 + s - 1) / s wrapped for a huge s
  }
  return {ShapedArray{out, in[0].dtype}};
}

std::vector<ShapedArray> pad_shape_rule(Avals in, const params::Pad& ps) {
  const Primitive p = Primitive::pad;
  expect_arity(p, in, 2);
  if (in[1].ndim() != 0 || in[1].dtype != in[0].dtype)
    type_fail(p, in, "the padding value must be a scalar of the operand's dtype");
  const Ints &lo = ps.lo, &hi = ps.hi, &interior = ps.interior;
  auto r = static_cast<std::size_t>(in[0].ndim());
  if (lo.size() != r || hi.size() != r || interior.size() != r)
    shape_fail(p, in, "lo, hi and interior need one entry per dimension");
  Shape out;
  constexpr std::int64_t kMaxPad = std::int64_t{1} << 61;  // the kernel's index arithmetic stays in range
  for (std::size_t i = 0; i < r; ++i) {
    if (interior[i] < 0) shape_fail(p, in, "interior padding must be non-negative");
    if (lo[i] > kMaxPad || lo[i] < -kMaxPad || hi[i] > kMaxPad || hi[i] < -kMaxPad || interior[i] > kMaxPad)
      shape_fail(p, in, "padding of dimension " + std::to_string(i) + " beyond 2^61 is not supported");
    const std::int64_t n = in[0].shape[i];
    // (lo + hi) + n + (n - 1) interior, each step checked (it wrapped to a small size); the pads
    // first, so that (-big, big) and (big, -big) both cancel (the transpose pads the other way)
    std::int64_t size = 0, pads = 0;
    if ((n > 0 && __builtin_mul_overflow(n - 1, interior[i], &size)) || __builtin_add_overflow(size, n, &size) ||
        __builtin_add_overflow(lo[i], hi[i], &pads) || __builtin_add_overflow(size, pads, &size))
      shape_fail(p, in, "the padded size of dimension " + std::to_string(i) + " exceeds 2^63 - 1");
    if (size < 0) shape_fail(p, in, "negative padding removes more than the dimension holds");
    out.push_back(size);
  }
  return {ShapedArray{out, in[0].dtype}};
}

void expect_scalar_indices(Primitive p, Avals in, std::size_t first, std::size_t count) {
  if (in.size() != first + count)
    shape_fail(p, in, "needs one start index per operand dimension");
  for (std::size_t i = first; i < in.size(); ++i)
    if (in[i].ndim() != 0 || !is_integer(in[i].dtype))
      type_fail(p, in, "start indices must be integer scalars");
}

std::vector<ShapedArray> dynamic_slice_shape_rule(Avals in, const params::DynamicSlice& ps) {
  const Primitive p = Primitive::dynamic_slice;
  if (in.empty()) shape_fail(p, in, "needs an operand");
  expect_scalar_indices(p, in, 1, static_cast<std::size_t>(in[0].ndim()));
  const Ints& sizes = ps.slice_sizes;
  if (sizes.size() != static_cast<std::size_t>(in[0].ndim())) shape_fail(p, in, "slice_sizes needs one entry per dimension");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) shape_fail(p, in, "slice size " + std::to_string(sizes[i]) + " is negative");
    if (sizes[i] > in[0].shape[i]) shape_fail(p, in, "slice size exceeds the dimension");
  }
  return {ShapedArray{sizes, in[0].dtype}};
}

std::vector<ShapedArray> dynamic_update_slice_shape_rule(Avals in) {
  const Primitive p = Primitive::dynamic_update_slice;
  if (in.size() < 2) shape_fail(p, in, "needs an operand and an update");
  if (in[1].dtype != in[0].dtype) type_fail(p, in, "the update must have the operand's dtype");
  if (in[1].ndim() != in[0].ndim()) shape_fail(p, in, "the update must have the operand's rank");
  for (std::size_t i = 0; i < in[0].shape.size(); ++i)
    if (in[1].shape[i] > in[0].shape[i]) shape_fail(p, in, "the update is larger than the operand");
  expect_scalar_indices(p, in, 2, static_cast<std::size_t>(in[0].ndim()));
  return {in[0]};
}

std::vector<ShapedArray> concatenate_shape_rule(Avals in, const params::Concatenate& ps) {
  const Primitive p = Primitive::concatenate;
  if (in.empty()) shape_fail(p, in, "needs at least one operand");
  std::int64_t dim = norm_axis(p, in, ps.dimension, in[0].ndim());
  Shape out = in[0].shape;
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) type_fail(p, in, "operands must have the same dtype");
    if (in[i].ndim() != in[0].ndim()) shape_fail(p, in, "operands must have the same rank");
    for (std::int64_t d = 0; d < in[0].ndim(); ++d)
      if (d != dim && in[i].shape[static_cast<std::size_t>(d)] != in[0].shape[static_cast<std::size_t>(d)])
        shape_fail(p, in, "operands differ outside the concatenation dimension");
    if (__builtin_add_overflow(out[static_cast<std::size_t>(dim)], in[i].shape[static_cast<std::size_t>(dim)], &out[static_cast<std::size_t>(dim)]))
      shape_fail(p, in, "the concatenated dimension exceeds 2^63 - 1");  // it wrapped: 4 x 2^62 + 5 gave 5
  }
  return {ShapedArray{out, in[0].dtype}};
}

Shape gather_shape(Primitive p, Avals in, std::int64_t axis) {
  norm_axis(p, in, axis, in[0].ndim());
  if (in[1].dtype != i32 && in[1].dtype != i64) type_fail(p, in, "indices must be i32 or i64");
  Shape out(in[0].shape.begin(), in[0].shape.begin() + axis);
  out.insert(out.end(), in[1].shape.begin(), in[1].shape.end());
  out.insert(out.end(), in[0].shape.begin() + axis + 1, in[0].shape.end());
  return out;
}

std::vector<ShapedArray> gather_shape_rule(Avals in, const params::Gather& ps) {
  expect_arity(Primitive::gather, in, 2);
  return {ShapedArray{gather_shape(Primitive::gather, in, ps.axis), in[0].dtype}};
}

// scatter(x, i, u) and its combining forms: u has the shape take(x, i, axis) has; every dtype, as
// lax's scatters (on bool, add is `or`, mul `and`, min `and`, max `or`).
std::vector<ShapedArray> scatter_shape_rule(Primitive p, Avals in, const params::Scatter& ps) {
  expect_arity(p, in, 3);
  ShapedArray upd{gather_shape(p, in, ps.axis), in[0].dtype};
  if (in[2] != upd) shape_fail(p, in, "updates must be " + upd.str());
  return {in[0]};
}

std::vector<ShapedArray> iota_shape_rule(Avals in, const params::Iota& ps) {
  expect_arity(Primitive::iota, in, 0);
  const Ints& shape = ps.shape;
  for (auto d : shape)
    if (d < 0) shape_fail(Primitive::iota, in, "negative dimension in shape " + shape_str(shape));
  norm_axis(Primitive::iota, in, ps.dimension, static_cast<std::int64_t>(shape.size()));
  return {ShapedArray{shape, ps.dtype}};
}

// threefry2x32(key: u32[L..., 2], counters: u32[L..., M..., 2]) -> u32[L..., M..., 2]: one key
// (L empty), or one per index of the counters' leading dims L (vmap over a batch of keys).
std::vector<ShapedArray> threefry2x32_shape_rule(Avals in) {
  const Primitive p = Primitive::threefry2x32;
  expect_arity(p, in, 2);
  if (in[0].dtype != u32 || in[1].dtype != u32) type_fail(p, in, "key and counters must be u32");
  if (in[0].ndim() == 0 || in[0].shape.back() != 2) shape_fail(p, in, "keys must have a trailing axis of size 2");
  if (in[1].ndim() == 0 || in[1].shape.back() != 2) shape_fail(p, in, "counters must have a trailing axis of size 2");
  const std::size_t lead = in[0].shape.size() - 1;
  if (in[1].shape.size() < lead + 1 || !std::equal(in[0].shape.begin(), in[0].shape.begin() + static_cast<std::ptrdiff_t>(lead), in[1].shape.begin()))
    shape_fail(p, in, "the keys' leading dims must be the counters' leading dims");
  return {in[1]};
}

// cholesky(a: f[..., n, n]) -> f[..., n, n], the lower factor (a's lower triangle is read).
std::vector<ShapedArray> cholesky_shape_rule(Avals in) {
  const Primitive p = Primitive::cholesky;
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], Kinds::floats);
  const Shape& s = in[0].shape;
  if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2])
    shape_fail(p, in, "needs square matrices in the last two dimensions (..., n, n)");
  return {in[0]};
}

// triangular_solve(a: f[..., m, m], b: f[..., m, n] (left_side) or f[..., n, m]) -> b's aval;
// a and b have the same batch dimensions (no broadcasting, as lax.linalg).
std::vector<ShapedArray> triangular_solve_shape_rule(Avals in, const params::TriangularSolve& ps) {
  const Primitive p = Primitive::triangular_solve;
  expect_arity(p, in, 2);
  expect_kind(p, in, in[0], Kinds::floats);
  if (in[1].dtype != in[0].dtype) type_fail(p, in, "a and b must have the same dtype; convert one with xj::astype");
  const Shape &a = in[0].shape, &b = in[1].shape;
  if (a.size() < 2 || a[a.size() - 1] != a[a.size() - 2])
    shape_fail(p, in, "a must be square matrices in the last two dimensions (..., m, m)");
  if (b.size() != a.size() || !std::equal(a.begin(), a.end() - 2, b.begin()))
    shape_fail(p, in, "a and b must have the same rank and the same batch dimensions");
  const std::int64_t m = a.back(), bm = ps.left_side ? b[b.size() - 2] : b.back();
  if (bm != m)
    shape_fail(p, in, std::string("b's ") + (ps.left_side ? "rows" : "columns") + " must match a's size " +
                          std::to_string(m) + (ps.left_side ? " (left_side: op(a) x = b)" : " (x op(a) = b)"));
  return {in[1]};
}

// lu(a: f[..., m, n]) -> (lu: f[..., m, n], pivots: i32[..., min(m, n)], permutation: i32[..., m]):
// a[..., permutation, :] = L U, L unit lower (m, k) and U upper (k, n) packed into lu, k = min(m, n).
std::vector<ShapedArray> lu_shape_rule(Avals in) {
  const Primitive p = Primitive::lu;
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], Kinds::floats);
  const Shape& s = in[0].shape;
  if (s.size() < 2) shape_fail(p, in, "needs matrices in the last two dimensions (..., m, n)");
  const std::int64_t m = s[s.size() - 2], n = s.back();
  Shape pivots(s.begin(), s.end() - 2), permutation = pivots;
  pivots.push_back(std::min(m, n));
  permutation.push_back(m);
  return {in[0], ShapedArray{pivots, DType::i32}, ShapedArray{permutation, DType::i32}};
}

/// The rank >= 2 float operand of a factorization: its batch dims, m and n.
struct MatrixOperand {
  Shape batch;
  std::int64_t m, n;
  Shape with(std::int64_t r) const {
    Shape s = batch;
    s.push_back(r);
    return s;
  }
  Shape with(std::int64_t r, std::int64_t c) const {
    Shape s = with(r);
    s.push_back(c);
    return s;
  }
};
MatrixOperand matrix_operand(Primitive p, Avals in) {
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], Kinds::floats);
  const Shape& s = in[0].shape;
  if (s.size() < 2) shape_fail(p, in, "needs matrices in the last two dimensions (..., m, n)");
  return {Shape(s.begin(), s.end() - 2), s[s.size() - 2], s.back()};
}

// qr(a: f[..., m, n]) -> (q: f[..., m, c], r: f[..., c, n]), c = m (full_matrices) or min(m, n).
std::vector<ShapedArray> qr_shape_rule(Avals in, const params::Qr& ps) {
  const MatrixOperand a = matrix_operand(Primitive::qr, in);
  const std::int64_t c = ps.full_matrices ? a.m : std::min(a.m, a.n);
  return {ShapedArray{a.with(a.m, c), in[0].dtype}, ShapedArray{a.with(c, a.n), in[0].dtype}};
}

// eigh(a: f[..., n, n]) -> (v: f[..., n, n], w: f[..., n]): eigenvectors as columns, eigenvalues ascending.
std::vector<ShapedArray> eigh_shape_rule(Avals in) {
  const MatrixOperand a = matrix_operand(Primitive::eigh, in);
  if (a.m != a.n) shape_fail(Primitive::eigh, in, "needs square matrices in the last two dimensions (..., n, n)");
  return {in[0], ShapedArray{a.with(a.n), in[0].dtype}};
}

// svd(a: f[..., m, n]) -> (s: f[..., k], u: f[..., m, m or k], vt: f[..., n or k, n]), k = min(m, n);
// s alone without compute_uv.
std::vector<ShapedArray> svd_shape_rule(Avals in, const params::Svd& ps) {
  const MatrixOperand a = matrix_operand(Primitive::svd, in);
  const std::int64_t k = std::min(a.m, a.n);
  std::vector<ShapedArray> out{ShapedArray{a.with(k), in[0].dtype}};
  if (ps.compute_uv) {
    out.push_back(ShapedArray{a.with(a.m, ps.full_matrices ? a.m : k), in[0].dtype});
    out.push_back(ShapedArray{a.with(ps.full_matrices ? a.n : k, a.n), in[0].dtype});
  }
  return out;
}

// lu_pivots_to_permutation(pivots: i32[..., k]) -> i32[..., permutation_size], k <= permutation_size.
std::vector<ShapedArray> lu_pivots_to_permutation_shape_rule(Avals in, const params::LuPivotsToPermutation& ps) {
  const Primitive p = Primitive::lu_pivots_to_permutation;
  expect_arity(p, in, 1);
  if (in[0].dtype != DType::i32) type_fail(p, in, "pivots must be i32 (as lu returns them)");
  if (in[0].ndim() < 1) shape_fail(p, in, "pivots need at least one axis (..., k)");
  if (ps.permutation_size < in[0].shape.back())
    shape_fail(p, in, "permutation_size " + std::to_string(ps.permutation_size) + " is less than the number of pivots");
  Shape s = in[0].shape;
  s.back() = ps.permutation_size;
  return {ShapedArray{s, DType::i32}};
}

std::vector<ShapedArray> all_gather_shape_rule(Avals in, const params::AllGather& ps) {
  const Primitive p = Primitive::all_gather;
  expect_arity(p, in, 1);
  norm_axis(p, in, ps.axis, in[0].ndim() + (ps.tiled ? 0 : 1));
  Shape shape = in[0].shape;
  if (ps.tiled) shape[static_cast<std::size_t>(ps.axis)] *= ps.axis_size;
  else shape.insert(shape.begin() + ps.axis, ps.axis_size);
  return {ShapedArray{shape, in[0].dtype}};
}

std::vector<ShapedArray> psum_scatter_shape_rule(Avals in, const params::PsumScatter& ps) {
  const Primitive p = Primitive::psum_scatter;
  expect_arity(p, in, 1);
  expect_kind(p, in, in[0], Kinds::numeric);
  norm_axis(p, in, ps.axis, in[0].ndim());
  const std::int64_t d = in[0].shape[static_cast<std::size_t>(ps.axis)];
  if (ps.tiled) {
    if (ps.axis_size <= 0 || d % ps.axis_size != 0)
      shape_fail(p, in, "tiled: axis " + std::to_string(ps.axis) + " (size " + std::to_string(d) +
                            ") must split into one chunk per process (" + std::to_string(ps.axis_size) + ")");
    Shape shape = in[0].shape;
    shape[static_cast<std::size_t>(ps.axis)] = d / ps.axis_size;
    return {ShapedArray{shape, in[0].dtype}};
  }
  if (d != ps.axis_size)
    shape_fail(p, in, "axis " + std::to_string(ps.axis) + " must have one entry per process (" +
                          std::to_string(ps.axis_size) + ")");
  return {ShapedArray{remove_axes(in[0].shape, {ps.axis}), in[0].dtype}};
}

std::vector<ShapedArray> ppermute_shape_rule(Avals in, const params::Ppermute& ps) {
  const Primitive p = Primitive::ppermute;
  if (ps.perm.size() % 2 != 0) shape_fail(p, in, "perm must hold (source, destination) pairs");
  return elementwise(p, in, 1, Kinds::any);
}

std::vector<ShapedArray> integer_pow_shape_rule(Avals in, const params::IntegerPow& ps) {
  auto out = elementwise(Primitive::integer_pow, in, 1, Kinds::numeric);
  if (ps.y < 0 && !is_floating(in[0].dtype))
    type_fail(Primitive::integer_pow, in, "a negative power needs a floating-point operand");
  return out;
}

}  // namespace

// A family's shape rule, or nothing where the primitive has its own case.
#define XJAX_SHAPE_float_unary(name, stem, S, kinds) \
  case P::name: return elementwise(p, in, 1, Kinds::kinds);
#define XJAX_SHAPE_numeric_unary(name, stem, S, kinds) XJAX_SHAPE_float_unary(name, stem, S, kinds)
#define XJAX_SHAPE_binary(name, stem, S, kinds) \
  case P::name: return elementwise(p, in, 2, Kinds::kinds);
#define XJAX_SHAPE_comparison(name, stem, S, kinds) \
  case P::name: return elementwise(p, in, 2, Kinds::kinds, bool_, false);
#define XJAX_SHAPE_power(name, stem, S, kinds)
#define XJAX_SHAPE_structural(name, stem, S, kinds)
#define XJAX_SHAPE_collective(name, stem, S, kinds)
#define XJAX_SHAPE_factorization(name, stem, S, kinds)
#define XJAX_SHAPE_higher_order(name, stem, S, kinds) \
  case P::name: return stem##_abstract_eval(in, ps.get<params::S>());
#define XJAX_SHAPE_control_flow(name, stem, S, kinds) XJAX_SHAPE_higher_order(name, stem, S, kinds)

namespace {
std::vector<ShapedArray> abstract_eval_of(Primitive p, std::span<const ShapedArray> in, const Params& ps) {
  using P = Primitive;
  switch (p) {
    // The elementwise families' rules (operand kinds from the table) and the higher-order
    // primitives' stem##_abstract_eval are generated; the others have their case below.
#define XJAX_SHAPE_CASE(name, stem, S, family, kinds) XJAX_SHAPE_##family(name, stem, S, kinds)
    XJAX_PRIMITIVES(XJAX_SHAPE_CASE)
#undef XJAX_SHAPE_CASE
    case P::integer_pow: return integer_pow_shape_rule(in, ps.get<params::IntegerPow>());
    case P::select_n: return select_n_shape_rule(in);
    case P::convert_element_type:
      expect_arity(p, in, 1);
      return {ShapedArray{in[0].shape, ps.get<params::ConvertElementType>().new_dtype}};
    case P::stop_gradient: case P::copy: return elementwise(p, in, 1, Kinds::any);
    case P::dot_general: return dot_general_shape_rule(in, ps.get<params::DotGeneral>());
    case P::conv_general_dilated: return conv_general_dilated_shape_rule(in, ps.get<params::ConvGeneralDilated>());
    case P::reduce_sum: case P::reduce_prod: return reduce(p, in, ps.get<params::Reduce>(), Kinds::numeric);
    case P::reduce_max: case P::reduce_min: return reduce(p, in, ps.get<params::Reduce>(), Kinds::any);
    case P::bitwise_not: return elementwise(p, in, 1, Kinds::integers);
    case P::round: {
      const std::int64_t m = ps.get<params::Round>().rounding_method;
      if (m != 0 && m != 1) shape_fail(p, in, "rounding_method must be 0 (away from zero) or 1 (to nearest even)");
      return elementwise(p, in, 1, Kinds::floats);
    }
    case P::population_count: return elementwise(p, in, 1, Kinds::ints);
    case P::argmax: case P::argmin: return arg_reduce_shape_rule(p, in, ps.get<params::Argmax>());
    case P::reduce_and: case P::reduce_or:
      if (in.size() == 1 && in[0].dtype != bool_) type_fail(p, in, "needs a bool operand (xj::all / xj::any convert others)");
      return reduce(p, in, ps.get<params::Reduce>(), Kinds::any);
    case P::is_finite: return elementwise(p, in, 1, Kinds::floats, bool_, false);
    case P::clamp: return clamp_shape_rule(in);
    case P::cumsum: case P::cumprod: case P::cummax: case P::cummin: case P::cumlogsumexp:
      return cumulative_shape_rule(p, in, ps.get<params::Cumulative>());
    case P::reduce_window_sum: case P::reduce_window_max: case P::reduce_window_min:
      return reduce_window_shape_rule(p, in, ps.get<params::ReduceWindow>());
    case P::select_and_gather_add: case P::select_and_scatter_add:
      return select_window_shape_rule(p, in, ps.get<params::SelectWindow>());
    case P::broadcast_in_dim: return broadcast_in_dim_shape_rule(in, ps.get<params::BroadcastInDim>());
    case P::reshape: return reshape_shape_rule(in, ps.get<params::Reshape>());
    case P::transpose: return transpose_shape_rule(in, ps.get<params::Transpose>());
    case P::rev:
      expect_arity(p, in, 1);
      check_unique_axes(p, in, ps.get<params::Rev>().dimensions, in[0].ndim());
      return {in[0]};
    case P::squeeze: return squeeze_shape_rule(in, ps.get<params::Squeeze>());
    case P::expand_dims: return expand_dims_shape_rule(in, ps.get<params::ExpandDims>());
    case P::slice: return slice_shape_rule(in, ps.get<params::Slice>());
    case P::pad: return pad_shape_rule(in, ps.get<params::Pad>());
    case P::dynamic_slice: return dynamic_slice_shape_rule(in, ps.get<params::DynamicSlice>());
    case P::dynamic_update_slice: return dynamic_update_slice_shape_rule(in);
    case P::concatenate: return concatenate_shape_rule(in, ps.get<params::Concatenate>());
    case P::gather: return gather_shape_rule(in, ps.get<params::Gather>());
    case P::scatter_add: case P::scatter: case P::scatter_mul: case P::scatter_min: case P::scatter_max:
      return scatter_shape_rule(p, in, ps.get<params::Scatter>());
    case P::iota: return iota_shape_rule(in, ps.get<params::Iota>());
    case P::name: return elementwise(p, in, 1, Kinds::any);
    case P::threefry2x32: return threefry2x32_shape_rule(in);
    case P::cholesky: return cholesky_shape_rule(in);
    case P::triangular_solve: return triangular_solve_shape_rule(in, ps.get<params::TriangularSolve>());
    case P::lu: return lu_shape_rule(in);
    case P::sort: {
      const auto& s = ps.get<params::Sort>();
      if (in.empty()) shape_fail(p, in, "needs at least one operand");
      for (const auto& a : in)
        if (a.shape != in[0].shape) shape_fail(p, in, "every operand must have the first one's shape");
      if (in[0].ndim() == 0) shape_fail(p, in, "needs operands of rank >= 1");
      if (s.dimension < 0 || s.dimension >= in[0].ndim())
        shape_fail(p, in, "dimension " + std::to_string(s.dimension) + " is outside the operands' " + std::to_string(in[0].ndim()));
      if (s.num_keys < 1 || s.num_keys > static_cast<std::int64_t>(in.size()))
        shape_fail(p, in, "num_keys must be between 1 and the number of operands, got " + std::to_string(s.num_keys));
      return std::vector<ShapedArray>(in.begin(), in.end());
    }
    case P::top_k: {
      expect_arity(p, in, 1);
      if (in[0].ndim() == 0) shape_fail(p, in, "needs an operand of rank >= 1");
      const std::int64_t k = ps.get<params::TopK>().k, n = in[0].shape.back();
      if (k < 0 || k > n) shape_fail(p, in, "k = " + std::to_string(k) + " is outside 0.." + std::to_string(n) + " (the last axis)");
      check_index_range(p, in, in[0].ndim() - 1, DType::i32, " (top_k's indices are i32, as JAX's)");
      Shape shape = in[0].shape;
      shape.back() = k;
      return {ShapedArray{shape, in[0].dtype}, ShapedArray{shape, DType::i32}};
    }
    case P::qr: return qr_shape_rule(in, ps.get<params::Qr>());
    case P::eigh: return eigh_shape_rule(in);
    case P::svd: return svd_shape_rule(in, ps.get<params::Svd>());
    case P::lu_pivots_to_permutation:
      return lu_pivots_to_permutation_shape_rule(in, ps.get<params::LuPivotsToPermutation>());
    case P::psum: return elementwise(p, in, 1, Kinds::numeric);
    case P::pmax: return elementwise(p, in, 1, Kinds::any);  // bools: or, as XLA's all-reduce max
    case P::all_gather: return all_gather_shape_rule(in, ps.get<params::AllGather>());
    case P::psum_scatter: return psum_scatter_shape_rule(in, ps.get<params::PsumScatter>());
    case P::ppermute: return ppermute_shape_rule(in, ps.get<params::Ppermute>());
  }
  throw Error("abstract_eval: unknown primitive");
}
}  // namespace

std::vector<ShapedArray> abstract_eval(Primitive p, std::span<const ShapedArray> in, const Params& ps) {
  std::vector<ShapedArray> out = abstract_eval_of(p, in, ps);
  // No result dimension may be negative: a rule's arithmetic that wrapped past 2^63 - 1. (The
  // element count is not checked here: vmap traces an empty batch of (2^62, 4) examples at the
  // example's shape, as JAX computes it; an array that large fails when it is allocated.)
  for (const ShapedArray& a : out)
    for (std::int64_t d : a.shape)
      if (d < 0) shape_fail(p, in, "a dimension of the result, " + shape_str(a.shape) + ", is negative (its size wrapped past 2^63 - 1)");
  return out;
}

}  // namespace xjax::detail
