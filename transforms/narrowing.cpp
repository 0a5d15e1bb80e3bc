// narrowing.cpp: which equations a residual narrowed by Policy::as (checkpoint.cpp) must not
// feed: those whose result jumps as a float input moves, so that a rounded input can change the
// result by more than rounding (a mask, a choice, an integer). partial_eval saves such equations
// instead of recomputing them from narrowed values; save_residuals_as keeps wide a residual that
// one reads.
#include <memory>
#include <unordered_set>

#include "ad.hpp"
#include "loops/custom_objects.hpp"

namespace xjax::detail {

std::unordered_set<std::uint64_t> zero_fills(const Jaxpr& j) {
  std::unordered_set<std::uint64_t> out;
  for (const Eqn& e : j.eqns)
    if (e.prim == Primitive::broadcast_in_dim)
      if (const auto* l = std::get_if<Literal>(&e.inputs[0]); l && l->value.item<double>() == 0.0) out.insert(e.outputs[0].id());
  return out;
}

namespace {

bool jumps(Primitive p) {
  using P = Primitive;
  if (family_of(p) == Family::comparison) return true;
  for (P q : {P::floor, P::ceil, P::round, P::sign, P::argmax, P::argmin, P::top_k, P::sort, P::rem, P::is_finite,
              P::nextafter, P::select_and_gather_add, P::select_and_scatter_add})
    if (p == q) return true;
  return false;
}

// x > 0 (either side) with x an f32 value itself narrowed to bf16 (`saved_as_is`; not a value
// recomputed from narrowed ones: h + b cancels): bf16 keeps f32's exponent range, so the sign and
// zeroness survive but for f32 subnormals below 2^-133 (relu's mask of its output).
bool sign_test_survives(const Eqn& e, DType to, const std::unordered_set<std::uint64_t>& zeros,
                        const SavedAsIs& saved_as_is) {
  if (to != bf16 || family_of(e.prim) != Family::comparison || e.inputs.size() != 2) return false;
  const auto zero = [&](const Atom& a) {
    const auto* l = std::get_if<Literal>(&a);
    const auto* v = std::get_if<Var>(&a);
    return (l && l->value.item<double>() == 0.0) || (v && zeros.count(v->id()));
  };
  const auto narrowed_f32 = [&](const Atom& a) {
    const auto* v = std::get_if<Var>(&a);
    return v && v->aval().dtype == f32 && saved_as_is(*v);
  };
  return (narrowed_f32(e.inputs[0]) && zero(e.inputs[1])) || (zero(e.inputs[0]) && narrowed_f32(e.inputs[1]));
}

}  // namespace

std::vector<std::size_t> operands_changed_by_narrowing(const Eqn& e, DType to, const std::unordered_set<std::uint64_t>& zeros,
                                                       const SavedAsIs& saved_as_is) {
  using P = Primitive;
  std::vector<std::size_t> all(e.inputs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (e.prim == P::convert_element_type) return is_floating(e.outputs[0].aval().dtype) ? std::vector<std::size_t>{} : all;
  // select_and_gather_add / select_and_scatter_add (t, x): x picks the element
  if (e.prim == P::select_and_gather_add || e.prim == P::select_and_scatter_add) return {1};
  // pow(x, y): a negative x's result takes its sign from y's parity (257 rounds to 256 in bf16)
  if (e.prim == P::pow) return std::holds_alternative<Var>(e.inputs[1]) ? std::vector<std::size_t>{1} : std::vector<std::size_t>{};
  // custom_lin(res..., t...): the user's bwd reads the residuals, and may compare them
  if (e.prim == P::custom_lin) {
    all.resize(std::min(all.size(), object<BwdObject>(e.params.get<params::CustomLin>().bwd).num_res));
    return all;
  }
  return jumps(e.prim) && !sign_test_survives(e, to, zeros, saved_as_is) ? all : std::vector<std::size_t>{};
}

SavedAsIs sign_faithful(SavedAsIs as_is, Definition definition, const std::unordered_set<std::uint64_t>& zeros) {
  auto faithful = std::make_shared<SavedAsIs>();
  *faithful = [as_is = std::move(as_is), definition = std::move(definition), &zeros,
               weak = std::weak_ptr<SavedAsIs>(faithful)](const Var& v) {
    if (as_is(v)) return true;
    const Eqn* e = definition(v);
    if (!e) return false;
    const auto faithful_var = [&](const Atom& a) {
      const auto* u = std::get_if<Var>(&a);
      return u && (*weak.lock())(*u);
    };
    const auto zero = [&](const Atom& a) {
      const auto* l = std::get_if<Literal>(&a);
      const auto* u = std::get_if<Var>(&a);
      return (l && l->value.item<double>() == 0.0) || (u && zeros.count(u->id()));
    };
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
  const std::unordered_set<std::uint64_t> zeros = zero_fills(j);
  // A body's inputs may be values recomputed from narrowed ones (d + b): none counts as kept as is.
  const SavedAsIs none = [](const Var&) { return false; };
  for (const Eqn& e : j.eqns) {
    if (!operands_changed_by_narrowing(e, to, zeros, none).empty()) return true;
    for (const auto& sub : sub_jaxprs(e.params))
      if (reads_changed_by_narrowing(*sub->jaxpr, to)) return true;
  }
  return false;
}

}  // namespace xjax::detail
