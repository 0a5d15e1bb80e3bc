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

/// inline_checkpoints : Jaxpr -> Jaxpr. Each checkpoint equation whose body has no consts is
/// replaced by its body's equations (fresh variables, its inputs bound to the operands): a
/// checkpoint means only "recompute under differentiation", so evaluating it is evaluating its
/// body. *inlined (if given) receives Primitive::checkpoint once per checkpoint inlined (the
/// planner counts them per run: eval_counts).
Jaxpr inline_checkpoints(const Jaxpr& j, std::vector<Primitive>* inlined = nullptr);
/// Whether inline_checkpoints would inline anything in j.
bool has_inlinable_checkpoint(const Jaxpr& j);

/// DCE rule of a primitive: the equation with unused outputs (and what only they need) removed;
/// used_in says which inputs the result still reads. Called only when some output is used. Only
/// the control-flow primitives have one (their definitions are transformation rules, in
/// transforms/); the others are kept or dropped whole.
using DceRule = Eqn (*)(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
DceRule dce_rule(Primitive p);
Eqn scan_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn cond_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn checkpoint_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);
Eqn while_loop_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in);

}  // namespace xjax::detail
