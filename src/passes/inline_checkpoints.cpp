// passes/inline_checkpoints.cpp: checkpoint inlining.
// inline_checkpoints : Jaxpr -> Jaxpr. A checkpoint means "recompute under differentiation"
// only; evaluating it is evaluating its body. So each checkpoint whose body has no consts is
// replaced by its body's equations (recursively), its inputs read as the checkpoint's operands,
// every variable the body defines renamed to a fresh one (the same body may be inlined twice),
// and the checkpoint's results read as the body's outputs. Same signature, same values; run by
// the planner before it plans, so fusion and liveness see through checkpoints.
#include <algorithm>
#include <unordered_map>

#include "passes.hpp"

namespace xjax::detail {
namespace {

bool inlinable(const Eqn& e) {
  if (e.prim != Primitive::checkpoint) return false;
  const ClosedJaxpr& body = *e.params.get<params::Checkpoint>().jaxpr;
  return body.consts.empty() && !body.jaxpr->eqns.empty();
}

/// Appends to `out` the equations of j with their operands read through `subst` (variable id ->
/// atom), each inlinable checkpoint replaced by its body; returns j's outputs through `subst`.
std::vector<Atom> inline_into(const Jaxpr& j, std::unordered_map<std::uint64_t, Atom>& subst, std::vector<Eqn>& out,
                              std::vector<Primitive>* inlined, bool fresh_outputs) {
  auto read = [&](const Atom& a) -> Atom {
    if (const auto* v = std::get_if<Var>(&a))
      if (auto it = subst.find(v->id()); it != subst.end()) return it->second;
    return a;
  };
  for (const Eqn& e : j.eqns) {
    std::vector<Atom> ins;
    for (const auto& in : e.inputs) ins.push_back(read(in));
    if (inlinable(e)) {
      const Jaxpr& body = *e.params.get<params::Checkpoint>().jaxpr->jaxpr;
      std::unordered_map<std::uint64_t, Atom> inner;
      for (std::size_t k = 0; k < body.invars.size(); ++k) inner[body.invars[k].id()] = ins[k];
      std::vector<Atom> results = inline_into(body, inner, out, inlined, true);
      if (inlined) inlined->push_back(Primitive::checkpoint);
      for (std::size_t k = 0; k < e.outputs.size(); ++k) subst[e.outputs[k].id()] = results[k];
      continue;
    }
    Eqn copy{e.prim, std::move(ins), e.outputs, e.params, e.loc};
    if (fresh_outputs)
      for (auto& o : copy.outputs) {
        Var renamed(o.aval());
        subst[o.id()] = renamed;
        o = renamed;
      }
    out.push_back(std::move(copy));
  }
  std::vector<Atom> outs;
  for (const auto& o : j.outvars) outs.push_back(read(o));
  return outs;
}

}  // namespace

bool has_inlinable_checkpoint(const Jaxpr& j) { return std::any_of(j.eqns.begin(), j.eqns.end(), inlinable); }

Jaxpr inline_checkpoints(const Jaxpr& j, std::vector<Primitive>* inlined) {
  Jaxpr out{j.constvars, j.invars, {}, {}};
  std::unordered_map<std::uint64_t, Atom> subst;
  out.outvars = inline_into(j, subst, out.eqns, inlined, false);
  return out;
}

}  // namespace xjax::detail
