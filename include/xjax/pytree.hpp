// pytree.hpp: nested containers of arrays ("pytrees") at the API edge. The core is flat; the
// transform templates flatten arguments to a list of leaves and a TreeDef, call a *_flat function,
// and unflatten results. A pytree is: xj::Array (a leaf), xj::None (empty), std::tuple, std::pair,
// std::vector, std::array, std::map<std::string, T>, or a struct declared with
// BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT. This is the only header that needs Hana.
#pragma once
#include <array>
#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "xjax/array.hpp"

namespace xjax {

/// An empty subtree (e.g. a scan body with no per-step output).
struct None {
  friend bool operator==(None, None) { return true; }
};

/// The structure of a pytree without its leaves; sizes of vectors, keys of maps and member names
/// of structs included.
struct TreeDef {
  enum class Kind { leaf, none, node } kind = Kind::leaf;
  /// How a node's children are named: by position (tuple, pair, vector, array), by map key, or by
  /// struct member name (`keys` holds the keys or the names, in the children's order).
  enum class Keyed : unsigned char { position, map_key, member } keyed = Keyed::position;
  std::vector<TreeDef> children;
  std::vector<std::string> keys;  // map keys or member names
  // Special members out of line (src/pytree.cpp): every transform copies and destroys TreeDefs,
  // and their inline copies cost each user translation unit compile time (issue 26).
  TreeDef();
  TreeDef(const TreeDef&);
  TreeDef(TreeDef&&) noexcept;
  TreeDef& operator=(const TreeDef&);
  TreeDef& operator=(TreeDef&&) noexcept;
  ~TreeDef();
  std::size_t num_leaves() const;
  friend bool operator==(const TreeDef&, const TreeDef&);
  std::string str() const;
};

template <class T, class = void> struct PyTree;

namespace detail {
template <class T> struct is_pytree_leaf : std::is_same<T, Array> {};
[[noreturn]] void tree_mismatch(const std::string& what);
/// Throws "WHAT: N leaves for a tree of M" unless def has n leaves.
void check_leaf_count(const char* what, const TreeDef& def, std::size_t n);
/// Throws an xj::Error naming `type` unless `def` is a structure it reads: a node keyed as `keyed`
/// with `children` children (any number when children is npos). tree_unflatten of a structure of
/// another type (a map's into a struct, a pair's into a 3-tuple) read by position before.
void expect_node(const TreeDef& def, TreeDef::Keyed keyed, std::size_t children, const char* type);
/// Throws an xj::Error unless a struct's structure names member i `name`.
void expect_member(const TreeDef& def, std::size_t i, const char* name);
/// The key of child i of node `def` in JAX's keystr style: `[0]`, `['key']`, `.member`.
std::string child_key(const TreeDef& def, std::size_t i);
/// Where two structures first differ, as "at PATH: what" (PATH in keystr style, `prefix` first;
/// "" when they are equal). Children are compared by key for maps and structs (key sets and
/// member names must agree), by position otherwise.
std::string tree_difference(const TreeDef& a, const TreeDef& b, const std::string& prefix = "");
/// An unambiguous text of a structure (keys length-prefixed), for cache keys: two structures
/// have the same key exactly when they are equal. (TreeDef::str is for people.)
std::string tree_key(const TreeDef& def);
/// `outer` with each of its leaves replaced by `inner` (JAX's PyTreeDef.compose): the structure of
/// a Jacobian, the output's outside and the argument's inside.
TreeDef compose_tree(const TreeDef& outer, const TreeDef& inner);
}  // namespace detail

template <> struct PyTree<Array> {
  static void flatten(const Array& x, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::leaf;
    leaves.push_back(x);
  }
  static Array unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    if (def.kind != TreeDef::Kind::leaf) detail::tree_mismatch("tree_unflatten: an Array where the structure has " + def.str());
    if (leaves.empty()) detail::tree_mismatch("tree_unflatten: the type reads more leaves than the structure holds");
    Array x = leaves.front();
    leaves = leaves.subspan(1);
    return x;
  }
};

template <> struct PyTree<None> {
  static void flatten(const None&, std::vector<Array>&, TreeDef& def) { def.kind = TreeDef::Kind::none; }
  static None unflatten(const TreeDef& def, std::span<const Array>&) {
    if (def.kind != TreeDef::Kind::none) detail::tree_mismatch("tree_unflatten: None where the structure has " + def.str());
    return {};
  }
};

template <class... Ts> struct PyTree<std::tuple<Ts...>> {
  static void flatten(const std::tuple<Ts...>& t, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.children.resize(sizeof...(Ts));
    std::size_t i = 0;
    std::apply([&](const auto&... x) { (PyTree<std::decay_t<decltype(x)>>::flatten(x, leaves, def.children[i++]), ...); }, t);
  }
  static std::tuple<Ts...> unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::position, sizeof...(Ts), "a std::tuple");
    return unflatten_impl(def, leaves, std::index_sequence_for<Ts...>{});
  }
  template <std::size_t... I>
  static std::tuple<Ts...> unflatten_impl(const TreeDef& def, std::span<const Array>& leaves, std::index_sequence<I...>) {
    return std::tuple<Ts...>{PyTree<Ts>::unflatten(def.children.at(I), leaves)...};  // braces: left to right
  }
};

template <class A, class B> struct PyTree<std::pair<A, B>> {
  static void flatten(const std::pair<A, B>& p, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.children.resize(2);
    PyTree<A>::flatten(p.first, leaves, def.children[0]);
    PyTree<B>::flatten(p.second, leaves, def.children[1]);
  }
  static std::pair<A, B> unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::position, 2, "a std::pair");
    A a = PyTree<A>::unflatten(def.children.at(0), leaves);
    B b = PyTree<B>::unflatten(def.children.at(1), leaves);
    return {std::move(a), std::move(b)};
  }
};

template <class T> struct PyTree<std::vector<T>> {
  static void flatten(const std::vector<T>& v, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.children.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) PyTree<T>::flatten(v[i], leaves, def.children[i]);
  }
  static std::vector<T> unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::position, std::string::npos, "a std::vector");
    std::vector<T> out;
    for (const auto& c : def.children) out.push_back(PyTree<T>::unflatten(c, leaves));
    return out;
  }
};

template <class T, std::size_t N> struct PyTree<std::array<T, N>> {
  static void flatten(const std::array<T, N>& v, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.children.resize(N);
    for (std::size_t i = 0; i < N; ++i) PyTree<T>::flatten(v[i], leaves, def.children[i]);
  }
  static std::array<T, N> unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::position, N, "a std::array");
    std::array<T, N> out;
    for (std::size_t i = 0; i < N; ++i) out[i] = PyTree<T>::unflatten(def.children.at(i), leaves);
    return out;
  }
};

template <class T> struct PyTree<std::map<std::string, T>> {
  static void flatten(const std::map<std::string, T>& m, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.keyed = TreeDef::Keyed::map_key;
    for (const auto& [k, v] : m) {
      def.keys.push_back(k);
      def.children.emplace_back();
      PyTree<T>::flatten(v, leaves, def.children.back());
    }
  }
  static std::map<std::string, T> unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::map_key, std::string::npos, "a std::map");
    std::map<std::string, T> out;
    for (std::size_t i = 0; i < def.children.size(); ++i)
      out.emplace(def.keys.at(i), PyTree<T>::unflatten(def.children[i], leaves));
    return out;
  }
};

/// Structs declared with BOOST_HANA_DEFINE_STRUCT or adapted with BOOST_HANA_ADAPT_STRUCT.
template <class T> struct PyTree<T, std::enable_if_t<boost::hana::Struct<T>::value>> {
  static void flatten(const T& s, std::vector<Array>& leaves, TreeDef& def) {
    def.kind = TreeDef::Kind::node;
    def.keyed = TreeDef::Keyed::member;
    boost::hana::for_each(boost::hana::accessors<T>(), [&](auto pair) {
      const auto& member = boost::hana::second(pair)(s);
      def.keys.emplace_back(boost::hana::to<char const*>(boost::hana::first(pair)));
      def.children.emplace_back();
      PyTree<std::decay_t<decltype(member)>>::flatten(member, leaves, def.children.back());
    });
  }
  static T unflatten(const TreeDef& def, std::span<const Array>& leaves) {
    detail::expect_node(def, TreeDef::Keyed::member, boost::hana::length(boost::hana::accessors<T>()), "a struct");
    T out{};
    std::size_t i = 0;
    boost::hana::for_each(boost::hana::accessors<T>(), [&](auto pair) {
      auto& member = boost::hana::second(pair)(out);
      detail::expect_member(def, i, boost::hana::to<char const*>(boost::hana::first(pair)));
      member = PyTree<std::decay_t<decltype(member)>>::unflatten(def.children.at(i++), leaves);
    });
    return out;
  }
};

/// Leaves in order, and the structure.
template <class T> std::pair<std::vector<Array>, TreeDef> tree_flatten(const T& tree) {
  std::pair<std::vector<Array>, TreeDef> out;
  PyTree<T>::flatten(tree, out.first, out.second);
  return out;
}

/// jax.tree.leaves: the leaves of `tree` in tree_flatten's order.
template <class T> std::vector<Array> tree_leaves(const T& tree) { return tree_flatten(tree).first; }

/// One step of a key path (JAX's SequenceKey / DictKey / GetAttrKey): a child's position in a
/// tuple, pair, vector or array, its key in a map, or its member name in a struct.
struct PathKey {
  TreeDef::Keyed kind = TreeDef::Keyed::position;
  std::size_t index = 0;  // position
  std::string name;       // map key or member name
  friend bool operator==(const PathKey&, const PathKey&) = default;
};
using KeyPath = std::vector<PathKey>;

/// JAX's keystr: `[0]['key'].member`.
std::string keystr(const KeyPath& path);
/// The dotted form used for file keys and masks: members and map keys joined by '.', positions as
/// `[i]` (`blocks[3].attn.q`, `layers.W1`).
std::string dotted_path(const KeyPath& path);
/// The key path of every leaf of a structure, in flatten order.
std::vector<KeyPath> leaf_key_paths(const TreeDef& def);

/// Leaves with their key paths, in flatten order, and the structure (JAX's tree_flatten_with_path).
template <class T> std::pair<std::vector<std::pair<KeyPath, Array>>, TreeDef> tree_flatten_with_path(const T& tree) {
  std::vector<Array> leaves;
  TreeDef def;
  PyTree<T>::flatten(tree, leaves, def);
  std::vector<KeyPath> paths = leaf_key_paths(def);
  std::vector<std::pair<KeyPath, Array>> out;
  out.reserve(leaves.size());
  for (std::size_t i = 0; i < leaves.size(); ++i) out.emplace_back(std::move(paths[i]), std::move(leaves[i]));
  return {std::move(out), std::move(def)};
}

/// Rebuilds a T of structure `def` from its leaves.
template <class T> T tree_unflatten(const TreeDef& def, std::span<const Array> leaves) {
  detail::check_leaf_count("tree_unflatten", def, leaves.size());
  std::span<const Array> rest = leaves;
  return PyTree<T>::unflatten(def, rest);
}

/// tree_map(f, tree, rest...): f applied to every leaf of tree and the leaves at the same place in
/// each of rest, keeping tree's structure (JAX's tree_map(f, tree, *rest)). Each of rest must have
/// tree's structure, its maps matched by key and its structs by member: an xj::Error names the
/// first key path where one differs.
template <class T, class F, class... Rest> T tree_map(F&& f, const T& tree, const Rest&... rest) {
  auto [leaves, def] = tree_flatten(tree);
  if constexpr (sizeof...(Rest) == 0) {
    for (auto& x : leaves) x = f(x);
  } else {
    std::size_t k = 0;
    auto flat_rest = [&](const auto& r) {
      auto [other, other_def] = tree_flatten(r);
      const std::size_t index = ++k;  // counted for every tree of rest, not only the one that differs
      std::string diff = detail::tree_difference(def, other_def);
      if (!diff.empty()) detail::tree_mismatch("tree_map: tree " + std::to_string(index) + " of rest differs from the first " + diff);
      return other;
    };
    std::array<std::vector<Array>, sizeof...(Rest)> others{flat_rest(rest)...};
    for (std::size_t i = 0; i < leaves.size(); ++i)
      leaves[i] = std::apply([&](const auto&... o) { return Array(f(leaves[i], o[i]...)); }, others);
  }
  return tree_unflatten<T>(def, leaves);
}

}  // namespace xjax
