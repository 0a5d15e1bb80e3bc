// dce.cpp: dead code elimination.
// dce : Jaxpr -> Jaxpr. Keeps the outputs marked used and the equations they need (walking
// backwards; every primitive is pure), drops constvars nothing reads. Inputs are kept so the
// signature does not change; *used_inputs says which are still read.
#include <algorithm>
#include <unordered_set>

#include "ad.hpp"

namespace xjax::detail {

ClosedJaxpr dce(const ClosedJaxpr& cj, const std::vector<bool>& used_outputs, std::vector<bool>* used_inputs) {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_set<std::uint64_t> needed;
  auto out = std::make_shared<Jaxpr>();
  for (std::size_t k = 0; k < j.outvars.size(); ++k) {
    if (!used_outputs[k]) continue;
    out->outvars.push_back(j.outvars[k]);
    if (auto* v = std::get_if<Var>(&j.outvars[k])) needed.insert(v->id());
  }
  for (auto it = j.eqns.rbegin(); it != j.eqns.rend(); ++it) {
    bool used = std::any_of(it->outputs.begin(), it->outputs.end(), [&](const Var& v) { return needed.count(v.id()); });
    if (!used) continue;
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
}

}  // namespace xjax::detail
