// api.cpp: the flat functions behind the transform templates of transforms.hpp: the trace cache,
// grad, vjp, jvp, linearize and the Jacobians, on flat lists of arrays.
#include <algorithm>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "ad.hpp"
#include "batching.hpp"
#include "xjax/ops.hpp"
#include "xjax/transforms.hpp"

namespace xjax::detail {

// ---- trace cache -----------------------------------------------------------------------------

/// One jit object's traces by signature, the least recently used dropped past kMaxTraces (JAX
/// bounds its jit caches too): a static argument that changes every call (a learning rate passed
/// as a double) retraces every call, and kept each trace, about 13 kB a step without end.
struct TraceCache {
  static constexpr std::size_t kMaxTraces = 4096;
  struct Entry {
    std::shared_ptr<const Traced> traced;
    std::list<const std::string*>::iterator used;  // its place in `recency`
  };
  std::mutex mu;
  std::map<std::string, Entry> entries;
  std::list<const std::string*> recency;  // the entries' keys (in their nodes), most recently used first
};

std::shared_ptr<TraceCache> new_trace_cache() { return std::make_shared<TraceCache>(); }

namespace {
bool all_consts_concrete(const ClosedJaxpr& j) {
  for (const auto& c : j.consts)
    if (!c.is_concrete()) return false;
  return true;
}
}  // namespace

std::shared_ptr<const Traced> cached(TraceCache& cache, const std::string& key, const std::function<Traced()>& build) {
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) {
      cache.recency.splice(cache.recency.begin(), cache.recency, it->second.used);
      return it->second.traced;
    }
  }
  const std::uint64_t callable_before = callable_rules_bound();
  auto t = std::make_shared<const Traced>(build());  // outside the lock: tracing may nest transforms
  if (all_consts_concrete(t->jaxpr) && callable_rules_bound() == callable_before) {
    // the last trace to finish is kept: a jit that calls itself while tracing finishes its
    // innermost trace first, and the outermost is the call's (emplace kept the innermost: the
    // next call ran only the recursion's last level)
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.entries.find(key); it != cache.entries.end()) {
      it->second.traced = t;
      cache.recency.splice(cache.recency.begin(), cache.recency, it->second.used);
    } else {
      const auto added = cache.entries.emplace(key, TraceCache::Entry{t, {}}).first;
      cache.recency.push_front(&added->first);
      added->second.used = cache.recency.begin();
      if (cache.entries.size() > TraceCache::kMaxTraces) {
        const auto oldest = cache.entries.find(*cache.recency.back());
        cache.recency.pop_back();
        cache.entries.erase(oldest);
      }
    }
  }
  return t;
}

std::string signature_key(const FlatArgs& fa, const std::vector<bool>& mask) {
  std::ostringstream os;
  for (const auto& d : fa.defs) os << tree_key(d) << ";";
  for (std::size_t i = 0; i < fa.leaves.size(); ++i) os << fa.leaves[i].aval().str() << (mask[i] ? "*" : "") << ",";
  return os.str();
}

std::vector<bool> argnum_mask(const FlatArgs& fa, std::initializer_list<int> argnums) {
  std::vector<bool> mask(fa.leaves.size(), false);
  for (int i : argnums)
    for (std::size_t k = fa.offsets[static_cast<std::size_t>(i)]; k < fa.offsets[static_cast<std::size_t>(i) + 1]; ++k)
      mask[k] = true;
  return mask;
}

void jit_static_array(std::size_t index) {
  throw TransformError("xj::jit: static_argnums lists argument " + std::to_string(index) +
                       ", an array pytree; arrays are traced, not static (as in JAX, a static "
                       "argument must be a hashable value: pass an int, double, string, ...)");
}

std::size_t normalized_argnum(int index, std::size_t num_args, const char* where) {
  const auto n = static_cast<std::int64_t>(num_args);
  if (index < -n || index >= n)
    throw TransformError(std::string(where) + " lists argument " + std::to_string(index) + " of a call with " +
                         std::to_string(num_args) + " arguments");
  return static_cast<std::size_t>(index < 0 ? index + n : index);
}

void jit_donated_not_array(std::size_t index) {
  throw TransformError("xj::jit: donate_argnums lists argument " + std::to_string(index) +
                       ", which is not an array pytree (only arrays have buffers to donate)");
}

void append_key_part(std::string& key, std::size_t index, std::string_view part) {
  key += '|';
  key += std::to_string(index);
  key += ':';
  key += part;
}

Array jit_number(double v, DType dtype) { return weakly_typed(scalar(v, dtype)); }

Array jit_number(std::int64_t v) {
  Array out = alloc_array({{}, i64});
  *static_cast<std::int64_t*>(mutable_data(out)) = v;
  return weakly_typed(out);
}

Array jit_weak(const Array& x) { return weakly_typed(x); }

std::vector<char> weak_flags(std::span<const Array> xs) {
  std::vector<char> out;
  for (const Array& x : xs) out.push_back(is_weak(x) ? 1 : 0);
  return out;
}

// Inside a trace jit's outputs are tracers whose weak types the binding already derived from the
// caller's operands; only concrete outputs (the plan's) are set there, exactly (a weak handle the
// flags call strong is made strong).
std::vector<Array> with_weak_types(std::vector<Array> outs, const std::vector<char>& weak, bool tracers_too) {
  for (std::size_t i = 0; i < outs.size() && i < weak.size(); ++i)
    if (tracers_too || !outs[i].is_tracer()) outs[i] = with_weak_type(outs[i], weak[i] != 0);
  return outs;
}

struct KeyStream::Impl {
  std::ostringstream os;
};
// Floating-point members print in full (the default 6 digits keyed 1.0000001 and 1.0000002 alike,
// so a second call reused the first value's trace): every long double's digits, enough for any
// float type a type's operator<< prints without its own precision.
KeyStream::KeyStream() : impl_(std::make_unique<Impl>()) { impl_->os.precision(std::numeric_limits<long double>::max_digits10); }
KeyStream::~KeyStream() = default;
std::ostream& KeyStream::stream() { return impl_->os; }
std::string KeyStream::str() const { return impl_->os.str(); }

std::string static_key_from(const char* type_name, const std::string& value) {
  std::string key = std::string(type_name) + "=" + value;
  std::string escaped;
  escaped.reserve(key.size());
  for (char c : key) {
    if (c == '|' || c == '\\') escaped.push_back('\\');
    escaped.push_back(c);
  }
  return escaped;
}

std::string static_key_bytes(const unsigned char* bytes, std::size_t n) {
  std::ostringstream os;
  os << std::hex;
  for (std::size_t i = 0; i < n; ++i) os << int(bytes[i]) << '.';
  return os.str();
}

void donate_args(FlatArgs& fa, const std::vector<int>& argnums, std::span<const Array> consts) {
  // Under an enclosing transform the call is traced: nothing is run, so nothing is donated.
  if (tracing_active()) return;
  // A leaf passed twice (the same handle in two donated places, or donated and also passed
  // undonated) shares the one handle that took the buffer. A leaf the function also captured (a
  // const of its jaxpr, the same value) is not donated: the plan reads it as a const too.
  auto captured = [&](const Array& leaf) {
    return std::any_of(consts.begin(), consts.end(), [&](const Array& c) {
      return c.impl() == leaf.impl() || (c.is_concrete() && leaf.is_concrete() && c.impl()->buffer == leaf.impl()->buffer);
    });
  };
  std::map<const ArrayImpl*, Array> taken;
  for (int d : argnums) {
    const auto k = static_cast<std::size_t>(d);
    for (std::size_t i = fa.offsets[k]; i < fa.offsets[k + 1]; ++i)
      if (!taken.contains(fa.leaves[i].impl().get()) && !captured(fa.leaves[i]))
        taken.emplace(fa.leaves[i].impl().get(),
                      take_donated(fa.leaves[i], "leaf " + std::to_string(i - fa.offsets[k]) + " of argument " +
                                                     std::to_string(k) + ", in donate_argnums"));
  }
  for (auto& leaf : fa.leaves)
    if (auto it = taken.find(leaf.impl().get()); it != taken.end()) leaf = it->second;
}

void aux_mismatch(bool returns_pair) {
  throw Error(returns_pair ? "grad: the function returns a std::pair; if its second element is auxiliary data, "
                             "pass {.has_aux = true}"
                           : "grad: has_aux is set but the function does not return std::pair{value, aux}");
}

void check_grad_inputs(const FlatArgs& fa, const std::vector<bool>& diff, bool allow_int) {
  if (allow_int) return;
  for (std::size_t arg = 0; arg + 1 < fa.offsets.size(); ++arg)
    for (std::size_t k = fa.offsets[arg]; k < fa.offsets[arg + 1]; ++k)
      if (diff[k] && !is_floating(fa.leaves[k].dtype()))
        throw TypeError("grad requires float inputs for the arguments it differentiates; argument " +
                        std::to_string(arg) + (fa.offsets[arg + 1] - fa.offsets[arg] > 1 ? " has a leaf " : " is ") +
                        fa.leaves[k].aval().str() +
                        ". Pass {.allow_int = true} to accept integer arguments (their gradient is zeros), "
                        "or leave the argument out of argnums");
}

FlatArgs::FlatArgs() : offsets{0} {}
FlatArgs::FlatArgs(FlatArgs&&) noexcept = default;
FlatArgs& FlatArgs::operator=(FlatArgs&&) noexcept = default;
FlatArgs::~FlatArgs() = default;
void FlatArgs::begin_arg() { defs.emplace_back(); }
void FlatArgs::end_arg() { offsets.push_back(leaves.size()); }
std::vector<ShapedArray> FlatArgs::avals() const {
  std::vector<ShapedArray> out;
  out.reserve(leaves.size());
  for (const auto& x : leaves) out.push_back(x.aval());
  return out;
}

GradCall::GradCall(FlatArgs args, std::initializer_list<int> argnums, bool allow_int)
    : fa(std::move(args)), diff(argnum_mask(fa, argnums)) {
  check_grad_inputs(fa, diff, allow_int);
}

GradCall::~GradCall() = default;

void GradCall::run(TransformMemo* memo, const FlatFn& flat, bool has_aux, bool with_value, std::source_location loc) {
  ClosedJaxpr traced = trace_flat(flat, fa.avals(), weak_flags(fa.leaves), loc);
  // The value is one array, not a pytree (JAX: "Gradient only defined for scalar-output
  // functions"): a tuple of values had its first leaf differentiated and the rest taken as aux.
  const TreeDef& value_def = has_aux ? out_def.children.at(0) : out_def;
  if (value_def.kind != TreeDef::Kind::leaf)
    throw TypeError(std::string("grad: the function must return one scalar array") +
                    (has_aux ? " as the first of its (value, aux) pair" : "") + ", got a pytree of " +
                    std::to_string(value_def.num_leaves()) + " leaves; use vjp or jacrev for other outputs (at " +
                    format_location(loc) + ")");
  std::vector<Array> outs = eval_grad(memo, traced, fa.leaves, diff, has_aux, with_value);
  const std::size_t nout = out_def.num_leaves() - (with_value ? 0 : 1);
  full.assign(fa.leaves.size(), Array());
  for (std::size_t k = 0, g = nout; k < full.size(); ++k)
    if (diff[k]) full[k] = outs[g++];
  kept.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(nout));
}

ClosedJaxpr jit_prepare(const ClosedJaxpr& j) { return simplify(j); }

// ---- grad ------------------------------------------------------------------------------------

ClosedJaxpr grad_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff, bool has_aux, bool with_value) {
  std::size_t nout = j->outvars.size();
  if (nout == 0 || (!has_aux && nout != 1))
    throw TypeError("grad: the function must return one scalar (got " + std::to_string(nout) +
                    " arrays); use vjp or jacrev for other outputs");
  const ShapedArray& out = atom_aval(j->outvars[0]);
  if (out.ndim() != 0 || !is_floating(out.dtype))
    throw TypeError("grad: the function must return a float scalar, got " + out.str() +
                    "; reduce it (e.g. xj::sum) or use vjp / jacrev");
  std::vector<bool> seed(nout, false);
  seed[0] = true;
  ClosedJaxpr g = vjp_jaxpr(j, diff, seed);
  std::vector<bool> keep(g->outvars.size(), true);
  if (!with_value) keep[0] = false;  // the value (aux outputs stay)
  return with_value ? g : simplify(dce(g, keep));
}

// ---- vjp -------------------------------------------------------------------------------------

namespace {
/// j linearized in all its inputs and its known part run on args (what vjp and linearize share):
/// j's outputs into *outs, the values the linear part reads into `residuals`.
Linearized linearize_at(const ClosedJaxpr& j, std::span<const Array> args, std::vector<Array>* outs,
                        std::vector<Array>& residuals) {
  Linearized lin = linearize_jaxpr(j, std::vector<bool>(j->invars.size(), true));
  std::vector<Array> known = eval_jaxpr(lin.pe.known, args);
  const auto nout = static_cast<std::ptrdiff_t>(j->outvars.size());
  outs->assign(known.begin(), known.begin() + nout);
  residuals.assign(known.begin() + nout, known.end());
  return lin;
}
}  // namespace

struct VjpState {
  ClosedJaxpr bwd;                  // (res, output cts) -> cts of the differentiable inputs
  std::vector<Array> residuals;
  std::vector<bool> nonzero;        // which inputs have cotangents
  std::vector<ShapedArray> in_avals;
  std::vector<ShapedArray> out_avals;
};

std::shared_ptr<const VjpState> vjp_forward(const ClosedJaxpr& j, std::span<const Array> args, std::vector<Array>* outs) try {
  AdModeScope reverse(AdMode::reverse);
  auto s = std::make_shared<VjpState>();
  Linearized lin = linearize_at(j, args, outs, s->residuals);
  std::vector<bool> linear_in(lin.pe.num_res, false);
  for (bool nz : lin.diff_in)
    if (nz) linear_in.push_back(true);
  s->bwd = simplify(transpose_jaxpr(lin.pe.staged, linear_in));
  s->nonzero = lin.diff_in;
  s->in_avals = j.in_avals();
  s->out_avals = j.out_avals();
  return s;
} catch (...) {
  rethrow_internal("vjp");
}

std::vector<Array> vjp_backward(const VjpState& s, std::span<const Array> cts) try {
  if (cts.size() != s.out_avals.size())
    throw TypeError("vjp: " + std::to_string(cts.size()) + " cotangent leaves for " + std::to_string(s.out_avals.size()) + " outputs");
  std::vector<Array> in = s.residuals;
  for (std::size_t k = 0; k < cts.size(); ++k) {
    if (cts[k].aval() != s.out_avals[k])
      throw TypeError("vjp: cotangent " + std::to_string(k) + " is " + cts[k].aval().str() + ", the output is " + s.out_avals[k].str());
    in.push_back(cts[k]);
  }
  std::vector<Array> got = eval_jaxpr(s.bwd, in);
  std::vector<Array> out;
  std::size_t g = 0;
  for (std::size_t i = 0; i < s.in_avals.size(); ++i)
    out.push_back(s.nonzero[i] ? got[g++] : zeros(s.in_avals[i].shape, s.in_avals[i].dtype));
  return out;
} catch (...) {
  rethrow_internal("vjp");
}

// ---- jvp / linearize -------------------------------------------------------------------------

std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const ClosedJaxpr& j, std::span<const Array> primals,
                                                           std::span<const Array> tangents) try {
  AdModeScope forward(AdMode::forward);
  if (tangents.size() != primals.size()) throw TypeError("jvp: primals and tangents differ in structure");
  std::vector<bool> nonzero;
  std::vector<Array> args(primals.begin(), primals.end());
  for (std::size_t i = 0; i < primals.size(); ++i) {
    bool d = differentiable(primals[i].aval());
    if (d && tangents[i].aval() != primals[i].aval())
      throw TypeError("jvp: tangent " + std::to_string(i) + " is " + tangents[i].aval().str() + ", its primal is " + primals[i].aval().str());
    nonzero.push_back(d);
    if (d) args.push_back(tangents[i]);
  }
  ClosedJaxpr jj = simplify(jvp_jaxpr(j, nonzero, true));
  std::vector<Array> all = eval_jaxpr(jj, args);
  std::size_t nout = j->outvars.size();
  return {std::vector<Array>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nout)),
          std::vector<Array>(all.begin() + static_cast<std::ptrdiff_t>(nout), all.end())};
} catch (...) {
  rethrow_internal("jvp");
}

struct LinearState {
  ClosedJaxpr staged;
  std::vector<Array> residuals;
  std::vector<bool> nonzero;
};

std::shared_ptr<const LinearState> linearize_forward(const ClosedJaxpr& j, std::span<const Array> args, std::vector<Array>* outs) try {
  AdModeScope forward(AdMode::forward);
  auto s = std::make_shared<LinearState>();
  Linearized lin = linearize_at(j, args, outs, s->residuals);
  s->staged = lin.pe.staged;
  s->nonzero = lin.diff_in;
  return s;
} catch (...) {
  rethrow_internal("linearize");
}

std::vector<Array> linearize_apply(const LinearState& s, std::span<const Array> tangents) try {
  std::vector<Array> in = s.residuals;
  if (tangents.size() != s.nonzero.size()) throw TypeError("linearize: wrong number of tangent leaves");
  for (std::size_t i = 0; i < tangents.size(); ++i)
    if (s.nonzero[i]) in.push_back(tangents[i]);
  return eval_jaxpr(s.staged, in);
} catch (...) {
  rethrow_internal("linearize");
}

// ---- Jacobians -------------------------------------------------------------------------------

namespace {
/// Columns first .. first + aval.size() of the n x n identity, shaped [n, aval.shape...] in aval's
/// dtype: one leaf's part of the standard basis of a space of n elements (JAX's _std_basis).
Array basis_block(std::int64_t n, std::int64_t first, const ShapedArray& aval) {
  const std::int64_t m = aval.size();
  Array block = astype(eq(iota(i64, {n, m}, 0), iota(i64, {n, m}, 1) + first), aval.dtype);
  Shape shape{n};
  shape.insert(shape.end(), aval.shape.begin(), aval.shape.end());
  return reshape(block, shape);
}

/// Where each of `avals` starts when they are laid end to end, and (last) their total size.
std::vector<std::int64_t> running_offsets(const std::vector<ShapedArray>& avals) {
  std::vector<std::int64_t> offsets{0};
  for (const auto& a : avals) offsets.push_back(offsets.back() + a.size());
  return offsets;
}

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

/// Elements [begin, end) of x along `axis`.
Array part(const Array& x, std::int64_t axis, std::int64_t begin, std::int64_t end) {
  if (begin == 0 && end == x.shape()[static_cast<std::size_t>(axis)]) return x;
  return slice_in_dim(x, begin, end, 1, axis);
}

// A dot_general with the identity matrix I as one operand is the other operand X, its contracted
// dim moved to where I's free dim goes: I . X contracting I's dim c with X's dim k gives
// out[i, r] = X[k = i, r]; X . I gives out[r, i] = X[r, k = i].
// `identity` is the id of j's invar holding I (the basis, when it is 2-D): the batched Jacobian
// then skips the GEMM by the basis (one n^2 d GEMM fewer; JAX performs it).
ClosedJaxpr fold_identity_dots(const ClosedJaxpr& j, std::uint64_t identity) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->eqns.clear();
  std::unordered_map<std::uint64_t, Atom> renamed;
  auto sub = [&](const Atom& a) -> Atom {
    if (auto* v = std::get_if<Var>(&a))
      if (auto it = renamed.find(v->id()); it != renamed.end()) return it->second;
    return a;
  };
  auto is_identity = [&](const Atom& a) { auto* v = std::get_if<Var>(&a); return v && v->id() == identity; };
  for (const Eqn& e0 : j->eqns) {
    Eqn e = e0;
    for (auto& in : e.inputs) in = sub(in);
    if (e.prim == Primitive::dot_general && is_identity(e.inputs[0]) != is_identity(e.inputs[1])) {
      const auto& dn = e.params.get<params::DotGeneral>();
      const bool lhs_is_i = is_identity(e.inputs[0]);
      const Atom& x = e.inputs[lhs_is_i ? 1 : 0];
      const ShapedArray& xa = atom_aval(x);
      const auto& kx = lhs_is_i ? dn.rhs_contracting : dn.lhs_contracting;
      if (dn.lhs_batch.empty() && kx.size() == 1 && xa.dtype == e.outputs[0].aval().dtype) {
        std::int64_t k = kx[0];
        params::Ints perm;
        if (lhs_is_i) perm.push_back(k);
        for (std::int64_t d = 0; d < xa.ndim(); ++d)
          if (d != k) perm.push_back(d);
        if (!lhs_is_i) perm.push_back(k);
        bool moved = false;
        for (std::size_t d = 0; d < perm.size(); ++d) moved = moved || perm[d] != static_cast<std::int64_t>(d);
        if (!moved) {
          renamed.emplace(e.outputs[0].id(), x);
          continue;
        }
        out->eqns.push_back(Eqn{Primitive::transpose, {x}, e.outputs, params::Transpose{.permutation = perm}, e.loc});
        continue;
      }
    }
    out->eqns.push_back(std::move(e));
  }
  for (auto& o : out->outvars) o = sub(o);
  return simplify(ClosedJaxpr{out, j.consts});
}
}  // namespace

JacobianCall::JacobianCall(FlatArgs args, std::initializer_list<int> argnums, bool forward_mode)
    : fa(std::move(args)), diff(argnum_mask(fa, argnums)), argnums(argnums), forward(forward_mode) {
  for (std::size_t arg = 0; arg + 1 < fa.offsets.size(); ++arg)
    for (std::size_t k = fa.offsets[arg]; k < fa.offsets[arg + 1]; ++k)
      if (diff[k] && !is_floating(fa.leaves[k].dtype()))
        throw TypeError(std::string(forward ? "jacfwd" : "jacrev") +
                        " requires float inputs for the arguments it differentiates (JAX: real-valued); argument " +
                        std::to_string(arg) + (fa.offsets[arg + 1] - fa.offsets[arg] > 1 ? " has a leaf " : " is ") +
                        fa.leaves[k].aval().str() + " (every leaf of a differentiated argument must be a float; pass integer data in "
                        "an argument outside argnums)");
}

JacobianCall::~JacobianCall() = default;

// Forward: the Jacobian's columns are the jvp's output tangents over the standard basis of the
// differentiated leaves' space (one batched evaluation, the batch axis put last). Reverse: its rows
// are the vjp's cotangents over the basis of the outputs' space (batched, the batch axis first).
void JacobianCall::run(TransformMemo* memo, const FlatFn& flat, std::source_location loc) {
  const char* who = forward ? "jacfwd" : "jacrev";
  ClosedJaxpr traced = trace_flat(flat, fa.avals(), weak_flags(fa.leaves), loc);
  const std::vector<ShapedArray> outs = traced.out_avals();
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (!differentiable(outs[i]))
      throw TypeError(std::string(who) + " requires float outputs (JAX: real-valued); output leaf " + std::to_string(i) +
                      " is " + outs[i].str() + " (at " + format_location(loc) + ")");
  std::vector<ShapedArray> wrt;  // the differentiated leaves
  for (std::size_t k = 0; k < diff.size(); ++k)
    if (diff[k]) wrt.push_back(fa.leaves[k].aval());
  const std::vector<std::int64_t> in_at = running_offsets(wrt), out_at = running_offsets(outs);
  const std::int64_t n_in = in_at.back(), n_out = out_at.back();
  std::vector<Array> by_leaf;  // (output i, differentiated leaf k) at i * wrt.size() + k, leaves in flatten order
  if (n_in == 0 || n_out == 0) {  // nothing to evaluate: every block is empty
    for (const auto& o : outs)
      for (const auto& w : wrt) by_leaf.push_back(zeros(concat_shapes(o.shape, w.shape), forward ? o.dtype : w.dtype));
  } else {
    by_leaf = evaluate_blocks(memo, traced, outs, wrt, in_at, out_at);
  }
  // In argnums' order (JAX's: the arguments' structures form a tuple in that order; a repeated
  // index repeats its blocks, as grad's gradients).
  std::vector<std::size_t> position(diff.size(), 0);  // leaf -> its index among the differentiated
  for (std::size_t k = 0, w = 0; k < diff.size(); ++k)
    if (diff[k]) position[k] = w++;
  blocks.clear();
  for (std::size_t i = 0; i < outs.size(); ++i)
    for (int a : argnums)
      for (std::size_t k = fa.offsets[static_cast<std::size_t>(a)]; k < fa.offsets[static_cast<std::size_t>(a) + 1]; ++k)
        blocks.push_back(by_leaf[i * wrt.size() + position[k]]);
}

std::vector<Array> JacobianCall::evaluate_blocks(TransformMemo* memo, const ClosedJaxpr& traced, const std::vector<ShapedArray>& outs,
                                                 const std::vector<ShapedArray>& wrt, const std::vector<std::int64_t>& in_at,
                                                 const std::vector<std::int64_t>& out_at) const {
  // The basis: one block per differentiated leaf (forward) or per output (reverse).
  const std::vector<ShapedArray>& space = forward ? wrt : outs;
  const std::vector<std::int64_t>& space_at = forward ? in_at : out_at;
  std::vector<Array> ins = fa.leaves;
  for (std::size_t b = 0; b < space.size(); ++b) ins.push_back(basis_block(space_at.back(), space_at[b], space[b]));
  std::vector<std::uint64_t> tag{forward ? 0x6a6663ull /* "jfc" */ : 0x6a7276ull /* "jrv" */, diff.size()};
  for (bool d : diff) tag.push_back(d);
  const std::size_t nargs = fa.leaves.size();
  auto [program, program_ins] = memoized(memo, traced, ins, std::move(tag), [&](const ClosedJaxpr& jl, std::size_t nc) {
    std::optional<AdModeScope> mode;  // forward: a custom_vjp function inside is an error
    if (forward) mode.emplace(AdMode::forward);
    std::vector<bool> lifted(nc, false);
    lifted.insert(lifted.end(), diff.begin(), diff.end());
    // (consts, args, basis members) -> (outs, output tangents) or (outs, cotangents of the wrt leaves)
    ClosedJaxpr linear = forward ? simplify(jvp_jaxpr(jl, lifted, true)) : vjp_jaxpr(jl, lifted, std::nullopt);
    std::vector<std::int64_t> in_dims(nc + nargs, not_batched), out_dims(outs.size(), not_batched);
    in_dims.resize(nc + nargs + space.size(), 0);
    if (forward)
      for (const auto& o : outs) out_dims.push_back(o.ndim());
    else
      out_dims.resize(outs.size() + wrt.size(), 0);
    ClosedJaxpr batched = simplify(batch_jaxpr(linear, in_dims, space_at.back(), out_dims));
    // One basis block of one dimension is the identity: its products fold away.
    const bool identity = space.size() == 1 && space[0].ndim() == 1;
    return identity ? fold_identity_dots(batched, batched->invars[nc + nargs].id()) : batched;
  });
  std::vector<Array> r = eval_jaxpr(program, program_ins);
  std::vector<Array> by_leaf;
  for (std::size_t i = 0; i < outs.size(); ++i)
    for (std::size_t k = 0; k < wrt.size(); ++k) {
      // forward: output i's tangents, shape out_i.shape + [n_in]; reverse: leaf k's cotangents, [n_out] + leaf_k.shape
      Array block = forward ? part(r[outs.size() + i], outs[i].ndim(), in_at[k], in_at[k + 1])
                            : part(r[outs.size() + k], 0, out_at[i], out_at[i + 1]);
      by_leaf.push_back(reshape(block, concat_shapes(outs[i].shape, wrt[k].shape)));
    }
  return by_leaf;
}

TreeDef JacobianCall::jacobian_def(bool as_tuple) const {
  TreeDef inner;
  if (as_tuple) {
    inner.kind = TreeDef::Kind::node;
    for (int a : argnums) inner.children.push_back(fa.defs.at(static_cast<std::size_t>(a)));
  } else {
    inner = fa.defs.at(static_cast<std::size_t>(argnums.at(0)));
  }
  return compose_tree(out_def, inner);
}

}  // namespace xjax::detail
