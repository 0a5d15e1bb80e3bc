// indexing.cpp: xj::at (JAX's x.at[idx]) and meshgrid, as compositions of gather and the scatter
// primitives. One index lowers to the primitive along axis 0 directly (the primitive counts
// negative indices from the end and clamps or drops the rest); several indices are flattened
// into one index along x's leading axes merged into one, clamped or, for a dropped update, sent
// past the merged axis.
#include "xjax/indexing.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "internal.hpp"

namespace xjax {
namespace {

using P = Primitive;
using detail::bind1;

[[noreturn]] void at_fail(const Array& x, const std::vector<Array>& indices, const std::string& why,
                          const std::source_location& loc, bool type_error) {
  std::string what = "at(" + x.aval().str();
  for (const auto& i : indices) what += ", " + i.aval().str();
  what += "): " + why + " (at " + format_location(loc) + ")";
  if (type_error) throw TypeError(what);
  throw ShapeError(what);
}

/// The index (array) along one merged axis that stands for `indices` along x's leading axes,
/// and the selected shape (the indices' broadcast shape, then x's remaining axes).
struct Selection {
  Array x;      // x with the indexed axes merged into its axis 0
  Array index;  // along that axis
  Shape selected;
};


Selection select_along_leading(const Array& x, const std::vector<Array>& indices, bool clamp_outside,
                               const std::source_location& loc) {
  const std::size_t k = indices.size();
  if (k == 0) at_fail(x, indices, "needs at least one index", loc, false);
  if (static_cast<std::int64_t>(k) > x.ndim())
    at_fail(x, indices, std::to_string(k) + " indices for an array of rank " + std::to_string(x.ndim()), loc, false);
  for (const auto& i : indices)
    if (!is_integer(i.dtype())) at_fail(x, indices, "indices must be integers, got " + std::string(dtype_name(i.dtype())), loc, true);
  const Shape& shape = x.shape();
  const Shape rest(shape.begin() + static_cast<std::ptrdiff_t>(k), shape.end());
  Shape common = indices[0].shape();
  for (std::size_t d = 1; d < k; ++d) common = broadcast_shapes(common, indices[d].shape());
  Shape selected = common;
  selected.insert(selected.end(), rest.begin(), rest.end());
  if (k == 1) return {x, detail::gather_index(indices[0], loc), selected};
  // Several axes: i = sum_d i_d stride_d over the merged axis of n = prod n_d rows.
  std::int64_t rows = 1;
  for (std::size_t d = 0; d < k; ++d) rows *= shape[d];
  std::optional<Array> flat, inside;
  std::int64_t stride = rows;
  for (std::size_t d = 0; d < k; ++d) {
    const std::int64_t n = shape[d];
    stride = n == 0 ? 0 : stride / n;
    const std::int64_t zero = 0;  // integer operands keep i64 (a C++ double would make them floats)
    Array i = astype(broadcast_to(detail::gather_index(indices[d], loc), common, loc), i64, loc);
    i = where(i < zero, i + n, i, loc);
    if (clamp_outside) {
      i = minimum(maximum(i, scalar(0.0, i64), loc), scalar(static_cast<double>(std::max<std::int64_t>(n - 1, 0)), i64), loc);
    } else {
      Array here = logical_and(i >= zero, i < n, loc);
      inside = inside ? logical_and(*inside, here, loc) : here;
    }
    flat = flat ? *flat + i * stride : i * stride;
  }
  if (!clamp_outside) flat = where(*inside, *flat, scalar(static_cast<double>(rows), i64), loc);
  Shape merged{rows};
  merged.insert(merged.end(), rest.begin(), rest.end());
  return {reshape(x, merged, loc), *flat, selected};
}

}  // namespace

At::At(Array x, std::vector<Array> indices, std::source_location loc) : x_(std::move(x)), indices_(std::move(indices)) {
  if (indices_.empty()) at_fail(x_, indices_, "needs at least one index", loc, false);
}

namespace {
std::int64_t index_count(const std::vector<Array>& indices) {
  Shape common = indices[0].shape();
  for (std::size_t d = 1; d < indices.size(); ++d) common = broadcast_shapes(common, indices[d].shape());
  std::int64_t count = 1;
  for (auto d : common) count *= d;
  return count;
}
bool empty_indexed_axis(const Array& x, std::size_t k) {
  for (std::size_t d = 0; d < k && d < x.shape().size(); ++d)
    if (x.shape()[d] == 0) return true;
  return false;
}
}  // namespace

// Reading from an empty axis is an error, as in JAX (the clamped gather read zeros there).
Array At::get(std::source_location loc) const {
  Selection s = select_along_leading(x_, indices_, true, loc);
  const std::int64_t count = index_count(indices_);
  for (std::size_t d = 0; d < indices_.size(); ++d) detail::require_takeable("at", x_, static_cast<std::int64_t>(d), count, loc);
  return bind1(P::gather, {s.x, s.index}, params::Gather{.axis = 0, .fill_or_drop = false}, loc);
}

Array At::update(Combine how, const Array& v, IndexMode mode, std::source_location loc) const {
  const bool drop = mode == IndexMode::drop;
  Selection s = select_along_leading(x_, indices_, !drop, loc);
  const Array u = broadcast_to(v.dtype() == x_.dtype() ? v : astype(v, x_.dtype(), loc), s.selected, loc);
  // An update into an empty axis: a scalar index is an error (jnp's IndexError), an array of
  // indices updates nothing (JAX's scatter drops them all).
  if (empty_indexed_axis(x_, indices_.size())) {
    const bool scalar_index = std::all_of(indices_.begin(), indices_.end(), [](const Array& i) { return i.ndim() == 0; });
    if (scalar_index)
      for (std::size_t d = 0; d < indices_.size(); ++d) detail::require_takeable("at", x_, static_cast<std::int64_t>(d), 1, loc);
    return x_;
  }
  P p = P::scatter;
  switch (how) {
    case Combine::set: p = P::scatter; break;
    case Combine::add: p = P::scatter_add; break;
    case Combine::mul: p = P::scatter_mul; break;
    case Combine::min: p = P::scatter_min; break;
    case Combine::max: p = P::scatter_max; break;
  }
  Array out = bind1(p, {s.x, s.index, u}, params::Scatter{.axis = 0, .fill_or_drop = drop}, loc);
  return out.shape() == x_.shape() ? out : reshape(out, x_.shape(), loc);
}

Array At::set(const Array& v, IndexMode mode, std::source_location loc) const { return update(Combine::set, v, mode, loc); }
Array At::add(const Array& v, IndexMode mode, std::source_location loc) const { return update(Combine::add, v, mode, loc); }
Array At::mul(const Array& v, IndexMode mode, std::source_location loc) const { return update(Combine::mul, v, mode, loc); }
Array At::min(const Array& v, IndexMode mode, std::source_location loc) const { return update(Combine::min, v, mode, loc); }
Array At::max(const Array& v, IndexMode mode, std::source_location loc) const { return update(Combine::max, v, mode, loc); }

At at(const Array& x, std::int64_t i, std::source_location loc) { return At(x, {array<std::int64_t>({i}, {})}, loc); }
At at(const Array& x, const Array& indices, std::source_location loc) { return At(x, {indices}, loc); }
At at(const Array& x, std::vector<Array> indices, std::source_location loc) { return At(x, std::move(indices), loc); }
At at(const Array& x, const std::vector<std::int64_t>& indices, std::source_location loc) {
  std::vector<Array> each;
  for (std::int64_t i : indices) each.push_back(detail::index_array(i));
  return At(x, std::move(each), loc);
}

std::vector<Array> meshgrid(const std::vector<Array>& xs, const std::string& indexing, std::source_location loc) {
  if (indexing != "xy" && indexing != "ij")
    throw Error("meshgrid: indexing must be \"xy\" or \"ij\", got \"" + indexing + "\" (at " + format_location(loc) + ")");
  Shape shape;
  for (const auto& x : xs) {
    if (x.ndim() != 1) throw ShapeError("meshgrid: every input must be 1-D, got " + x.aval().str() + " (at " + format_location(loc) + ")");
    shape.push_back(x.shape()[0]);
  }
  const bool cartesian = indexing == "xy" && xs.size() >= 2;
  if (cartesian) std::swap(shape[0], shape[1]);
  std::vector<Array> out;
  for (std::size_t d = 0; d < xs.size(); ++d) {
    auto axis = static_cast<std::int64_t>(d);
    if (cartesian && d < 2) axis = 1 - axis;
    out.push_back(broadcast_in_dim(xs[d], shape, {axis}, loc));
  }
  return out;
}

namespace detail {

void require_takeable(const char* what, const Array& x, std::int64_t axis, std::int64_t count, const std::source_location& loc) {
  if (count == 0 || x.dim(axis) != 0) return;
  throw ShapeError(std::string(what) + "(" + x.aval().str() + "): cannot take " + std::to_string(count) +
                   " elements from the empty axis " + std::to_string(axis) + " (at " + format_location(loc) + ")");
}

Array gather_index(const Array& i, const std::source_location& loc) {
  if (i.dtype() == i32 || i.dtype() == i64 || !is_integer(i.dtype())) return i;  // gather's rule names a wrong dtype
  // u64 beyond 2^62 indexes past any array: capped so that i64 keeps it positive
  const Array capped = i.dtype() == u64 ? minimum(i, scalar(std::ldexp(1.0, 62), u64), loc) : i;
  return astype(capped, i.dtype() == u32 || i.dtype() == u64 ? i64 : i32, loc);
}

}  // namespace detail
}  // namespace xjax
