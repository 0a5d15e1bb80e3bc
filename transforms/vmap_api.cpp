// vmap_api.cpp: the flat entry points of vmap.hpp: in_axes / out_axes checked against the
// arguments and outputs, the batch size, and the batched jaxpr's evaluation.
#include <algorithm>
#include <string>

#include "batching.hpp"
#include "xjax/vmap.hpp"

namespace xjax::detail {
namespace {

std::string spec_str(const AxisSpec& s) {
  if (s.kind == AxisSpec::Kind::axis) return std::to_string(s.axis);
  if (s.kind == AxisSpec::Kind::none) return "None";
  const bool keyed = !s.keys.empty();
  std::string out = keyed ? "{" : "(";
  for (std::size_t i = 0; i < s.children.size(); ++i)
    out += (i ? ", " : "") + (keyed ? "'" + s.keys[i] + "': " : std::string()) + spec_str(s.children[i]);
  return out + (keyed ? "}" : s.children.size() == 1 ? ",)" : ")");
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + ("'" + keys[i] + "'");
  return "{" + out + "}";
}

[[noreturn]] void not_a_prefix(const std::string& path, const AxisSpec& s, const TreeDef& def, const std::string& why) {
  throw TypeError("vmap: " + path + " = " + spec_str(s) + " is not a tree prefix of the value there, " + def.str() +
                  ": " + why + " (a container spec needs one entry per child, a map spec the map's keys or the "
                  "struct's member names exactly; an int or None covers a whole subtree)");
}

/// Appends the (unnormalized) axis of each leaf of `def` under spec `s`, matching a map spec's
/// entries by key and a positional spec's by position; `path` names s (keystr style).
void spread(const AxisSpec& s, const TreeDef& def, std::vector<std::optional<std::int64_t>>& out, const std::string& path) {
  if (s.kind != AxisSpec::Kind::node) {
    for (std::size_t i = 0; i < def.num_leaves(); ++i)
      out.push_back(s.kind == AxisSpec::Kind::axis ? std::optional<std::int64_t>(s.axis) : std::nullopt);
    return;
  }
  if (def.kind != TreeDef::Kind::node) not_a_prefix(path, s, def, "a container spec for a leaf or None");
  if (!s.keys.empty()) {
    if (def.keyed == TreeDef::Keyed::position)
      not_a_prefix(path, s, def, "a map spec for a tuple, pair, vector or array");
    std::vector<std::string> value_keys = def.keys;
    std::sort(value_keys.begin(), value_keys.end());  // a map spec's keys are sorted (std::map)
    if (s.keys != value_keys)
      not_a_prefix(path, s, def, "the spec's keys " + key_list(s.keys) + " differ from the value's " + key_list(def.keys));
    for (std::size_t i = 0; i < def.children.size(); ++i) {
      auto at = std::lower_bound(s.keys.begin(), s.keys.end(), def.keys[i]);
      spread(s.children[static_cast<std::size_t>(at - s.keys.begin())], def.children[i], out, path + child_key(def, i));
    }
    return;
  } else {
    if (def.keyed == TreeDef::Keyed::map_key)
      not_a_prefix(path, s, def, "a positional spec for a map (give a map spec with its keys " + key_list(def.keys) + ")");
    if (def.children.size() != s.children.size())
      not_a_prefix(path, s, def, std::to_string(s.children.size()) + " entries for " + std::to_string(def.children.size()) +
                                     " children");
  }
  for (std::size_t i = 0; i < s.children.size(); ++i) spread(s.children[i], def.children[i], out, path + child_key(def, i));
}

std::int64_t normalized(std::int64_t axis, std::int64_t rank, const std::string& what, const ShapedArray& aval) {
  std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw ShapeError("vmap: " + what + " axis " + std::to_string(axis) + " is out of range for " + aval.str() +
                     " (rank " + std::to_string(rank) + ")");
  return a;
}

// Argument index of leaf k.
std::size_t argument_of(const FlatArgs& fa, std::size_t k) {
  std::size_t i = 0;
  while (i + 1 < fa.offsets.size() && fa.offsets[i + 1] <= k) ++i;
  return i;
}

}  // namespace

std::vector<std::int64_t> vmap_in_dims(const AxisSpec& in_axes, const FlatArgs& fa) {
  std::size_t nargs = fa.defs.size();
  std::vector<std::optional<std::int64_t>> axes;
  if (in_axes.kind == AxisSpec::Kind::node) {
    if (in_axes.children.size() != nargs)
      throw TypeError("vmap: in_axes " + spec_str(in_axes) + " has " + std::to_string(in_axes.children.size()) +
                      " entries for " + std::to_string(nargs) + " arguments (one per argument)");
    if (!in_axes.keys.empty())
      throw TypeError("vmap: in_axes " + spec_str(in_axes) + " is a map; at the top level it needs one entry per argument "
                      "(a std::tuple), or an int or None for all of them");
    for (std::size_t i = 0; i < nargs; ++i) spread(in_axes.children[i], fa.defs[i], axes, "in_axes[" + std::to_string(i) + "]");
  } else {
    for (std::size_t i = 0; i < nargs; ++i) spread(in_axes, fa.defs[i], axes, "in_axes");
  }
  std::vector<std::int64_t> dims;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    if (!axes[k]) {
      dims.push_back(not_batched);
      continue;
    }
    const ShapedArray& a = fa.leaves[k].aval();
    dims.push_back(normalized(*axes[k], a.ndim(), "argument " + std::to_string(argument_of(fa, k)) + "'s in_axes", a));
  }
  return dims;
}

std::int64_t vmap_axis_size(const FlatArgs& fa, const std::vector<std::int64_t>& in_dims,
                            std::optional<std::int64_t> axis_size) {
  std::optional<std::int64_t> size = axis_size;
  std::string source = axis_size ? "axis_size" : "";
  if (axis_size && *axis_size < 0) throw ShapeError("vmap: axis_size must not be negative, got " + std::to_string(*axis_size));
  for (std::size_t k = 0; k < in_dims.size(); ++k) {
    if (in_dims[k] == not_batched) continue;
    std::int64_t n = fa.leaves[k].dim(in_dims[k]);
    std::string here = "argument " + std::to_string(argument_of(fa, k)) + " (" + fa.leaves[k].aval().str() + ", axis " +
                       std::to_string(in_dims[k]) + ")";
    if (!size) {
      size = n;
      source = here;
    } else if (*size != n) {
      throw ShapeError("vmap: batched inputs disagree on the batch size: " + source + " has " + std::to_string(*size) +
                       ", " + here + " has " + std::to_string(n));
    }
  }
  if (!size) throw ShapeError("vmap: no argument is batched (in_axes all None); give the size: {.axis_size = n}");
  return *size;
}

std::vector<ShapedArray> vmap_member_avals(const FlatArgs& fa, const std::vector<std::int64_t>& in_dims) {
  std::vector<ShapedArray> out;
  for (std::size_t k = 0; k < in_dims.size(); ++k) {
    ShapedArray a = fa.leaves[k].aval();
    if (in_dims[k] != not_batched) a.shape.erase(a.shape.begin() + in_dims[k]);
    out.push_back(a);
  }
  return out;
}

std::vector<std::int64_t> vmap_out_dims(const AxisSpec& out_axes, const TreeDef& out_def,
                                        const std::vector<ShapedArray>& member_out) {
  std::vector<std::optional<std::int64_t>> axes;
  spread(out_axes, out_def, axes, "out_axes");
  std::vector<std::int64_t> dims;
  for (std::size_t k = 0; k < axes.size(); ++k)
    dims.push_back(axes[k] ? normalized(*axes[k], member_out[k].ndim() + 1, "output " + std::to_string(k) + "'s out_axes",
                                        member_out[k])
                           : not_batched);
  return dims;
}

std::vector<Array> vmap_flat(const ClosedJaxpr& j, std::span<const Array> leaves, const std::vector<std::int64_t>& in_dims,
                             std::int64_t size, const std::vector<std::int64_t>& out_dims) try {
  return eval_jaxpr(batch_jaxpr(j, in_dims, size, out_dims), leaves);
} catch (...) {
  rethrow_internal("vmap");
}

}  // namespace xjax::detail
