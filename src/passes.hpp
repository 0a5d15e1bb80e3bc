// passes.hpp: the jaxpr -> jaxpr passes of the core (src/passes/), which transformations and the
// planner run on whole jaxprs. Each keeps a jaxpr's signature and meaning and changes only how
// it computes. Not installed.
#pragma once
#include <vector>

#include "internal.hpp"

namespace xjax::detail {

/// dce : Jaxpr -> Jaxpr. Drops equations whose outputs nothing uses (and unused outputs where
/// used_outputs says so). *used_inputs (if given) reports which inputs are still read.
ClosedJaxpr dce(const ClosedJaxpr& j, const std::vector<bool>& used_outputs,
                std::vector<bool>* used_inputs = nullptr);

/// cse : Jaxpr -> Jaxpr. Merges equations with the same primitive, params and operands.
ClosedJaxpr cse(const ClosedJaxpr& j);

/// fold_transposes : Jaxpr -> Jaxpr. A dot_general reading `transpose[perm] x` reads x instead,
/// its contracting and batch dims mapped through perm (the dot kernel turns them into GEMM
/// transpose flags), where the operand's free dims keep their order; a transpose left without
/// readers goes. The planner runs it: a copy of the operand would be pure overhead.
Jaxpr fold_transposes(const Jaxpr& j);

/// concatenate_padded_sums : Jaxpr -> Jaxpr. A sum (a chain of adds) of zero pads whose pieces
/// tile one axis exactly is the concatenation of the pieces (the cotangent of a value cut into
/// slices: attention's q, k, v), which writes the array once; only where the pads and inner adds
/// have no other readers. The planner runs it. Values agree but for a zero's sign.
Jaxpr concatenate_padded_sums(const Jaxpr& j);

/// inline_calls : Jaxpr -> Jaxpr. Each checkpoint, custom_jvp_call and custom_vjp_call equation
/// whose jaxpr has no consts is replaced by that jaxpr's equations (fresh variables, its inputs
/// bound to the operands): these calls mean only "recompute / differentiate this way", so
/// evaluating one is evaluating its jaxpr. *inlined (if given) receives each inlined call's
/// primitive once per inlining (the planner counts them per run: eval_counts).
Jaxpr inline_calls(const Jaxpr& j, std::vector<Primitive>* inlined = nullptr);
/// Whether inline_calls would inline anything in j.
bool has_inlinable_call(const Jaxpr& j);
/// The jaxpr a checkpoint, custom_jvp_call or custom_vjp_call equation means (what evaluating it
/// evaluates); null for other equations.
const ClosedJaxpr* called_jaxpr(const Eqn& e);

/// DCE rule of a primitive: the equation with unused outputs (and what only they need) removed;
/// used_in says which inputs the result still reads. Called only when some output is used. Only
/// the control-flow primitives and revolve_fwd / revolve_lin have one (their definitions are
/// transformation rules, in transforms/); the others are kept or dropped whole.
using DceRule = Eqn (*)(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
DceRule dce_rule(Primitive p);
Eqn scan_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn cond_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn checkpoint_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn while_loop_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
/// The scheduled loops' reverse-mode halves (transforms/revolve.cpp), pruned as a plain scan's
/// known and staged scans are.
Eqn revolve_fwd_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn revolve_lin_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);

}  // namespace xjax::detail
