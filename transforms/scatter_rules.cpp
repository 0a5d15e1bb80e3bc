// scatter_rules.cpp: the derivative and batching rules of the scatter family that take more than
// a line: the jvps of scatter_mul, scatter_min and scatter_max, the survivors of a scatter (its
// transpose's mask), and one batching rule for all five scatters.
// Every rule reads and writes with the equation's own mode: a gather that reads back what a
// scatter wrote uses the same axis and, where the scatter drops an update, reads zeros.
#include "scatter_rules.hpp"

#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

using P = Primitive;

const params::Scatter& scatter_params(const Params& ps) { return ps.get<params::Scatter>(); }

/// The gather reading, for every update, the element a scatter with `ps` combined it into.
Array read_back(const Array& y, const Array& indices, const params::Scatter& ps, std::source_location loc) {
  return bind1(P::gather, {y, indices}, params::Gather{.axis = ps.axis, .fill_or_drop = ps.fill_or_drop}, loc);
}

Array filled(double v, const ShapedArray& aval, std::source_location loc) {
  return broadcast_to(scalar(v, aval.dtype), aval.shape, loc);
}

Array scatter_with(P p, const Array& x, const Array& indices, const Array& updates, const params::Scatter& ps,
                   std::source_location loc) {
  return bind1(p, {x, indices, updates}, ps, loc);
}

JvpOut no_tangent(const Array& y) { return {{y}, {Tangent::zero(y.aval())}}; }

/// For every update u_j of scatter_mul(x, i, u): the product of the other updates landing on its
/// element, prod_{k != j, i_k = i_j} u_k, with no division by zero. On each element, Q is the
/// product of the nonzero updates, Z the number of zero ones and S their sum (0, but it carries
/// their tangents): for u_j != 0 it is Q / u_j (Z = 0) or S Q / u_j (Z = 1: S is the one zero);
/// for u_j = 0 it is Q (Z = 1) or (S - u_j) Q (Z = 2); else 0. Each form is the product itself as
/// a polynomial near u, so all its derivatives are exact too, except with two or more zeros
/// among the others, where the second and higher derivatives are taken as 0 (docs/status.md).
Array product_of_others(const Array& x, const Array& i, const Array& u, const params::Scatter& ps,
                        std::source_location loc) {
  const Array nonzero = ne(u, scalar_like(0.0, u), loc);
  const Array u_or_one = where(nonzero, u, 1.0, loc);
  const Array zeros_x = filled(0.0, x.aval(), loc);
  const Array q = read_back(scatter_with(P::scatter_mul, filled(1.0, x.aval(), loc), i, u_or_one, ps, loc), i, ps, loc);
  const Array z = read_back(scatter_with(P::scatter_add, zeros_x, i, where(nonzero, 0.0, filled(1.0, u.aval(), loc), loc), ps, loc), i, ps, loc);
  const Array s = read_back(scatter_with(P::scatter_add, zeros_x, i, where(nonzero, 0.0, u, loc), ps, loc), i, ps, loc);
  auto count_is = [&](double c) { return eq(z, scalar_like(c, z), loc); };
  const Array q_over_u = q / u_or_one;
  const Array when_nonzero = where(count_is(0), q_over_u, where(count_is(1), s * q_over_u, 0.0, loc), loc);
  const Array when_zero = where(count_is(1), q, where(count_is(2), (s - u) * q, 0.0, loc), loc);
  return where(nonzero, when_nonzero, when_zero, loc);
}

/// a == b, with NaN equal to NaN (a NaN result is attained by the NaN that made it).
Array same_value(const Array& a, const Array& b, std::source_location loc) {
  return logical_or(eq(a, b, loc), logical_and(ne(a, a, loc), ne(b, b, loc), loc), loc);
}

// min and max: y[p] = extremum(x[p], u_j for i_j = p). The tangent of an element is the mean of
// the tangents of the values that attain it (ties split evenly, as lax.max's jvp and JAX's
// scatter_max jvp do; a NaN is attained by the NaNs, so an element no update touches keeps dx):
// dy = (kept dx + scatter_add(0, i, attaining du)) / count.
JvpOut scatter_extremum_jvp(const JvpArgs& a) {
  const auto& ps = scatter_params(a.params);
  const Array &x = a.x[0], &i = a.x[1], &u = a.x[2];
  const Array y = scatter_with(a.prim, x, i, u, ps, a.loc);
  if (!is_floating(y.dtype())) return no_tangent(y);
  const Array kept = same_value(x, y, a.loc);                       // x's shape
  const Array attains = same_value(u, read_back(y, i, ps, a.loc), a.loc);  // u's shape
  const Array zeros_x = filled(0.0, x.aval(), a.loc);
  const Array count = where(kept, 1.0, zeros_x, a.loc) +
                      scatter_with(P::scatter_add, zeros_x, i, where(attains, 1.0, filled(0.0, u.aval(), a.loc), a.loc), ps, a.loc);
  Tangent sum = Tangent::zero(y.aval());
  if (!a.t[0].is_zero()) sum = tadd(sum, Tangent(where(kept, a.t[0].value(), 0.0, a.loc)));
  if (!a.t[2].is_zero())
    sum = tadd(sum, Tangent(scatter_with(P::scatter_add, zeros_x, i, where(attains, a.t[2].value(), 0.0, a.loc), ps, a.loc)));
  return {{y}, {tmap(sum, y.aval(), [&](const Array& t) { return t / count; })}};
}

}  // namespace

// y = scatter_mul(x, i, u), y[p] = x[p] prod_{j: i_j = p} u_j:
// dy = scatter_mul(dx, i, u) + x * scatter_add(0, i, du * prod_{k != j, i_k = i_j} u_k)
JvpOut scatter_mul_jvp(const JvpArgs& a) {
  const auto& ps = scatter_params(a.params);
  const Array &x = a.x[0], &i = a.x[1], &u = a.x[2];
  const Array y = scatter_with(P::scatter_mul, x, i, u, ps, a.loc);
  if (!is_floating(y.dtype())) return no_tangent(y);
  Tangent dy = Tangent::zero(y.aval());
  if (!a.t[0].is_zero()) dy = Tangent(scatter_with(P::scatter_mul, a.t[0].value(), i, u, ps, a.loc));
  if (!a.t[2].is_zero()) {
    const Array others = product_of_others(x, i, u, ps, a.loc);
    const Array spread = scatter_with(P::scatter_add, filled(0.0, x.aval(), a.loc), i, a.t[2].value() * others, ps, a.loc);
    dy = tadd(dy, Tangent(x * spread));
  }
  return {{y}, {dy}};
}

JvpOut scatter_min_jvp(const JvpArgs& a) { return scatter_extremum_jvp(a); }
JvpOut scatter_max_jvp(const JvpArgs& a) { return scatter_extremum_jvp(a); }

// Each update is numbered (from 1) and the numbers scattered along the axis alone (the indices
// pick positions, whatever the other dims): update j survives when its element reads back j.
Array surviving_updates(const Array& indices, const ShapedArray& operand, const ShapedArray& updates,
                        const params::Scatter& ps, std::source_location loc) {
  const auto axis = static_cast<std::size_t>(ps.axis);
  const std::int64_t m = indices.size();
  const Array flat = reshape(indices, {m}, loc);
  const Array number = iota(i64, {m}, 0, loc) + scalar(1.0, i64);
  const params::Scatter along{.axis = 0, .fill_or_drop = ps.fill_or_drop};
  const Array owner = scatter_with(P::scatter, broadcast_to(scalar(0.0, i64), {operand.shape[axis]}, loc), flat, number, along, loc);
  const Array survives = reshape(eq(read_back(owner, flat, along, loc), number, loc), indices.shape(), loc);
  Axes dims;
  for (std::int64_t d = 0; d < indices.ndim(); ++d) dims.push_back(ps.axis + d);
  return broadcast_in_dim(survives, updates.shape, dims, loc);
}

// scatter*(x, i, u, axis)[b]. Unbatched indices: x and u batched at 0 and the axis shifted by
// one. Batched indices: each member's updates go to the rows its indices name in its own operand,
// one scatter along merged rows (vmap_gather.cpp).
BatchOut scatter_family_batch(const BatchArgs& a) {
  if (a.dims[1] != not_batched) return scatter_by_rows(a);
  const auto& ps = scatter_params(a.params);
  std::vector<Array> ops{move_batch_dim(a.x[0], a.dims[0], 0, a.size), a.x[1], move_batch_dim(a.x[2], a.dims[2], 0, a.size)};
  return {{bind1(a.prim, ops, params::Scatter{.axis = ps.axis + 1, .fill_or_drop = ps.fill_or_drop}, a.loc)}, {0}};
}

}  // namespace xjax::detail
