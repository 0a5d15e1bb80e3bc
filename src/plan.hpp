// plan.hpp: the execution plan of a jaxpr (not installed). Built once per jaxpr, on its first
// evaluation outside a trace (plan_of caches it in a side table, src/plan_cache.cpp), and run by eval_jaxpr on every later one.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "loops/loops.hpp"
#include "internal.hpp"
#include "kernels/kernels.hpp"
#include "raw_plan.hpp"

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
    bool last_use = false;  // the step is the slot's last reader (and reads it once): moved out
    bool repeated = false;  // in `outs`: an earlier output reads the same slot
  };
  /// call: a checkpoint, whose evaluation is its body's: the body's plan runs directly (no impl
  /// rule, no plan lookup per execution; the body belongs to the equation's params).
  enum class Kind { kernel, impl, fused, call };
  struct Step {
    Kind kind = Kind::kernel;
    const Eqn* eqn = nullptr;                        // kernel, impl, call: the equation
    const ClosedJaxpr* body = nullptr;               // call: the body
    std::shared_ptr<const EvalPlan> body_plan;       // call: its plan
    KernelFn kernel;                                 // kernel
    kernels::IntoKernel into;                        // kernel: into caller memory, where it has one
    ImplRule impl = nullptr;                         // impl
    OwningImplRule owning_impl = nullptr;            // impl: preferred when set (takes `ins` over)
    std::shared_ptr<const kernels::FusedProgram> fused;  // fused
    std::vector<Primitive> counted;                  // primitives counted per execution (eval_counts)
    std::vector<Operand> ins;
    std::vector<std::size_t> outs;        // npos: output never read
    std::vector<std::size_t> free_after;  // slots to drop after this step
    /// StepProfile's name of the step: its primitives and first output; empty for a step that
    /// runs sub-jaxprs (a loop, a conditional, a call: their steps are timed instead).
    std::string label;
  };
  /// The jaxpr the steps run when the passes run before planning changed the source (calls
  /// inlined, transposes folded into dots: passes.hpp), owned by the plan; null when they left it
  /// as it is, and the steps point into the source's equations and literals. So a plan runs only
  /// while its source lives (plan_of's side table drops it with the source).
  std::shared_ptr<const Jaxpr> rewritten;
  /// The calls inlined (checkpoint, custom_jvp_call, custom_vjp_call), counted once per run (eval_counts: every step of a plan runs once
  /// per run, so they ran once each).
  std::vector<Primitive> inlined_calls;
  std::size_t num_slots = 0;
  std::vector<ShapedArray> slot_avals;  // each slot's aval
  std::vector<std::size_t> const_slots, in_slots;  // npos: never read
  std::vector<Step> steps;
  std::vector<Operand> outs;
  std::size_t fused_equations = 0;  // equations run inside fused steps
  /// The same plan on raw memory (raw_plan.hpp): loop bodies run it (scan, while_loop), and
  /// top-level runs of small values (raw_at_top_level); nullptr when a step runs sub-jaxprs.
  std::shared_ptr<const RawPlan> raw;
};

/// Builds j's plan. A function of the jaxpr: the plan points into j's equations and literals,
/// so it must not be run after j is gone; it also holds the plans of j's checkpoint bodies
/// (looked up with plan_of while building).
std::shared_ptr<const EvalPlan> make_plan(const Jaxpr& j);

/// j's plan, built on first use and kept in the side table (plan_cache.cpp). Thread-safe.
std::shared_ptr<const EvalPlan> plan_of(const std::shared_ptr<const Jaxpr>& j);
/// plan_of, and before j's first plan check_before_eval(j) (eval_jaxpr's: j may be built by hand).
std::shared_ptr<const EvalPlan> checked_plan_of(const std::shared_ptr<const Jaxpr>& j);
/// The jaxpr derived from j under `key` (scan's unrolled bodies), built by `build` (outside any
/// lock) the first time and kept as long as j lives (unless it is j itself: then not kept).
using DerivedKey = std::vector<std::int64_t>;
ClosedJaxprPtr derived_jaxpr(const std::shared_ptr<const Jaxpr>& j, const DerivedKey& key,
                             const std::function<ClosedJaxprPtr()>& build);
/// Runs a plan of cj's jaxpr on concrete arguments (eval_jaxpr outside a trace): its raw plan when
/// raw_at_top_level accepts it, else run_plan_into.
std::vector<Array> run_plan(const EvalPlan& plan, const ClosedJaxpr& cj, std::span<const Array> args);
/// Runs the plan on the Array executor, writing the outputs into `result` (cleared first), so a
/// loop can reuse one vector (a scan body without a raw plan runs this way once per iteration).
void run_plan_into(const EvalPlan& plan, const ClosedJaxpr& cj, std::span<const Array> args, std::vector<Array>& result);
/// Entries in the side table, live or not yet swept (for tests).
std::size_t plan_table_size();

}  // namespace xjax::detail
