// custom_derivatives.cpp: every rule of custom_jvp_call, custom_vjp_call and custom_lin.
//   custom_jvp_call[call_jaxpr, jvp, num_consts] consts... args...   f with a user jvp rule
//   custom_vjp_call[call_jaxpr, fwd_jaxpr, bwd, num_consts] consts... args...
//   custom_lin[bwd] res... tangents...    the linear map whose transpose is the user's bwd
// Under jvp, custom_vjp_call runs fwd (primal outputs and residuals) and emits custom_lin on the
// tangents; partial evaluation stages custom_lin with the residuals as known inputs; transposing
// custom_lin calls bwd. So grad uses the user's bwd. Forward mode the user asked for (jvp,
// linearize, jacfwd: AdMode::forward) of a custom_vjp function is an error as soon as its jvp rule
// runs, whether or not the result is used (JAX's rule), so the outcome never depends on DCE.
#include <algorithm>

#include "higher_order.hpp"
#include "loops/custom_objects.hpp"
#include "per_thread.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

std::vector<Array> with_consts(const ClosedJaxpr& j, std::span<const Array> args) {
  std::vector<Array> in = j.consts;
  in.insert(in.end(), args.begin(), args.end());
  return in;
}

// A captured value (one of the call's `nc` leading consts, the last `nrc` of them the rule's)
// with a tangent: the user's rule speaks of the explicit arguments only, so its derivative would
// be dropped (a silent zero). JAX raises CustomJVPException / CustomVJPException here.
void require_constant_captures(const char* what, const JvpArgs& a, std::size_t nc, std::size_t nrc = 0) {
  for (std::size_t i = 0; i < nc; ++i)
    if (!a.t[i].is_zero())
      throw TransformError(std::string(what) + ": differentiated with respect to a value its " +
                           (i + nrc >= nc ? "rule" : "function") + " captures (a " + a.t[i].aval().str() +
                           " closed over, at " + format_location(a.loc) +
                           "); the rule only covers the explicit arguments: pass that value as an argument");
}

/// When only the rule's consts (the call's last `nrc` of `nc`) carry tangents, the function itself
/// is not differentiated (its value does not read them): the call again, tangents zero, as JAX
/// binds the primal when the arguments' tangents are all zero (the rule never runs).
std::optional<JvpOut> undifferentiated(const JvpArgs& a, std::size_t nc, std::size_t nrc) {
  for (std::size_t i = 0; i < a.t.size(); ++i)
    if ((i + nrc < nc || i >= nc) && !a.t[i].is_zero()) return std::nullopt;
  JvpOut r{bind(a.prim, std::vector<Array>(a.x.begin(), a.x.end()), a.params, a.loc), {}};
  for (const auto& o : r.primals) r.tangents.push_back(Tangent::zero(o.aval()));
  return r;
}

/// The call's jaxpr taking j's consts, then `extra` inputs it does not read (values its rules
/// carry), then j's inputs.
ClosedJaxpr with_unused_inputs(const ClosedJaxpr& j, std::span<const Array> extra) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->invars = j->constvars;
  for (const auto& x : extra) out->invars.emplace_back(x.aval());
  out->invars.insert(out->invars.end(), j->invars.begin(), j->invars.end());
  out->constvars.clear();
  return ClosedJaxpr{out, {}};
}

/// custom_jvp_call(f) with `obj` as its rule, which reads `rule_consts` (operands after f's consts).
std::vector<Array> bind_custom_jvp_call(const ClosedJaxpr& f, std::shared_ptr<JvpRuleObject> obj,
                                        std::span<const Array> rule_consts, std::span<const Array> args,
                                        std::source_location loc) {
  obj->weak = weak_flags(args);
  obj->num_rule_consts = rule_consts.size();
  params::CustomJvpCall ps{.call_jaxpr = std::make_shared<const ClosedJaxpr>(with_unused_inputs(f, rule_consts)),
                           .jvp = obj,
                           .num_consts = static_cast<std::int64_t>(f.consts.size() + rule_consts.size())};
  return bind(Primitive::custom_jvp_call, cat(cat(f.consts, rule_consts), args), std::move(ps), loc);
}

}  // namespace

// ---- custom_jvp_call -------------------------------------------------------------------------

std::vector<Array> custom_jvp_call_flat(const ClosedJaxpr& f, JvpFlatRule rule, std::span<const Array> args,
                                        std::source_location loc, std::optional<std::uint64_t> rule_key) {
  auto obj = std::make_shared<JvpRuleObject>();
  obj->rule = std::move(rule);
  if (rule_key) obj->key = std::vector<std::uint64_t>{*rule_key};
  return bind_custom_jvp_call(f, std::move(obj), {}, args, loc);
}

namespace {
thread_local std::uint64_t callable_rules = 0;

/// One more on `count` while alive (a thread's rules or bwds being traced).
class CountWhile {
 public:
  explicit CountWhile(int& count) : count_(count) { ++count_; }
  ~CountWhile() { --count_; }
  CountWhile(const CountWhile&) = delete;
  CountWhile& operator=(const CountWhile&) = delete;

 private:
  int& count_;
};
}  // namespace

std::uint64_t callable_rules_bound() { return callable_rules; }

// The rule traced at the arguments' types ((primals, tangents) -> (outs, tangent outs)); what it
// captures (rc) becomes operands of the call, handed back to it before the primals.
std::vector<Array> custom_jvp_call_user(const ClosedJaxpr& f, const JvpFlatRule& rule, std::span<const Array> args,
                                        std::source_location loc) {
  // A call made while a rule is traced here (JAX's documented rule calls f itself) keeps its rule
  // as the callable, run when differentiated: tracing it too recursed forever (and nested custom
  // functions traced 2^depth rules).
  static thread_local int tracing_rules = 0;
  if (tracing_rules > 0) {
    ++callable_rules;
    return custom_jvp_call_flat(f, rule, args, loc);
  }
  const std::size_t n = args.size();
  const std::vector<ShapedArray> avals = avals_of(args);
  const std::vector<char> weak = weak_flags(args);
  std::size_t nout = 0;
  const ClosedJaxpr traced = trace_flat(
      [&](std::span<const Array> xs) {
        const CountWhile tracing(tracing_rules);
        auto [outs, touts] = call_user([&] { return rule(xs.first(n), xs.subspan(n)); });
        nout = outs.size();
        outs.insert(outs.end(), touts.begin(), touts.end());
        return outs;
      },
      cat(avals, avals), cat(weak, weak), loc);
  auto obj = std::make_shared<JvpRuleObject>();
  obj->rule = [rule_in = consts_as_inputs(traced), nout](std::span<const Array> rc_and_p, std::span<const Array> t) {
    std::vector<Array> all = eval_jaxpr(rule_in, cat(std::vector<Array>(rc_and_p.begin(), rc_and_p.end()), t));
    return std::pair{std::vector<Array>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nout)),
                     std::vector<Array>(all.begin() + static_cast<std::ptrdiff_t>(nout), all.end())};
  };
  return bind_custom_jvp_call(f, std::move(obj), traced.consts, args, loc);
}

// d f(x) = rule(x, dx): the user's rule (its own operations are differentiated normally later)
JvpOut custom_jvp_call_jvp(const JvpArgs& a) {
  const auto& ps = a.params.get<params::CustomJvpCall>();
  auto nc = static_cast<std::size_t>(ps.num_consts);
  const auto& obj = object<JvpRuleObject>(ps.jvp);
  if (auto r = undifferentiated(a, nc, obj.num_rule_consts)) return *r;
  require_constant_captures("custom_jvp", a, nc, obj.num_rule_consts);
  std::vector<Array> tangents;
  for (std::size_t i = nc; i < a.t.size(); ++i) tangents.push_back(a.t[i].instantiate());
  // the rule's consts, then the arguments
  std::vector<Array> primals(a.x.begin() + static_cast<std::ptrdiff_t>(nc - obj.num_rule_consts),
                             a.x.begin() + static_cast<std::ptrdiff_t>(nc));
  for (auto& p : with_weak_types({a.x.begin() + static_cast<std::ptrdiff_t>(nc), a.x.end()}, obj.weak, true))
    primals.push_back(std::move(p));
  tangents = with_weak_types(std::move(tangents), obj.weak, true);
  auto [outs, touts] = call_user([&] { return obj.rule(primals, tangents); });
  JvpOut r{outs, {}};
  auto avals = ps.call_jaxpr->out_avals();
  if (outs.size() != avals.size() || touts.size() != avals.size())
    throw TypeError("custom_jvp: the rule returned a different number of outputs than the function");
  for (std::size_t k = 0; k < touts.size(); ++k) {
    if (outs[k].aval() != avals[k])
      throw TypeError("custom_jvp: the rule's primal output " + std::to_string(k) + " is " + outs[k].aval().str() +
                      ", the function's is " + avals[k].str());
    if (touts[k].aval() != avals[k])
      throw TypeError("custom_jvp: the rule's tangent output " + std::to_string(k) + " is " + touts[k].aval().str() +
                      ", the function's is " + avals[k].str());
    r.tangents.push_back(touts[k]);
  }
  return r;
}

std::vector<Tangent> custom_jvp_call_transpose(const TransposeArgs& a) {
  throw TransformError("custom_jvp_call is not linear (at " + format_location(a.loc) + ")");
}

// ---- custom_vjp_call -------------------------------------------------------------------------

namespace {
struct FwdsTraced {
  std::vector<const void*> selves;  // the custom_vjps whose fwd is being traced
};
std::vector<const void*>& fwds_traced() { return per_thread_always<FwdsTraced>().selves; }
}  // namespace

FwdTraceGuard::FwdTraceGuard(const void* self) : self_(self) {
  auto& traced = fwds_traced();
  reentered_ = std::find(traced.begin(), traced.end(), self) != traced.end();
  if (!reentered_) traced.push_back(self);
}

void FwdTraceGuard::release() {
  if (reentered_ || released_) return;
  released_ = true;
  auto& traced = fwds_traced();
  traced.erase(std::find(traced.begin(), traced.end(), self_));
}

FwdTraceGuard::~FwdTraceGuard() { release(); }

namespace {

/// fwd returning, after its own residuals, `extra` values (consts of the result).
ClosedJaxpr with_extra_residuals(const ClosedJaxpr& fwd, std::span<const Array> extra) {
  auto out = std::make_shared<Jaxpr>(*fwd.jaxpr);
  for (const auto& x : extra) {
    out->constvars.emplace_back(x.aval());
    out->outvars.emplace_back(out->constvars.back());
  }
  return ClosedJaxpr{out, cat(fwd.consts, extra)};
}

}  // namespace

// Under a trace, bwd is traced at the residuals' and outputs' types now: what it captures (bc)
// travels as residuals that fwd passes through, so bwd(res..., bc..., cts) never holds a tracer of
// a trace that has ended by the time the transpose calls it.
std::vector<Array> custom_vjp_call_flat(const ClosedJaxpr& fwd_user, std::size_t num_out, BwdFlat bwd,
                                        std::span<const Array> args) {
  ClosedJaxpr fwd = fwd_user;
  std::size_t nbc = 0;
  // A custom_vjp called while a bwd is traced here (a bwd calling its own function, as JAX allows)
  // keeps its bwd as the callable, run at the transpose: tracing it too would recurse forever.
  static thread_local int tracing_bwds = 0;
  if (tracing_bwds > 0) ++callable_rules;
  if (tracing_active() && tracing_bwds == 0) {
    const CountWhile tracing(tracing_bwds);
    const std::vector<ShapedArray> fwd_outs = fwd.out_avals();
    const std::size_t nres = fwd_outs.size() - num_out;
    std::vector<ShapedArray> in(fwd_outs.begin() + static_cast<std::ptrdiff_t>(num_out), fwd_outs.end());
    in.insert(in.end(), fwd_outs.begin(), fwd_outs.begin() + static_cast<std::ptrdiff_t>(num_out));
    const ClosedJaxpr traced = trace_flat(
        [&](std::span<const Array> xs) { return call_user([&] { return bwd(xs.first(nres), xs.subspan(nres)); }); }, in);
    nbc = traced.consts.size();
    fwd = with_extra_residuals(fwd, traced.consts);
    bwd = [bwd_in = consts_as_inputs(traced), nres, nbc](std::span<const Array> res, std::span<const Array> cts) {
      std::vector<Array> all(res.begin() + static_cast<std::ptrdiff_t>(nres), res.end());  // bc
      all.insert(all.end(), res.begin(), res.begin() + static_cast<std::ptrdiff_t>(nres));
      all.insert(all.end(), cts.begin(), cts.end());
      return eval_jaxpr(bwd_in, all);
    };
  }
  ClosedJaxpr fwd_in = consts_as_inputs(fwd);
  std::vector<bool> keep(fwd->outvars.size(), false);
  for (std::size_t k = 0; k < num_out; ++k) keep[k] = true;
  auto obj = std::make_shared<BwdObject>();
  obj->bwd = std::move(bwd);
  obj->num_bwd_consts = nbc;
  auto outs = fwd.out_avals();
  obj->out_avals.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(num_out));
  for (const auto& x : args) obj->in_avals.push_back(x.aval());
  obj->in_weak = weak_flags(args);
  obj->num_res = outs.size() - num_out;
  params::CustomVjpCall ps{.call_jaxpr = std::make_shared<const ClosedJaxpr>(dce(fwd_in, keep)),
                           .fwd_jaxpr = std::make_shared<const ClosedJaxpr>(fwd_in),
                           .bwd = obj,
                           .num_consts = static_cast<std::int64_t>(fwd.consts.size())};
  return bind(Primitive::custom_vjp_call, with_consts(fwd, args), std::move(ps));
}

// (out, res) = fwd(x);  d out = custom_lin(res, dx), whose transpose is bwd(res, .)
JvpOut custom_vjp_call_jvp(const JvpArgs& a) {
  const auto& ps = a.params.get<params::CustomVjpCall>();
  auto nc = static_cast<std::size_t>(ps.num_consts);
  const auto& obj = object<BwdObject>(ps.bwd);
  if (auto r = undifferentiated(a, nc, obj.num_bwd_consts)) return *r;
  if (ad_mode() == AdMode::forward) custom_vjp_no_forward_mode();
  require_constant_captures("custom_vjp", a, nc, obj.num_bwd_consts);
  std::vector<Array> all = eval_jaxpr(*ps.fwd_jaxpr, a.x);
  std::size_t nout = obj.out_avals.size();
  JvpOut r{std::vector<Array>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nout)), {}};
  std::vector<Array> lin_in(all.begin() + static_cast<std::ptrdiff_t>(nout), all.end());
  for (std::size_t i = nc; i < a.t.size(); ++i) lin_in.push_back(a.t[i].instantiate());
  for (auto& t : bind(Primitive::custom_lin, lin_in, params::CustomLin{.bwd = ps.bwd}, a.loc)) r.tangents.push_back(t);
  return r;
}

std::vector<Tangent> custom_vjp_call_transpose(const TransposeArgs& a) {
  throw TransformError("custom_vjp_call is not linear (at " + format_location(a.loc) + ")");
}

// ---- custom_lin ------------------------------------------------------------------------------

JvpOut custom_lin_jvp(const JvpArgs&) { custom_vjp_no_forward_mode(); }

// custom_lin(res, .)^T ct = bwd(res, ct)
std::vector<Tangent> custom_lin_transpose(const TransposeArgs& a) {
  const auto& obj = object<BwdObject>(a.params.get<params::CustomLin>().bwd);
  std::vector<Array> res, cts;
  for (std::size_t i = 0; i < obj.num_res; ++i) {
    if (a.in[i].is_linear()) throw TransformError("custom_vjp: a residual depends on the tangents");
    res.push_back(a.in[i].value);
  }
  for (const auto& c : a.ct) cts.push_back(c.instantiate());
  std::vector<Array> got = call_user([&] { return obj.bwd(res, cts); });
  if (got.size() != obj.in_avals.size())
    throw TypeError("custom_vjp: bwd returned " + std::to_string(got.size()) + " cotangent leaves for " +
                    std::to_string(obj.in_avals.size()) + " argument leaves");
  std::vector<Tangent> out;
  for (std::size_t i = 0; i < obj.num_res; ++i) out.push_back(Tangent::zero(a.in[i].aval));
  for (std::size_t k = 0; k < got.size(); ++k) {
    // A weakly typed argument's dtype stands for a C++ number: its cotangent comes in that dtype.
    const bool weak_arg = k < obj.in_weak.size() && obj.in_weak[k];
    if (weak_arg && got[k].shape() == obj.in_avals[k].shape && got[k].dtype() != obj.in_avals[k].dtype &&
        is_floating(got[k].dtype()))
      got[k] = astype(got[k], obj.in_avals[k].dtype);
    if (got[k].aval() != obj.in_avals[k])
      throw TypeError("custom_vjp: bwd's cotangent " + std::to_string(k) + " is " + got[k].aval().str() +
                      ", the argument is " + obj.in_avals[k].str());
    out.push_back(got[k]);
  }
  return out;
}

// ---- batching --------------------------------------------------------------------------------
// The custom rules are batched too: the user's jvp rule and bwd are traced at one member's types
// and the trace batched, so grad(vmap(f)) and vmap(grad(f)) still use them. As in JAX, only the
// batched operands are batched (at axis 0); an unbatched one (a weight the members share) stays
// as it is, in the call and in the rules. Outputs, residuals and cotangents of f's outputs are
// always batched; a bwd's cotangent for an unbatched argument is summed over the members.

namespace {

ShapedArray member_aval(ShapedArray batched) {
  batched.shape.erase(batched.shape.begin());
  return batched;
}

ShapedArray batched_aval(ShapedArray member, std::int64_t size) {
  member.shape.insert(member.shape.begin(), size);
  return member;
}

/// The avals of one member: a batched operand's without its leading axis, an unbatched one's own.
std::vector<ShapedArray> member_avals(std::span<const Array> ops, const std::vector<bool>& batched) {
  std::vector<ShapedArray> out;
  for (std::size_t i = 0; i < ops.size(); ++i) out.push_back(batched[i] ? member_aval(ops[i].aval()) : ops[i].aval());
  return out;
}

/// fn (a function of flat arrays, at one member's avals `member`) applied to arrays of which those
/// with `batched` set carry the batch at axis 0; every output batched at 0.
std::vector<Array> call_batched(const std::function<std::vector<Array>(std::span<const Array>)>& fn,
                                const std::vector<ShapedArray>& member, const std::vector<bool>& batched,
                                std::span<const Array> in, std::int64_t size) {
  ClosedJaxpr traced = trace_flat([&](std::span<const Array> args) { return call_user([&] { return fn(args); }); },
                                  member);
  std::vector<bool> force(traced->outvars.size(), true);
  return eval_jaxpr(batch_jaxpr_leading(traced, batched, size, force, nullptr), in);
}

/// obj's bwd batched: residuals and cotangents batched at 0 in; out, the cotangent of each argument
/// batched at 0 where arg_batched says so, summed over the members where not (the argument is
/// shared, so its cotangent is the sum of the members').
std::shared_ptr<BwdObject> batched_bwd(const BwdObject& obj, std::vector<ShapedArray> res_member, std::int64_t size,
                                       const std::vector<bool>& arg_batched) {
  auto out = std::make_shared<BwdObject>();
  out->num_res = obj.num_res;
  out->num_bwd_consts = obj.num_bwd_consts;
  out->in_weak = obj.in_weak;
  for (const auto& a : obj.out_avals) out->out_avals.push_back(batched_aval(a, size));
  for (std::size_t k = 0; k < obj.in_avals.size(); ++k)
    out->in_avals.push_back(arg_batched[k] ? batched_aval(obj.in_avals[k], size) : obj.in_avals[k]);
  std::vector<ShapedArray> member = res_member;
  member.insert(member.end(), obj.out_avals.begin(), obj.out_avals.end());
  out->bwd = [bwd = obj.bwd, member, nres = obj.num_res, size, arg_batched](std::span<const Array> res,
                                                                           std::span<const Array> cts) {
    std::vector<Array> in(res.begin(), res.end());
    in.insert(in.end(), cts.begin(), cts.end());
    auto fn = [&](std::span<const Array> args) { return bwd(args.subspan(0, nres), args.subspan(nres)); };
    std::vector<Array> got = call_batched(fn, member, std::vector<bool>(member.size(), true), in, size);
    // An unbatched argument's cotangent is the sum over the batch, in its own dtype (lax.reduce_sum);
    // an integer or bool argument's is zeros of its own dtype (xj::sum would widen it to i64 / u64,
    // which the dtype check of bwd's cotangents refuses).
    for (std::size_t k = 0; k < got.size() && k < arg_batched.size(); ++k)
      if (!arg_batched[k])
        got[k] = is_floating(got[k].dtype()) ? sum(got[k], {0})
                                             : zeros(Shape(got[k].shape().begin() + 1, got[k].shape().end()), got[k].dtype());
    return got;
  };
  return out;
}

std::vector<bool> tail(const std::vector<bool>& v, std::size_t from) {
  return std::vector<bool>(v.begin() + static_cast<std::ptrdiff_t>(from), v.end());
}

// The key of a keyed rule batched over `size` members: its own key, then what the batching adds
// (the size, each argument's member type and whether it is batched); none for a rule without one.
std::optional<std::vector<std::uint64_t>> batched_rule_key(const std::optional<std::vector<std::uint64_t>>& key,
                                                           std::span<const ShapedArray> member,
                                                           const std::vector<bool>& batched, std::int64_t size) {
  if (!key) return std::nullopt;
  std::vector<std::uint64_t> w = *key;
  w.push_back(static_cast<std::uint64_t>(size));
  w.push_back(member.size());
  for (std::size_t i = 0; i < member.size(); ++i) {
    w.push_back(batched[i]);
    w.push_back(static_cast<std::uint64_t>(member[i].dtype));
    w.push_back(member[i].shape.size());
    for (auto d : member[i].shape) w.push_back(static_cast<std::uint64_t>(d));
  }
  return w;
}

}  // namespace

// custom_jvp_call(f, rule)[b] = custom_jvp_call(vmap f, vmap rule)
BatchOut custom_jvp_call_batch(const BatchArgs& a) {
  const auto& ps = a.params.get<params::CustomJvpCall>();
  std::vector<Array> ops = batch_to_front(a);
  std::vector<bool> batched = batched_mask(a.dims);
  auto nout = ps.call_jaxpr->jaxpr->outvars.size();
  ClosedJaxpr call = batch_jaxpr_leading(*ps.call_jaxpr, batched, a.size, std::vector<bool>(nout, true), nullptr);
  auto nc = static_cast<std::size_t>(ps.num_consts);
  const auto& old = object<JvpRuleObject>(ps.jvp);
  const std::size_t nrc = old.num_rule_consts, first = nc - nrc;
  // The rule takes (its consts and the primals, tangents); a tangent is batched as its primal is.
  std::vector<bool> batched_pt = tail(batched, first);
  std::vector<ShapedArray> member_pt = member_avals(std::span<const Array>(ops).subspan(first), batched_pt);
  const std::vector<ShapedArray> member_t(member_pt.begin() + static_cast<std::ptrdiff_t>(nrc), member_pt.end());
  const std::vector<bool> batched_t(batched_pt.begin() + static_cast<std::ptrdiff_t>(nrc), batched_pt.end());
  member_pt.insert(member_pt.end(), member_t.begin(), member_t.end());
  batched_pt.insert(batched_pt.end(), batched_t.begin(), batched_t.end());
  auto obj = std::make_shared<JvpRuleObject>();
  obj->key = batched_rule_key(old.key, member_pt, batched_pt, a.size);
  obj->weak = old.weak;
  obj->num_rule_consts = nrc;
  obj->rule = [rule = old.rule, weak = obj->weak, nrc, member_pt, batched_pt,
               size = a.size](std::span<const Array> p, std::span<const Array> t) {
    const std::size_t n = t.size();
    std::size_t m = 0;
    auto fn = [&](std::span<const Array> args) {  // the member's tracers, weak where the call's arguments were
      const auto part = [&](std::size_t from, std::size_t count) {
        return with_weak_types({args.begin() + static_cast<std::ptrdiff_t>(from), args.begin() + static_cast<std::ptrdiff_t>(from + count)}, weak, true);
      };
      std::vector<Array> primals(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(nrc));
      for (auto& x : part(nrc, n)) primals.push_back(std::move(x));
      auto [outs, touts] = rule(primals, part(nrc + n, n));
      m = outs.size();
      outs.insert(outs.end(), touts.begin(), touts.end());
      return outs;
    };
    std::vector<Array> in(p.begin(), p.end());
    in.insert(in.end(), t.begin(), t.end());
    std::vector<Array> all_out = call_batched(fn, member_pt, batched_pt, in, size);
    return std::pair{std::vector<Array>(all_out.begin(), all_out.begin() + static_cast<std::ptrdiff_t>(m)),
                     std::vector<Array>(all_out.begin() + static_cast<std::ptrdiff_t>(m), all_out.end())};
  };
  params::CustomJvpCall bps{.call_jaxpr = std::make_shared<const ClosedJaxpr>(std::move(call)), .jvp = obj,
                            .num_consts = ps.num_consts};
  auto outs = bind(a.prim, ops, bps, a.loc);
  return {outs, BatchDims(outs.size(), 0)};
}

// custom_vjp_call(f, fwd, bwd)[b] = custom_vjp_call(vmap f, vmap fwd, vmap bwd)
BatchOut custom_vjp_call_batch(const BatchArgs& a) {
  const auto& ps = a.params.get<params::CustomVjpCall>();
  const auto& obj = object<BwdObject>(ps.bwd);
  std::vector<Array> ops = batch_to_front(a);
  std::vector<bool> batched = batched_mask(a.dims);
  auto batched_jaxpr = [&](const ClosedJaxpr& j) {
    return std::make_shared<const ClosedJaxpr>(
        batch_jaxpr_leading(j, batched, a.size, std::vector<bool>(j->outvars.size(), true), nullptr));
  };
  auto fwd_outs = ps.fwd_jaxpr->out_avals();
  std::vector<ShapedArray> res_member(fwd_outs.begin() + static_cast<std::ptrdiff_t>(obj.out_avals.size()), fwd_outs.end());
  params::CustomVjpCall bps{.call_jaxpr = batched_jaxpr(*ps.call_jaxpr), .fwd_jaxpr = batched_jaxpr(*ps.fwd_jaxpr),
                            .bwd = batched_bwd(obj, res_member, a.size, tail(batched, static_cast<std::size_t>(ps.num_consts))),
                            .num_consts = ps.num_consts};
  auto outs = bind(a.prim, ops, bps, a.loc);
  return {outs, BatchDims(outs.size(), 0)};
}

// custom_lin(res, t)[b] = custom_lin with vmap bwd
BatchOut custom_lin_batch(const BatchArgs& a) {
  const auto& obj = object<BwdObject>(a.params.get<params::CustomLin>().bwd);
  // Residuals and tangents all batched (unbatched ones broadcast): a tangent's batching is not
  // known when the bwd is called, and custom_lin is linear in them, so this costs one broadcast.
  std::vector<Array> ops;
  for (std::size_t i = 0; i < a.x.size(); ++i) ops.push_back(move_batch_dim(a.x[i], a.dims[i], 0, a.size));
  std::vector<ShapedArray> res_member;
  for (std::size_t i = 0; i < obj.num_res; ++i) res_member.push_back(member_aval(ops[i].aval()));
  auto outs = bind(a.prim, ops,
                   params::CustomLin{.bwd = batched_bwd(obj, res_member, a.size, std::vector<bool>(obj.in_avals.size(), true))},
                   a.loc);
  return {outs, BatchDims(outs.size(), 0)};
}

}  // namespace xjax::detail
