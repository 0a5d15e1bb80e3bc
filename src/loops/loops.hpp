// loops.hpp: the meaning of the higher-order primitives (those carrying jaxprs or functions in
// their params) in the core: each one's shape rule and evaluation, including the loop executors
// of scan, while_loop and the revolve sweeps. Their transformation rules (jvp, transpose,
// batching, partial evaluation, DCE) live in transforms/ and build on this header, never the
// other way round. Not installed.
//   loops/scan.cpp      scan           loops/while.cpp   while_loop
//   loops/revolve.cpp   revolve_fwd, revolve_lin, revolve_bwd, online_fwd (loops/revolve.hpp)
//   loops/calls.cpp     cond, checkpoint, custom_jvp_call, custom_vjp_call, custom_lin
#pragma once
#include <span>
#include <vector>

#include "internal.hpp"

namespace xjax::detail {

using ImplRule = std::vector<Array> (*)(std::span<const Array> in, const Params& params);
/// Evaluation rule of a higher-order primitive (nullptr: the primitive runs a kernel).
ImplRule impl_rule(Primitive p);
/// An evaluation rule that takes its operands over (an execution plan's values at their last
/// use), so it can free them early or reuse their buffers; nullptr for most primitives.
using OwningImplRule = std::vector<Array> (*)(std::vector<Array>&& in, const Params& params);
OwningImplRule owning_impl_rule(Primitive p);

// XJAX_FOR_EACH_HIGHER_ORDER_RULE_STEM(X) (primitives.hpp): X(primitive, stem) for each
// higher-order primitive, stem naming its rule functions. The shape and evaluation rules receive
// the primitive's parameter struct; the tables that dispatch to them unwrap it (Params::get).
#define XJAX_DECLARE_HIGHER_ORDER_MEANING(prim, stem)                                             \
  std::vector<ShapedArray> stem##_abstract_eval(std::span<const ShapedArray> in,                  \
                                                const params_of_t<Primitive::prim>& ps);         \
  std::vector<Array> stem##_impl(std::span<const Array> in, const params_of_t<Primitive::prim>& ps);
XJAX_FOR_EACH_HIGHER_ORDER_RULE_STEM(XJAX_DECLARE_HIGHER_ORDER_MEANING)
#undef XJAX_DECLARE_HIGHER_ORDER_MEANING

/// a with a leading axis of size n added (a loop's stacked values), and removed.
ShapedArray stacked(const ShapedArray& a, std::int64_t n);
ShapedArray unstacked(const ShapedArray& a);

/// v[first, first + n) as a vector, and a followed by b: the operand lists of loops are cut and
/// joined by position.
template <class T> std::vector<T> part(std::span<const T> v, std::size_t first, std::size_t n) {
  return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(first), v.begin() + static_cast<std::ptrdiff_t>(first + n));
}
template <class T> std::vector<T> part(const std::vector<T>& v, std::size_t first, std::size_t n) {
  return part(std::span<const T>(v), first, n);
}
template <class T> std::vector<T> cat(std::vector<T> a, std::span<const T> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
template <class T> std::vector<T> cat(std::vector<T> a, const std::vector<T>& b) { return cat(std::move(a), std::span<const T>(b)); }
/// The avals of xs.
std::vector<ShapedArray> avals_of(std::span<const Array> xs);

/// A jaxpr whose constvars became its leading invars (closure conversion for a primitive that
/// stores a jaxpr in its params: consts, perhaps tracers, are passed as operands instead).
ClosedJaxpr consts_as_inputs(const ClosedJaxpr& j);

/// params::Scan with the counts as sizes.
struct ScanParams {
  ClosedJaxprPtr body;
  std::int64_t length = 0;
  bool reverse = false;
  std::int64_t unroll = 1;
  std::size_t nconsts = 0, ncarry = 0;
  std::int64_t snapshots = 0;  // 0: every step; s > 0: the binomial schedule

  std::size_t nxs() const { return body->jaxpr->invars.size() - nconsts - ncarry; }
  std::size_t nys() const { return body->jaxpr->outvars.size() - ncarry; }

  static ScanParams read(const params::Scan& p);
  static ScanParams read(const Params& ps) { return read(ps.get<params::Scan>()); }
  /// These params with another body and counts.
  params::Scan with(ClosedJaxpr b, std::size_t nc, std::size_t ncar, bool rev) const;
};

/// params::While with the const counts as sizes.
struct WhileParams {
  ClosedJaxprPtr cond, body;
  std::size_t cn = 0, bn = 0;
  std::int64_t snapshots = 0;  // reverse mode: 0 none, s > 0 online(s)

  static WhileParams read(const params::While& p);
  static WhileParams read(const Params& ps) { return read(ps.get<params::While>()); }
};
params::While while_params(ClosedJaxpr cond, ClosedJaxpr body, std::size_t cn, std::size_t bn, std::int64_t snapshots);

/// custom_linear_solve's operand list cut by position: (matvec consts, solve consts,
/// transpose_solve consts, b); the counts come from the jaxprs (each takes its consts, then one
/// operand per leaf of b).
struct LinearSolveParts {
  std::size_t nb = 0, matvec = 0, solve = 0, transpose_solve = 0;

  static LinearSolveParts read(const params::CustomLinearSolve& p);
  std::size_t total() const { return matvec + solve + transpose_solve + nb; }
  std::size_t solve_begin() const { return matvec; }
  std::size_t transpose_solve_begin() const { return matvec + solve; }
  std::size_t b_begin() const { return matvec + solve + transpose_solve; }
};

/// A copy of a loop's final carry that views one of its stacked xs (the body passed a slice
/// through), so that the result does not keep the whole xs alive.
void unview_carry(std::vector<Array>& carry, std::span<const Array> xs);

}  // namespace xjax::detail
