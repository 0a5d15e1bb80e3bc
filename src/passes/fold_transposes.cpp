// passes/fold_transposes.cpp: transpose folding.
// fold_transposes : Jaxpr -> Jaxpr. Every `t = transpose[perm] x` that feeds a dot_general
// operand is folded into that dot: the dot reads x with its contracting and batch dims mapped
// through perm, which the dot kernel turns into GEMM transpose flags. Only when the operand's free
// dims keep their order (the dot's output layout is unchanged). A transpose left without readers
// is dropped. Same signature, same values; run by the planner before it plans.
#include <algorithm>
#include <unordered_map>

#include "kernels/kernels.hpp"
#include "passes.hpp"

namespace xjax::detail {
namespace {

using Ints = std::vector<std::int64_t>;

Ints mapped(const Ints& dims, const Ints& perm) {
  Ints out;
  for (auto d : dims) out.push_back(perm[static_cast<std::size_t>(d)]);
  return out;
}

}  // namespace

Jaxpr fold_transposes(const Jaxpr& j) {
  std::unordered_map<std::uint64_t, const Eqn*> transpose_of;  // t -> its transpose equation
  std::unordered_map<std::uint64_t, std::size_t> readers;
  for (const Eqn& e : j.eqns) {
    if (e.prim == Primitive::transpose) transpose_of[e.outputs[0].id()] = &e;
    for (const auto& in : e.inputs)
      if (auto* v = std::get_if<Var>(&in)) ++readers[v->id()];
  }
  for (const auto& o : j.outvars)
    if (auto* v = std::get_if<Var>(&o)) ++readers[v->id()];
  Jaxpr out{j.constvars, j.invars, {}, j.outvars};
  out.eqns.reserve(j.eqns.size());
  for (const Eqn& source : j.eqns) {
    Eqn e = source;
    if (e.prim == Primitive::dot_general)
      for (std::size_t side = 0; side < 2; ++side) {
        auto* v = std::get_if<Var>(&e.inputs[side]);
        if (!v) continue;
        auto it = transpose_of.find(v->id());
        if (it == transpose_of.end()) continue;
        const Eqn& t = *it->second;
        const Ints& perm = t.params.get<params::Transpose>().permutation;
        auto& dn = e.params.get<params::DotGeneral>();
        Ints& contracting = side == 0 ? dn.lhs_contracting : dn.rhs_contracting;
        Ints& batch = side == 0 ? dn.lhs_batch : dn.rhs_batch;
        Ints free = mapped(kernels::free_dims(static_cast<std::int64_t>(perm.size()), contracting, batch), perm);
        if (!std::is_sorted(free.begin(), free.end())) continue;
        contracting = mapped(contracting, perm);
        batch = mapped(batch, perm);
        --readers[v->id()];
        e.inputs[side] = t.inputs[0];  // (v pointed into it)
      }
    out.eqns.push_back(std::move(e));
  }
  std::erase_if(out.eqns, [&](const Eqn& e) { return e.prim == Primitive::transpose && readers[e.outputs[0].id()] == 0; });
  return out;
}

}  // namespace xjax::detail
