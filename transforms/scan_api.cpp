// scan_api.cpp: the checks behind xj::scan and xj::while_loop (control_flow.hpp) that need no
// templates.
#include "higher_order.hpp"
#include "xjax/control_flow.hpp"

namespace xjax::detail {

std::int64_t scan_length(std::span<const Array> xs, const std::optional<std::int64_t>& length, std::source_location loc) {
  std::optional<std::int64_t> n = length;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].ndim() == 0)
      throw ShapeError("scan: xs leaf " + std::to_string(i) + " is a scalar " + xs[i].aval().str() +
                       "; every xs leaf needs a leading axis to scan over (at " + format_location(loc) + ")");
    std::int64_t d = xs[i].shape()[0];
    if (n && *n != d)
      throw ShapeError("scan: xs leaf " + std::to_string(i) + " has leading axis " + std::to_string(d) + " but " +
                       (length ? "length is " : "an earlier leaf has ") + std::to_string(*n) + " (at " + format_location(loc) + ")");
    n = d;
  }
  if (!n) throw ShapeError("scan: xs is empty (xj::None), so .length must be given (at " + format_location(loc) + ")");
  if (*n < 0) throw ShapeError("scan: negative length " + std::to_string(*n) + " (at " + format_location(loc) + ")");
  return *n;
}

void check_carry(const char* loop, const char* body, const TreeDef& in_def, const TreeDef& out_def,
                 std::span<const ShapedArray> in, std::span<const ShapedArray> out, std::source_location loc) {
  const std::string at = " (at " + format_location(loc) + ")";
  if (!(in_def == out_def))
    throw TypeError(std::string(loop) + ": " + body + " returns a carry of structure " + out_def.str() + " but the carry has " +
                    in_def.str() + ", " + tree_difference(in_def, out_def, "carry") + at);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] != out[i]) {
      // the leaf's key path too, as JAX names `c['b']` (a helper's hunt of the thirty-seventh session)
      const std::string path = keystr(leaf_key_paths(in_def).at(i));
      throw TypeError(std::string(loop) + ": carry leaf " + std::to_string(i) + (path.empty() ? "" : " (" + path + ")") + " enters " +
                      body + " as " + in[i].str() + " but " + body + " returns " + out[i].str() +
                      "; the carry's shapes and dtypes must not change" + at);
    }
}

void scan_body_not_pair(std::source_location loc) {
  throw TypeError("scan: the body must return std::pair{new_carry, y} (use xj::None{} for no y) (at " + format_location(loc) + ")");
}

std::vector<ShapedArray> slice_avals(std::span<const Array> xs) {
  std::vector<ShapedArray> out;
  for (const auto& x : xs) {
    ShapedArray a = x.aval();
    a.shape.erase(a.shape.begin());
    out.push_back(a);
  }
  return out;
}

}  // namespace xjax::detail
