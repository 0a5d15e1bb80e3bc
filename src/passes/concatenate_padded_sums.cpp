// passes/concatenate_padded_sums.cpp: sums of zero pads that tile one axis.
// concatenate_padded_sums : Jaxpr -> Jaxpr. The transpose of `slice` is a pad with zeros, so the
// cotangent of a value split into pieces along one axis (attention's q, k and v cut from one
// product) is a sum of pads: each writes the whole array, and each add reads two and writes one.
// Where the pads' pieces tile the axis exactly (every other dim unpadded), that sum is the
// concatenation of the pieces, which writes the array once. Only where every pad and every inner
// add has no other reader. The values agree except for the sign of a zero: a piece's -0.0 stays
// -0.0 where the sum gave -0.0 + 0.0 = +0.0. Run by the planner before it plans.
#include <algorithm>
#include <unordered_map>

#include "passes.hpp"

namespace xjax::detail {
namespace {

// A piece of the sum: a pad's operand (in the source jaxpr) and its interval [lo, size - hi)
// along the tiled axis.
struct Piece {
  const Atom* operand = nullptr;
  std::int64_t lo = 0;
  const params::Pad* pad = nullptr;
};

bool is_zero_literal(const Atom& a) {
  const auto* lit = std::get_if<Literal>(&a);
  if (!lit) return false;
  const auto* bytes = static_cast<const unsigned char*>(lit->value.raw_data());
  return std::all_of(bytes, bytes + lit->value.aval().nbytes(), [](unsigned char b) { return b == 0; });
}

class Finder {
 public:
  explicit Finder(const Jaxpr& j) : j_(j) {
    for (std::size_t i = 0; i < j.eqns.size(); ++i) {
      defined_by_[j.eqns[i].outputs[0].id()] = i;
      for (const auto& in : j.eqns[i].inputs)
        if (const auto* v = std::get_if<Var>(&in)) ++readers_[v->id()];
    }
    for (const auto& o : j.outvars)
      if (const auto* v = std::get_if<Var>(&o)) ++readers_[v->id()];
  }

  // The pieces whose sum the add at `root` computes, the equations that only serve it in
  // `consumed`; false where the sum is not a tiling of pads.
  bool pieces_of(std::size_t root, std::vector<Piece>& pieces, std::vector<std::size_t>& consumed) const {
    const Eqn& e = j_.eqns[root];
    for (const Atom& in : e.inputs) {
      const auto* v = std::get_if<Var>(&in);
      if (!v || v->aval() != e.outputs[0].aval()) return false;
      const auto it = defined_by_.find(v->id());
      if (it == defined_by_.end() || readers_.at(v->id()) != 1) return false;
      const Eqn& d = j_.eqns[it->second];
      consumed.push_back(it->second);
      if (d.prim == Primitive::add) {
        if (!pieces_of(it->second, pieces, consumed)) return false;
      } else if (d.prim == Primitive::pad && is_zero_literal(d.inputs[1])) {
        pieces.push_back({&d.inputs[0], 0, &d.params.get<params::Pad>()});
      } else {
        return false;
      }
    }
    return true;
  }

 private:
  const Jaxpr& j_;
  std::unordered_map<std::uint64_t, std::size_t> defined_by_;
  std::unordered_map<std::uint64_t, std::size_t> readers_;
};

// The axis the pieces tile (sorted along it), or -1.
std::int64_t tiled_axis(std::vector<Piece>& pieces, const Shape& shape) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::int64_t axis = -1;
  for (const Piece& p : pieces)
    for (std::int64_t d = 0; d < rank; ++d) {
      const auto i = static_cast<std::size_t>(d);
      if (p.pad->interior[i] != 0 || p.pad->lo[i] < 0 || p.pad->hi[i] < 0) return -1;
      if ((p.pad->lo[i] != 0 || p.pad->hi[i] != 0) && axis != d) {
        if (axis >= 0) return -1;  // padded along two axes
        axis = d;
      }
    }
  if (axis < 0) return -1;
  const auto a = static_cast<std::size_t>(axis);
  for (Piece& p : pieces) p.lo = p.pad->lo[a];
  std::sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) { return x.lo < y.lo; });
  std::int64_t next = 0;  // where the next piece must start
  for (const Piece& p : pieces) {
    if (p.lo != next) return -1;
    next = shape[a] - p.pad->hi[a];
  }
  return next == shape[a] ? axis : -1;
}

}  // namespace

Jaxpr concatenate_padded_sums(const Jaxpr& j) {
  const Finder finder(j);
  std::vector<char> dropped(j.eqns.size(), 0);
  std::unordered_map<std::size_t, Eqn> replaced;  // root add -> its concatenate
  for (std::size_t i = j.eqns.size(); i-- > 0;) {  // the outermost add of a chain first
    if (j.eqns[i].prim != Primitive::add || dropped[i]) continue;
    std::vector<Piece> pieces;
    std::vector<std::size_t> consumed;
    if (!finder.pieces_of(i, pieces, consumed)) continue;
    const std::int64_t axis = tiled_axis(pieces, j.eqns[i].outputs[0].aval().shape);
    if (axis < 0) continue;
    Eqn concat{Primitive::concatenate, {}, j.eqns[i].outputs, params::Concatenate{.dimension = axis}, j.eqns[i].loc};
    for (const Piece& p : pieces) concat.inputs.push_back(*p.operand);
    replaced.emplace(i, std::move(concat));
    for (std::size_t c : consumed) dropped[c] = 1;
  }
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
