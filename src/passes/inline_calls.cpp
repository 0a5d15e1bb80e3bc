// passes/inline_calls.cpp: call inlining.
// inline_calls : Jaxpr -> Jaxpr. A checkpoint means "recompute under differentiation" only, and a
// custom_jvp_call / custom_vjp_call only "differentiate by this rule": evaluating any of them is
// evaluating the jaxpr it calls. So each such call whose jaxpr has no consts is replaced by that
// jaxpr's equations (recursively), its inputs read as the call's operands, every variable the
// body defines renamed to a fresh one (the same body may be inlined twice), and the call's
// results read as the body's outputs. Same signature, same values; run by the planner before it
// plans, so fusion and liveness see through checkpoints and custom rules (relu, gelu, softmax).
#include <algorithm>
#include <unordered_map>

#include "passes.hpp"

namespace xjax::detail {
namespace {

bool inlinable(const Eqn& e) {
  const ClosedJaxpr* body = called_jaxpr(e);
  return body && body->consts.empty() && !body->jaxpr->eqns.empty();
}

/// Appends to `out` the equations of j with their operands read through `subst` (variable id ->
/// atom), each inlinable call replaced by its body; returns j's outputs through `subst`.
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
      const Jaxpr& body = *called_jaxpr(e)->jaxpr;
      std::unordered_map<std::uint64_t, Atom> inner;
      for (std::size_t k = 0; k < body.invars.size(); ++k) inner[body.invars[k].id()] = ins[k];
      std::vector<Atom> results = inline_into(body, inner, out, inlined, true);
      if (inlined) inlined->push_back(e.prim);
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

const ClosedJaxpr* called_jaxpr(const Eqn& e) {
  if (e.prim == Primitive::checkpoint) return e.params.get<params::Checkpoint>().jaxpr.get();
  if (e.prim == Primitive::custom_jvp_call) return e.params.get<params::CustomJvpCall>().call_jaxpr.get();
  if (e.prim == Primitive::custom_vjp_call) return e.params.get<params::CustomVjpCall>().call_jaxpr.get();
  return nullptr;
}

bool has_inlinable_call(const Jaxpr& j) { return std::any_of(j.eqns.begin(), j.eqns.end(), inlinable); }

Jaxpr inline_calls(const Jaxpr& j, std::vector<Primitive>* inlined) {
  Jaxpr out{j.constvars, j.invars, {}, {}};
  std::unordered_map<std::uint64_t, Atom> subst;
  out.outvars = inline_into(j, subst, out.eqns, inlined, false);
  return out;
}

}  // namespace xjax::detail
