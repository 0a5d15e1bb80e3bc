// passes/cse.cpp: common subexpression elimination.
// cse : Jaxpr -> Jaxpr. Two equations with the same primitive, parameters and operands compute
// the same values (every primitive is pure), so the later one is dropped and its outputs renamed
// to the earlier one's. Equations carrying prevent_cse=True (a checkpoint's recompute) are never
// merged. Keys are exact: a literal is its dtype, weak type and bit pattern (so 0.0 and -0.0 are
// different keys, and two NaNs are one key only when their bits agree: CSE never changes a result;
// nor a weak type, which decides promotion when the jaxpr is evaluated inside a trace). No
// parameter is a floating-point number; param_key's static_assert makes whoever adds one decide
// its key.
#include <bit>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "passes.hpp"
#include "param_reflect.hpp"

namespace xjax::detail {
namespace {

/// One parameter's identity: jaxprs and objects by address, numbers exactly.
template <class T> std::string param_key(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, params::Ints>) {
    for (auto x : v) os << x << ",";
  } else if constexpr (std::is_same_v<T, std::vector<ClosedJaxprPtr>>) {
    for (const auto& x : v) os << x.get() << ",";
  } else if constexpr (std::is_same_v<T, ClosedJaxprPtr> || std::is_same_v<T, params::Object>) {
    os << v.get();
  } else if constexpr (std::is_same_v<T, DType>) {
    os << dtype_name(v);
  } else {
    static_assert(std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::string>);
    os << v;
  }
  return os.str();
}

/// A rank-0 literal's identity: its dtype, whether it is weakly typed, and the bytes of its value,
/// in hex.
std::string literal_key(const Array& x) {
  const auto* bytes = static_cast<const unsigned char*>(x.raw_data());
  std::size_t n = x.aval().nbytes();
  static constexpr char hex[] = "0123456789abcdef";
  std::string key = x.aval().str() + (is_weak(x) ? "weak:" : ":");
  for (std::size_t i = 0; i < n; ++i) {
    key += hex[bytes[i] >> 4];
    key += hex[bytes[i] & 15];
  }
  return key;
}

bool prevents_cse(const Eqn& e) {
  const auto* c = e.params.get_if<params::Checkpoint>();
  return c && c->prevent_cse;
}

}  // namespace

ClosedJaxpr cse(const ClosedJaxpr& cj) {
  const Jaxpr& j = *cj.jaxpr;
  std::unordered_map<std::uint64_t, Var> rename;
  auto atom = [&](const Atom& a) -> Atom {
    if (auto* v = std::get_if<Var>(&a)) {
      auto it = rename.find(v->id());
      if (it != rename.end()) return it->second;
    }
    return a;
  };
  auto key_of_atom = [](const Atom& a) -> std::string {
    if (auto* v = std::get_if<Var>(&a)) return "v" + std::to_string(v->id());
    return "l" + literal_key(std::get<Literal>(a).value);
  };
  std::unordered_map<std::string, std::size_t> seen;  // key -> index in out->eqns
  auto out = std::make_shared<Jaxpr>();
  out->constvars = j.constvars;
  out->invars = j.invars;
  out->eqns.reserve(j.eqns.size());
  for (const Eqn& e0 : j.eqns) {
    Eqn e = e0;
    for (auto& in : e.inputs) in = atom(in);
    if (!prevents_cse(e)) {
      std::string key(primitive_name(e.prim));
      for_each_param(e.params, [&](std::string_view k, const auto& v) {
        key += "|";
        key += k;
        key += "=" + param_key(v);
      });
      for (const auto& in : e.inputs) key += " " + key_of_atom(in);
      auto [it, inserted] = seen.emplace(key, out->eqns.size());
      if (!inserted) {
        const Eqn& prev = out->eqns[it->second];
        for (std::size_t k = 0; k < e.outputs.size(); ++k) rename[e.outputs[k].id()] = prev.outputs[k];
        continue;
      }
    }
    out->eqns.push_back(std::move(e));
  }
  for (const auto& o : j.outvars) out->outvars.push_back(atom(o));
  return ClosedJaxpr{out, cj.consts};
}

}  // namespace xjax::detail
