// interpreter.cpp: eval_jaxpr. Binds each equation in order; outside a trace that runs kernels,
// inside one it re-records the equations (inlining). Each value is dropped right after its last
// use, so a buffer is freed as soon as nothing later needs it.
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

std::vector<Array> eval_jaxpr(const ClosedJaxpr& cj, std::span<const Array> args) {
  const Jaxpr& j = *cj.jaxpr;
  check_args(j, args, cj.consts.size());

  // last_use[var id] = index of the last equation reading it (eqns.size() for outputs).
  std::unordered_map<std::uint64_t, std::size_t> last_use;
  for (std::size_t i = 0; i < j.eqns.size(); ++i)
    for (const auto& in : j.eqns[i].inputs)
      if (auto* v = std::get_if<Var>(&in)) last_use[v->id()] = i;
  for (const auto& o : j.outvars)
    if (auto* v = std::get_if<Var>(&o)) last_use[v->id()] = j.eqns.size();

  std::unordered_map<std::uint64_t, Array> env;
  auto put = [&](const Var& v, const Array& a) {
    if (last_use.count(v.id())) env[v.id()] = a;
  };
  auto read = [&](const Atom& a) -> Array {
    if (auto* l = std::get_if<Literal>(&a)) return l->value;
    return env.at(std::get<Var>(a).id());
  };
  for (std::size_t i = 0; i < j.constvars.size(); ++i) put(j.constvars[i], cj.consts[i]);
  for (std::size_t i = 0; i < j.invars.size(); ++i) put(j.invars[i], args[i]);

  std::vector<Array> ins;
  for (std::size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& e = j.eqns[i];
    ins.clear();
    for (const auto& a : e.inputs) ins.push_back(read(a));
    auto outs = detail::bind(e.prim, ins, e.params, e.loc);
    ins.clear();
    for (const auto& a : e.inputs)
      if (auto* v = std::get_if<Var>(&a); v && last_use[v->id()] == i) env.erase(v->id());
    for (std::size_t k = 0; k < outs.size(); ++k) put(e.outputs[k], outs[k]);
  }
  std::vector<Array> result;
  for (const auto& o : j.outvars) result.push_back(read(o));
  return result;
}

}  // namespace xjax
