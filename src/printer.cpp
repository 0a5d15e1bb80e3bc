// printer.cpp: JAX's text form of jaxprs.
//   { lambda consts ; invars. let
//       outs = prim[param=value ...] inputs
//     in (outvars) }
// Variables are named a, b, ..., z, ba, bb, ... in order of definition; one naming context is
// shared by nested jaxprs. A jaxpr without nested jaxprs that fits in 80 columns prints on one line.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "internal.hpp"
#include "param_reflect.hpp"

namespace xjax {

namespace detail {
std::string var_name(std::size_t index) {
  // bijective base 26 without 'a' as a leading digit beyond one letter: a..z, ba..bz, ca..
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('a' + index % 26));
    index /= 26;
  } while (index > 0);
  return s;
}

std::string describe_application(Primitive p, std::span<const ShapedArray> in) {
  std::string s(primitive_name(p));
  s += "(";
  for (std::size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + in[i].str();
  return s + ")";
}
}  // namespace detail

namespace {

std::string numpy_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u32: return "uint32";
    case DType::bool_: return "bool";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::i16: return "int16";
    case DType::u16: return "uint16";
    case DType::u64: return "uint64";
  }
  return "?";
}

// Python's repr of a float (what JAX prints for a numpy scalar): the shortest digits that round
// trip in the value's own precision, positional for 1e-4 <= |v| < 1e16, else scientific.
std::string python_float_repr(double v, bool single) {
  char buf[64];
  auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific)
                  : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // e.g. "-4.4715e-02"
  bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  auto e = s.find('e');
  int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    auto point = static_cast<std::size_t>(exp + 1);
    if (exp < 0) out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    else if (digits.size() <= point) out = digits + std::string(point - digits.size(), '0') + ".0";
    else out = digits.substr(0, point) + "." + digits.substr(point);
  } else {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : std::string());
    std::string e_digits = std::to_string(exp < 0 ? -exp : exp);
    out += std::string("e") + (exp < 0 ? "-" : "+") + (e_digits.size() < 2 ? "0" : "") + e_digits;
  }
  return (negative ? "-" : "") + out;
}

// The shortest decimal form (up to 17 significant digits) that reads back as the same bf16 / f16
// value: what JAX prints for those types.
std::string narrow_float_repr(double v, DType d) {
  for (int digits = 1; digits <= 17; ++digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    const double back = std::strtod(buf, nullptr);
    const bool same = d == bf16 ? bfloat16_t(back).bits == bfloat16_t(v).bits : float16_t(back).bits == float16_t(v).bits;
    if (same) return python_float_repr(back, false);
  }
  return python_float_repr(v, false);
}

std::string format_number(const Array& x) {
  const DType d = x.dtype();
  // 64-bit integers exactly (through a double 2^53 + 1 printed rounded, INT64_MAX negative)
  if (d == u64) return std::to_string(x.to_vector<std::uint64_t>()[0]);
  if (d == i64) return std::to_string(x.to_vector<std::int64_t>()[0]);
  const double v = x.item<double>();
  if (d == bool_) return v != 0 ? "True" : "False";
  if (!is_floating(d)) return std::to_string(static_cast<std::int64_t>(v));
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  if (d == bf16 || d == f16) return narrow_float_repr(v, d);
  return python_float_repr(v, d == f32);
}

class Printer {
 public:
  std::string name(const Var& v) {
    auto it = names_.find(v.id());
    if (it != names_.end()) return it->second;
    return names_[v.id()] = detail::var_name(next_++);
  }
  std::string typed(const Var& v) { return name(v) + ":" + v.aval().str(); }
  std::string atom(const Atom& a) {
    if (auto* v = std::get_if<Var>(&a)) return name(*v);
    const Array& x = std::get<Literal>(a).value;
    return format_number(x) + ":" + x.aval().str();
  }

  std::string jaxpr(const Jaxpr& j, int indent) {
    std::string head = "{ lambda ";
    for (std::size_t i = 0; i < j.constvars.size(); ++i) head += (i ? " " : "") + typed(j.constvars[i]);
    head += j.constvars.empty() ? "; " : "; ";
    for (std::size_t i = 0; i < j.invars.size(); ++i) head += (i ? " " : "") + typed(j.invars[i]);
    head += ". let";
    std::vector<std::string> lines;
    bool nested = false;
    for (const auto& e : j.eqns) lines.push_back(eqn(e, indent + 4, nested));
    std::string tail = "in (";
    for (std::size_t i = 0; i < j.outvars.size(); ++i) tail += (i ? ", " : "") + atom(j.outvars[i]);
    tail += j.outvars.size() == 1 ? ",) }" : ") }";

    std::string one_line = head;
    for (const auto& l : lines) one_line += " " + l;
    one_line += (lines.empty() ? "  " : " ") + tail;  // JAX: "let  in" when there are no equations
    if (!nested && lines.size() <= 1 && one_line.size() + static_cast<std::size_t>(indent) <= 80)
      return one_line;
    std::string pad(static_cast<std::size_t>(indent), ' ');
    std::string out = head + "\n";
    for (const auto& l : lines) out += pad + "    " + l + "\n";
    return out + pad + "  " + tail;
  }

 private:
  template <class T> std::string param(const T& v, int indent, bool& nested) {
    if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
    else if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(v);
    else if constexpr (std::is_same_v<T, std::string>) return v;
    else if constexpr (std::is_same_v<T, DType>) return numpy_dtype_name(v);
    else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
      std::string s = "(";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + (v.size() == 1 ? ",)" : ")");
    } else if constexpr (std::is_same_v<T, ClosedJaxprPtr>) {
      nested = true;
      return jaxpr(*v->jaxpr, indent + 2);
    } else if constexpr (std::is_same_v<T, std::vector<ClosedJaxprPtr>>) {
      nested = true;
      std::string s = "(\n";
      for (const auto& b : v)
        s += std::string(static_cast<std::size_t>(indent + 4), ' ') + jaxpr(*b->jaxpr, indent + 4) + "\n";
      return s + std::string(static_cast<std::size_t>(indent + 2), ' ') + ")";
    } else {
      static_assert(std::is_same_v<T, params::Object>, "a parameter type the printer does not know");
      return v ? v->repr() : "None";
    }
  }

  std::string eqn(const Eqn& e, int indent, bool& nested) {
    std::string lhs;
    for (std::size_t i = 0; i < e.outputs.size(); ++i) lhs += (i ? " " : "") + typed(e.outputs[i]);
    bool eqn_nested = false;
    // Sorted by name, as JAX prints them; formatted in that order, since nested jaxprs share the
    // variable names.
    std::vector<std::pair<std::string_view, std::function<std::string()>>> named;
    detail::for_each_param(e.params, [&](std::string_view k, const auto& v) {
      named.emplace_back(k, [&, value = &v] { return param(*value, indent, eqn_nested); });
    });
    std::sort(named.begin(), named.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<std::string> ps;
    for (const auto& [k, format] : named) ps.push_back(std::string(k) + "=" + format());
    // JAX prints an equation without outputs as just its right-hand side.
    std::string s = (lhs.empty() ? std::string() : lhs + " = ") + std::string(primitive_name(e.prim));
    if (!ps.empty()) {
      if (eqn_nested) {
        nested = true;
        std::string pad(static_cast<std::size_t>(indent + 2), ' ');
        s += "[\n";
        for (const auto& p : ps) s += pad + p + "\n";
        s += std::string(static_cast<std::size_t>(indent), ' ') + "]";
      } else {
        s += "[";
        for (std::size_t i = 0; i < ps.size(); ++i) s += (i ? " " : "") + ps[i];
        s += "]";
      }
    }
    for (const auto& a : e.inputs) s += " " + atom(a);
    return s;
  }

  std::unordered_map<std::uint64_t, std::string> names_;
  std::size_t next_ = 0;
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Jaxpr& j) {
  Printer p;
  return os << p.jaxpr(j, 0);
}

std::ostream& operator<<(std::ostream& os, const ClosedJaxpr& j) { return os << *j; }

std::string ClosedJaxpr::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

}  // namespace xjax
