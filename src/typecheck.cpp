// typecheck.cpp: typecheck : Jaxpr -> () (throws TypeError). Every variable is defined once
// before use with the type it is used at, and every equation's outputs are what its shape rule
// gives for its inputs. Sub-jaxprs in parameters are checked recursively.
#include <unordered_map>

#include "internal.hpp"

namespace xjax {
namespace {

[[noreturn]] void fail(const Eqn* e, const std::string& why) {
  std::string where_s = e ? std::string(" in equation ") + std::string(primitive_name(e->prim)) +
                                " (at " + format_location(e->loc) + ")"
                          : std::string();
  throw TypeError("typecheck failed" + where_s + ": " + why);
}

void check(const Jaxpr& j, bool scalar_literals);

void check_params(const Eqn& e, bool scalar_literals) {
  if (!params_match(e.prim, e.params))
    fail(&e, std::string("its parameters are params::") + detail::params_struct_name(e.params.index()) +
                 ", not the struct of " + std::string(primitive_name(e.prim)));
  for (const auto& sub : sub_jaxprs(e.params)) {
    if (!sub) continue;  // an optional body not given
    if (!sub->jaxpr) fail(&e, "a ClosedJaxpr in its parameters has no jaxpr");
    // a body's consts are read as its constvars' types (a shorter one was read past its end)
    if (sub->consts.size() != sub->jaxpr->constvars.size()) fail(&e, "a body has " + std::to_string(sub->consts.size()) + " consts for " + std::to_string(sub->jaxpr->constvars.size()) + " constvars");
    for (std::size_t i = 0; i < sub->consts.size(); ++i)
      if (!sub->consts[i].valid() || sub->consts[i].aval() != sub->jaxpr->constvars[i].aval())
        fail(&e, "a body's const " + std::to_string(i) + " is not of its constvar's type " + sub->jaxpr->constvars[i].aval().str());
    check(*sub->jaxpr, scalar_literals);
  }
}

// typecheck, and with scalar_literals false literals of any rank (the plans' inlining passes
// make array literals; the kernels read a literal by its own aval).
void check(const Jaxpr& j, bool scalar_literals) {
  std::unordered_map<std::uint64_t, ShapedArray> env;
  auto define = [&](const Var& v, const Eqn* e) {
    if (!v.valid()) fail(e, "an empty Var (default-constructed) is defined");
    if (!env.emplace(v.id(), v.aval()).second) fail(e, "variable defined twice");
  };
  auto use = [&](const Atom& a, const Eqn* e) {
    if (auto* v = std::get_if<Var>(&a)) {
      if (!v->valid()) fail(e, "an empty Var (default-constructed) is used");
      auto it = env.find(v->id());
      if (it == env.end()) fail(e, "variable of " + v->aval().str() + " used before definition");
      if (it->second != v->aval()) fail(e, "variable type mismatch");
    } else if (scalar_literals && std::get<Literal>(a).value.ndim() != 0) {
      fail(e, "literal of rank > 0");
    }
  };
  for (const auto& v : j.constvars) define(v, nullptr);
  for (const auto& v : j.invars) define(v, nullptr);
  for (const auto& e : j.eqns) {
    std::vector<ShapedArray> in;
    for (const auto& a : e.inputs) {
      use(a, &e);
      in.push_back(atom_aval(a));
    }
    check_params(e, scalar_literals);
    auto expect = detail::abstract_eval(e.prim, in, e.params);
    if (expect.size() != e.outputs.size()) fail(&e, "wrong number of outputs");
    for (std::size_t i = 0; i < expect.size(); ++i)
      if (expect[i] != e.outputs[i].aval())
        fail(&e, "output " + std::to_string(i) + " is " + e.outputs[i].aval().str() +
                     " but the shape rule gives " + expect[i].str());
    for (const auto& v : e.outputs) define(v, &e);
  }
  for (const auto& a : j.outvars) use(a, nullptr);
}

}  // namespace

void typecheck(const Jaxpr& j) { check(j, true); }

void detail::check_before_eval(const Jaxpr& j) { check(j, false); }

}  // namespace xjax
