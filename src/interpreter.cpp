// interpreter.cpp: eval_jaxpr. Binds each equation in order; outside a trace that runs kernels,
// inside one it re-records the equations (inlining). Each value is dropped right after its last
// use, so a buffer is freed as soon as nothing later needs it.
#include <algorithm>
#include <unordered_map>

#include "higher_order.hpp"
#include "internal.hpp"

namespace xjax {

namespace detail {
ImplRule impl_rule(Primitive p) {
  switch (p) {
#define XJAX_KERNEL_PRIMITIVE(name) case Primitive::name:
    XJAX_FOR_EACH_FIRST_ORDER_PRIMITIVE(XJAX_KERNEL_PRIMITIVE)
#undef XJAX_KERNEL_PRIMITIVE
    return nullptr;
#define XJAX_IMPL_CASE(name) \
  case Primitive::name: return name##_impl;
    XJAX_FOR_EACH_HIGHER_ORDER_PRIMITIVE(XJAX_IMPL_CASE)
#undef XJAX_IMPL_CASE
  }
  return nullptr;
}
}  // namespace detail

std::vector<ShapedArray> Jaxpr::in_avals() const {
  std::vector<ShapedArray> out;
  for (const auto& v : invars) out.push_back(v.aval());
  return out;
}

std::vector<ShapedArray> Jaxpr::out_avals() const {
  std::vector<ShapedArray> out;
  for (const auto& a : outvars) out.push_back(atom_aval(a));
  return out;
}

namespace {

void check_args(const Jaxpr& j, std::span<const Array> args, std::size_t nconsts) {
  if (nconsts != j.constvars.size())
    throw TypeError("eval_jaxpr: " + std::to_string(nconsts) + " consts for " +
                    std::to_string(j.constvars.size()) + " constvars");
  if (args.size() != j.invars.size())
    throw TypeError("eval_jaxpr: " + std::to_string(args.size()) + " arguments for a jaxpr of " +
                    std::to_string(j.invars.size()) + " inputs");
  for (std::size_t i = 0; i < args.size(); ++i)
    if (!args[i].valid() || args[i].aval() != j.invars[i].aval())
      throw TypeError("eval_jaxpr: argument " + std::to_string(i) + " is " +
                      (args[i].valid() ? args[i].aval().str() : std::string("empty")) +
                      ", the jaxpr expects " + j.invars[i].aval().str());
}

}  // namespace

namespace detail {

/// Slots for every variable, literal operands inline, and after each equation the slots whose
/// last use it was: evaluation frees each value as soon as nothing later reads it.
struct EvalPlan {
  struct Operand {
    std::size_t slot = 0;
    const Literal* literal = nullptr;
  };
  struct Step {
    std::vector<Operand> ins;
    std::vector<std::size_t> outs;        // npos: output never read
    std::vector<std::size_t> free_after;  // slots to drop after this step
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t num_slots = 0;
  std::vector<std::size_t> const_slots, in_slots;  // npos: never read
  std::vector<Step> steps;
  std::vector<Operand> outs;
};

namespace {
std::shared_ptr<const EvalPlan> make_plan(const Jaxpr& j) {
  auto plan = std::make_shared<EvalPlan>();
  std::unordered_map<std::uint64_t, std::size_t> last_use;
  for (std::size_t i = 0; i < j.eqns.size(); ++i)
    for (const auto& in : j.eqns[i].inputs)
      if (auto* v = std::get_if<Var>(&in)) last_use[v->id()] = i;
  for (const auto& o : j.outvars)
    if (auto* v = std::get_if<Var>(&o)) last_use[v->id()] = j.eqns.size();
  std::unordered_map<std::uint64_t, std::size_t> slot;
  auto define = [&](const Var& v) {
    if (!last_use.count(v.id())) return EvalPlan::npos;
    return slot[v.id()] = plan->num_slots++;
  };
  auto operand = [&](const Atom& a) {
    EvalPlan::Operand op;
    if (auto* l = std::get_if<Literal>(&a)) op.literal = l;
    else op.slot = slot.at(std::get<Var>(a).id());
    return op;
  };
  for (const auto& v : j.constvars) plan->const_slots.push_back(define(v));
  for (const auto& v : j.invars) plan->in_slots.push_back(define(v));
  for (std::size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& e = j.eqns[i];
    EvalPlan::Step st;
    for (const auto& in : e.inputs) st.ins.push_back(operand(in));
    for (const auto& in : e.inputs)
      if (auto* v = std::get_if<Var>(&in); v && last_use[v->id()] == i) {
        std::size_t s = slot.at(v->id());
        if (std::find(st.free_after.begin(), st.free_after.end(), s) == st.free_after.end()) st.free_after.push_back(s);
      }
    for (const auto& o : e.outputs) st.outs.push_back(define(o));
    plan->steps.push_back(std::move(st));
  }
  for (const auto& o : j.outvars) plan->outs.push_back(operand(o));
  return plan;
}
}  // namespace

const EvalPlan& PlanCache::get(const Jaxpr& j) const {
  std::call_once(once_, [&] { plan_ = make_plan(j); });
  return *plan_;
}

}  // namespace detail

std::vector<Array> eval_jaxpr(const ClosedJaxpr& cj, std::span<const Array> args) {
  const Jaxpr& j = *cj.jaxpr;
  check_args(j, args, cj.consts.size());
  const detail::EvalPlan& plan = j.plan.get(j);
  detail::LocationScope own_locations(nullptr);
  std::vector<Array> slots(plan.num_slots);
  auto put = [&](std::size_t s, const Array& a) {
    if (s != detail::EvalPlan::npos) slots[s] = a;
  };
  auto read = [&](const detail::EvalPlan::Operand& op) -> const Array& {
    return op.literal ? op.literal->value : slots[op.slot];
  };
  for (std::size_t i = 0; i < cj.consts.size(); ++i) put(plan.const_slots[i], cj.consts[i]);
  for (std::size_t i = 0; i < args.size(); ++i) put(plan.in_slots[i], args[i]);
  std::vector<Array> ins;
  for (std::size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& e = j.eqns[i];
    const auto& st = plan.steps[i];
    ins.clear();
    for (const auto& op : st.ins) ins.push_back(read(op));
    auto outs = detail::bind(e.prim, ins, e.params, e.loc);
    ins.clear();
    for (auto s : st.free_after) slots[s] = Array();
    for (std::size_t k = 0; k < outs.size(); ++k) put(st.outs[k], outs[k]);
  }
  std::vector<Array> result;
  for (const auto& op : plan.outs) result.push_back(read(op));
  return result;
}

}  // namespace xjax
