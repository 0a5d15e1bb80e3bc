// jaxpr.cpp: what jaxpr.hpp declares about the IR's values: variables, atoms and a jaxpr's
// input/output types. (Parameters are in params.cpp, printing in printer.cpp, typecheck in
// typecheck.cpp, evaluation in interpreter.cpp, the plan side table in plan_cache.cpp.)
#include <atomic>

#include "xjax/jaxpr.hpp"

#include <string>

#include "xjax/errors.hpp"

namespace xjax {

Var::Var(ShapedArray aval) {
  static std::atomic<std::uint64_t> next_id{1};
  p_ = std::make_shared<const Impl>(Impl{std::move(aval), next_id.fetch_add(1)});
}

const ShapedArray& atom_aval(const Atom& a) {
  if (auto* v = std::get_if<Var>(&a)) return v->aval();
  return std::get<Literal>(a).value.aval();
}


void detail::no_jaxpr(const char* what) {
  throw Error(std::string("ClosedJaxpr::") + what + ": the ClosedJaxpr has no jaxpr (default-constructed)");
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
