// higher_order.hpp: the transformation rules of higher-order primitives (those carrying jaxprs or
// functions in their params), which the transforms' rule tables dispatch to; their meaning (shape
// rule, evaluation) is in the core, src/loops/loops.hpp. Each primitive keeps all its rules in one
// file: custom_derivatives.cpp for custom_jvp_call, custom_vjp_call and custom_lin.
#pragma once
#include "ad.hpp"
#include "batching.hpp"
#include "loops/loops.hpp"
#include "pe_rules.hpp"

namespace xjax::detail {

// XJAX_FOR_EACH_HIGHER_ORDER_RULE_STEM(X) (primitives.hpp): X(primitive, stem) for each
// higher-order primitive, stem naming its rule functions.
#define XJAX_DECLARE_HIGHER_ORDER_RULES(prim, stem)                                                 \
  JvpOut stem##_jvp(const JvpArgs& a);                                                              \
  std::vector<Tangent> stem##_transpose(const TransposeArgs& a);                                    \
  BatchOut stem##_batch(const BatchArgs& a);
XJAX_FOR_EACH_HIGHER_ORDER_RULE_STEM(XJAX_DECLARE_HIGHER_ORDER_RULES)
#undef XJAX_DECLARE_HIGHER_ORDER_RULES

struct PeSplit;
PeSplit scan_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable);
PeSplit cond_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable);
PeSplit while_loop_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable);
PeSplit checkpoint_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable);

/// The transpose of a scan body (consts, carry, xs) -> (carry, ys) that is linear in its carries
/// and in the consts and xs with lin_in set (lin_in's carry entries are ignored):
///   jaxpr : (consts c_nl; ct acc of c_lin, ct carry; xs x_nl, ct ys) -> (ct acc', ct carry'; ct x_lin)
/// where the acc inputs accumulate the cotangents of the linear consts across steps.
struct TransposedBody {
  ClosedJaxpr jaxpr;
  std::vector<std::size_t> c_nl, c_lin, x_nl, x_lin;  // positions among the body's invars
};
TransposedBody transpose_scan_body(const ClosedJaxpr& body, std::size_t nc, std::size_t ncar, const std::vector<bool>& lin_in);

/// scan's partial evaluation under a binomial schedule (snapshots > 0): the known scan becomes
/// revolve_fwd and the staged one revolve_lin (revolve.cpp). `uk` and `pe` are the body's split
/// after the unknown-carry fixpoint; outside[r] is the atom outside the loop that holds residual r
/// when it is loop-invariant (a forwarded const or a hoisted value), which revolve_lin then reads
/// instead of a last-step copy. nullopt when the schedule does not apply (no known carry).
std::optional<PeSplit> revolve_partial_eval(const Eqn& e, const std::vector<bool>& uk, const PartialEval& pe,
                                            const std::vector<std::optional<Atom>>& outside);
/// while_loop's partial evaluation under online(s): the known loop becomes online_fwd and the
/// staged one revolve_lin with the trip count known at run time. `cond` is the cond on the known
/// inputs (known cond consts, known carries), `body_uk` which body inputs are unknown, `carry_uk`
/// which carries. nullopt when the schedule does not apply.
std::optional<PeSplit> online_partial_eval(const Eqn& e, const ClosedJaxpr& cond, const std::vector<bool>& cond_known,
                                           const std::vector<bool>& body_uk, const std::vector<bool>& carry_uk);

/// j as the shared pointer an equation's params hold (scan, cond, while bodies...).
inline ClosedJaxprPtr share(ClosedJaxpr j) { return std::make_shared<const ClosedJaxpr>(std::move(j)); }
/// j with its invars reordered: new invars[i] = old invars[order[i]] (same for outvars).
ClosedJaxpr permute_invars(const ClosedJaxpr& j, const std::vector<std::size_t>& order);
ClosedJaxpr permute_outvars(const ClosedJaxpr& j, const std::vector<std::size_t>& order);
/// j keeping only the invars with keep set (the others must be unused: InternalError otherwise).
ClosedJaxpr prune_invars(const ClosedJaxpr& j, const std::vector<bool>& keep);
/// dce : Jaxpr -> Jaxpr of a loop body (nc consts, ncar carries first among its inputs and outputs):
/// keeps the outputs used and the carries used or read by what is kept (a fixpoint; `used_carry`
/// grows to them); `reads` says which inputs the result reads (scan's and revolve_lin's DCE).
ClosedJaxpr loop_body_dce(const ClosedJaxpr& body, std::size_t nc, std::size_t ncar, const std::vector<bool>& used_out,
                          std::vector<bool>& used_carry, std::vector<bool>& reads);
/// Copies j's equations into `out` with fresh variables, its invars bound to `inputs`; returns
/// the atoms of its outputs. (j must have no constvars.)
std::vector<Atom> inline_jaxpr(const Jaxpr& j, std::span<const Atom> inputs, std::vector<Eqn>& out);

}  // namespace xjax::detail
