// interpreter.cpp: eval_jaxpr. Outside a trace it runs the jaxpr's execution plan (plan.hpp: built
// once, then reused; each value is dropped right after its last use, so a buffer is freed as soon
// as nothing later needs it; a plan of small values runs raw instead, raw_plan.hpp, its values
// packed into one workspace by lifetime). Inside a trace it binds each equation, which re-records
// it into the trace (inlining).
#include <algorithm>
#include <unordered_map>

#include "kernels/kernels.hpp"
#include "loops/loops.hpp"
#include "internal.hpp"
#include "per_thread.hpp"
#include "plan.hpp"
#include "step_profile.hpp"

namespace xjax {

namespace detail {
namespace {
// outs with each output that is one of `in`'s own handles (a loop that ran no step returns its
// init; a body may pass a constant or a literal through) replaced by a new handle on its buffer,
// as eval_jaxpr renews its outputs: donating that output must not mark the operand (the caller's
// array, or a jaxpr's literal, every later call of the jit failing) donated too.
std::vector<Array> renewed_outputs(std::vector<Array> outs, std::span<const Array> in) {
  for (Array& o : outs)
    if (o.valid() && std::any_of(in.begin(), in.end(), [&](const Array& x) { return x.impl() == o.impl(); })) o = fresh_handle(o);
  return outs;
}
}  // namespace

// A family's impl rule: none for those evaluated by a kernel (KernelFn: one output); a
// factorization's kernel (several outputs) and a higher-order primitive's meaning otherwise
// (its outputs renewed where they are operands' handles).
#define XJAX_IMPL_float_unary(name, stem) nullptr
#define XJAX_IMPL_numeric_unary(name, stem) nullptr
#define XJAX_IMPL_power(name, stem) nullptr
#define XJAX_IMPL_binary(name, stem) nullptr
#define XJAX_IMPL_comparison(name, stem) nullptr
#define XJAX_IMPL_structural(name, stem) nullptr
#define XJAX_IMPL_collective(name, stem) nullptr
#define XJAX_IMPL_factorization(name, stem)                                                   \
  [](std::span<const Array> in, const Params& ps) {                                           \
    return kernels::run_widened(Primitive::name, in, [&](std::span<const Array> wide) {       \
      return kernels::stem##_kernel(wide, ps.get<params_of_t<Primitive::name>>());            \
    });                                                                                       \
  }
#define XJAX_IMPL_higher_order(name, stem)                                                      \
  [](std::span<const Array> in, const Params& ps) {                                           \
    return renewed_outputs(stem##_impl(in, ps.get<params_of_t<Primitive::name>>()), in);     \
  }
#define XJAX_IMPL_control_flow(name, stem) XJAX_IMPL_higher_order(name, stem)

ImplRule impl_rule(Primitive p) {
  switch (p) {
#define XJAX_IMPL_CASE(name, stem, S, family, kinds) \
  case Primitive::name: return XJAX_IMPL_##family(name, stem);
    XJAX_PRIMITIVES(XJAX_IMPL_CASE)
#undef XJAX_IMPL_CASE
  }
  return nullptr;
}
}  // namespace detail

namespace {

void check_args(const Jaxpr& j, std::span<const Array> args, std::span<const Array> consts) {
  if (consts.size() != j.constvars.size())
    throw TypeError("eval_jaxpr: " + std::to_string(consts.size()) + " consts for " +
                    std::to_string(j.constvars.size()) + " constvars");
  for (std::size_t i = 0; i < consts.size(); ++i)
    if (!consts[i].valid() || consts[i].aval() != j.constvars[i].aval())
      throw TypeError("eval_jaxpr: const " + std::to_string(i) + " is " +
                      (consts[i].valid() ? consts[i].aval().str() : std::string("empty")) +
                      ", the jaxpr's constvar is " + j.constvars[i].aval().str());
  if (args.size() != j.invars.size())
    throw TypeError("eval_jaxpr: " + std::to_string(args.size()) + " arguments for a jaxpr of " +
                    std::to_string(j.invars.size()) + " inputs");
  for (std::size_t i = 0; i < args.size(); ++i) detail::check_not_donated(args[i], "passed to a jitted function (or eval_jaxpr)");
  for (const Array& c : consts) detail::check_not_donated(c, "a constant of the jaxpr evaluated");
  for (std::size_t i = 0; i < args.size(); ++i)
    if (!args[i].valid() || args[i].aval() != j.invars[i].aval())
      throw TypeError("eval_jaxpr: argument " + std::to_string(i) + " is " +
                      (args[i].valid() ? args[i].aval().str() : std::string("empty")) +
                      ", the jaxpr expects " + j.invars[i].aval().str());
}

}  // namespace


namespace {

// Inside a trace (or with tracer operands): bind every equation, which records it into the
// innermost trace (inlining) or reports an escaped tracer.
std::vector<Array> eval_by_binding(const ClosedJaxpr& cj, std::span<const Array> args) {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_map<std::uint64_t, Array> env;
  for (std::size_t i = 0; i < cj.consts.size(); ++i) env[j.constvars[i].id()] = cj.consts[i];
  for (std::size_t i = 0; i < args.size(); ++i) env[j.invars[i].id()] = args[i];
  auto read = [&](const Atom& a) -> const Array& {
    if (auto* l = std::get_if<Literal>(&a)) return l->value;
    return env.at(std::get<Var>(a).id());
  };
  std::vector<Array> ins;
  for (const Eqn& e : j.eqns) {
    ins.clear();
    for (const auto& in : e.inputs) ins.push_back(read(in));
    auto outs = detail::bind(e.prim, ins, e.params, e.loc);
    for (std::size_t k = 0; k < outs.size(); ++k) env[e.outputs[k].id()] = std::move(outs[k]);
  }
  std::vector<Array> result;
  for (const auto& o : j.outvars) result.push_back(read(o));
  return result;
}

}  // namespace

namespace {

/// The working vectors of one run_plan call. Kept per thread and reused (a scan body's plan runs
/// once per iteration), so a run allocates no vectors; nested runs (a scan inside a scan) take
/// their own frame. A frame is emptied before it goes back, so it holds no array between runs.
struct PlanFrame {
  std::vector<Array> slots, ins, outs;
};

class FrameLease {
  using Pool = std::vector<std::unique_ptr<PlanFrame>>;

 public:
  FrameLease() {
    Pool* pool = detail::PerThread<Pool>::get();
    if (!pool || pool->empty()) frame_ = std::make_unique<PlanFrame>();
    else {
      frame_ = std::move(pool->back());
      pool->pop_back();
    }
  }
  ~FrameLease() {
    frame_->slots.clear();
    frame_->ins.clear();
    frame_->outs.clear();
    if (Pool* pool = detail::PerThread<Pool>::get()) {
      try {
        pool->push_back(std::move(frame_));
      } catch (const std::bad_alloc&) {  // out of memory: the frame is freed with the lease
      }
    }
  }
  FrameLease(const FrameLease&) = delete;
  FrameLease& operator=(const FrameLease&) = delete;
  PlanFrame& operator*() { return *frame_; }

 private:
  std::unique_ptr<PlanFrame> frame_;
};

}  // namespace

namespace {

// The steps of `plan` on a frame whose slots hold the consts and inputs already.
void run_steps(const detail::EvalPlan& plan, PlanFrame& frame, std::vector<Array>& result) {
  using detail::EvalPlan;
  std::vector<Array>& slots = frame.slots;
  auto put = [&](std::size_t s, Array a) {
    if (s != EvalPlan::npos) slots[s] = std::move(a);
  };
  auto read = [&](const EvalPlan::Operand& op) -> const Array& {
    return op.literal ? op.literal->value : slots[op.slot];
  };
  std::vector<Array>& ins = frame.ins;
  std::vector<Array>& outs = frame.outs;
  detail::StepTimer timer;
  for (const auto& st : plan.steps) {
    ins.clear();
    for (const auto& op : st.ins) ins.push_back(op.last_use ? std::move(slots[op.slot]) : read(op));
    timer.start();
    switch (st.kind) {
      case EvalPlan::Kind::kernel:
        outs.clear();
        outs.push_back(st.kernel(ins));
        break;
      case EvalPlan::Kind::impl:
        outs = st.owning_impl ? st.owning_impl(std::move(ins), st.eqn->params) : st.impl(ins, st.eqn->params);
        break;
      case EvalPlan::Kind::fused: detail::kernels::run_fused(*st.fused, ins, outs); break;
      case EvalPlan::Kind::call: run_plan_into(*st.body_plan, *st.body, ins, outs); break;
    }
    timer.stop(st.label);
    for (Primitive p : st.counted) detail::count_eval(p);
    ins.clear();
    for (auto s : st.free_after) slots[s] = Array();
    for (std::size_t k = 0; k < outs.size(); ++k) put(st.outs[k], std::move(outs[k]));
  }
  for (Primitive p : plan.inlined_calls) detail::count_eval(p);
  result.clear();
  // A literal output, or a value returned twice, comes back as a handle of its own: donating it
  // must leave the jaxpr's literal and the other output alone (XLA gives each output a buffer).
  for (const auto& op : plan.outs) result.push_back(op.literal || op.repeated ? detail::fresh_handle(read(op)) : read(op));
}

// Puts the consts, then the inputs (moved when `args` is owned), into their slots.
void load_slots(const detail::EvalPlan& plan, const ClosedJaxpr& cj, std::span<const Array> args, std::vector<Array>* owned,
                PlanFrame& frame) {
  frame.slots.resize(plan.num_slots);
  for (std::size_t i = 0; i < cj.consts.size(); ++i)
    if (plan.const_slots[i] != detail::EvalPlan::npos) frame.slots[plan.const_slots[i]] = cj.consts[i];
  for (std::size_t i = 0; i < args.size(); ++i)
    if (plan.in_slots[i] != detail::EvalPlan::npos)
      frame.slots[plan.in_slots[i]] = owned ? std::move((*owned)[i]) : args[i];
}

}  // namespace

// Outside any trace: run the jaxpr's cached execution plan.
void detail::run_plan_into(const detail::EvalPlan& plan, const ClosedJaxpr& cj, std::span<const Array> args,
                           std::vector<Array>& result) {
  FrameLease lease;
  load_slots(plan, cj, args, nullptr, *lease);
  run_steps(plan, *lease, result);
}

std::vector<Array> detail::run_plan(const detail::EvalPlan& plan, const ClosedJaxpr& cj, std::span<const Array> args) {
  if (plan.raw && detail::raw_at_top_level(*plan.raw)) return detail::run_raw_to_arrays(*plan.raw, cj.consts, args);
  std::vector<Array> result;
  run_plan_into(plan, cj, args, result);
  return result;
}

namespace {

bool any_tracer(std::span<const Array> xs) {
  return std::any_of(xs.begin(), xs.end(), [](const Array& x) { return x.is_tracer(); });
}

}  // namespace

void prepare(const ClosedJaxpr& cj) {
  (void)*cj;  // an Error for a ClosedJaxpr without a jaxpr
  (void)detail::checked_plan_of(cj.jaxpr);  // as eval_jaxpr: it may be built by hand
  for (const Eqn& e : cj.jaxpr->eqns)
    for (const auto& sub : sub_jaxprs(e.params))
      if (sub) prepare(*sub);
}

namespace {

// eval_jaxpr: inside a trace (or on tracers) bind every equation, else run cj's plan (the one
// given, or the plan table's).
// The handles of the arrays a run is given (its inputs and constants).
std::vector<const void*> handles_of(std::span<const Array> args, std::span<const Array> consts) {
  std::vector<const void*> given;
  for (const auto* xs : {&args, &consts})
    for (const Array& x : *xs) given.push_back(x.impl().get());
  return given;
}

// An output that is one of the given arrays' own handles (an input or constant passed through, a
// loop that ran no step) comes back as a new handle on its buffer: donating that output then
// leaves the caller's array and the jaxpr's constant alone (it marked them donated: a jit's
// constant failed every later call).
std::vector<Array> renewed(std::vector<Array> result, const std::vector<const void*>& given) {
  for (Array& r : result)
    if (r.valid() && std::find(given.begin(), given.end(), r.impl().get()) != given.end()) r = detail::fresh_handle(r);
  return result;
}

std::vector<Array> evaluate(const ClosedJaxpr& cj, const detail::EvalPlan* plan, std::span<const Array> args) try {
  check_args(*cj, args, cj.consts);  // (*cj: an Error for a ClosedJaxpr without a jaxpr)
  detail::LocationScope own_locations(nullptr);
  if (detail::tracing_active() || any_tracer(args) || any_tracer(cj.consts)) return eval_by_binding(cj, args);
  return renewed(detail::run_plan(plan ? *plan : *detail::checked_plan_of(cj.jaxpr), cj, args), handles_of(args, cj.consts));
} catch (...) {
  detail::rethrow_internal("eval_jaxpr");
}

}  // namespace

std::vector<Array> eval_jaxpr(const ClosedJaxpr& cj, std::span<const Array> args) { return evaluate(cj, nullptr, args); }

std::shared_ptr<const detail::EvalPlan> detail::plan_for_jit(const ClosedJaxpr& j) {
  prepare(j);
  return plan_of(j.jaxpr);
}

std::vector<Array> detail::eval_jaxpr_with_plan(const ClosedJaxpr& j, const EvalPlan& plan, std::span<const Array> args) {
  return evaluate(j, &plan, args);
}

std::vector<Array> detail::eval_jaxpr_consuming(const ClosedJaxpr& j, const EvalPlan& plan, std::vector<Array> args) try {
  if (detail::tracing_active() || any_tracer(args) || any_tracer(j.consts)) return evaluate(j, &plan, args);
  check_args(*j.jaxpr, args, j.consts);
  detail::LocationScope own_locations(nullptr);
  // The Array executor (not the raw plan, which places every output in fresh memory): each input
  // is handed to the plan, so a fused chain at the input's last use may write in its buffer.
  FrameLease lease;
  const std::vector<const void*> given = handles_of(args, j.consts);
  load_slots(plan, j, args, &args, *lease);
  args.clear();
  std::vector<Array> result;
  run_steps(plan, *lease, result);
  return renewed(std::move(result), given);
} catch (...) {
  detail::rethrow_internal("eval_jaxpr");
}

}  // namespace xjax
