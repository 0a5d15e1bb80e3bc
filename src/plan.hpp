// plan.hpp: the execution plan of a jaxpr (not installed). Built once per jaxpr, on its first
// evaluation outside a trace (Jaxpr::plan caches it), and run by eval_jaxpr on every later one.
#pragma once
#include <memory>
#include <vector>

#include "higher_order.hpp"
#include "internal.hpp"
#include "kernels/kernels.hpp"

namespace xjax::detail {

/// Instructions in execution order. Every value lives in a slot; a step reads slots (or literal
/// operands), writes slots, and then drops the slots whose last reader it was, so a buffer is
/// released (to the arena) as soon as nothing later needs it. A step is one equation whose
/// kernel closure was resolved when the plan was built, one higher-order equation (its impl rule
/// runs the sub-jaxprs, themselves planned once), or a fused chain of elementwise equations whose
/// intermediates are never materialized (kernels::FusedProgram).
struct EvalPlan {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  struct Operand {
    std::size_t slot = 0;
    const Literal* literal = nullptr;
  };
  enum class Kind { kernel, impl, fused };
  struct Step {
    Kind kind = Kind::kernel;
    const Eqn* eqn = nullptr;                        // kernel, impl: the equation
    KernelFn kernel;                                 // kernel
    ImplRule impl = nullptr;                         // impl
    std::shared_ptr<const kernels::FusedProgram> fused;  // fused
    std::vector<Primitive> counted;                  // primitives counted per execution (eval_counts)
    std::vector<Operand> ins;
    std::vector<std::size_t> outs;        // npos: output never read
    std::vector<std::size_t> free_after;  // slots to drop after this step
  };
  /// The equations the steps run: the jaxpr's, after transposes feeding a dot_general were folded
  /// into it (fold_transposes in plan.cpp). Steps point into it.
  std::vector<Eqn> eqns;
  std::size_t num_slots = 0;
  std::vector<std::size_t> const_slots, in_slots;  // npos: never read
  std::vector<Step> steps;
  std::vector<Operand> outs;
  std::size_t fused_equations = 0;  // equations run inside fused steps
};

/// Builds j's plan. Pure function of the jaxpr: the plan points into j's literals and variables,
/// so it must not outlive j (Jaxpr::plan owns it).
std::shared_ptr<const EvalPlan> make_plan(const Jaxpr& j);

}  // namespace xjax::detail
