// pytree.cpp: the non-template parts of pytrees.
#include "xjax/pytree.hpp"

#include "xjax/detail/flat.hpp"

namespace xjax {

TreeDef::TreeDef() = default;
TreeDef::TreeDef(const TreeDef&) = default;
TreeDef::TreeDef(TreeDef&&) noexcept = default;
TreeDef& TreeDef::operator=(const TreeDef&) = default;
TreeDef& TreeDef::operator=(TreeDef&&) noexcept = default;
TreeDef::~TreeDef() = default;
bool operator==(const TreeDef&, const TreeDef&) = default;  // memberwise, declared a friend in pytree.hpp

std::size_t TreeDef::num_leaves() const {
  if (kind == Kind::leaf) return 1;
  std::size_t n = 0;
  for (const auto& c : children) n += c.num_leaves();
  return n;
}

namespace detail {
void tree_mismatch(const std::string& what) { throw Error(what); }

void check_leaf_count(const char* what, const TreeDef& def, std::size_t n) {
  if (n != def.num_leaves())
    tree_mismatch(std::string(what) + ": " + std::to_string(n) + " leaves for a tree of " + std::to_string(def.num_leaves()));
}

void expect_node(const TreeDef& def, TreeDef::Keyed keyed, std::size_t children, const char* type) {
  if (def.kind == TreeDef::Kind::node && def.keyed == keyed && (children == std::string::npos || def.children.size() == children) &&
      def.keys.size() == (keyed == TreeDef::Keyed::position ? 0 : def.children.size()))
    return;
  const std::string count = children == std::string::npos ? "" : " of " + std::to_string(children);
  tree_mismatch(std::string("tree_unflatten: ") + type + count + " where the structure has " + def.str());
}

void expect_member(const TreeDef& def, std::size_t i, const char* name) {
  if (def.keys.at(i) != name)
    tree_mismatch("tree_unflatten: a struct's member " + std::to_string(i) + " is ." + name + ", the structure's ." + def.keys.at(i));
}

std::string child_key(const TreeDef& def, std::size_t i) {
  switch (def.keyed) {
    case TreeDef::Keyed::position: break;
    case TreeDef::Keyed::map_key: return "['" + def.keys.at(i) + "']";
    case TreeDef::Keyed::member: return "." + def.keys.at(i);
  }
  return "[" + std::to_string(i) + "]";
}

namespace {
std::string kind_str(const TreeDef& d) {
  if (d.kind == TreeDef::Kind::leaf) return "a leaf";
  if (d.kind == TreeDef::Kind::none) return "None";
  switch (d.keyed) {
    case TreeDef::Keyed::position: break;
    case TreeDef::Keyed::map_key: return "a map " + d.str();
    case TreeDef::Keyed::member: return "a struct " + d.str();
  }
  return "a sequence of " + std::to_string(d.children.size()) + " " + d.str();
}

std::string keys_str(const std::vector<std::string>& keys) {
  std::string s = "{";
  for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s + "}";
}
}  // namespace

TreeDef compose_tree(const TreeDef& outer, const TreeDef& inner) {
  if (outer.kind == TreeDef::Kind::leaf) return inner;
  TreeDef out = outer;
  for (auto& c : out.children) c = compose_tree(c, inner);
  return out;
}

std::string tree_difference(const TreeDef& a, const TreeDef& b, const std::string& prefix) {
  const std::string at = "at " + (prefix.empty() ? std::string("the root") : prefix) + ": ";
  if (a.kind != b.kind || a.keyed != b.keyed || a.children.size() != b.children.size())
    return at + kind_str(a) + " against " + kind_str(b);
  if (a.keys != b.keys) return at + "keys " + keys_str(a.keys) + " against " + keys_str(b.keys);
  for (std::size_t i = 0; i < a.children.size(); ++i) {
    std::string d = tree_difference(a.children[i], b.children[i], prefix + child_key(a, i));
    if (!d.empty()) return d;
  }
  return "";
}

std::string tree_key(const TreeDef& def) {
  if (def.kind == TreeDef::Kind::leaf) return "*";
  if (def.kind == TreeDef::Kind::none) return "N";
  std::string s = "(" + std::to_string(static_cast<int>(def.keyed)) + ":" + std::to_string(def.children.size());
  for (std::size_t i = 0; i < def.children.size(); ++i) {
    if (i < def.keys.size()) s += " " + std::to_string(def.keys[i].size()) + "#" + def.keys[i];
    s += " " + tree_key(def.children[i]);
  }
  return s + ")";
}

void check_same_tree(const std::string& what, const TreeDef& expected, const TreeDef& got) {
  std::string d = tree_difference(expected, got);
  if (!d.empty()) tree_mismatch(what + " " + d);
}

void check_same_args(const std::string& what, std::span<const TreeDef> expected, std::span<const TreeDef> got) {
  if (expected.size() != got.size())
    tree_mismatch(what + ": " + std::to_string(got.size()) + " arguments for " + std::to_string(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::string d = tree_difference(expected[i], got[i], "[" + std::to_string(i) + "]");
    if (!d.empty()) tree_mismatch(what + " differ from the arguments' structure " + d);
  }
}
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


std::string keystr(const KeyPath& path) {
  std::string out;
  for (const auto& k : path) {
    switch (k.kind) {
      case TreeDef::Keyed::position: out += "[" + std::to_string(k.index) + "]"; break;
      case TreeDef::Keyed::map_key: out += "['" + k.name + "']"; break;
      case TreeDef::Keyed::member: out += "." + k.name; break;
    }
  }
  return out;
}

std::string dotted_path(const KeyPath& path) {
  std::string out;
  for (const auto& k : path) {
    if (k.kind == TreeDef::Keyed::position) out += "[" + std::to_string(k.index) + "]";
    else out += (out.empty() ? "" : ".") + k.name;
  }
  return out;
}

std::vector<KeyPath> leaf_key_paths(const TreeDef& def) {
  std::vector<KeyPath> out;
  KeyPath here;
  auto walk = [&](auto&& self, const TreeDef& d) -> void {
    if (d.kind == TreeDef::Kind::leaf) out.push_back(here);
    for (std::size_t i = 0; i < d.children.size(); ++i) {
      PathKey k{d.keyed, i, d.keyed == TreeDef::Keyed::position ? std::string() : d.keys.at(i)};
      here.push_back(std::move(k));
      self(self, d.children[i]);
      here.pop_back();
    }
  };
  walk(walk, def);
  return out;
}

}  // namespace xjax
