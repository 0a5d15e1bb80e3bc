// transpose.cpp: transposition of linear jaxprs (the backward pass of reverse mode).
// transpose : (r, T a -o T b) -> (r, T b) -> T a
// Equations that read no linear value are evaluated forward first; the linear ones are then
// walked in reverse, each rule mapping the cotangents of an equation's outputs to cotangents of
// its linear inputs. Cotangents are accumulated with add and stay symbolic zeros until the end.
// Read: rule helpers, the rules in the order of XJAX_PRIMITIVE_TABLE (a non-linear primitive's
// rule reports the misuse; families that are never linear get that rule from the table), the
// rule table, then the pass.
#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "ad.hpp"
#include "higher_order.hpp"
#include "scatter_rules.hpp"
#include "windows.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

using P = Primitive;
using Ints = std::vector<std::int64_t>;
using Cts = std::vector<Tangent>;

// Cotangent list with zeros for every input; rules fill the linear ones.
Cts zeros_for(const TransposeArgs& a) {
  Cts out;
  for (const auto& in : a.in) out.push_back(Tangent::zero(in.aval));
  return out;
}

[[noreturn]] Cts not_linear(const TransposeArgs& a) {
  throw TransformError("transpose: " + std::string(primitive_name(a.prim)) +
                       " is not linear in its operands, so it cannot be transposed (at " + format_location(a.loc) + ")");
}

Array ct0(const TransposeArgs& a) { return a.ct[0].instantiate(); }

// Unary linear primitive whose transpose is the function g.
template <class G> Cts unary_linear(const TransposeArgs& a, G g) {
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = g(ct0(a));
  return out;
}

Ints complement(const Ints& dims, std::int64_t rank) {
  Ints out;
  for (std::int64_t i = 0; i < rank; ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) out.push_back(i);
  return out;
}

Ints range(std::int64_t lo, std::int64_t hi) {
  Ints out;
  for (std::int64_t i = lo; i < hi; ++i) out.push_back(i);
  return out;
}

// Cotangent of one operand x of y = dot_general(x, w) (or of w, by symmetry): contract the
// cotangent with the other operand over the other operand's free dims, then put the result's
// dims back in x's order. Of the two operand orders (ct . other, other . ct) the one whose result
// is already in x's order is used, so no transpose is materialized when either fits (dW = x^T g).
Array dot_transpose_operand(const Array& ct, const ShapedArray& x_aval, const Array& other, const Ints& x_contract,
                            const Ints& other_contract, const Ints& x_batch, const Ints& other_batch,
                            bool x_is_lhs) {
  auto nb = static_cast<std::int64_t>(x_batch.size());
  Ints x_free = complement([&] { Ints d = x_batch; d.insert(d.end(), x_contract.begin(), x_contract.end()); return d; }(), x_aval.ndim());
  Ints o_free = complement([&] { Ints d = other_batch; d.insert(d.end(), other_contract.begin(), other_contract.end()); return d; }(), other.ndim());
  auto nxf = static_cast<std::int64_t>(x_free.size());
  auto nof = static_cast<std::int64_t>(o_free.size());
  // ct dims: batch, lhs free, rhs free.
  Ints ct_other_free = x_is_lhs ? range(nb + nxf, nb + nxf + nof) : range(nb, nb + nof);
  // x's dims matching the other operand's contracting dims, in ascending order of those.
  Ints sorted_oc = other_contract;
  std::sort(sorted_oc.begin(), sorted_oc.end());
  Ints x_of_oc;
  for (auto oc : sorted_oc) {
    auto pos = std::find(other_contract.begin(), other_contract.end(), oc) - other_contract.begin();
    x_of_oc.push_back(x_contract[static_cast<std::size_t>(pos)]);
  }
  // perm taking a result whose dim k is x's dim r_to_x[k] back to x's order (empty: identity).
  auto back_to_x = [](const Ints& r_to_x) {
    Ints perm(r_to_x.size());
    bool identity = true;
    for (std::size_t k = 0; k < r_to_x.size(); ++k) {
      perm[static_cast<std::size_t>(r_to_x[k])] = static_cast<std::int64_t>(k);
      identity = identity && r_to_x[k] == static_cast<std::int64_t>(k);
    }
    return identity ? Ints{} : perm;
  };
  Ints ct_first = x_batch, other_first = x_batch;  // result dims of (ct . other), (other . ct)
  ct_first.insert(ct_first.end(), x_free.begin(), x_free.end());
  ct_first.insert(ct_first.end(), x_of_oc.begin(), x_of_oc.end());
  other_first.insert(other_first.end(), x_of_oc.begin(), x_of_oc.end());
  other_first.insert(other_first.end(), x_free.begin(), x_free.end());
  Ints perm = back_to_x(ct_first);
  if (perm.empty()) return dot_general(ct, other, ct_other_free, o_free, range(0, nb), other_batch);
  if (back_to_x(other_first).empty())
    return dot_general(other, ct, o_free, ct_other_free, other_batch, range(0, nb));
  return transpose(dot_general(ct, other, ct_other_free, o_free, range(0, nb), other_batch), perm);
}

Array zeros_of(const ShapedArray& aval) { return broadcast_to(scalar(0.0, aval.dtype), aval.shape); }

std::vector<Array> index_operands(const TransposeArgs& a, std::size_t first) {
  std::vector<Array> idx;
  for (std::size_t i = first; i < a.in.size(); ++i) idx.push_back(a.in[i].value);
  return idx;
}

// ---- rules -----------------------------------------------------------------------------------

// (-)^T ct = -ct
Cts neg_transpose(const TransposeArgs& a) { return unary_linear(a, [](const Array& c) { return neg(c); }); }
Cts abs_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts sign_transpose(const TransposeArgs& a) { return not_linear(a); }
// (a + b)^T ct = (ct, ct)
Cts add_transpose(const TransposeArgs& a) {
  Cts out = zeros_for(a);
  for (std::size_t i = 0; i < 2; ++i)
    if (a.in[i].is_linear()) out[i] = a.ct[0];
  return out;
}
// (a - b)^T ct = (ct, -ct)
Cts sub_transpose(const TransposeArgs& a) {
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = a.ct[0];
  if (a.in[1].is_linear()) out[1] = tneg(a.ct[0]);
  return out;
}
// (a * w)^T ct = ct * w   (one operand linear)
Cts mul_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear() && a.in[1].is_linear()) return not_linear(a);
  Cts out = zeros_for(a);
  std::size_t lin = a.in[0].is_linear() ? 0 : 1;
  out[lin] = mul(ct0(a), a.in[1 - lin].value);
  return out;
}
// (a / w)^T ct = ct / w   (numerator linear)
Cts div_transpose(const TransposeArgs& a) {
  if (a.in[1].is_linear()) return not_linear(a);
  Cts out = zeros_for(a);
  out[0] = div(ct0(a), a.in[1].value);
  return out;
}
Cts max_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts min_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts pow_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts atan2_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts nextafter_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts rem_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts bitwise_and_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts bitwise_or_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts bitwise_xor_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts shift_left_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts shift_right_logical_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts shift_right_arithmetic_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts bitwise_not_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts round_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts population_count_transpose(const TransposeArgs& a) { return not_linear(a); }
// select(p, c0, c1, ...)^T ct = (-, select(p, ct, 0, ...), select(p, 0, ct, ...), ...)
Cts select_n_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear()) return not_linear(a);
  Cts out = zeros_for(a);
  Array c = ct0(a);
  Array z = zeros_of(c.aval());
  for (std::size_t i = 1; i < a.in.size(); ++i) {
    if (!a.in[i].is_linear()) continue;
    std::vector<Array> ins{a.in[0].value};
    for (std::size_t k = 1; k < a.in.size(); ++k) ins.push_back(k == i ? c : z);
    out[i] = bind1(P::select_n, ins, {}, a.loc);
  }
  return out;
}
// convert^T ct = convert ct back to the operand's dtype
Cts convert_element_type_transpose(const TransposeArgs& a) {
  return unary_linear(a, [&](const Array& c) { return astype(c, a.in[0].aval.dtype); });
}
Cts stop_gradient_transpose(const TransposeArgs& a) { return not_linear(a); }
// copy^T ct = ct
Cts copy_transpose(const TransposeArgs& a) { return unary_linear(a, [](const Array& c) { return c; }); }
// (x . w)^T ct = (ct . w^T, x^T . ct), dims put back in each operand's order
Cts dot_general_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear() && a.in[1].is_linear()) return not_linear(a);
  const auto& dn = a.params.get<params::DotGeneral>();
  const Ints &lc = dn.lhs_contracting, &rc = dn.rhs_contracting, &lb = dn.lhs_batch, &rb = dn.rhs_batch;
  Cts out = zeros_for(a);
  if (a.in[0].is_linear())
    out[0] = dot_transpose_operand(ct0(a), a.in[0].aval, a.in[1].value, lc, rc, lb, rb, true);
  else
    out[1] = dot_transpose_operand(ct0(a), a.in[1].aval, a.in[0].value, rc, lc, rb, lb, false);
  return out;
}
// Dims `spec[2:]` (the spatial ones) of `shape`.
Shape spatial(const Shape& shape, const Ints& spec) {
  Shape out;
  for (std::size_t i = 2; i < spec.size(); ++i) out.push_back(shape[static_cast<std::size_t>(spec[i])]);
  return out;
}
Ints swap_first_two(Ints spec) {
  std::swap(spec[0], spec[1]);
  return spec;
}

// conv(x, w)^T ct with respect to x: a convolution of ct with w flipped in space and its feature
// dims swapped (O <-> I), strides becoming lhs dilation and lhs dilation strides; groups move into
// the kernel's input features (JAX's _conv_general_dilated_transpose_lhs).
Array conv_transpose_lhs(const Array& ct, const ShapedArray& lhs, const Array& rhs, const params::ConvGeneralDilated& p,
                         const std::source_location& loc) {
  const std::int64_t groups = std::max(p.feature_group_count, p.batch_group_count);
  Array w = rhs;
  if (groups > 1) w = reshape_axis_into(p.rhs_spec[0], p.rhs_spec[1], reshape_axis_out_of(p.rhs_spec[0], groups, w));
  params::ConvGeneralDilated t = p;
  t.lhs_spec = p.out_spec;
  t.rhs_spec = swap_first_two(p.rhs_spec);
  t.out_spec = p.lhs_spec;
  t.window_strides = p.lhs_dilation;
  t.lhs_dilation = p.window_strides;
  t.feature_group_count = groups;
  t.batch_group_count = 1;
  vjp_lhs_padding(spatial(lhs.shape, p.lhs_spec), spatial(rhs.shape(), p.rhs_spec), spatial(ct.shape(), p.out_spec),
                  p.window_strides, p.padding_lo, p.lhs_dilation, p.rhs_dilation, t.padding_lo, t.padding_hi);
  Array out = bind1(P::conv_general_dilated, {ct, flip(w, Ints(p.rhs_spec.begin() + 2, p.rhs_spec.end()))}, t, loc);
  if (p.batch_group_count > 1)
    out = reshape_axis_into(p.lhs_spec[1], p.lhs_spec[0], reshape_axis_out_of(p.lhs_spec[1], p.batch_group_count, out));
  return out;
}

// conv(x, w)^T ct with respect to w: a convolution of x and ct whose batch dims contract (the
// specs' first two dims swapped), window strides becoming rhs dilation; feature groups become
// batch groups and back (JAX's _conv_general_dilated_transpose_rhs).
Array conv_transpose_rhs(const Array& ct, const Array& lhs, const ShapedArray& rhs, const params::ConvGeneralDilated& p,
                         const std::source_location& loc) {
  params::ConvGeneralDilated t = p;
  t.lhs_spec = swap_first_two(p.lhs_spec);
  t.rhs_spec = swap_first_two(p.out_spec);
  t.out_spec = swap_first_two(p.rhs_spec);
  t.window_strides = p.rhs_dilation;
  t.rhs_dilation = p.window_strides;
  t.feature_group_count = p.batch_group_count;
  t.batch_group_count = p.feature_group_count;
  const Shape in = spatial(lhs.shape(), p.lhs_spec), window = spatial(rhs.shape, p.rhs_spec),
              out = spatial(ct.shape(), p.out_spec);
  t.padding_hi.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::int64_t l = dilated(in[i], p.lhs_dilation[i]), w = dilated(window[i], p.rhs_dilation[i]),
                       o = dilated(out[i], p.window_strides[i]);
    t.padding_hi.push_back((o - l) + (w - p.padding_lo[i] - 1));
  }
  return bind1(P::conv_general_dilated, {lhs, ct}, t, loc);
}

// conv(x, w)^T ct = (conv_transpose_lhs(ct, w), conv_transpose_rhs(x, ct)), for whichever is linear
Cts conv_general_dilated_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear() && a.in[1].is_linear()) return not_linear(a);
  const auto& p = a.params.get<params::ConvGeneralDilated>();
  Cts out = zeros_for(a);
  const Array c = ct0(a);
  if (c.size() == 0) return out;
  if (a.in[0].is_linear())
    out[0] = conv_transpose_lhs(c, a.in[0].aval, a.in[1].value, p, a.loc);
  else
    out[1] = conv_transpose_rhs(c, a.in[0].value, a.in[1].aval, p, a.loc);
  return out;
}
// sum^T ct = broadcast ct over the summed axes
Cts reduce_sum_transpose(const TransposeArgs& a) {
  const ShapedArray& x = a.in[0].aval;
  return unary_linear(a, [&](const Array& c) {
    return broadcast_in_dim(c, x.shape, complement(a.params.get<params::Reduce>().axes, x.ndim()));
  });
}
Cts reduce_max_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts reduce_min_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts reduce_prod_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts argmax_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts argmin_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts reduce_and_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts reduce_or_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts is_finite_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts clamp_transpose(const TransposeArgs& a) { return not_linear(a); }
// cumsum^T ct = cumsum of ct in the opposite direction (each input feeds every later output)
Cts cumsum_transpose(const TransposeArgs& a) {
  const auto& c = a.params.get<params::Cumulative>();
  return unary_linear(a, [&](const Array& ct) { return cumsum(ct, c.axis, !c.reverse); });
}
Cts cumprod_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts cummax_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts cummin_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts cumlogsumexp_transpose(const TransposeArgs& a) { return not_linear(a); }
// reduce_window_sum^T ct: ct spread by the strides (interior padding), padded so that every
// operand element sees the windows that read it, then summed over windows moving by the base
// dilation (JAX's _reduce_window_sum_transpose_rule; the window of ones is its own flip).
Cts reduce_window_sum_transpose(const TransposeArgs& a) {
  const auto& w = a.params.get<params::ReduceWindow>();
  return unary_linear(a, [&](const Array& ct) {
    params::ReduceWindow t{w.window_dimensions, w.base_dilation, {}, {}, Ints(w.base_dilation.size(), 1), w.window_dilation};
    Ints lo, hi, interior;
    vjp_lhs_padding(a.in[0].aval.shape, w.window_dimensions, ct.shape(), w.window_strides, w.padding_lo,
                    w.base_dilation, w.window_dilation, lo, hi);
    for (auto s : w.window_strides) interior.push_back(s - 1);
    const Array spread = bind1(P::pad, {ct, scalar(0.0, ct.dtype())}, params::Pad{.lo = lo, .hi = hi, .interior = interior}, a.loc);
    t.padding_lo = t.padding_hi = Ints(lo.size(), 0);
    return bind1(P::reduce_window_sum, {spread}, t, a.loc);
  });
}
Cts reduce_window_max_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts reduce_window_min_transpose(const TransposeArgs& a) { return not_linear(a); }
// select_and_gather_add(t, x)^T ct = select_and_scatter_add(ct, x): each window's cotangent goes
// back to the element it read; and the other way round.
Cts select_transpose(const TransposeArgs& a, P to) {
  if (a.in[1].is_linear()) return not_linear(a);
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = bind1(to, {ct0(a), a.in[1].value}, a.params, a.loc);
  return out;
}
Cts select_and_gather_add_transpose(const TransposeArgs& a) { return select_transpose(a, P::select_and_scatter_add); }
Cts select_and_scatter_add_transpose(const TransposeArgs& a) { return select_transpose(a, P::select_and_gather_add); }
// broadcast^T ct = sum ct over the broadcast dims, reshaped to the operand
Cts broadcast_in_dim_transpose(const TransposeArgs& a) {
  const ShapedArray& x = a.in[0].aval;
  const Ints& bd = a.params.get<params::BroadcastInDim>().broadcast_dimensions;
  const Ints& shape = a.params.get<params::BroadcastInDim>().shape;
  return unary_linear(a, [&](const Array& c) {
    Ints axes = complement(bd, static_cast<std::int64_t>(shape.size()));
    for (std::size_t i = 0; i < bd.size(); ++i)
      if (x.shape[i] == 1 && shape[static_cast<std::size_t>(bd[i])] != 1) axes.push_back(bd[i]);
    std::sort(axes.begin(), axes.end());
    Array s = axes.empty() ? c : bind1(P::reduce_sum, {c}, params::Reduce{.axes = axes}, a.loc);
    return reshape(s, x.shape);
  });
}
// reshape^T ct = reshape ct back
Cts reshape_transpose(const TransposeArgs& a) {
  return unary_linear(a, [&](const Array& c) { return reshape(c, a.in[0].aval.shape); });
}
// transpose(perm)^T ct = transpose(ct, perm^-1)
Cts transpose_transpose(const TransposeArgs& a) {
  const Ints& perm = a.params.get<params::Transpose>().permutation;
  Ints inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inv[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  return unary_linear(a, [&](const Array& c) { return transpose(c, inv); });
}
// rev^T ct = rev ct (a permutation that is its own inverse)
Cts rev_transpose(const TransposeArgs& a) {
  return unary_linear(a, [&](const Array& c) { return flip(c, a.params.get<params::Rev>().dimensions); });
}
Cts squeeze_transpose(const TransposeArgs& a) { return reshape_transpose(a); }
Cts expand_dims_transpose(const TransposeArgs& a) { return reshape_transpose(a); }
// slice^T ct = ct padded with zeros back to the operand's shape (strides as interior padding)
Cts slice_transpose(const TransposeArgs& a) {
  const ShapedArray& x = a.in[0].aval;
  const Ints &start = a.params.get<params::Slice>().start_indices, &strides = a.params.get<params::Slice>().strides;
  return unary_linear(a, [&](const Array& c) {
    Ints lo, hi, interior;
    for (std::size_t i = 0; i < start.size(); ++i) {
      std::int64_t s = strides.empty() ? 1 : strides[i];
      std::int64_t n = c.shape()[i];
      std::int64_t end = n > 0 ? start[i] + (n - 1) * s + 1 : start[i];
      lo.push_back(start[i]);
      hi.push_back(x.shape[i] - end);
      interior.push_back(n > 0 ? s - 1 : 0);
    }
    return bind1(P::pad, {c, scalar(0.0, c.dtype())}, params::Pad{.lo = lo, .hi = hi, .interior = interior}, a.loc);
  });
}
// pad^T ct = (ct with the padding cut away, sum(ct) - sum(that))
Cts pad_transpose(const TransposeArgs& a) {
  const auto& pad = a.params.get<params::Pad>();
  const Ints &lo = pad.lo, &hi = pad.hi, &interior = pad.interior;
  Array c = ct0(a);
  Ints nlo, nhi, zero(lo.size(), 0), strides;
  for (std::size_t i = 0; i < lo.size(); ++i) {
    nlo.push_back(-lo[i]);
    nhi.push_back(-hi[i]);
    strides.push_back(interior[i] + 1);
  }
  Array unpadded = bind1(P::pad, {c, scalar(0.0, c.dtype())}, params::Pad{.lo = nlo, .hi = nhi, .interior = zero}, a.loc);
  Array t_op = slice(unpadded, Ints(lo.size(), 0), unpadded.shape(), strides);
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = t_op;
  if (a.in[1].is_linear()) out[1] = sub(sum(c), sum(t_op));
  return out;
}
// The primitive dynamic_update_slice at starts the primal equation received (mapped from the end
// already: xj::dynamic_update_slice would map a start still negative a second time).
Array update_slice_at(const Array& x, const Array& update, const std::vector<Array>& starts, const std::source_location& loc) {
  std::vector<Array> ins{x, update};
  ins.insert(ins.end(), starts.begin(), starts.end());
  return bind1(P::dynamic_update_slice, ins, {}, loc);
}
// dynamic_slice^T ct = zeros with ct written at the same (clamped) start
Cts dynamic_slice_transpose(const TransposeArgs& a) {
  auto idx = index_operands(a, 1);
  return unary_linear(a, [&](const Array& c) { return update_slice_at(zeros_of(a.in[0].aval), c, idx, a.loc); });
}
// dynamic_update_slice^T ct = (ct with the window zeroed, ct's window)
Cts dynamic_update_slice_transpose(const TransposeArgs& a) {
  auto idx = index_operands(a, 2);
  Array c = ct0(a);
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = update_slice_at(c, zeros_of(a.in[1].aval), idx, a.loc);
  if (a.in[1].is_linear()) {
    std::vector<Array> ins{c};
    ins.insert(ins.end(), idx.begin(), idx.end());
    out[1] = bind1(P::dynamic_slice, ins, params::DynamicSlice{.slice_sizes = a.in[1].aval.shape}, a.loc);
  }
  return out;
}
// concatenate^T ct = the slices of ct
Cts concatenate_transpose(const TransposeArgs& a) {
  std::int64_t dim = a.params.get<params::Concatenate>().dimension;
  Array c = ct0(a);
  Cts out = zeros_for(a);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < a.in.size(); ++i) {
    std::int64_t n = a.in[i].aval.shape[static_cast<std::size_t>(dim)];
    if (a.in[i].is_linear()) out[i] = slice_in_dim(c, offset, offset + n, 1, dim);
    offset += n;
  }
  return out;
}
// take(x, i)^T ct = scatter_add(zeros, i, ct) (a read of zeros, fill_or_drop, drops its ct)
Cts gather_transpose(const TransposeArgs& a) {
  if (a.in[1].is_linear()) return not_linear(a);
  const auto& g = a.params.get<params::Gather>();
  return unary_linear(a, [&](const Array& c) {
    return bind1(P::scatter_add, {zeros_of(a.in[0].aval), a.in[1].value, c},
                 params::Scatter{.axis = g.axis, .fill_or_drop = g.fill_or_drop}, a.loc);
  });
}
/// The gather that reads back, for each update, the element a scatter with `ps` put it in.
Array read_back(const Array& c, const Array& indices, const params::Scatter& ps, std::source_location loc) {
  return bind1(P::gather, {c, indices}, params::Gather{.axis = ps.axis, .fill_or_drop = ps.fill_or_drop}, loc);
}
// scatter_add(x, i, u)^T ct = (ct, take(ct, i))
Cts scatter_add_transpose(const TransposeArgs& a) {
  if (a.in[1].is_linear()) return not_linear(a);
  Array c = ct0(a);
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = c;
  if (a.in[2].is_linear()) out[2] = read_back(c, a.in[1].value, a.params.get<params::Scatter>(), a.loc);
  return out;
}
// scatter(x, i, u)^T ct = (ct with the overwritten elements zeroed, take(ct, i) where update j
// survived, else 0)
Cts scatter_transpose(const TransposeArgs& a) {
  if (a.in[1].is_linear()) return not_linear(a);
  const auto& ps = a.params.get<params::Scatter>();
  const Array& i = a.in[1].value;
  Array c = ct0(a);
  Cts out = zeros_for(a);
  if (a.in[0].is_linear()) out[0] = bind1(P::scatter, {c, i, zeros_of(a.in[2].aval)}, ps, a.loc);
  if (a.in[2].is_linear())
    out[2] = where(surviving_updates(i, a.in[0].aval, a.in[2].aval, ps, a.loc), read_back(c, i, ps, a.loc), 0.0, a.loc);
  return out;
}
// scatter_mul(x, i, u) is linear in x alone (its jvp never makes u's tangent an operand):
// scatter_mul(x, i, u)^T ct = scatter_mul(ct, i, u), a diagonal map
Cts scatter_mul_transpose(const TransposeArgs& a) {
  if (a.in[1].is_linear() || a.in[2].is_linear()) return not_linear(a);
  return unary_linear(a, [&](const Array& c) { return bind1(P::scatter_mul, {c, a.in[1].value, a.in[2].value}, a.params, a.loc); });
}
Cts scatter_min_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts scatter_max_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts iota_transpose(const TransposeArgs& a) { return not_linear(a); }
// name^T ct = ct (never reached with a name on a linear value, kept for completeness)
Cts name_transpose(const TransposeArgs& a) { return unary_linear(a, [](const Array& c) { return c; }); }
Cts threefry2x32_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts cholesky_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts lu_pivots_to_permutation_transpose(const TransposeArgs& a) { return not_linear(a); }
// x = op(a)^-1 b is linear in b: b_ct = op(a)^-T x_ct (left side) or x_ct op(a)^-T, the same
// solve with transpose_a flipped
Cts triangular_solve_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear()) return not_linear(a);
  Cts out = zeros_for(a);
  params::TriangularSolve ps = a.params.get<params::TriangularSolve>();
  ps.transpose_a = !ps.transpose_a;
  if (a.in[1].is_linear()) out[1] = bind1(P::triangular_solve, {a.in[0].value, ct0(a)}, ps, a.loc);
  return out;
}
// The collectives' transposes, for the global objective (the sum over processes of each
// process's output): psum^T = psum; all_gather^T = psum_scatter and back; ppermute^T = ppermute
// along the inverted pairs.
Cts psum_transpose(const TransposeArgs& a) {
  return unary_linear(a, [&](const Array& c) { return bind1(P::psum, {c}, {}, a.loc); });
}
Cts pmax_transpose(const TransposeArgs& a) { return not_linear(a); }
Cts all_gather_transpose(const TransposeArgs& a) {
  const auto& ps = a.params.get<params::AllGather>();
  return unary_linear(a, [&](const Array& c) {
    return bind1(P::psum_scatter, {c}, params::PsumScatter{.axis = ps.axis, .axis_size = ps.axis_size, .tiled = ps.tiled}, a.loc);
  });
}
Cts psum_scatter_transpose(const TransposeArgs& a) {
  const auto& ps = a.params.get<params::PsumScatter>();
  return unary_linear(a, [&](const Array& c) {
    return bind1(P::all_gather, {c}, params::AllGather{.axis = ps.axis, .axis_size = ps.axis_size, .tiled = ps.tiled}, a.loc);
  });
}
Cts ppermute_transpose(const TransposeArgs& a) {
  Ints inverse;
  const Ints& perm = a.params.get<params::Ppermute>().perm;
  for (std::size_t i = 0; i + 1 < perm.size(); i += 2) {
    inverse.push_back(perm[i + 1]);
    inverse.push_back(perm[i]);
  }
  return unary_linear(a, [&](const Array& c) { return bind1(P::ppermute, {c}, params::Ppermute{.perm = inverse}, a.loc); });
}

}  // namespace

// The family's transpose (float_unary, power, comparison: not linear) or the primitive's own.
#define XJAX_TRANSPOSE_float_unary(stem) not_linear
#define XJAX_TRANSPOSE_power(stem) not_linear
#define XJAX_TRANSPOSE_comparison(stem) not_linear
#define XJAX_TRANSPOSE_numeric_unary(stem) stem##_transpose
#define XJAX_TRANSPOSE_binary(stem) stem##_transpose
#define XJAX_TRANSPOSE_structural(stem) stem##_transpose
#define XJAX_TRANSPOSE_collective(stem) stem##_transpose
#define XJAX_TRANSPOSE_factorization(stem) not_linear
#define XJAX_TRANSPOSE_higher_order(stem) stem##_transpose
#define XJAX_TRANSPOSE_control_flow(stem) stem##_transpose

TransposeRule transpose_rule(Primitive p) {
  switch (p) {
#define XJAX_T_CASE(name, stem, S, family, kinds) \
  case P::name: return XJAX_TRANSPOSE_##family(stem);
    XJAX_PRIMITIVES(XJAX_T_CASE)
#undef XJAX_T_CASE
  }
  return nullptr;
}

// ---- the pass --------------------------------------------------------------------------------

std::vector<Tangent> backward_pass(const ClosedJaxpr& cj, const std::vector<bool>& linear_in,
                                   std::span<const Array> nonlinear_args, std::span<const Tangent> cts) try {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_map<std::uint64_t, Array> value;  // non-linear values
  std::unordered_set<std::uint64_t> linear;
  for (std::size_t i = 0; i < j.constvars.size(); ++i) value[j.constvars[i].id()] = cj.consts[i];
  std::size_t k = 0;
  for (std::size_t i = 0; i < j.invars.size(); ++i) {
    if (linear_in[i]) linear.insert(j.invars[i].id());
    else value[j.invars[i].id()] = nonlinear_args[k++];
  }
  auto is_linear = [&](const Atom& a) { auto* v = std::get_if<Var>(&a); return v && linear.count(v->id()); };
  auto read = [&](const Atom& a) -> Array {
    if (auto* l = std::get_if<Literal>(&a)) return l->value;
    return value.at(std::get<Var>(a).id());
  };

  // Forward: evaluate what reads no linear value; collect the linear equations.
  std::vector<const Eqn*> lin_eqns;
  for (const Eqn& e : j.eqns) {
    if (std::any_of(e.inputs.begin(), e.inputs.end(), is_linear)) {
      for (const auto& o : e.outputs) linear.insert(o.id());
      lin_eqns.push_back(&e);
      continue;
    }
    std::vector<Array> ins;
    for (const auto& in : e.inputs) ins.push_back(read(in));
    auto outs = bind(e.prim, ins, e.params, e.loc);
    for (std::size_t o = 0; o < outs.size(); ++o) value[e.outputs[o].id()] = outs[o];
  }

  // Backward: cotangents flow from outputs to linear inputs.
  std::unordered_map<std::uint64_t, Tangent> ct_env;
  auto accumulate = [&](const Var& v, const Tangent& t) {
    auto it = ct_env.find(v.id());
    if (it == ct_env.end()) ct_env.emplace(v.id(), t);
    else it->second = tadd(it->second, t);
  };
  for (std::size_t o = 0; o < j.outvars.size(); ++o)
    if (is_linear(j.outvars[o])) accumulate(std::get<Var>(j.outvars[o]), cts[o]);

  for (auto it = lin_eqns.rbegin(); it != lin_eqns.rend(); ++it) {
    const Eqn& e = **it;
    std::vector<Tangent> ct_out;
    bool any = false;
    for (const auto& o : e.outputs) {
      auto f = ct_env.find(o.id());
      if (f == ct_env.end()) {
        ct_out.push_back(Tangent::zero(o.aval()));
      } else {
        ct_out.push_back(f->second);
        any = any || !f->second.is_zero();
        ct_env.erase(f);
      }
    }
    if (!any) continue;
    std::vector<LinearInput> ins;
    for (const auto& in : e.inputs)
      ins.push_back(is_linear(in) ? LinearInput{Array(), atom_aval(in)} : LinearInput{read(in), atom_aval(in)});
    LocationScope at(&e.loc);
    Cts ct_in = transpose_rule(e.prim)(TransposeArgs{e.prim, ct_out, ins, e.params, e.loc});
    for (std::size_t i = 0; i < e.inputs.size(); ++i)
      if (is_linear(e.inputs[i]) && !ct_in[i].is_zero()) accumulate(std::get<Var>(e.inputs[i]), ct_in[i]);
  }

  std::vector<Tangent> result;
  for (std::size_t i = 0; i < j.invars.size(); ++i) {
    if (!linear_in[i]) continue;
    auto f = ct_env.find(j.invars[i].id());
    result.push_back(f == ct_env.end() ? Tangent::zero(j.invars[i].aval()) : f->second);
  }
  return result;
} catch (...) {
  rethrow_internal("transpose");
}

ClosedJaxpr transpose_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& linear_in) try {
  std::vector<ShapedArray> avals;
  for (std::size_t i = 0; i < linear_in.size(); ++i)
    if (!linear_in[i]) avals.push_back(j->invars[i].aval());
  std::size_t n_nonlin = avals.size();
  for (const auto& a : j.out_avals()) avals.push_back(a);
  auto body = [&](std::span<const Array> args) {
    std::vector<Tangent> cts(args.begin() + static_cast<std::ptrdiff_t>(n_nonlin), args.end());
    auto res = backward_pass(j, linear_in, args.subspan(0, n_nonlin), cts);
    std::vector<Array> out;
    for (const auto& t : res) out.push_back(t.instantiate());
    return out;
  };
  return trace_flat(body, avals);
} catch (...) {
  rethrow_internal("transpose");
}

}  // namespace xjax::detail
