// custom_derivatives.cpp: every rule of custom_jvp_call, custom_vjp_call and custom_lin.
//   custom_jvp_call[call_jaxpr, jvp, num_consts] consts... args...   f with a user jvp rule
//   custom_vjp_call[call_jaxpr, fwd_jaxpr, bwd, num_consts] consts... args...
//   custom_lin[bwd] res... tangents...    the linear map whose transpose is the user's bwd
// Under jvp, custom_vjp_call runs fwd (primal outputs and residuals) and emits custom_lin on the
// tangents; partial evaluation stages custom_lin with the residuals as known inputs; transposing
// custom_lin calls bwd. So grad uses the user's bwd. Forward mode the user asked for (jvp,
// linearize, jacfwd: AdMode::forward) of a custom_vjp function is an error as soon as its jvp rule
// runs, whether or not the result is used (JAX's rule), so the outcome never depends on DCE.
#include "higher_order.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

struct JvpRuleObject : ParamObject {
  JvpFlatRule rule;
  std::string repr() const override { return "<custom jvp rule>"; }
};

struct BwdObject : ParamObject {
  BwdFlat bwd;
  std::vector<ShapedArray> out_avals;  // avals of the tangent outputs (f's outputs)
  std::vector<ShapedArray> in_avals;   // avals of the primal arguments (bwd's results)
  std::size_t num_res = 0;
  std::string repr() const override { return "<custom vjp bwd>"; }
};

template <class T> const T& object(const Params& ps, std::string_view name) {
  return static_cast<const T&>(*param<std::shared_ptr<const ParamObject>>(ps, name));
}

const ClosedJaxpr& call_jaxpr(const Params& ps) { return *param<ClosedJaxprPtr>(ps, "call_jaxpr"); }

std::vector<Array> with_consts(const ClosedJaxpr& j, std::span<const Array> args) {
  std::vector<Array> in = j.consts;
  in.insert(in.end(), args.begin(), args.end());
  return in;
}

}  // namespace

ClosedJaxpr consts_as_inputs(const ClosedJaxpr& j) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->invars = j->constvars;
  out->invars.insert(out->invars.end(), j->invars.begin(), j->invars.end());
  out->constvars.clear();
  return ClosedJaxpr{out, {}};
}

// ---- custom_jvp_call -------------------------------------------------------------------------

std::vector<Array> custom_jvp_call_flat(const ClosedJaxpr& f, JvpFlatRule rule, std::span<const Array> args) {
  auto obj = std::make_shared<JvpRuleObject>();
  obj->rule = std::move(rule);
  Params ps{{"call_jaxpr", std::make_shared<const ClosedJaxpr>(consts_as_inputs(f))},
            {"jvp", std::shared_ptr<const ParamObject>(obj)},
            {"num_consts", static_cast<std::int64_t>(f.consts.size())}};
  return bind(Primitive::custom_jvp_call, with_consts(f, args), std::move(ps));
}

std::vector<ShapedArray> custom_jvp_call_abstract_eval(std::span<const ShapedArray>, const Params& ps) {
  return call_jaxpr(ps).out_avals();
}

// f itself, evaluated
std::vector<Array> custom_jvp_call_impl(std::span<const Array> in, const Params& ps) { return eval_jaxpr(call_jaxpr(ps), in); }

// d f(x) = rule(x, dx): the user's rule (its own operations are differentiated normally later)
JvpOut custom_jvp_call_jvp(const JvpArgs& a) {
  auto nc = static_cast<std::size_t>(param_int(a.params, "num_consts"));
  std::vector<Array> tangents;
  for (std::size_t i = nc; i < a.t.size(); ++i) tangents.push_back(a.t[i].instantiate());
  const auto& rule = object<JvpRuleObject>(a.params, "jvp").rule;
  auto [outs, touts] = call_user([&] { return rule(a.x.subspan(nc), tangents); });
  JvpOut r{outs, {}};
  auto avals = call_jaxpr(a.params).out_avals();
  if (outs.size() != avals.size() || touts.size() != avals.size())
    throw TypeError("custom_jvp: the rule returned a different number of outputs than the function");
  for (std::size_t k = 0; k < touts.size(); ++k) {
    if (touts[k].aval() != avals[k] || outs[k].aval() != avals[k])
      throw TypeError("custom_jvp: the rule's output " + std::to_string(k) + " is " + touts[k].aval().str() +
                      ", the function's is " + avals[k].str());
    r.tangents.push_back(touts[k]);
  }
  return r;
}

std::vector<Tangent> custom_jvp_call_transpose(const TransposeArgs& a) {
  throw TransformError("custom_jvp_call is not linear (at " + where(a.loc) + ")");
}

// ---- custom_vjp_call -------------------------------------------------------------------------

namespace {
// (No source location: a custom_vjp_call equation records the line of custom_vjp_call_flat, not
// the user's.)
[[noreturn]] void no_forward_mode() {
  throw TransformError("forward-mode differentiation (jvp, linearize, jacfwd) of a custom_vjp function is not "
                       "supported; use grad / vjp / jacrev, or define the function with custom_jvp");
}
}  // namespace

std::vector<Array> custom_vjp_call_flat(const ClosedJaxpr& fwd, std::size_t num_out, BwdFlat bwd, std::span<const Array> args) {
  ClosedJaxpr fwd_in = consts_as_inputs(fwd);
  std::vector<bool> keep(fwd->outvars.size(), false);
  for (std::size_t k = 0; k < num_out; ++k) keep[k] = true;
  auto obj = std::make_shared<BwdObject>();
  obj->bwd = std::move(bwd);
  auto outs = fwd.out_avals();
  obj->out_avals.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(num_out));
  for (const auto& x : args) obj->in_avals.push_back(x.aval());
  obj->num_res = outs.size() - num_out;
  Params ps{{"call_jaxpr", std::make_shared<const ClosedJaxpr>(dce(fwd_in, keep))},
            {"fwd_jaxpr", std::make_shared<const ClosedJaxpr>(fwd_in)},
            {"bwd", std::shared_ptr<const ParamObject>(obj)},
            {"num_consts", static_cast<std::int64_t>(fwd.consts.size())}};
  return bind(Primitive::custom_vjp_call, with_consts(fwd, args), std::move(ps));
}

std::vector<ShapedArray> custom_vjp_call_abstract_eval(std::span<const ShapedArray>, const Params& ps) {
  return call_jaxpr(ps).out_avals();
}

std::vector<Array> custom_vjp_call_impl(std::span<const Array> in, const Params& ps) { return eval_jaxpr(call_jaxpr(ps), in); }

// (out, res) = fwd(x);  d out = custom_lin(res, dx), whose transpose is bwd(res, .)
JvpOut custom_vjp_call_jvp(const JvpArgs& a) {
  if (ad_mode() == AdMode::forward) no_forward_mode();
  auto nc = static_cast<std::size_t>(param_int(a.params, "num_consts"));
  const auto& obj = object<BwdObject>(a.params, "bwd");
  std::vector<Array> all = eval_jaxpr(*param<ClosedJaxprPtr>(a.params, "fwd_jaxpr"), a.x);
  std::size_t nout = obj.out_avals.size();
  JvpOut r{std::vector<Array>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nout)), {}};
  std::vector<Array> lin_in(all.begin() + static_cast<std::ptrdiff_t>(nout), all.end());
  for (std::size_t i = nc; i < a.t.size(); ++i) lin_in.push_back(a.t[i].instantiate());
  Params ps{{"bwd", param<std::shared_ptr<const ParamObject>>(a.params, "bwd")}};
  for (auto& t : bind(Primitive::custom_lin, lin_in, std::move(ps), a.loc)) r.tangents.push_back(t);
  return r;
}

std::vector<Tangent> custom_vjp_call_transpose(const TransposeArgs& a) {
  throw TransformError("custom_vjp_call is not linear (at " + where(a.loc) + ")");
}

// ---- custom_lin ------------------------------------------------------------------------------

std::vector<ShapedArray> custom_lin_abstract_eval(std::span<const ShapedArray>, const Params& ps) {
  return object<BwdObject>(ps, "bwd").out_avals;
}

// Only transposed: evaluating or differentiating it would be forward mode of the custom_vjp function.
std::vector<Array> custom_lin_impl(std::span<const Array>, const Params&) {
  no_forward_mode();
}
JvpOut custom_lin_jvp(const JvpArgs&) { no_forward_mode(); }

// custom_lin(res, .)^T ct = bwd(res, ct)
std::vector<Tangent> custom_lin_transpose(const TransposeArgs& a) {
  const auto& obj = object<BwdObject>(a.params, "bwd");
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
    if (got[k].aval() != obj.in_avals[k])
      throw TypeError("custom_vjp: bwd's cotangent " + std::to_string(k) + " is " + got[k].aval().str() +
                      ", the argument is " + obj.in_avals[k].str());
    out.push_back(got[k]);
  }
  return out;
}

}  // namespace xjax::detail
