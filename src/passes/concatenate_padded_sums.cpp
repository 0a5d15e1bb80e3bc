// passes/concatenate_padded_sums.cpp: sums of zero pads that tile one axis.
// concatenate_padded_sums : Jaxpr -> Jaxpr. The transpose of `slice` is a pad with zeros, so the
// cotangent of a value split into pieces along one axis (attention's q, k and v cut from one
// product) is a sum of pads: each writes the whole array, and each add reads two and writes one.
// Where the pads' pieces tile the axis exactly (every other dim unpadded), that sum is the
// concatenation of the pieces, which writes the array once. Only where every pad and every inner
// add has no other reader. A tree of adds is tried whole, then (where it does not tile) its
// outermost subtrees that do, each equation visited a bounded number of times. The values agree except for the sign of a zero: a piece's -0.0 stays
// -0.0 where the sum gave -0.0 + 0.0 = +0.0. Run by the planner before it plans.
#include <algorithm>
#include <unordered_map>

#include "passes.hpp"

namespace xjax::detail {
namespace {

// The run [lo, end) of `axis` that a pad's piece, or a sum's pieces, cover without gaps or
// overlaps (axis -1: none such).
struct Span {
  std::int64_t axis = -1, lo = 0, end = 0;
};

// A piece of the sum: a pad's operand (in the source jaxpr) and the run it fills.
struct Piece {
  const Atom* operand = nullptr;
  Span span;
};

bool is_zero_literal(const Atom& a) {
  const auto* lit = std::get_if<Literal>(&a);
  if (!lit) return false;
  const auto* bytes = static_cast<const unsigned char*>(lit->value.raw_data());
  return std::all_of(bytes, bytes + lit->value.aval().nbytes(), [](unsigned char b) { return b == 0; });
}

// The sums of pads in a jaxpr: every add whose operands are each a zero pad or another such add
// with this add as its only reader (a tree of adds over pads, each equation in one tree), and
// the outermost add of each tree. Built in one pass over the equations (an add's operands come
// before it); a tree is walked once, with an explicit stack (a chain of 100000 adds is deep).
class PadSums {
 public:
  explicit PadSums(const Jaxpr& j)
      : j_(j), kind_(j.eqns.size(), Kind::other), span_(j.eqns.size()), read_by_sum_(j.eqns.size(), 0) {
    std::unordered_map<std::uint64_t, std::size_t> readers;
    for (std::size_t i = 0; i < j.eqns.size(); ++i) {
      for (const auto& in : j.eqns[i].inputs)
        if (const auto* v = std::get_if<Var>(&in)) ++readers[v->id()];
      for (const auto& o : j.eqns[i].outputs) defined_by_[o.id()] = i;
    }
    for (const auto& o : j.outvars)
      if (const auto* v = std::get_if<Var>(&o)) ++readers[v->id()];
    for (std::size_t i = 0; i < j.eqns.size(); ++i) {
      const Eqn& e = j.eqns[i];
      if (e.prim == Primitive::pad && is_zero_literal(e.inputs[1])) {
        kind_[i] = Kind::pad;
        span_[i] = pad_span(e);
      }
      if (e.prim != Primitive::add) continue;
      std::vector<std::size_t> parts;
      for (const Atom& in : e.inputs) {
        const auto* v = std::get_if<Var>(&in);
        if (!v || v->aval() != e.outputs[0].aval() || readers[v->id()] != 1) break;
        const auto it = defined_by_.find(v->id());
        if (it == defined_by_.end() || kind_[it->second] == Kind::other) break;
        parts.push_back(it->second);
      }
      if (parts.size() != e.inputs.size()) continue;
      kind_[i] = Kind::sum;
      for (std::size_t part : parts) read_by_sum_[part] = 1;
      if (parts.size() == 2) span_[i] = joined(span_[parts[0]], span_[parts[1]]);
    }
  }

  /// The outermost adds of the trees.
  std::vector<std::size_t> roots() const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < kind_.size(); ++i)
      if (kind_[i] == Kind::sum && !read_by_sum_[i]) out.push_back(i);
    return out;
  }

  /// Where a tree that does not tile its axis as a whole holds subtrees that do (the gradient of
  /// overlapping slices: two of them tile, a third overlaps): the outermost adds under `root`
  /// whose pads, nested two by two, each tile a run next to the other's and together the whole
  /// axis. Walked once, down from the root.
  std::vector<std::size_t> tiling_subtrees(std::size_t root) const {
    std::vector<std::size_t> out, todo{root};
    while (!todo.empty()) {
      const std::size_t at = todo.back();
      todo.pop_back();
      const Span& sp = span_[at];
      if (sp.axis >= 0 && sp.lo == 0 && sp.end == j_.eqns[at].outputs[0].aval().shape[static_cast<std::size_t>(sp.axis)]) {
        out.push_back(at);
        continue;
      }
      for (const Atom& in : j_.eqns[at].inputs)
        if (const std::size_t part = defined_by_.at(std::get<Var>(in).id()); kind_[part] == Kind::sum) todo.push_back(part);
    }
    return out;
  }

  /// The pads under `root` (its pieces) and the equations of its tree but the root.
  void tree(std::size_t root, std::vector<Piece>& pieces, std::vector<std::size_t>& members) const {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const Eqn& e = j_.eqns[todo.back()];
      todo.pop_back();
      for (const Atom& in : e.inputs) {
        const std::size_t part = defined_by_.at(std::get<Var>(in).id());
        members.push_back(part);
        if (kind_[part] == Kind::sum) todo.push_back(part);
        else pieces.push_back({&j_.eqns[part].inputs[0], span_[part]});
      }
    }
  }

 private:
  enum class Kind : std::uint8_t { other, pad, sum };
  static Span pad_span(const Eqn& pad) {
    const auto& p = pad.params.get<params::Pad>();
    const Shape& shape = pad.outputs[0].aval().shape;
    Span sp;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (p.interior[d] != 0 || p.lo[d] < 0 || p.hi[d] < 0) return {};
      if (p.lo[d] == 0 && p.hi[d] == 0) continue;
      if (sp.axis >= 0) return {};  // padded along two axes
      sp = {static_cast<std::int64_t>(d), p.lo[d], shape[d] - p.hi[d]};
    }
    return sp;
  }
  static Span joined(const Span& a, const Span& b) {
    if (a.axis < 0 || a.axis != b.axis || (a.end != b.lo && b.end != a.lo)) return {};
    return {a.axis, std::min(a.lo, b.lo), std::max(a.end, b.end)};
  }
  const Jaxpr& j_;
  std::vector<Kind> kind_;
  std::vector<Span> span_;
  std::vector<char> read_by_sum_;
  std::unordered_map<std::uint64_t, std::size_t> defined_by_;
};

// The axis the pieces tile (sorted along it), or -1.
std::int64_t tiled_axis(std::vector<Piece>& pieces, const Shape& shape) {
  const std::int64_t axis = pieces.empty() ? -1 : pieces[0].span.axis;
  if (axis < 0 || std::any_of(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.span.axis != axis; })) return -1;
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& x, const Piece& y) { return std::pair{x.span.lo, x.span.end} < std::pair{y.span.lo, y.span.end}; });
  std::int64_t next = 0;  // where the next piece must start
  for (const Piece& p : pieces) {
    if (p.span.lo != next) return -1;
    next = p.span.end;
  }
  return next == shape[static_cast<std::size_t>(axis)] ? axis : -1;
}

}  // namespace

Jaxpr concatenate_padded_sums(const Jaxpr& j) {
  const PadSums sums(j);
  std::vector<char> dropped(j.eqns.size(), 0);
  std::unordered_map<std::size_t, Eqn> replaced;  // root add -> its concatenate
  auto concatenate_tree = [&](std::size_t root) {
    std::vector<Piece> pieces;
    std::vector<std::size_t> members;
    sums.tree(root, pieces, members);
    const std::int64_t axis = tiled_axis(pieces, j.eqns[root].outputs[0].aval().shape);
    if (axis < 0) return false;
    Eqn concat{Primitive::concatenate, {}, j.eqns[root].outputs, params::Concatenate{.dimension = axis}, j.eqns[root].loc};
    for (const Piece& p : pieces) concat.inputs.push_back(*p.operand);
    replaced.emplace(root, std::move(concat));
    for (std::size_t m : members) dropped[m] = 1;
    return true;
  };
  for (std::size_t root : sums.roots())
    if (!concatenate_tree(root))
      for (std::size_t sub : sums.tiling_subtrees(root)) (void)concatenate_tree(sub);
  if (replaced.empty()) return j;
  Jaxpr out{j.constvars, j.invars, {}, j.outvars};
  for (std::size_t i = 0; i < j.eqns.size(); ++i) {
    if (dropped[i]) continue;
    const auto it = replaced.find(i);
    out.eqns.push_back(it == replaced.end() ? j.eqns[i] : it->second);
  }
  return out;
}

}  // namespace xjax::detail
