// passes/dce.cpp: dead code elimination.
// dce : Jaxpr -> Jaxpr. Keeps the outputs marked used and the equations they need (walking
// backwards; every primitive is pure), drops constvars nothing reads. Inputs are kept so the
// signature does not change; *used_inputs says which are still read. When nothing is dropped it
// returns its argument (the same shared jaxpr: jaxprs are immutable), not a copy.
#include <algorithm>
#include <unordered_set>

#include "passes.hpp"

namespace xjax::detail {

// Only control_flow primitives have a DCE rule (stem##_dce), and of the higher-order ones the
// scheduled loops' halves; the rest are kept or dropped whole.
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
  if (p == Primitive::revolve_fwd) return revolve_fwd_dce;
  if (p == Primitive::revolve_lin) return revolve_lin_dce;
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
  needed.reserve(2 * j.eqns.size() + j.outvars.size());
  for (std::size_t k = 0; k < j.outvars.size(); ++k)
    if (auto* v = std::get_if<Var>(&j.outvars[k]); v && used_outputs[k]) needed.insert(v->id());
  // Backwards: which equations stay, and the control-flow ones their rules pruned.
  std::vector<char> kept(j.eqns.size(), 0);
  std::vector<std::pair<std::size_t, Eqn>> pruned;
  std::vector<bool> used_out, used_in;
  for (std::size_t i = j.eqns.size(); i-- > 0;) {
    const Eqn& e = j.eqns[i];
    used_out.clear();
    for (const auto& v : e.outputs) used_out.push_back(needed.count(v.id()) > 0);
    if (std::none_of(used_out.begin(), used_out.end(), [](bool b) { return b; })) continue;
    kept[i] = 1;
    if (DceRule rule = dce_rule(e.prim)) {
      // A control-flow primitive prunes its own body and reports which inputs stay read.
      used_in.clear();
      pruned.emplace_back(i, rule(e, used_out, used_in));
      for (std::size_t k = 0; k < e.inputs.size(); ++k)
        if (auto* v = std::get_if<Var>(&e.inputs[k]); v && used_in[k]) needed.insert(v->id());
      continue;
    }
    for (const auto& in : e.inputs)
      if (auto* v = std::get_if<Var>(&in)) needed.insert(v->id());
  }
  if (used_inputs) {
    used_inputs->clear();
    for (const auto& v : j.invars) used_inputs->push_back(needed.count(v.id()) > 0);
  }
  const auto all = [](const auto& flags) { return std::all_of(flags.begin(), flags.end(), [](auto b) { return bool(b); }); };
  const bool consts_read = std::all_of(j.constvars.begin(), j.constvars.end(), [&](const Var& v) { return needed.count(v.id()) > 0; });
  // Nothing to drop: the same (immutable) jaxpr, not a copy of it.
  if (pruned.empty() && all(kept) && all(used_outputs) && consts_read) return cj;
  auto out = std::make_shared<Jaxpr>();
  for (std::size_t k = 0; k < j.outvars.size(); ++k)
    if (used_outputs[k]) out->outvars.push_back(j.outvars[k]);
  out->eqns.reserve(static_cast<std::size_t>(std::count(kept.begin(), kept.end(), 1)));
  auto next_pruned = pruned.rbegin();  // pruned holds descending indices
  for (std::size_t i = 0; i < j.eqns.size(); ++i) {
    if (!kept[i]) continue;
    if (next_pruned != pruned.rend() && next_pruned->first == i) out->eqns.push_back(std::move((next_pruned++)->second));
    else out->eqns.push_back(j.eqns[i]);
  }
  std::vector<Array> consts;
  for (std::size_t i = 0; i < j.constvars.size(); ++i)
    if (needed.count(j.constvars[i].id())) {
      out->constvars.push_back(j.constvars[i]);
      consts.push_back(cj.consts[i]);
    }
  out->invars = j.invars;
  return ClosedJaxpr{out, std::move(consts)};
} catch (...) {
  rethrow_internal("dce");
}

}  // namespace xjax::detail
