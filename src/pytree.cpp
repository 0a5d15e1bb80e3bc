// pytree.cpp: the non-template parts of pytrees.
#include "xjax/pytree.hpp"

namespace xjax {

namespace detail {
void tree_mismatch(const std::string& what) { throw Error(what); }
}  // namespace detail

std::string TreeDef::str() const {
  switch (kind) {
    case Kind::leaf: return "*";
    case Kind::none: return "None";
    case Kind::node: break;
  }
  std::string s = "(";
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (i) s += ", ";
    if (i < keys.size()) s += keys[i] + ": ";
    s += children[i].str();
  }
  return s + ")";
}

}  // namespace xjax
