// vmap_gather.cpp: batching rules that read a different window or index per batch member as
// takes of whole rows, instead of a loop over the members (batch_by_loop):
//   dynamic_slice(x, starts)[b]             with batched starts
//   take(x, i, axis)[b]                     with x and i both batched
//   scatter*(x, i, u, axis)[b]              with batched indices (every scatter)
// (dynamic_update_slice with batched starts stays member by member: as a take of every element
// of the result and a select it measured 50x slower than the loop, whose members are one copy
// and one small window write each.)
// Each index is first normalized as the kernel normalizes it (a window start clamped to
// [0, n - s]; a take index counted from the end when negative, then clamped to [0, n - 1], or in
// fill_or_drop mode sent past every member's rows), so a member's offset never reaches another
// member's elements and the result is the loop's, element for element. Empty windows or batches
// go member by member.
#include <cmath>
#include <algorithm>

#include "batching.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

/// The integer type of positions up to `count`.
DType index_dtype(std::int64_t count) { return count < (std::int64_t{1} << 31) ? i32 : i64; }

Array constant(std::int64_t v, DType t) { return scalar(static_cast<double>(v), t); }

Array clamp(const Array& x, std::int64_t lo, std::int64_t hi, DType t) {
  return minimum(maximum(x, constant(lo, t)), constant(hi, t));
}

/// Every member's start of window dim k (operand `operand`), clamped to [0, n - s] in 64 bits:
/// shape [B] when batched, a scalar when not.
Array clamped_start(const BatchArgs& a, std::size_t operand, std::int64_t n, std::int64_t s) {
  Array start = a.x[operand];
  // a u64 start past i64's range is past every axis: capped first (converted, ~0 became -1 -> 0)
  if (start.dtype() == u64) start = minimum(start, scalar(std::ldexp(1.0, 62), u64));
  return clamp(astype(start, i64, a.loc), 0, std::max<std::int64_t>(n - s, 0), i64);
}

/// Rows of a batched operand ([B] + n, batch at 0) with its leading dims [B] + n[:k] and axis k
/// merged into one axis (row r of axis k at leading position l is row l n_k + r): the merged
/// shape, and the merged rows that positions `pos` along axis k name (values in [0, n_k); shape
/// [B] + P when each member has its own, P when all share them) at every leading position:
/// shape [B] + n[:k] + P. So a take or scatter along the merged axis moves whole rows.
struct MergedRows {
  Shape merged;
  Array index;
};
MergedRows merged_rows(const Shape& shape, std::size_t k, const Array& pos, bool pos_batched, std::source_location loc) {
  const Shape lead(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(k) + 1);  // [B] + n[:k]
  const std::int64_t rows = shape[k + 1], leading = shape_size(lead);
  Shape merged{leading * rows};
  merged.insert(merged.end(), shape.begin() + static_cast<std::ptrdiff_t>(k) + 2, shape.end());
  const Shape P(pos.shape().begin() + (pos_batched ? 1 : 0), pos.shape().end());
  const DType t = index_dtype(2 * leading * rows);  // room for past_rows(shape, k) + an offset
  Shape base_shape = lead;
  base_shape.insert(base_shape.end(), P.size(), 1);
  Array base = reshape(iota(t, {leading}, 0, loc) * constant(rows, t), base_shape, loc);
  Shape pos_shape(k + 1, 1);
  if (pos_batched) pos_shape[0] = shape[0];
  pos_shape.insert(pos_shape.end(), P.begin(), P.end());
  return {merged, base + reshape(astype(pos, t, loc), pos_shape, loc)};
}

/// y ([B] + n) read along member axis k at `pos`: [B] + n[:k] + P + n[k+1:].
Array take_rows(const Array& y, std::size_t k, const Array& pos, bool pos_batched, std::source_location loc) {
  MergedRows m = merged_rows(y.shape(), k, pos, pos_batched, loc);
  return take(reshape(y, m.merged, loc), m.index, 0, loc);
}

/// A merged-row index past every member's rows (a dropped or filled index stays outside).
std::int64_t past_rows(const Shape& shape, std::size_t k) {
  return shape_size(Shape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(k) + 2));
}

/// Indices as gather and the scatters read them: negative ones count from the end; then clamped
/// to [0, rows - 1], or in fill_or_drop mode those outside set to `outside`; in 64 bits, batch at 0.
Array normalized_indices(const BatchArgs& a, std::size_t operand, std::int64_t rows, bool fill_or_drop,
                         std::int64_t outside) {
  Array i = astype(move_batch_dim(a.x[operand], a.dims[operand], 0, a.size), i64, a.loc);
  const std::int64_t zero = 0;
  i = where(i < zero, i + constant(rows, i64), i, a.loc);
  if (!fill_or_drop) return clamp(i, 0, rows - 1, i64);
  return where(logical_and(i >= zero, i < rows, a.loc), i, constant(outside, i64), a.loc);
}

BatchOut one_at_front(Array y) { return {{std::move(y)}, {0}}; }

}  // namespace

// dynamic_slice(x, start...)[b]: the window axis by axis, each a take of rows at start_k[b] + w
// (w < s_k); an axis whose window is the whole axis is left as it is. x is never broadcast: while
// it is shared, an unbatched start takes from it directly and the first batched one adds the batch.
BatchOut dynamic_slice_as_take(const BatchArgs& a) {
  const auto& sizes = a.params.get<params::DynamicSlice>().slice_sizes;
  bool batched = a.dims[0] != not_batched;
  Array y = batched ? move_batch_dim(a.x[0], a.dims[0], 0, a.size) : a.x[0];
  const Shape n(y.shape().begin() + (batched ? 1 : 0), y.shape().end());
  if (a.size == 0 || shape_size(sizes) == 0) return batch_by_loop(a);
  for (std::size_t k = 0; k < n.size(); ++k) {
    if (sizes[k] == n[k]) continue;  // the start clamps to 0
    const bool start_batched = a.dims[1 + k] != not_batched;
    Array start = clamped_start(a, 1 + k, n[k], sizes[k]);
    Array w = iota(i64, {sizes[k]}, 0, a.loc);
    Array pos = start_batched ? reshape(start, {a.size, 1}, a.loc) + reshape(w, {1, sizes[k]}, a.loc) : start + w;
    const auto axis = static_cast<std::int64_t>(k);
    if (batched) {
      y = take_rows(y, k, pos, start_batched, a.loc);
    } else {
      y = take(y, pos, axis, a.loc);  // batched positions: [B, s_k] at axis k
      if (start_batched) {
        y = move_batch_dim(y, axis, 0, a.size);
        batched = true;
      }
    }
  }
  return {{y}, {batched ? 0 : not_batched}};
}

// take(x, i, axis)[b] with both batched: member b's indices, normalized, as rows of its operand.
BatchOut take_both_batched(const BatchArgs& a) {
  const auto& g = a.params.get<params::Gather>();
  const auto axis = static_cast<std::size_t>(g.axis);
  Array x = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
  const std::int64_t rows = x.shape()[axis + 1];
  if (a.size == 0 || rows == 0) return batch_by_loop(a);
  Array pos = normalized_indices(a, 1, rows, g.fill_or_drop, past_rows(x.shape(), axis));
  MergedRows m = merged_rows(x.shape(), axis, pos, true, a.loc);
  return one_at_front(bind1(Primitive::gather, {reshape(x, m.merged, a.loc), m.index},
                            params::Gather{.axis = 0, .fill_or_drop = g.fill_or_drop}, a.loc));
}

// scatter*(x, i, u, axis)[b] with batched indices: member b's updates combined into the rows its
// normalized indices name in its operand, one scatter along the merged rows (for scatter_add the
// transpose of take_both_batched; e.g. per-example gradients of an embedding lookup). x and u are
// batched (broadcast when shared: every member's result is its own).
BatchOut scatter_by_rows(const BatchArgs& a) {
  const auto& ps = a.params.get<params::Scatter>();
  const auto axis = static_cast<std::size_t>(ps.axis);
  Array x = move_batch_dim(a.x[0], a.dims[0], 0, a.size);
  const std::int64_t rows = x.shape()[axis + 1];
  if (a.size == 0 || rows == 0) return batch_by_loop(a);
  Array u = move_batch_dim(a.x[2], a.dims[2], 0, a.size);
  Array pos = normalized_indices(a, 1, rows, ps.fill_or_drop, past_rows(x.shape(), axis));
  MergedRows m = merged_rows(x.shape(), axis, pos, true, a.loc);
  Array out = bind1(a.prim, {reshape(x, m.merged, a.loc), m.index, u},
                    params::Scatter{.axis = 0, .fill_or_drop = ps.fill_or_drop}, a.loc);
  return one_at_front(reshape(out, x.shape(), a.loc));
}

}  // namespace xjax::detail
