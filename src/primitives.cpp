// primitives.cpp: what primitives.hpp declares: the primitives' printed names.
#include "xjax/primitives.hpp"

#include <ostream>

namespace xjax {
namespace {
constexpr std::string_view without_trailing_underscore(std::string_view s) {
  return s.ends_with('_') ? s.substr(0, s.size() - 1) : s;
}
}  // namespace

std::string_view primitive_name(Primitive p) {
  switch (p) {
#define XJAX_NAME(name) \
  case Primitive::name: return without_trailing_underscore(#name);
    XJAX_FOR_EACH_PRIMITIVE(XJAX_NAME)
#undef XJAX_NAME
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, Primitive p) { return os << primitive_name(p); }

}  // namespace xjax
