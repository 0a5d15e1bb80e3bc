// vmap.cpp: batching.
// vmap : (a -> b) -> ([n]a -> [n]b)
// The pass re-traces the jaxpr, running each equation's batching rule on batched values (the
// operands with a batch axis, and where it is: BatchArgs::dims). An equation none of whose
// operands is batched is copied as is: its outputs do not depend on the batch member. A rule
// leaves the batch axis where the primitive puts it and moves it only when the primitive needs
// it elsewhere (JAX's batch_dim), so a chain of elementwise ops or a matmul by unbatched weights
// adds no transpose.
// Read: the helpers, the rules in the order of XJAX_FOR_EACH_PRIMITIVE (higher-order primitives'
// rules live with their other rules), the rule table, then the pass and batch_by_loop.
#include <algorithm>
#include <unordered_map>

#include "batching.hpp"
#include "higher_order.hpp"
#include "scatter_rules.hpp"
#include "windows.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {

namespace {

using P = Primitive;
using Ints = std::vector<std::int64_t>;

std::int64_t first_batched(std::span<const std::int64_t> dims) {
  for (auto d : dims)
    if (d != not_batched) return d;
  throw InternalError("vmap", "a batching rule ran without a batched operand");
}

/// Axis `a` of an unbatched operand, as an axis of the operand batched at d.
std::int64_t shifted(std::int64_t a, std::int64_t d) { return a >= d ? a + 1 : a; }
Ints shifted(const Ints& axes, std::int64_t d) {
  Ints out;
  for (auto a : axes) out.push_back(shifted(a, d));
  return out;
}
/// How many of `axes` (of the unbatched operand) come before batch dim d.
std::int64_t count_below(const Ints& axes, std::int64_t d) {
  return static_cast<std::int64_t>(std::count_if(axes.begin(), axes.end(), [d](std::int64_t a) { return a < d; }));
}
Ints inserted(Ints v, std::int64_t at, std::int64_t value) {
  v.insert(v.begin() + at, value);
  return v;
}

BatchOut one(Array y, std::int64_t d) { return {{std::move(y)}, {d}}; }

// ---- rule families ---------------------------------------------------------------------------

// f(x...)[b] = f(x[b]...) for operands of one shape: every operand gets the first batched
// operand's batch dim (unbatched ones broadcast along it).
BatchOut elementwise_batch(const BatchArgs& a) {
  std::int64_t d = first_batched(a.dims);
  std::vector<Array> xs;
  for (std::size_t i = 0; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], d, a.size));
  auto ys = bind(a.prim, xs, a.params, a.loc);
  return {ys, BatchDims(ys.size(), d)};
}

// reduce(x, axes)[b] = reduce(x[b], axes): the axes shift past the batch dim.
template <class S> BatchOut reduction_batch(const BatchArgs& a) {
  std::int64_t d = a.dims[0];
  S ps = a.params.get<S>();
  Ints axes = ps.axes;
  ps.axes = shifted(axes, d);
  return one(bind1(a.prim, a.x, ps, a.loc), d - count_below(axes, d));
}

// ---- rules, in the order of XJAX_PRIMITIVE_TABLE ----------------------------------------------

// (The elementwise families, float_unary to comparison, are batched by elementwise_batch: the
// table in batch_rule.)

// select_n(p, c...)[b] = select_n(p[b], c[b]...): the cases share a batch dim; a scalar
// predicate stays scalar when unbatched and is broadcast over the cases when batched.
BatchOut select_n_batch(const BatchArgs& a) {
  std::span<const std::int64_t> case_dims = a.dims.subspan(1);
  bool cases_batched = std::any_of(case_dims.begin(), case_dims.end(), [](auto d) { return d != not_batched; });
  std::int64_t d = cases_batched ? first_batched(case_dims) : 0;
  std::vector<Array> xs{Array()};
  for (std::size_t i = 1; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], d, a.size));
  const Array& pred = a.x[0];
  std::int64_t pred_rank = pred.ndim() - (a.dims[0] == not_batched ? 0 : 1);
  if (pred_rank == 0 && a.dims[0] == not_batched) {
    xs[0] = pred;
  } else if (pred_rank == 0) {  // a batched scalar: one predicate per member, over its whole case
    xs[0] = broadcast_in_dim(pred, xs[1].shape(), {d});
  } else {
    xs[0] = move_batch_dim(pred, a.dims[0], d, a.size);
  }
  return one(bind1(a.prim, xs, a.params, a.loc), d);
}

BatchOut convert_element_type_batch(const BatchArgs& a) { return elementwise_batch(a); }
BatchOut stop_gradient_batch(const BatchArgs& a) { return elementwise_batch(a); }
BatchOut copy_batch(const BatchArgs& a) { return elementwise_batch(a); }

// dot_general(l, r)[b]: both batched -> the batch becomes a dot batch dimension (output dim 0);
// one batched -> the batch axis is a free dimension of that operand, so the matmul by unbatched
// weights is one larger GEMM. No operand is transposed.
BatchOut dot_general_batch(const BatchArgs& a) {
  params::DotGeneral dn = a.params.get<params::DotGeneral>();
  std::int64_t dl = a.dims[0], dr = a.dims[1];
  const Ints lc = dn.lhs_contracting, rc = dn.rhs_contracting, lb = dn.lhs_batch, rb = dn.rhs_batch;
  auto nb = static_cast<std::int64_t>(lb.size());
  if (dl != not_batched && dr != not_batched) {
    dn = {shifted(lc, dl), shifted(rc, dr), inserted(shifted(lb, dl), 0, dl), inserted(shifted(rb, dr), 0, dr)};
    return one(bind1(a.prim, a.x, dn, a.loc), 0);
  }
  // The free dims of the batched operand, in order: where its batch dim lands in the output.
  auto free_position = [](const Ints& contracting, const Ints& batch, std::int64_t d) {
    std::int64_t pos = 0;
    for (std::int64_t i = 0; i < d; ++i)
      if (std::find(contracting.begin(), contracting.end(), i) == contracting.end() &&
          std::find(batch.begin(), batch.end(), i) == batch.end())
        ++pos;
    return pos;
  };
  if (dl != not_batched) {
    dn.lhs_contracting = shifted(lc, dl);
    dn.lhs_batch = shifted(lb, dl);
    std::int64_t pos = free_position(dn.lhs_contracting, dn.lhs_batch, dl);
    return one(bind1(a.prim, a.x, dn, a.loc), nb + pos);
  }
  dn.rhs_contracting = shifted(rc, dr);
  dn.rhs_batch = shifted(rb, dr);
  std::int64_t lhs_free = a.x[0].ndim() - static_cast<std::int64_t>(lc.size() + lb.size());
  std::int64_t pos = free_position(dn.rhs_contracting, dn.rhs_batch, dr);
  return one(bind1(a.prim, a.x, dn, a.loc), nb + lhs_free + pos);
}

// conv(l, r)[b] without a loop (JAX's rule): the batch folds into a dim the convolution already
// maps independently. Both batched: into lhs's features and rhs's output features as that many
// more feature groups (or into lhs's batch as batch groups). Only lhs: into its batch dim (inside
// each batch group). Only rhs: into its output features (inside each group).
BatchOut conv_general_dilated_batch(const BatchArgs& a) {
  if (a.size == 0) return batch_by_loop(a);
  params::ConvGeneralDilated p = a.params.get<params::ConvGeneralDilated>();
  const std::int64_t dl = a.dims[0], dr = a.dims[1], n = a.size;
  const std::int64_t lb = p.lhs_spec[0], lf = p.lhs_spec[1], ro = p.rhs_spec[0], ob = p.out_spec[0], of = p.out_spec[1];
  auto conv = [&](const Array& l, const Array& r) { return bind1(a.prim, {l, r}, p, a.loc); };
  if (dl != not_batched && dr != not_batched) {
    Array l = a.x[0];
    if (p.batch_group_count > 1) {
      l = reshape_axis_into(dl, lb, l);
      p.batch_group_count *= n;
    } else {
      l = reshape_axis_into(dl, lf, l);
      p.feature_group_count *= n;
    }
    return one(reshape_axis_out_of(of, n, conv(l, reshape_axis_into(dr, ro, a.x[1]))), of);
  }
  if (dl != not_batched) {
    Array l = a.x[0];
    if (p.batch_group_count == 1) {
      l = reshape_axis_into(dl, lb, l);
    } else {  // the batch goes inside each batch group: (groups, n, N / groups) -> N'
      l = reshape_axis_out_of(lb + (dl <= lb ? 1 : 0), p.batch_group_count, l);
      l = reshape_axis_into(dl + (lb < dl ? 1 : 0), lb + 1, l);
      l = reshape_axis_into(lb, lb, l);
    }
    return one(reshape_axis_out_of(ob, n, conv(l, a.x[1])), ob);
  }
  Array r = a.x[1];
  if (p.feature_group_count == 1 && p.batch_group_count == 1)
    return one(reshape_axis_out_of(of, n, conv(a.x[0], reshape_axis_into(dr, ro, r))), of);
  // The batch goes inside each group of output features, and comes out of each group again.
  const std::int64_t groups = std::max(p.feature_group_count, p.batch_group_count);
  r = reshape_axis_out_of(ro + (dr <= ro ? 1 : 0), groups, r);
  r = reshape_axis_into(dr + (ro < dr ? 1 : 0), ro + 1, r);
  r = reshape_axis_into(ro, ro, r);
  Array out = reshape_axis_out_of(of, groups, conv(a.x[0], r));
  out = reshape_axis_out_of(of + 1, n, out);
  return one(reshape_axis_into(of, of + 1, out), of);
}

BatchOut reduce_sum_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
BatchOut reduce_max_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
BatchOut reduce_min_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
BatchOut reduce_prod_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
BatchOut argmax_batch(const BatchArgs& a) { return reduction_batch<params::Argmax>(a); }
BatchOut argmin_batch(const BatchArgs& a) { return reduction_batch<params::Argmax>(a); }
BatchOut reduce_and_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
BatchOut reduce_or_batch(const BatchArgs& a) { return reduction_batch<params::Reduce>(a); }
// f(x)[b] for a one-operand elementwise primitive outside the elementwise families
// (bitwise_not, population_count, round): the batch dim stays.
BatchOut unary_elementwise_batch(const BatchArgs& a) { return one(bind1(a.prim, a.x, a.params, a.loc), a.dims[0]); }
BatchOut bitwise_not_batch(const BatchArgs& a) { return unary_elementwise_batch(a); }
BatchOut population_count_batch(const BatchArgs& a) { return unary_elementwise_batch(a); }
BatchOut round_batch(const BatchArgs& a) { return unary_elementwise_batch(a); }
BatchOut is_finite_batch(const BatchArgs& a) { return unary_elementwise_batch(a); }
// clamp(lo, x, hi)[b]: with scalar bounds shared by every member, x keeps its batch dim; else the
// three at x's batched shape (batch at 0), a member's scalar bound broadcast over its elements.
BatchOut clamp_batch(const BatchArgs& a) {
  const bool shared_scalars = a.dims[0] == not_batched && a.dims[2] == not_batched && a.x[0].ndim() == 0 && a.x[2].ndim() == 0;
  if (shared_scalars) return one(bind1(a.prim, a.x, a.params, a.loc), a.dims[1]);
  const Array x = move_batch_dim(a.x[1], a.dims[1], 0, a.size);
  const Shape& full = x.shape();
  auto bound = [&](std::size_t i) {
    if (a.dims[i] == not_batched && a.x[i].ndim() == 0) return a.x[i];
    const Array b = move_batch_dim(a.x[i], a.dims[i], 0, a.size);  // [B] (a scalar per member) or full
    return b.shape() == full ? b : broadcast_in_dim(b, full, {0}, a.loc);
  };
  return one(bind1(a.prim, {bound(0), x, bound(2)}, a.params, a.loc), 0);
}
// cumop(x, axis)[b]: the batch dim stays where it is, the axis shifts past it.
BatchOut cumulative_batch(const BatchArgs& a) {
  const std::int64_t d = a.dims[0];
  params::Cumulative c = a.params.get<params::Cumulative>();
  c.axis = shifted(c.axis, d);
  return one(bind1(a.prim, a.x, c, a.loc), d);
}
BatchOut cumsum_batch(const BatchArgs& a) { return cumulative_batch(a); }
BatchOut cumprod_batch(const BatchArgs& a) { return cumulative_batch(a); }
BatchOut cummax_batch(const BatchArgs& a) { return cumulative_batch(a); }
BatchOut cummin_batch(const BatchArgs& a) { return cumulative_batch(a); }
BatchOut cumlogsumexp_batch(const BatchArgs& a) { return cumulative_batch(a); }
// A window op on operands batched at d: every operand gets the batch at d, and the window a dim
// of extent 1 there (so each batch member is reduced alone).
template <class W> BatchOut window_batch(const BatchArgs& a) {
  const std::int64_t d = first_batched(a.dims);
  W w = a.params.get<W>();
  const auto at = [d](Ints v, std::int64_t value) { return inserted(std::move(v), d, value); };
  w.window_dimensions = at(w.window_dimensions, 1);
  w.window_strides = at(w.window_strides, 1);
  w.padding_lo = at(w.padding_lo, 0);
  w.padding_hi = at(w.padding_hi, 0);
  w.base_dilation = at(w.base_dilation, 1);
  w.window_dilation = at(w.window_dilation, 1);
  std::vector<Array> xs;
  for (std::size_t i = 0; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], d, a.size));
  return one(bind1(a.prim, xs, w, a.loc), d);
}
BatchOut reduce_window_sum_batch(const BatchArgs& a) { return window_batch<params::ReduceWindow>(a); }
BatchOut reduce_window_max_batch(const BatchArgs& a) { return window_batch<params::ReduceWindow>(a); }
BatchOut reduce_window_min_batch(const BatchArgs& a) { return window_batch<params::ReduceWindow>(a); }
BatchOut select_and_gather_add_batch(const BatchArgs& a) { return window_batch<params::SelectWindow>(a); }
BatchOut select_and_scatter_add_batch(const BatchArgs& a) { return window_batch<params::SelectWindow>(a); }

// broadcast_in_dim(x)[b]: the batch axis first, in the operand and in the output (as JAX), so a
// broadcast joins operands batched at 0 without a transpose between them.
BatchOut broadcast_in_dim_batch(const BatchArgs& a) {
  const auto& ps = a.params.get<params::BroadcastInDim>();
  const Array x = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
  Ints dims{0};
  for (auto d : ps.broadcast_dimensions) dims.push_back(d + 1);
  const Ints shape = inserted(ps.shape, 0, a.size);
  return one(bind1(a.prim, {x}, params::BroadcastInDim{.shape = shape, .broadcast_dimensions = dims}, a.loc), 0);
}

// reshape(x)[b]: the batch axis first, then the member's new shape.
BatchOut reshape_batch(const BatchArgs& a) {
  Array x = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
  Ints sizes = inserted(a.params.get<params::Reshape>().new_sizes, 0, a.size);
  return one(bind1(a.prim, {x}, params::Reshape{.new_sizes = sizes}, a.loc), 0);
}

// transpose(x, perm)[b]: one transpose that also brings the batch axis to the front.
BatchOut transpose_batch(const BatchArgs& a) {
  std::int64_t d = a.dims[0];
  Ints perm{d};
  for (auto p : a.params.get<params::Transpose>().permutation) perm.push_back(shifted(p, d));
  return one(bind1(a.prim, a.x, params::Transpose{.permutation = perm}, a.loc), 0);
}

// rev(x, dims)[b]: the reversed dims shift past the batch dim.
BatchOut rev_batch(const BatchArgs& a) {
  const std::int64_t d = a.dims[0];
  return one(bind1(a.prim, a.x, params::Rev{.dimensions = shifted(a.params.get<params::Rev>().dimensions, d)}, a.loc), d);
}

// squeeze(x, dims)[b]: the squeezed dims shift past the batch dim.
BatchOut squeeze_batch(const BatchArgs& a) {
  std::int64_t d = a.dims[0];
  const Ints& dims = a.params.get<params::Squeeze>().dimensions;
  return one(bind1(a.prim, a.x, params::Squeeze{.dimensions = shifted(dims, d)}, a.loc), d - count_below(dims, d));
}

// expand_dims(x, dims)[b]: the batch axis first; the new dims (output positions) shift by one.
BatchOut expand_dims_batch(const BatchArgs& a) {
  Array x = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
  Ints dims;
  for (auto p : a.params.get<params::ExpandDims>().dimensions) dims.push_back(p + 1);
  return one(bind1(a.prim, {x}, params::ExpandDims{.dimensions = dims}, a.loc), 0);
}

// slice(x)[b]: the whole batch axis is kept.
BatchOut slice_batch(const BatchArgs& a) {
  std::int64_t d = a.dims[0];
  params::Slice ps = a.params.get<params::Slice>();
  ps.start_indices = inserted(ps.start_indices, d, 0);
  ps.limit_indices = inserted(ps.limit_indices, d, a.size);
  if (!ps.strides.empty()) ps.strides = inserted(ps.strides, d, 1);
  return one(bind1(a.prim, a.x, ps, a.loc), d);
}

// The padding of a member with an unpadded batch axis at d.
params::Pad with_unpadded_axis(const params::Pad& ps, std::int64_t d) {
  return {.lo = inserted(ps.lo, d, 0), .hi = inserted(ps.hi, d, 0), .interior = inserted(ps.interior, d, 0)};
}

// pad(x, v)[b] with a batched padding value: x padded with 0 (its batch axis unpadded, a shared x
// padded once), then v[b] wherever no element of x landed (where a padded mask of ones is 0).
BatchOut pad_with_batched_value(const BatchArgs& a) {
  const params::Pad& ps = a.params.get<params::Pad>();
  const bool x_batched = a.dims[0] != not_batched;
  Array x = x_batched ? move_batch_dim(a.x[0], a.dims[0], 0, a.size) : a.x[0];
  const Shape member(x.shape().begin() + (x_batched ? 1 : 0), x.shape().end());
  const Array zero = scalar(0.0, x.dtype());
  Array padded = bind1(Primitive::pad, {x, zero}, x_batched ? with_unpadded_axis(ps, 0) : ps, a.loc);
  Array from_x = ne(bind1(Primitive::pad, {full(member, 1.0, x.dtype()), zero}, ps, a.loc), zero, a.loc);
  Shape v_shape(member.size() + 1, 1);
  v_shape[0] = a.size;
  Array v = reshape(move_batch_dim(a.x[1], a.dims[1], 0, a.size), v_shape, a.loc);
  return one(where(from_x, padded, v, a.loc), 0);
}

// pad(x, v)[b]: no padding along the batch axis.
BatchOut pad_batch(const BatchArgs& a) {
  if (a.dims[1] != not_batched) return pad_with_batched_value(a);
  std::int64_t d = a.dims[0];
  return one(bind1(a.prim, a.x, with_unpadded_axis(a.params.get<params::Pad>(), d), a.loc), d);
}

bool indices_batched(const BatchArgs& a, std::size_t first) {
  return std::any_of(a.dims.begin() + static_cast<std::ptrdiff_t>(first), a.dims.end(),
                     [](std::int64_t d) { return d != not_batched; });
}
// The index operands with a zero start for the batch axis inserted at d.
std::vector<Array> with_batch_start(const BatchArgs& a, std::size_t first, std::int64_t d) {
  std::vector<Array> idx(a.x.begin() + static_cast<std::ptrdiff_t>(first), a.x.end());
  DType t = idx.empty() ? i32 : idx[0].dtype();
  idx.insert(idx.begin() + d, scalar(0.0, t));
  return idx;
}

// dynamic_slice(x, i...)[b] with unbatched starts: start 0 and full size along the batch axis.
// Batched starts (a different window per member): takes of rows (vmap_gather.cpp).
BatchOut dynamic_slice_batch(const BatchArgs& a) {
  if (indices_batched(a, 1)) return dynamic_slice_as_take(a);
  std::int64_t d = a.dims[0];
  std::vector<Array> ops{a.x[0]};
  for (auto& i : with_batch_start(a, 1, d)) ops.push_back(i);
  Ints sizes = inserted(a.params.get<params::DynamicSlice>().slice_sizes, d, a.size);
  return one(bind1(a.prim, ops, params::DynamicSlice{.slice_sizes = sizes}, a.loc), d);
}

// dynamic_update_slice(x, u, i...)[b] with unbatched starts: operand and update share a batch
// dim, start 0 along it. Batched starts go member by member (see vmap_gather.cpp).
BatchOut dynamic_update_slice_batch(const BatchArgs& a) {
  if (indices_batched(a, 2)) return batch_by_loop(a);
  std::int64_t d = first_batched(a.dims.subspan(0, 2));
  std::vector<Array> ops{move_batch_dim(a.x[0], a.dims[0], d, a.size), move_batch_dim(a.x[1], a.dims[1], d, a.size)};
  for (auto& i : with_batch_start(a, 2, d)) ops.push_back(i);
  return one(bind1(a.prim, ops, a.params, a.loc), d);
}

// concatenate(x...)[b]: the operands share a batch dim; the concatenated dim shifts past it.
BatchOut concatenate_batch(const BatchArgs& a) {
  std::int64_t d = first_batched(a.dims);
  std::vector<Array> xs;
  for (std::size_t i = 0; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], d, a.size));
  std::int64_t dim = shifted(a.params.get<params::Concatenate>().dimension, d);
  return one(bind1(a.prim, xs, params::Concatenate{.dimension = dim}, a.loc), d);
}

// take(x, i, axis)[b]: out = x[:axis] + i.shape + x[axis+1:]. A batched x keeps its batch dim
// (past the index dims when after axis); batched indices put theirs among the index dims. Both
// batched: a take of rows (vmap_gather.cpp).
BatchOut gather_batch(const BatchArgs& a) {
  std::int64_t axis = a.params.get<params::Gather>().axis;
  std::int64_t dx = a.dims[0], di = a.dims[1];
  if (dx != not_batched && di != not_batched) return take_both_batched(a);
  if (dx != not_batched) {
    std::int64_t ax = shifted(axis, dx);
    std::int64_t out = dx < ax ? dx : dx + a.x[1].ndim() - 1;
    return one(bind1(a.prim, a.x, params::Gather{.axis = ax, .fill_or_drop = a.params.get<params::Gather>().fill_or_drop}, a.loc), out);
  }
  return one(bind1(a.prim, a.x, a.params, a.loc), axis + di);
}

// Every scatter: scatter_rules.cpp.
BatchOut scatter_add_batch(const BatchArgs& a) { return scatter_family_batch(a); }
BatchOut scatter_batch(const BatchArgs& a) { return scatter_family_batch(a); }
BatchOut scatter_mul_batch(const BatchArgs& a) { return scatter_family_batch(a); }
BatchOut scatter_min_batch(const BatchArgs& a) { return scatter_family_batch(a); }
BatchOut scatter_max_batch(const BatchArgs& a) { return scatter_family_batch(a); }

// iota has no operands, so it is never batched; the rule exists for the table.
BatchOut iota_batch(const BatchArgs& a) { return batch_by_loop(a); }
BatchOut name_batch(const BatchArgs& a) { return elementwise_batch(a); }

// threefry2x32(key, counters)[b]: with a shared key, batched counters keep their batch dim (if it
// is past the key's leading dims and not the trailing pair axis). A batch of keys becomes the
// keys' first leading dim, and the counters' (broadcast when shared): one key per member.
BatchOut threefry2x32_batch(const BatchArgs& a) {
  if (a.dims[0] != not_batched) {
    Array keys = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
    Array c = move_batch_dim(a.x[1], a.dims[1], 0, a.size);
    return one(bind1(a.prim, {keys, c}, a.params, a.loc), 0);
  }
  const std::int64_t lead = a.x[0].ndim() - 1;  // the shared keys' leading dims
  std::int64_t d = a.dims[1];
  if (d == a.x[1].ndim() - 1 || d < lead) d = lead;
  Array c = move_batch_dim(a.x[1], a.dims[1], d, a.size);
  return one(bind1(a.prim, {a.x[0], c}, a.params, a.loc), d);
}

// The linear-algebra primitives take leading batch dims: every operand's batch axis moves to
// the front (an unbatched operand is broadcast along it). cholesky(x)[b] = cholesky(x[b]), and so on.
// Every output's batch dim is its first.
BatchOut leading_batch(const BatchArgs& a) {
  std::vector<Array> xs;
  for (std::size_t i = 0; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], 0, a.size));
  std::vector<Array> ys = bind(a.prim, xs, a.params, a.loc);
  return {ys, BatchDims(ys.size(), 0)};
}
BatchOut cholesky_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut triangular_solve_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut lu_pivots_to_permutation_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut lu_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut qr_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut eigh_batch(const BatchArgs& a) { return leading_batch(a); }
BatchOut svd_batch(const BatchArgs& a) { return leading_batch(a); }
// sort(x...)[b]: every operand batched at 0 (unbatched ones broadcast), the dimension shifted.
BatchOut sort_batch(const BatchArgs& a) {
  std::vector<Array> xs;
  for (std::size_t i = 0; i < a.x.size(); ++i) xs.push_back(move_batch_dim(a.x[i], a.dims[i], 0, a.size));
  params::Sort ps = a.params.get<params::Sort>();
  ++ps.dimension;
  std::vector<Array> ys = bind(a.prim, xs, ps, a.loc);
  return {ys, BatchDims(ys.size(), 0)};
}

// top_k(x)[b]: along the last axis, so the batch dim stays where it is unless it is the last.
BatchOut top_k_batch(const BatchArgs& a) {
  const std::int64_t d = a.dims[0] == a.x[0].ndim() - 1 ? 0 : a.dims[0];
  const Array x = move_batch_dim(a.x[0], a.dims[0], d, a.size);
  std::vector<Array> ys = bind(a.prim, std::span<const Array>(&x, 1), a.params, a.loc);
  return {ys, BatchDims(ys.size(), d)};
}

// The collectives act elementwise across processes: psum / pmax / ppermute keep the batch dim;
// all_gather and psum_scatter put it first and shift their axis past it.
BatchOut psum_batch(const BatchArgs& a) { return elementwise_batch(a); }
BatchOut pmax_batch(const BatchArgs& a) { return elementwise_batch(a); }
BatchOut ppermute_batch(const BatchArgs& a) { return elementwise_batch(a); }
BatchOut all_gather_batch(const BatchArgs& a) {
  params::AllGather ps = a.params.get<params::AllGather>();
  ++ps.axis;
  return one(bind1(a.prim, {move_batch_dim(a.x[0], a.dims[0], 0, a.size)}, ps, a.loc), 0);
}
BatchOut psum_scatter_batch(const BatchArgs& a) {
  params::PsumScatter ps = a.params.get<params::PsumScatter>();
  ++ps.axis;
  return one(bind1(a.prim, {move_batch_dim(a.x[0], a.dims[0], 0, a.size)}, ps, a.loc), 0);
}

}  // namespace

// The family's batching rule (the elementwise families: elementwise_batch) or the primitive's own.
#define XJAX_BATCH_float_unary(stem) elementwise_batch
#define XJAX_BATCH_numeric_unary(stem) elementwise_batch
#define XJAX_BATCH_power(stem) elementwise_batch
#define XJAX_BATCH_binary(stem) elementwise_batch
#define XJAX_BATCH_comparison(stem) elementwise_batch
#define XJAX_BATCH_structural(stem) stem##_batch
#define XJAX_BATCH_collective(stem) stem##_batch
#define XJAX_BATCH_factorization(stem) stem##_batch
#define XJAX_BATCH_higher_order(stem) stem##_batch
#define XJAX_BATCH_control_flow(stem) stem##_batch

BatchRule batch_rule(Primitive p) {
  switch (p) {
#define XJAX_BATCH_CASE(name, stem, S, family, kinds) \
  case P::name: return XJAX_BATCH_##family(stem);
    XJAX_PRIMITIVES(XJAX_BATCH_CASE)
#undef XJAX_BATCH_CASE
  }
  return nullptr;
}

// ---- helpers shared with the higher-order rules ----------------------------------------------

Array move_batch_dim(const Array& x, std::int64_t from, std::int64_t to, std::int64_t size) {
  if (from == not_batched) {
    Shape shape = x.shape();
    shape.insert(shape.begin() + to, size);
    Ints dims;
    for (std::int64_t i = 0; i <= x.ndim(); ++i)
      if (i != to) dims.push_back(i);
    return broadcast_in_dim(x, shape, dims);
  }
  if (from == to) return x;
  Ints perm;
  for (std::int64_t i = 0; i < x.ndim(); ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm);
}

std::vector<bool> batched_mask(std::span<const std::int64_t> dims) {
  std::vector<bool> out;
  for (auto d : dims) out.push_back(d != not_batched);
  return out;
}

std::vector<Array> batch_to_front(const BatchArgs& a) {
  std::vector<Array> out;
  for (std::size_t i = 0; i < a.x.size(); ++i)
    out.push_back(a.dims[i] == not_batched ? a.x[i] : move_batch_dim(a.x[i], a.dims[i], 0, a.size));
  return out;
}

// ---- the pass --------------------------------------------------------------------------------

BatchOut batch_eval(const ClosedJaxpr& cj, std::span<const Array> args, std::span<const std::int64_t> dims,
                    std::int64_t size) {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_map<std::uint64_t, Array> val;
  std::unordered_map<std::uint64_t, std::int64_t> dim;
  for (std::size_t i = 0; i < j.constvars.size(); ++i) {
    val[j.constvars[i].id()] = cj.consts[i];
    dim[j.constvars[i].id()] = not_batched;
  }
  for (std::size_t i = 0; i < j.invars.size(); ++i) {
    val[j.invars[i].id()] = args[i];
    dim[j.invars[i].id()] = dims[i];
  }
  auto value = [&](const Atom& a) -> Array {
    if (auto* l = std::get_if<Literal>(&a)) return l->value;
    return val.at(std::get<Var>(a).id());
  };
  auto dim_of = [&](const Atom& a) -> std::int64_t {
    if (std::holds_alternative<Literal>(a)) return not_batched;
    return dim.at(std::get<Var>(a).id());
  };
  std::vector<Array> xs;
  BatchDims ds;
  for (const Eqn& e : j.eqns) {
    xs.clear();
    ds.clear();
    for (const auto& in : e.inputs) {
      xs.push_back(value(in));
      ds.push_back(dim_of(in));
    }
    BatchOut out;
    LocationScope at(&e.loc);  // an enclosing rule's scope would rename an unbatched equation too
    if (std::all_of(ds.begin(), ds.end(), [](auto d) { return d == not_batched; })) {
      out.outs = bind(e.prim, xs, e.params, e.loc);
      out.dims.assign(out.outs.size(), not_batched);
    } else {
      out = batch_rule(e.prim)(BatchArgs{e.prim, xs, ds, size, e.params, e.loc});
    }
    for (std::size_t k = 0; k < e.outputs.size(); ++k) {
      val[e.outputs[k].id()] = out.outs[k];
      dim[e.outputs[k].id()] = out.dims[k];
    }
  }
  BatchOut result;
  for (const auto& o : j.outvars) {
    result.outs.push_back(value(o));
    result.dims.push_back(dim_of(o));
  }
  return result;
}

namespace {
ShapedArray with_batch_axis(ShapedArray a, std::int64_t d, std::int64_t size) {
  if (d != not_batched) a.shape.insert(a.shape.begin() + d, size);
  return a;
}
}  // namespace

ClosedJaxpr batch_jaxpr(const ClosedJaxpr& j, std::span<const std::int64_t> in_dims, std::int64_t size,
                        std::span<const std::int64_t> out_dims) try {
  std::vector<ShapedArray> avals;
  auto in = j.in_avals();
  for (std::size_t i = 0; i < in.size(); ++i) avals.push_back(with_batch_axis(in[i], in_dims[i], size));
  std::vector<std::int64_t> dims(in_dims.begin(), in_dims.end());
  std::vector<std::int64_t> wanted(out_dims.begin(), out_dims.end());
  auto body = [&](std::span<const Array> args) {
    BatchOut out = batch_eval(j, args, dims, size);
    std::vector<Array> res;
    for (std::size_t k = 0; k < out.outs.size(); ++k) {
      if (wanted[k] == not_batched) {
        if (out.dims[k] != not_batched)
          throw TransformError("vmap: output " + std::to_string(k) + " depends on the batch member, but its out_axes "
                               "entry is None (not batched)");
        res.push_back(out.outs[k]);
      } else {
        res.push_back(move_batch_dim(out.outs[k], out.dims[k], wanted[k], size));
      }
    }
    return res;
  };
  return trace_flat(body, avals);
} catch (...) {
  rethrow_internal("vmap");
}

ClosedJaxpr batch_jaxpr_leading(const ClosedJaxpr& j, const std::vector<bool>& in_batched, std::int64_t size,
                                const std::vector<bool>& force_out, std::vector<bool>* out_batched) try {
  std::vector<ShapedArray> avals;
  auto in = j.in_avals();
  BatchDims dims;
  for (std::size_t i = 0; i < in.size(); ++i) {
    dims.push_back(in_batched[i] ? 0 : not_batched);
    avals.push_back(with_batch_axis(in[i], dims.back(), size));
  }
  std::vector<bool> batched;
  auto body = [&](std::span<const Array> args) {
    BatchOut out = batch_eval(j, args, dims, size);
    std::vector<Array> res;
    batched.clear();
    for (std::size_t k = 0; k < out.outs.size(); ++k) {
      bool b = out.dims[k] != not_batched || force_out[k];
      batched.push_back(b);
      res.push_back(b ? move_batch_dim(out.outs[k], out.dims[k], 0, size) : out.outs[k]);
    }
    return res;
  };
  ClosedJaxpr out = trace_flat(body, avals);
  if (out_batched) *out_batched = batched;
  return out;
} catch (...) {
  rethrow_internal("vmap");
}

// ---- member by member ------------------------------------------------------------------------

BatchOut batch_by_loop(const BatchArgs& a) {
  // A scan over the batch axis: the batched operands (batch axis moved to 0) are its xs; the
  // unbatched ones are captured by the body and become the scan's consts.
  std::vector<std::size_t> batched_pos;
  std::vector<Array> xs;
  std::vector<ShapedArray> slice_avals;
  for (std::size_t i = 0; i < a.x.size(); ++i) {
    if (a.dims[i] == not_batched) continue;
    batched_pos.push_back(i);
    xs.push_back(move_batch_dim(a.x[i], a.dims[i], 0, a.size));
    ShapedArray s = xs.back().aval();
    s.shape.erase(s.shape.begin());
    slice_avals.push_back(s);
  }
  auto step = [&](std::span<const Array> slices) {  // one member's slices -> its outputs
    std::vector<Array> ops(a.x.begin(), a.x.end());
    for (std::size_t k = 0; k < batched_pos.size(); ++k) ops[batched_pos[k]] = slices[k];
    return bind(a.prim, ops, a.params, a.loc);
  };
  ClosedJaxpr body = trace_flat(step, slice_avals);
  auto ys = scan_flat(body, {}, xs, a.size, false, 1, a.loc);
  return {ys, BatchDims(ys.size(), 0)};
}

}  // namespace xjax::detail
