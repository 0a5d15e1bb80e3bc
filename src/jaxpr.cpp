// jaxpr.cpp: what jaxpr.hpp declares about the IR's values: variables, atoms, parameter access
// and a jaxpr's input/output types. (Printing is in printer.cpp, typecheck in typecheck.cpp,
// evaluation and the plan cache in interpreter.cpp.)
#include <atomic>

#include "xjax/jaxpr.hpp"

namespace xjax {

Var::Var(ShapedArray aval) {
  static std::atomic<std::uint64_t> next_id{1};
  p_ = std::make_shared<const Impl>(Impl{std::move(aval), next_id.fetch_add(1)});
}

const ShapedArray& atom_aval(const Atom& a) {
  if (auto* v = std::get_if<Var>(&a)) return v->aval();
  return std::get<Literal>(a).value.aval();
}

std::int64_t param_int(const Params& ps, std::string_view name) { return param<std::int64_t>(ps, name); }
const std::vector<std::int64_t>& param_ints(const Params& ps, std::string_view name) {
  return param<std::vector<std::int64_t>>(ps, name);
}

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

}  // namespace xjax
