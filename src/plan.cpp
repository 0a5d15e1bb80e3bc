// plan.cpp: make_plan, which compiles a jaxpr into an EvalPlan (plan.hpp).
//
// Read in order: liveness (the last equation reading each variable), fusibility (which equations
// can join a fused elementwise chain and under which compute dtype and shape), the construction
// of a FusedProgram from a run of consecutive fusible equations, the passes run before planning
// (passes.hpp: checkpoint inlining, transpose folding), and make_plan, which runs them, then walks
// the equations once, grouping fusible runs and resolving every other equation's kernel or impl.
#include "plan.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "passes.hpp"

namespace xjax::detail {
namespace {

using kernels::FusedProgram;
using LastUse = std::unordered_map<std::uint64_t, std::size_t>;
using kernels::Ints;
using kernels::is_comparison;
using kernels::is_float_binary;
using kernels::is_narrow;

/// The equations a plan runs, in order: the source jaxpr's, or its rewritten copy's.
using EqnList = std::vector<const Eqn*>;

// The index of the last equation reading each variable; eqns.size() for the jaxpr's outputs.
LastUse last_uses(const EqnList& eqns, const std::vector<Atom>& outvars) {
  LastUse last;
  for (std::size_t i = 0; i < eqns.size(); ++i)
    for (const auto& in : eqns[i]->inputs)
      if (auto* v = std::get_if<Var>(&in)) last[v->id()] = i;
  for (const auto& o : outvars)
    if (auto* v = std::get_if<Var>(&o)) last[v->id()] = eqns.size();
  return last;
}

// ---- fusibility --------------------------------------------------------------------------------

/// The loop a fused equation joins: its shape and the float dtype of its values in memory (a
/// bf16 / f16 chain computes in f32: FusedProgram::storage).
struct FusionKey {
  Shape shape;
  DType storage;
  friend bool operator==(const FusionKey&, const FusionKey&) = default;
};

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16; }

// Unary arithmetic, or a rename (name, stop_gradient: the fused loop reads its operand).
bool is_unary_float(Primitive p) {
  return kernels::is_unary_math(p) || p == Primitive::name || p == Primitive::stop_gradient;
}
// True when every operand is `dtype` (or bool when bool_ok) with the output's shape or rank 0.
bool operands_fit(const Eqn& e, std::size_t first, const Shape& shape, DType dtype, bool bool_ok = false) {
  for (std::size_t i = first; i < e.inputs.size(); ++i) {
    const ShapedArray& a = atom_aval(e.inputs[i]);
    if (a.ndim() != 0 && a.shape != shape) return false;
    if (a.dtype != dtype && !(bool_ok && a.dtype == DType::bool_)) return false;
  }
  return true;
}

/// How a broadcast_in_dim's operand covers its output when the operand's dims of size > 1 are a
/// run [a, b) of the output's dims (in order): each operand element repeated over the
/// `repeat` = size(out[b:]) elements after it, the whole operand `size(out[:a])` times. A bias
/// row over a batch (b = rank), a column from a keepdims reduction (a = 0), or anything between.
struct BroadcastLayout {
  std::int64_t period = 0, repeat = 1;
};
std::optional<BroadcastLayout> broadcast_layout(const Eqn& e) {
  const ShapedArray& in = atom_aval(e.inputs[0]);
  const Shape& out = e.outputs[0].aval().shape;
  const Ints& dims = e.params.get<params::BroadcastInDim>().broadcast_dimensions;
  // An empty operand has period 0, which marks a dense input of the chain's shape: the output
  // was taken for a rename of the operand (review finding: jit returned [0,1] for [0,5]).
  if (in.ndim() == 0 || dims.size() != in.shape.size() || in.size() == 0) return std::nullopt;
  std::int64_t a = -1, b = -1;  // the run of output dims the operand's dims of size > 1 map to
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0 && dims[i] <= dims[i - 1]) return std::nullopt;
    if (in.shape[i] == 1) continue;
    if (in.shape[i] != out[static_cast<std::size_t>(dims[i])]) return std::nullopt;
    if (a < 0) a = dims[i];
    else if (dims[i] != b) return std::nullopt;  // a gap in the run
    b = dims[i] + 1;
  }
  if (a < 0) return BroadcastLayout{1, 1};  // one element
  std::int64_t repeat = 1;
  for (std::size_t d = static_cast<std::size_t>(b); d < out.size(); ++d) repeat *= out[d];
  return BroadcastLayout{in.size(), repeat};
}

/// The loop e can join, if e is an elementwise equation the fused executor supports: float
/// arithmetic, comparisons of floats, clamp and is_finite of floats, two-case select_n on a bool,
/// float<->bool conversion, and
/// broadcasts of a float scalar (which become a scalar operand instead of an array).
std::optional<FusionKey> fusion_key(const Eqn& e) {
  if (e.outputs.size() != 1) return std::nullopt;
  const ShapedArray& out = e.outputs[0].aval();
  if (out.ndim() == 0 || e.inputs.empty()) return std::nullopt;
  const Shape& s = out.shape;
  const Primitive p = e.prim;
  const ShapedArray& in0 = atom_aval(e.inputs[0]);
  if (p == Primitive::nextafter && is_narrow(out.dtype)) return std::nullopt;  // steps in the narrow format itself
  if (is_unary_float(p) || is_float_binary(p))
    return is_float(out.dtype) && operands_fit(e, 0, s, out.dtype) ? std::optional(FusionKey{s, out.dtype}) : std::nullopt;
  if (is_comparison(p))
    return is_float(in0.dtype) && operands_fit(e, 0, s, in0.dtype) ? std::optional(FusionKey{s, in0.dtype}) : std::nullopt;
  if (p == Primitive::clamp)  // bounds are scalars or of x's shape
    return is_float(out.dtype) && operands_fit(e, 0, s, out.dtype) ? std::optional(FusionKey{s, out.dtype}) : std::nullopt;
  if (p == Primitive::is_finite)
    return is_float(in0.dtype) && in0.shape == s ? std::optional(FusionKey{s, in0.dtype}) : std::nullopt;
  if (p == Primitive::select_n)
    return e.inputs.size() == 3 && in0.dtype == DType::bool_ && (in0.ndim() == 0 || in0.shape == s) &&
                   is_float(out.dtype) && operands_fit(e, 1, s, out.dtype)
               ? std::optional(FusionKey{s, out.dtype})
               : std::nullopt;
  if (p == Primitive::convert_element_type) {
    if (in0.shape != s) return std::nullopt;
    if (is_float(in0.dtype) && out.dtype == DType::bool_) return FusionKey{s, in0.dtype};
    if (in0.dtype == DType::bool_ && is_float(out.dtype)) return FusionKey{s, out.dtype};
    return std::nullopt;
  }
  if (p == Primitive::broadcast_in_dim)
    return is_float(in0.dtype) && (in0.ndim() == 0 || broadcast_layout(e)) ? std::optional(FusionKey{s, in0.dtype})
                                                                           : std::nullopt;
  return std::nullopt;
}

// True when e only renames its operand's value inside a fused loop (no op is emitted; a
// broadcast's operand is a scalar or row-broadcast input, or has the output's shape already).
bool is_alias(const Eqn& e) {
  if (e.prim == Primitive::convert_element_type) return e.outputs[0].aval().dtype != DType::bool_;  // bool -> 0/1
  return e.prim == Primitive::broadcast_in_dim || e.prim == Primitive::name || e.prim == Primitive::stop_gradient;
}

// ---- scheduling -------------------------------------------------------------------------------

// Scalar arithmetic: an equation fusion_key would admit but for its rank-0 output (a weakly typed
// number converted to the arrays' dtype, a learning rate scaled): cheap, pure, and best computed
// before the fusion runs that read it, so that it does not split one.
bool is_scalar_arithmetic(const Eqn& e) {
  const Primitive p = e.prim;
  return e.outputs.size() == 1 && e.outputs[0].aval().ndim() == 0 &&
         (is_unary_float(p) || is_float_binary(p) || is_comparison(p) || p == Primitive::select_n ||
          p == Primitive::convert_element_type);
}

/// The equations reordered so that fusible equations of one FusionKey run consecutively where the
/// dependences allow: a list schedule that takes, among the equations whose inputs are all
/// computed, one continuing the current fusion run if there is one (same key, reading a value of
/// the run), else the first in the original order. A fusible equation reading no variable (a
/// broadcast literal), and a fusible broadcast_in_dim of a variable, is placed right before its
/// first reader, so it joins that reader's run instead of being materialized early (a transposed
/// layer_norm's row statistics, broadcast at the top of a scan body, had been a fused program of
/// four broadcasts writing full arrays); its readers then also wait for what it reads. Between
/// runs, ready scalar arithmetic (is_scalar_arithmetic) goes first. Other equations that cannot fuse keep their relative order (so do collectives), and an
/// equation only moves ahead of others when it is fusible or scalar arithmetic.
EqnList schedule_for_fusion(const EqnList& eqns) {
  const std::size_t n = eqns.size();
  std::vector<std::optional<FusionKey>> key(n);
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) any = (key[i] = fusion_key(*eqns[i])).has_value() || any;
  if (!any) return eqns;
  std::unordered_map<std::uint64_t, std::size_t> producer;
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& o : eqns[i]->outputs) producer[o.id()] = i;
  std::vector<bool> sinks(n);  // fusible, reads no variable or is a broadcast: placed before its first reader
  for (std::size_t i = 0; i < n; ++i)
    sinks[i] = key[i].has_value() && (eqns[i]->prim == Primitive::broadcast_in_dim ||
                                      std::none_of(eqns[i]->inputs.begin(), eqns[i]->inputs.end(),
                                                   [](const Atom& a) { return std::holds_alternative<Var>(a); }));
  std::vector<std::size_t> waiting(n, 0);           // inputs from scheduled equations not computed yet
  std::vector<std::vector<std::size_t>> readers(n);  // equations waiting for i's outputs
  // Equation i waits for the producers of equation `of`'s inputs (of = i, then the sinks it reads:
  // a sink is emitted with its reader, so what the sink reads must be computed by then).
  auto wait_for_inputs = [&](std::size_t i, std::size_t of, auto& self) -> void {
    for (const auto& in : eqns[of]->inputs)
      if (auto* v = std::get_if<Var>(&in))
        if (auto it = producer.find(v->id()); it != producer.end()) {
          if (sinks[it->second]) {
            self(i, it->second, self);
          } else {
            ++waiting[i];
            readers[it->second].push_back(i);
          }
        }
  };
  for (std::size_t i = 0; i < n; ++i)
    if (!sinks[i]) wait_for_inputs(i, i, wait_for_inputs);
  std::vector<std::size_t> ready;  // sorted by original position
  for (std::size_t i = 0; i < n; ++i)
    if (!sinks[i] && !waiting[i]) ready.push_back(i);
  EqnList order;
  order.reserve(n);
  std::vector<bool> emitted(n, false);
  std::vector<std::size_t> run_of(n, 0);  // the run (1, 2, ...) that scheduled equation i
  std::size_t run = 0;
  std::optional<FusionKey> current;
  auto emit = [&](std::size_t i) {
    if (!current || key[i] != current) ++run;
    current = key[i];
    run_of[i] = run;
    emitted[i] = true;
    order.push_back(eqns[i]);
  };
  // Reads a value of the current run, a sink the run emitted included (a broadcast of an older
  // value: left out, the run ended before a ready reader of it and split a bf16 chain, fuzz seed
  // 24109860). Pulling ahead an equation that reads only older values would allocate its output
  // early and keep it alive longer, for no fusion of data.
  auto continues_run = [&](std::size_t i) {
    for (const auto& in : eqns[i]->inputs)
      if (auto* v = std::get_if<Var>(&in))
        if (auto it = producer.find(v->id()); it != producer.end() && emitted[it->second] && run_of[it->second] == run)
          return true;
    return false;
  };
  auto emit_sinks_read_by = [&](std::size_t i, auto& self) -> void {
    for (const auto& in : eqns[i]->inputs)
      if (auto* v = std::get_if<Var>(&in))
        if (auto it = producer.find(v->id()); it != producer.end() && sinks[it->second] && !emitted[it->second]) {
          self(it->second, self);
          emit(it->second);
        }
  };
  while (!ready.empty()) {
    auto pick = ready.begin();
    if (current) {
      for (auto it = ready.begin(); it != ready.end(); ++it)
        if (key[*it] == current && continues_run(*it)) {
          pick = it;
          break;
        }
    } else {
      pick = std::find_if(ready.begin(), ready.end(), [&](std::size_t i) { return is_scalar_arithmetic(*eqns[i]); });
      if (pick == ready.end()) pick = ready.begin();
    }
    const std::size_t i = *pick;
    ready.erase(pick);
    emit_sinks_read_by(i, emit_sinks_read_by);  // its sinks first (and theirs before them)
    emit(i);
    for (std::size_t r : readers[i])
      if (--waiting[r] == 0) ready.insert(std::lower_bound(ready.begin(), ready.end(), r), r);
  }
  for (std::size_t i = 0; i < n; ++i)  // unread (an output of the jaxpr, or dead)
    if (!emitted[i]) {
      emit_sinks_read_by(i, emit_sinks_read_by);
      emit(i);
    }
  return order;
}

// ---- fused programs ----------------------------------------------------------------------------

/// Builds the fused step of equations [first, last) (all with the same FusionKey): external
/// operands become program inputs, each non-alias equation an op, and the values read after the
/// run (last use >= last) the outputs. `operand` maps an atom to a plan operand.
template <class OperandOf>
EvalPlan::Step fuse(const EqnList& eqns, std::size_t first, std::size_t last, const FusionKey& key,
                    const LastUse& last_use, OperandOf operand) {
  auto prog = std::make_shared<FusedProgram>();
  prog->storage = key.storage;
  prog->compute = kernels::compute_dtype(key.storage);
  prog->shape = key.shape;
  EvalPlan::Step st;
  st.kind = EvalPlan::Kind::fused;
  std::unordered_map<std::uint64_t, std::int32_t> value_of;  // var id -> value defined in the run (-1 while collecting)
  // The program's inputs, one per operand and layout (an array broadcast as a row and as a column
  // in one run is read two ways): keyed by the atom and the layout. A scalar literal is keyed by
  // its dtype and bits, so equal constants (the zeros of relu and of its derivative) are one
  // input, one row filled, and one value the program's simplifications can match.
  using InputKey = std::tuple<int, std::uint64_t, std::int64_t, std::int64_t>;  // (kind, id / address / bits, layout)
  enum InputKind : int { kVarInput, kLiteralInput, kScalarLiteralInput };  // the last: + dtype
  auto input_key = [](const Atom& a, BroadcastLayout layout) -> InputKey {
    if (auto* v = std::get_if<Var>(&a)) return {kVarInput, v->id(), layout.period, layout.repeat};
    const Literal& l = std::get<Literal>(a);
    const ShapedArray& av = l.value.aval();
    if (av.ndim() == 0 && av.nbytes() <= sizeof(std::uint64_t)) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, l.value.raw_data(), av.nbytes());
      return {kScalarLiteralInput + static_cast<int>(av.dtype), bits, layout.period, layout.repeat};
    }
    return {kLiteralInput, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&l)), layout.period, layout.repeat};
  };
  std::map<InputKey, std::int32_t> input_value;
  auto value = [&](const Atom& a, BroadcastLayout layout = {}) -> std::int32_t {
    auto* v = std::get_if<Var>(&a);
    if (v)
      if (auto it = value_of.find(v->id()); it != value_of.end()) return it->second;
    const InputKey key = input_key(a, layout);
    if (auto it = input_value.find(key); it != input_value.end()) return it->second;
    auto n = static_cast<std::int32_t>(prog->inputs.size());
    const ShapedArray& av = atom_aval(a);
    prog->inputs.push_back({av.dtype == DType::bool_, av.ndim() == 0, layout.period, layout.repeat});
    st.ins.push_back(operand(a));
    input_value[key] = n;
    return n;
  };
  // Inputs get numbers as they are met; ops are numbered after all inputs, so collect first.
  // A broadcast operand of rank > 0 that is not the shape is read by its layout.
  auto layout_of = [&](const Eqn& e) -> BroadcastLayout {
    if (e.prim != Primitive::broadcast_in_dim) return {};
    const ShapedArray& in = atom_aval(e.inputs[0]);
    if (in.ndim() == 0 || in.shape == key.shape) return {};
    return *broadcast_layout(e);  // fusion_key admitted e
  };
  for (std::size_t i = first; i < last; ++i) {
    const Eqn& e = *eqns[i];
    for (const auto& in : e.inputs) (void)value(in, layout_of(e));
    value_of[e.outputs[0].id()] = -1;  // defined inside: not an input
  }
  auto next = static_cast<std::int32_t>(prog->inputs.size());
  for (std::size_t i = first; i < last; ++i) {
    const Eqn& e = *eqns[i];
    st.counted.push_back(e.prim);
    std::int32_t src[3] = {0, 0, 0};
    for (std::size_t k = 0; k < e.inputs.size() && k < 3; ++k) src[k] = value(e.inputs[k], layout_of(e));
    if (is_alias(e)) {
      value_of[e.outputs[0].id()] = src[0];
      continue;
    }
    FusedProgram::Op op{e.prim, next++, {src[0], src[1], src[2]}, 0, false};
    if (e.prim == Primitive::integer_pow) op.y = e.params.get<params::IntegerPow>().y;
    if (e.prim == Primitive::convert_element_type) op.to_bool = true;
    prog->ops.push_back(op);
    value_of[e.outputs[0].id()] = op.dst;
  }
  prog->num_values = next;
  for (std::size_t i = first; i < last; ++i) {
    const Var& out = eqns[i]->outputs[0];
    auto it = last_use.find(out.id());
    if (it == last_use.end() || it->second < last) continue;  // consumed inside the run, or dead
    prog->outputs.push_back({value_of.at(out.id()), out.aval().dtype == DType::bool_});
    st.outs.push_back(0);  // slot assigned by make_plan
  }
  kernels::simplify_program(*prog);
  kernels::finish_program(*prog);
  st.fused = std::move(prog);
  return st;
}

// ---- the passes run before planning -----------------------------------------------------------

bool has(const Jaxpr& j, Primitive p) {
  return std::any_of(j.eqns.begin(), j.eqns.end(), [p](const Eqn& e) { return e.prim == p; });
}

/// source rewritten for execution by the passes (passes.hpp): calls inlined, sums of pads
/// tiling an axis concatenated, transposes folded into the dots that read them; null when they would not change it. The inlined
/// calls are appended to `inlined`.
std::shared_ptr<const Jaxpr> rewritten_for_execution(const Jaxpr& source, std::vector<Primitive>& inlined) {
  const bool inline_bodies = has_inlinable_call(source);
  auto folds = [](const Jaxpr& j) { return has(j, Primitive::transpose) && has(j, Primitive::dot_general); };
  auto concatenates = [](const Jaxpr& j) { return has(j, Primitive::pad) && has(j, Primitive::add); };
  if (!inline_bodies && !folds(source) && !concatenates(source)) return nullptr;
  Jaxpr j = inline_bodies ? inline_calls(source, &inlined) : source;
  if (concatenates(j)) j = concatenate_padded_sums(j);
  if (folds(j)) j = fold_transposes(j);
  return std::make_shared<const Jaxpr>(std::move(j));
}

// "dot_general f32[1024,384]", "fused(mul,add,tanh) f32[1024,512]"; empty for a step that runs
// sub-jaxprs (StepProfile times their steps).
std::string step_label(const EvalPlan::Step& st) {
  if (st.kind == EvalPlan::Kind::call || (st.kind == EvalPlan::Kind::impl && !sub_jaxprs(st.eqn->params).empty())) return "";
  if (st.kind != EvalPlan::Kind::fused) return std::string(primitive_name(st.eqn->prim)) + " " + st.eqn->outputs[0].aval().str();
  std::string names;
  for (Primitive p : st.counted) names += (names.empty() ? "" : ",") + std::string(primitive_name(p));
  const DType first_out = st.fused->outputs.empty() || !st.fused->outputs[0].is_bool ? st.fused->storage : DType::bool_;
  return "fused(" + names + ") " + ShapedArray{st.fused->shape, first_out}.str();
}

}  // namespace

std::shared_ptr<const EvalPlan> make_plan(const Jaxpr& source) {
  auto plan = std::make_shared<EvalPlan>();
  plan->rewritten = rewritten_for_execution(source, plan->inlined_calls);
  const Jaxpr& program = plan->rewritten ? *plan->rewritten : source;
  EqnList listed;
  for (const Eqn& e : program.eqns) listed.push_back(&e);
  const std::vector<Atom>* outvars = &program.outvars;
  const EqnList eqns = schedule_for_fusion(listed);
  const LastUse last_use = last_uses(eqns, *outvars);
  std::unordered_map<std::uint64_t, std::size_t> slot;
  auto define = [&](const Var& v) {
    if (!last_use.count(v.id())) return EvalPlan::npos;
    plan->slot_avals.push_back(v.aval());
    return slot[v.id()] = plan->num_slots++;
  };
  auto operand = [&](const Atom& a) {
    EvalPlan::Operand op;
    if (auto* l = std::get_if<Literal>(&a)) op.literal = l;
    else op.slot = slot.at(std::get<Var>(a).id());
    return op;
  };
  // Slots read for the last time by equations [first, last).
  auto dying = [&](std::size_t first, std::size_t last) {
    std::vector<std::size_t> out;
    for (std::size_t i = first; i < last; ++i)
      for (const auto& in : eqns[i]->inputs)
        if (auto* v = std::get_if<Var>(&in); v && last_use.at(v->id()) == i) {
          auto it = slot.find(v->id());  // absent: an intermediate of a fused run
          if (it != slot.end() && std::find(out.begin(), out.end(), it->second) == out.end())
            out.push_back(it->second);
        }
    return out;
  };
  // A value read for the last time is handed over (moved), so the step owns it and may reuse its
  // buffer: revolve_bwd's snapshots, a fused chain writing an output in place.
  auto hand_over = [](EvalPlan::Step& st) {
    for (auto& op : st.ins) {
      auto reads = std::count_if(st.ins.begin(), st.ins.end(), [&](const EvalPlan::Operand& o) { return !o.literal && o.slot == op.slot; });
      op.last_use = !op.literal && reads == 1 &&
                    std::find(st.free_after.begin(), st.free_after.end(), op.slot) != st.free_after.end();
    }
  };
  for (const auto& v : source.constvars) plan->const_slots.push_back(define(v));
  for (const auto& v : source.invars) plan->in_slots.push_back(define(v));
  for (std::size_t i = 0; i < eqns.size();) {
    const Eqn& e = *eqns[i];
    std::optional<FusionKey> key = fusion_key(e);
    std::size_t end = i + 1;
    if (key)
      while (end < eqns.size() && fusion_key(*eqns[end]) == key) ++end;
    // A lone select_n (relu's derivative after a GEMM) runs as a one-equation fused loop: the
    // select_n kernel picks each element through a case index; the fused loop blends with SIMD.
    // Not in bf16 / f16: the kernel moves their bits as they are (NaN payloads too), where the
    // loop would widen and round them.
    const bool lone_select = key && end - i == 1 && e.prim == Primitive::select_n && !is_narrow(key->storage);
    if (key && (end - i >= 2 || lone_select)) {
      EvalPlan::Step st = fuse(eqns, i, end, *key, last_use, operand);
      std::size_t k = 0;
      for (std::size_t q = i; q < end; ++q) {
        const Var& out = eqns[q]->outputs[0];
        auto it = last_use.find(out.id());
        if (it != last_use.end() && it->second >= end) st.outs[k++] = define(out);
      }
      st.free_after = dying(i, end);
      hand_over(st);
      plan->fused_equations += end - i;
      plan->steps.push_back(std::move(st));
      i = end;
      continue;
    }
    EvalPlan::Step st;
    st.eqn = &e;
    st.counted = {e.prim};
    if (e.prim == Primitive::checkpoint) {
      st.kind = EvalPlan::Kind::call;
      st.body = e.params.get<params::Checkpoint>().jaxpr.get();
      st.body_plan = plan_of(st.body->jaxpr);
    } else if ((st.impl = impl_rule(e.prim))) {
      st.kind = EvalPlan::Kind::impl;
      st.owning_impl = owning_impl_rule(e.prim);
    } else {
      if (e.outputs.size() != 1)
        throw Error("make_plan: " + std::string(primitive_name(e.prim)) + " has " +
                    std::to_string(e.outputs.size()) + " outputs; kernels produce one");
      std::vector<ShapedArray> in_avals;
      for (const auto& in : e.inputs) in_avals.push_back(atom_aval(in));
      st.kernel = resolve_kernel(e.prim, e.params, in_avals, e.outputs[0].aval());
      if (e.prim == Primitive::dot_general)
        st.into = kernels::dot_general_into(e.params.get<params::DotGeneral>(), in_avals[0], in_avals[1], e.outputs[0].aval());
      else
        st.into = kernels::elementwise_into(e.prim, e.params, in_avals, e.outputs[0].aval());
      if (!st.into) st.into = kernels::shape_into(e.prim, e.params, in_avals, e.outputs[0].aval());
    }
    for (const auto& in : e.inputs) st.ins.push_back(operand(in));
    st.free_after = dying(i, i + 1);
    hand_over(st);
    for (const auto& o : e.outputs) st.outs.push_back(define(o));
    plan->steps.push_back(std::move(st));
    i = end;
  }
  for (const auto& o : *outvars) {
    EvalPlan::Operand op = operand(o);
    op.repeated = !op.literal && std::any_of(plan->outs.begin(), plan->outs.end(),
                                             [&](const EvalPlan::Operand& q) { return !q.literal && q.slot == op.slot; });
    plan->outs.push_back(op);
  }
  for (auto& st : plan->steps) st.label = step_label(st);
  plan->raw = make_raw_plan(*plan);
  return plan;
}

}  // namespace xjax::detail
