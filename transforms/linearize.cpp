// linearize.cpp: composing the passes into reverse mode.
// linearize : (a -> b) -> a -> (b, T a -o T b)            = jvp, then partial_eval
// vjp       : (a -> b) -> a -> (b, T b -o T a)            = linearize, then transpose
// grad      : (a -> R) -> a -> T a                        = vjp seeded with ones
// Each result is one jaxpr built by tracing the evaluation of the pieces, then simplified (DCE,
// CSE), so it composes with every other transform like any user function.
#include "ad.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {

namespace {
thread_local AdMode current_ad_mode = AdMode::forward;
}  // namespace

AdMode ad_mode() { return current_ad_mode; }
AdModeScope::AdModeScope(AdMode mode) : saved_(current_ad_mode) { current_ad_mode = mode; }
AdModeScope::~AdModeScope() { current_ad_mode = saved_; }

ClosedJaxpr simplify(const ClosedJaxpr& j) try {
  std::vector<bool> all(j->outvars.size(), true);
  ClosedJaxpr out = dce(cse(dce(j, all)), all);
#if XJAX_CHECKS
  typecheck(*out.jaxpr);
#endif
  return out;
} catch (...) {
  rethrow_internal("simplify");
}

Linearized linearize_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff_in) try {
  std::size_t n = j->invars.size(), nout = j->outvars.size();
  std::vector<bool> nonzero(n);
  for (std::size_t i = 0; i < n; ++i) nonzero[i] = diff_in[i] && differentiable(j->invars[i].aval());
  ClosedJaxpr jj = jvp_jaxpr(j, nonzero, /*instantiate_out=*/true);
  std::vector<bool> in_unknown(n, false);
  for (std::size_t i = 0; i < n; ++i)
    if (nonzero[i]) in_unknown.push_back(true);
  std::vector<bool> instantiate(nout, false);
  instantiate.resize(2 * nout, true);
  PartialEval pe = partial_eval(jj, in_unknown, instantiate);
  for (std::size_t k = 0; k < nout; ++k)
    if (pe.out_unknown[k]) throw InternalError("linearize", "primal output " + std::to_string(k) + " was staged");
  return Linearized{std::move(pe), nonzero};
} catch (...) {
  rethrow_internal("linearize");
}

ClosedJaxpr vjp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff_in,
                      const std::optional<std::vector<bool>>& seed) try {
  AdModeScope reverse(AdMode::reverse);
  Linearized lin = linearize_jaxpr(j, diff_in);
  std::size_t n = j->invars.size(), nout = j->outvars.size(), nres = lin.pe.num_res;
  std::vector<bool> linear_in(nres, false);
  for (bool nz : lin.diff_in)
    if (nz) linear_in.push_back(true);
  // Outputs seeded with zeros (e.g. aux outputs) are dropped before transposing: no zero
  // cotangent is materialized or propagated for them.
  std::vector<bool> ct_used = seed ? *seed : std::vector<bool>(nout, true);
  ClosedJaxpr bwd = transpose_jaxpr(dce(lin.pe.staged, ct_used), linear_in);

  std::vector<ShapedArray> avals = j.in_avals();
  if (!seed)
    for (const auto& a : j.out_avals()) avals.push_back(a);
  auto body = [&](std::span<const Array> args) {
    auto primals = args.subspan(0, n);
    std::vector<Array> known_out = eval_jaxpr(lin.pe.known, primals);
    std::vector<Array> bwd_in(known_out.begin() + static_cast<std::ptrdiff_t>(nout), known_out.end());
    for (std::size_t k = 0; k < nout; ++k) {
      if (!ct_used[k]) continue;
      const ShapedArray& aval = atom_aval(j->outvars[k]);
      bwd_in.push_back(seed ? broadcast_to(scalar(1.0, aval.dtype), aval.shape) : args[n + k]);
    }
    std::vector<Array> cts = eval_jaxpr(bwd, bwd_in);
    std::vector<Array> out(known_out.begin(), known_out.begin() + static_cast<std::ptrdiff_t>(nout));
    std::size_t c = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!diff_in[i]) continue;
      const ShapedArray& a = j->invars[i].aval();
      out.push_back(lin.diff_in[i] ? cts[c++] : broadcast_to(scalar(0.0, a.dtype), a.shape));
    }
    return out;
  };
  return simplify(trace_flat(body, avals));
} catch (...) {
  rethrow_internal("vjp");
}

}  // namespace xjax::detail
