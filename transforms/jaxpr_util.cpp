// jaxpr_util.cpp: small structural edits of jaxprs shared by the higher-order primitives' rules
// (reordering and pruning inputs, inlining with fresh variables).
#include <unordered_map>
#include <unordered_set>

#include "higher_order.hpp"

namespace xjax::detail {

ClosedJaxpr permute_invars(const ClosedJaxpr& j, const std::vector<std::size_t>& order) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->invars.clear();
  for (auto i : order) out->invars.push_back(j->invars.at(i));
  return ClosedJaxpr{out, j.consts};
}

ClosedJaxpr permute_outvars(const ClosedJaxpr& j, const std::vector<std::size_t>& order) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->outvars.clear();
  for (auto i : order) out->outvars.push_back(j->outvars.at(i));
  return ClosedJaxpr{out, j.consts};
}

ClosedJaxpr prune_invars(const ClosedJaxpr& j, const std::vector<bool>& keep) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->invars.clear();
  std::unordered_set<std::uint64_t> dropped;
  for (std::size_t i = 0; i < keep.size(); ++i) {
    if (keep[i]) out->invars.push_back(j->invars[i]);
    else dropped.insert(j->invars[i].id());
  }
  auto check = [&](const Atom& a) {
    if (auto* v = std::get_if<Var>(&a); v && dropped.count(v->id()))
      throw InternalError("prune_invars", "an input of type " + v->aval().str() + " is dropped but still read");
  };
  if (!dropped.empty()) {
    for (const Eqn& e : j->eqns)
      for (const auto& in : e.inputs) check(in);
    for (const auto& o : j->outvars) check(o);
  }
  return ClosedJaxpr{out, j.consts};
}

std::vector<Atom> inline_jaxpr(const Jaxpr& j, std::span<const Atom> inputs, std::vector<Eqn>& out) {
  std::unordered_map<std::uint64_t, Atom> env;
  for (std::size_t i = 0; i < j.invars.size(); ++i) env.emplace(j.invars[i].id(), inputs[i]);
  auto sub = [&](const Atom& a) -> Atom {
    if (auto* v = std::get_if<Var>(&a)) return env.at(v->id());
    return a;
  };
  for (const Eqn& e : j.eqns) {
    Eqn c = e;
    for (auto& in : c.inputs) in = sub(in);
    for (auto& o : c.outputs) {
      Var fresh(o.aval());
      env.emplace(o.id(), fresh);
      o = fresh;
    }
    out.push_back(std::move(c));
  }
  std::vector<Atom> result;
  for (const auto& o : j.outvars) result.push_back(sub(o));
  return result;
}

}  // namespace xjax::detail
