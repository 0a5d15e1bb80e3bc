// passes/dce.cpp: dead code elimination.
// dce : Jaxpr -> Jaxpr. Keeps the outputs marked used and the equations they need (walking
// backwards; every primitive is pure), drops constvars nothing reads. Inputs are kept so the
// signature does not change; *used_inputs says which are still read.
#include <algorithm>
#include <unordered_set>

#include "passes.hpp"

namespace xjax::detail {

// Only control_flow primitives have a DCE rule (stem##_dce); the rest are kept or dropped whole.
#define XJAX_DCE_float_unary(stem) nullptr
#define XJAX_DCE_numeric_unary(stem) nullptr
#define XJAX_DCE_power(stem) nullptr
#define XJAX_DCE_binary(stem) nullptr
#define XJAX_DCE_comparison(stem) nullptr
#define XJAX_DCE_structural(stem) nullptr
#define XJAX_DCE_collective(stem) nullptr
#define XJAX_DCE_factorization(stem) nullptr
#define XJAX_DCE_higher_order(stem) nullptr
#define XJAX_DCE_control_flow(stem) stem##_dce

DceRule dce_rule(Primitive p) {
  switch (p) {
#define XJAX_DCE_CASE(name, stem, S, family, kinds) \
  case Primitive::name: return XJAX_DCE_##family(stem);
    XJAX_PRIMITIVES(XJAX_DCE_CASE)
#undef XJAX_DCE_CASE
  }
  return nullptr;
}

ClosedJaxpr dce(const ClosedJaxpr& cj, const std::vector<bool>& used_outputs, std::vector<bool>* used_inputs) try {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_set<std::uint64_t> needed;
  auto out = std::make_shared<Jaxpr>();
  for (std::size_t k = 0; k < j.outvars.size(); ++k) {
    if (!used_outputs[k]) continue;
    out->outvars.push_back(j.outvars[k]);
    if (auto* v = std::get_if<Var>(&j.outvars[k])) needed.insert(v->id());
  }
  for (auto it = j.eqns.rbegin(); it != j.eqns.rend(); ++it) {
    std::vector<bool> used_out;
    for (const auto& v : it->outputs) used_out.push_back(needed.count(v.id()) > 0);
    if (std::none_of(used_out.begin(), used_out.end(), [](bool b) { return b; })) continue;
    if (DceRule rule = dce_rule(it->prim)) {
      // The rule may prune inside the primitive (e.g. a scan's unused carries and outputs).
      std::vector<bool> used_in;
      Eqn pruned = rule(*it, used_out, used_in);
      for (std::size_t i = 0; i < it->inputs.size(); ++i)
        if (auto* v = std::get_if<Var>(&it->inputs[i]); v && used_in[i]) needed.insert(v->id());
      out->eqns.push_back(std::move(pruned));
      continue;
    }
    for (const auto& in : it->inputs)
      if (auto* v = std::get_if<Var>(&in)) needed.insert(v->id());
    out->eqns.push_back(*it);
  }
  std::reverse(out->eqns.begin(), out->eqns.end());
  std::vector<Array> consts;
  for (std::size_t i = 0; i < j.constvars.size(); ++i)
    if (needed.count(j.constvars[i].id())) {
      out->constvars.push_back(j.constvars[i]);
      consts.push_back(cj.consts[i]);
    }
  out->invars = j.invars;
  if (used_inputs) {
    used_inputs->clear();
    for (const auto& v : j.invars) used_inputs->push_back(needed.count(v.id()) > 0);
  }
  return ClosedJaxpr{out, std::move(consts)};
} catch (...) {
  rethrow_internal("dce");
}

}  // namespace xjax::detail
