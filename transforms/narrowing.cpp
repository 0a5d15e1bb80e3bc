// narrowing.cpp: which equations a residual narrowed by Policy::as (checkpoint.cpp) must not
// feed: those whose result jumps as a float input moves, so that a rounded input can change the
// result by more than rounding (a mask, a choice, an integer). partial_eval saves such equations
// instead of recomputing them from narrowed values; save_residuals_as keeps wide a residual that
// one reads.
#include <memory>
#include <optional>
#include <unordered_set>

#include "ad.hpp"
#include "kernels/narrow_float.hpp"
#include "loops/custom_objects.hpp"

namespace xjax::detail {

namespace {
/// y rounded to the float dtype `to` (nearest even), computed here, not by xjax operations: this
/// runs while transforms trace. (A double rounded to f32 first: exact for a value f32 holds.)
double rounded_to(double y, DType to) {
  if (to == f64) return y;
  if (to == f32) return static_cast<float>(y);
  if (to == bf16) return narrow::float_from_bf16(narrow::bf16_from_float(static_cast<float>(y)));
  if (to == f16) return narrow::float_from_f16(narrow::f16_from_float(static_cast<float>(y)));
  return y;
}

/// a's value when it is a literal or a var of `fills`, else nullopt.
std::optional<double> constant_value(const Atom& a, const Fills& fills) {
  if (const auto* l = std::get_if<Literal>(&a)) return l->value.item<double>();
  const auto it = fills.find(std::get<Var>(a).id());
  return it == fills.end() ? std::nullopt : std::optional(it->second);
}
}  // namespace

Definitions definitions_of(const Jaxpr& j) {
  Definitions out;
  for (const Eqn& e : j.eqns)
    for (const Var& o : e.outputs) out.emplace(o.id(), &e);
  return out;
}

Definition definition_in(const Definitions& defs) {
  return [&defs](const Var& v) -> const Eqn* {
    const auto it = defs.find(v.id());
    return it == defs.end() ? nullptr : it->second;
  };
}

Fills literal_fills(const Jaxpr& j) {
  using P = Primitive;
  Fills out;
  for (const Eqn& e : j.eqns) {
    if (e.outputs.size() != 1 || !is_floating(e.outputs[0].aval().dtype)) continue;
    std::vector<double> in;
    for (const Atom& a : e.inputs)
      if (const auto v = constant_value(a, out)) in.push_back(*v);
    if (in.size() != e.inputs.size() || in.empty()) continue;
    // a fill, and the arithmetic a derivative rule does on one (pow's y - 1), each step rounded to
    // its dtype as the program rounds it (in double, 2^24 + 1 + 1 - (2^24 + 2) was 0 where f32
    // computes -2: a relu-like mask judged a test against zero was rebuilt from a rounded value).
    // bf16 / f16 arithmetic is not folded: a fused chain computes it in f32 and rounds once
    // (2048 + 1 - 2048 is 1 there, 0 step by step).
    const DType dt = e.outputs[0].aval().dtype;
    const bool folds_arithmetic = dt == f32 || dt == f64;
    std::optional<double> v;
    if (e.prim == P::broadcast_in_dim || e.prim == P::reshape || e.prim == P::convert_element_type) v = in[0];
    else if (e.prim == P::neg) v = -in[0];
    else if (e.prim == P::add && in.size() == 2 && folds_arithmetic) v = in[0] + in[1];
    else if (e.prim == P::sub && in.size() == 2 && folds_arithmetic) v = in[0] - in[1];
    else if (e.prim == P::mul && in.size() == 2 && folds_arithmetic) v = in[0] * in[1];
    if (v) out.emplace(e.outputs[0].id(), rounded_to(*v, dt));
  }
  return out;
}

namespace {

/// Whether `to` holds y exactly.
bool held_exactly(double y, DType to) {
  if (to == bf16 || to == f16) return static_cast<double>(static_cast<float>(y)) == y && rounded_to(y, to) == y;
  return rounded_to(y, to) == y;
}

bool jumps(Primitive p) {
  using P = Primitive;
  if (family_of(p) == Family::comparison) return true;
  // (eigh, svd: the order of their values; lu: its pivots, chosen inside LAPACK)
  for (P q : {P::floor, P::ceil, P::round, P::sign, P::argmax, P::argmin, P::top_k, P::sort, P::rem, P::is_finite,
              P::nextafter, P::select_and_gather_add, P::select_and_scatter_add, P::eigh, P::svd, P::lu})
    if (p == q) return true;
  return false;
}

// x > 0 (either side) with x an f32 value itself narrowed to bf16 (`saved_as_is`; not a value
// recomputed from narrowed ones: h + b cancels): bf16 keeps f32's exponent range, so the sign and
// zeroness survive but for f32 subnormals below 2^-133 (relu's mask of its output).
bool sign_test_survives(const Eqn& e, DType to, const Fills& fills, const SavedAsIs& saved_as_is) {
  if (to != bf16 || family_of(e.prim) != Family::comparison || e.inputs.size() != 2) return false;
  const auto zero = [&](const Atom& a) { return constant_value(a, fills) == 0.0; };
  const auto narrowed_f32 = [&](const Atom& a) {
    const auto* v = std::get_if<Var>(&a);
    return v && v->aval().dtype == f32 && saved_as_is(*v);
  };
  return (narrowed_f32(e.inputs[0]) && zero(e.inputs[1])) || (zero(e.inputs[0]) && narrowed_f32(e.inputs[1]));
}

}  // namespace

std::vector<std::size_t> operands_changed_by_narrowing(const Eqn& e, DType to, const Fills& fills,
                                                       const SavedAsIs& saved_as_is) {
  using P = Primitive;
  std::vector<std::size_t> all(e.inputs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (e.prim == P::convert_element_type) return is_floating(e.outputs[0].aval().dtype) ? std::vector<std::size_t>{} : all;
  // select_and_gather_add / select_and_scatter_add (t, x): x picks the element
  if (e.prim == P::select_and_gather_add || e.prim == P::select_and_scatter_add) return {1};
  // pow(x, y): a negative x's result takes its sign from y's parity (257 rounds to 256 in bf16);
  // a constant exponent that `to` holds exactly (2.5, -0.5) cannot change
  if (e.prim == P::pow) {
    const std::optional<double> y = constant_value(e.inputs[1], fills);
    const bool exact = y && held_exactly(*y, to);
    return exact ? std::vector<std::size_t>{} : std::vector<std::size_t>{1};
  }
  // custom_lin(res..., t...): the user's bwd reads the residuals, and may compare them
  if (e.prim == P::custom_lin) {
    all.resize(std::min(all.size(), object<BwdObject>(e.params.get<params::CustomLin>().bwd).num_res));
    return all;
  }
  return jumps(e.prim) && !sign_test_survives(e, to, fills, saved_as_is) ? all : std::vector<std::size_t>{};
}

SavedAsIs sign_faithful(SavedAsIs as_is, Definition definition, const Fills& fills) {
  auto faithful = std::make_shared<SavedAsIs>();
  *faithful = [as_is = std::move(as_is), definition = std::move(definition), &fills,
               weak = std::weak_ptr<SavedAsIs>(faithful)](const Var& v) {
    if (as_is(v)) return true;
    const Eqn* e = definition(v);
    if (!e) return false;
    const auto faithful_var = [&](const Atom& a) {
      const auto* u = std::get_if<Var>(&a);
      return u && (*weak.lock())(*u);
    };
    const auto zero = [&](const Atom& a) { return constant_value(a, fills) == 0.0; };
    using P = Primitive;
    if (e->prim == P::max || e->prim == P::min)  // relu's max(v, 0)
      return (faithful_var(e->inputs[0]) && zero(e->inputs[1])) || (zero(e->inputs[0]) && faithful_var(e->inputs[1]));
    if (e->prim == P::reshape || e->prim == P::broadcast_in_dim || e->prim == P::transpose ||
        (e->prim == P::convert_element_type && is_floating(e->outputs[0].aval().dtype)))
      return faithful_var(e->inputs[0]);
    return false;
  };
  return [faithful](const Var& v) { return (*faithful)(v); };
}

bool reads_changed_by_narrowing(const Jaxpr& j, DType to) {
  const Fills fills = literal_fills(j);
  // A body's inputs may be values recomputed from narrowed ones (d + b): none counts as kept as is.
  const SavedAsIs none = [](const Var&) { return false; };
  for (const Eqn& e : j.eqns) {
    if (!operands_changed_by_narrowing(e, to, fills, none).empty()) return true;
    for (const auto& sub : sub_jaxprs(e.params))
      if (reads_changed_by_narrowing(*sub->jaxpr, to)) return true;
  }
  return false;
}

}  // namespace xjax::detail
