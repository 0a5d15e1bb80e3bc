// ad.hpp: the internal interface of the autodiff passes (jvp, partial_eval, transpose, dce, cse,
// linearize) and of the helpers their rules share. Not installed.
#pragma once
#include <functional>
#include <optional>
#include <unordered_set>
#include <span>
#include <vector>

#include "internal.hpp"
#include "passes.hpp"

namespace xjax::detail {

/// A tangent or cotangent: a value, or the symbolic zero of `aval` (no array materialized).
class Tangent {
 public:
  Tangent() = default;
  Tangent(Array v) : aval_(v.aval()), value_(std::move(v)) {}  // NOLINT: implicit on purpose
  static Tangent zero(ShapedArray aval) {
    Tangent t;
    t.aval_ = std::move(aval);
    return t;
  }
  bool is_zero() const { return !value_.valid(); }
  const Array& value() const { return value_; }
  const ShapedArray& aval() const { return aval_; }
  /// The value, materializing zeros when symbolic (only at boundaries that need an array).
  Array instantiate() const;

 private:
  ShapedArray aval_;
  Array value_;
};

/// Tangent arithmetic that keeps zeros symbolic.
Tangent tadd(const Tangent& a, const Tangent& b);
Tangent tneg(const Tangent& a);
/// f applied to a nonzero tangent; zero of `out` otherwise.
Tangent tmap(const Tangent& t, const ShapedArray& out, const std::function<Array(const Array&)>& f);

// ---- jvp -------------------------------------------------------------------------------------
struct JvpArgs {
  Primitive prim;
  std::span<const Array> x;     // primal inputs
  std::span<const Tangent> t;   // their tangents (some symbolic zeros, never all)
  const Params& params;
  std::source_location loc;
};
struct JvpOut {
  std::vector<Array> primals;
  std::vector<Tangent> tangents;
};
using JvpRule = JvpOut (*)(const JvpArgs&);
JvpRule jvp_rule(Primitive p);

/// Evaluates j on primals and tangents at the current trace level: (primal outs, tangent outs).
JvpOut jvp_eval(const ClosedJaxpr& j, std::span<const Array> primals, std::span<const Tangent> tangents);

/// jvp : (a -> b) -> ((a, T a) -> (b, T b)). Inputs of the result: all primals, then tangents of
/// the inputs with nonzero_in set; outputs: primals, then tangents (all if instantiate_out, else
/// those whose tangent is not symbolically zero; *nonzero_out says which).
ClosedJaxpr jvp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& nonzero_in, bool instantiate_out,
                      std::vector<bool>* nonzero_out = nullptr);
/// The same with a per-output choice: output k's tangent is present iff instantiate[k] or it is
/// not symbolically zero (*nonzero_out says which are present).
ClosedJaxpr jvp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& nonzero_in, const std::vector<bool>& instantiate,
                      std::vector<bool>* nonzero_out);

// ---- partial evaluation ----------------------------------------------------------------------
/// Decides, for an equation whose inputs are all known, whether its outputs may be saved as
/// residuals (true) or must be recomputed in the staged jaxpr (false).
using Saveable = std::function<bool(const Eqn&)>;

struct PartialEval {
  ClosedJaxpr known;   // known inputs -> (known outputs, residuals)
  ClosedJaxpr staged;  // (residuals, unknown inputs) -> unknown outputs
  std::vector<bool> out_unknown;
  std::size_t num_res = 0;
  std::vector<Var> residual_vars;  // in the known jaxpr, for saved_residuals reports
};

/// partial_eval : (a -> b) -> (known a -> (known b, r), (r, unknown a) -> unknown b).
/// An equation is staged when any input is unknown; a known equation that `saveable` rejects is
/// also copied into the staged jaxpr (recomputed there). Outputs with instantiate set are unknown.
/// `narrowed_to`: the residuals will be saved in this float dtype (Policy::as), so a comparison of
/// a value that narrowing would round is saved (one byte an element), never recomputed or rebuilt
/// on the staged side from the rounded value.
PartialEval partial_eval(const ClosedJaxpr& j, const std::vector<bool>& in_unknown,
                         const std::vector<bool>& instantiate, const Saveable& saveable = nullptr,
                         std::optional<DType> narrowed_to = std::nullopt);

/// How many custom_jvp calls this thread has bound with a callable rule because a rule was being
/// traced (custom_derivatives.cpp): a jit trace that bound one is not cached, as its rule may
/// hold that trace's tracers.
std::uint64_t callable_rules_bound();

// ---- Policy::as (narrowing.cpp) --------------------------------------------------------------
/// The vars of j holding one constant value: broadcasts of a literal and what neg / add / sub /
/// mul / reshape / convert compute from such values alone (pow's y - 1), each with its value.
using Fills = std::unordered_map<std::uint64_t, double>;
Fills literal_fills(const Jaxpr& j);
/// Whether a var is a residual narrowed as it is (not a value recomputed from narrowed ones).
using SavedAsIs = std::function<bool(const Var&)>;
/// The operands of e through which narrowing float inputs to `to` can change e's result by more
/// than rounding: every operand of a comparison, floor, sign, argmax, a sort, eigh / svd / lu (an
/// order, a pivot), a float-to-integer convert ...; select_and_gather_add's choosing operand,
/// pow's exponent, custom_lin's residuals (the user's bwd is opaque); none for a continuous
/// equation, nor for the sign test against zero (a literal 0 or a var of `fills` holding 0) of an
/// f32 value narrowed to bf16 as it is.
std::vector<std::size_t> operands_changed_by_narrowing(const Eqn& e, DType to, const Fills& fills,
                                                       const SavedAsIs& saved_as_is);
/// A var's equation, or null (an input).
using Definition = std::function<const Eqn*(const Var&)>;
/// var id -> the equation of a jaxpr that defines it.
using Definitions = std::unordered_map<std::uint64_t, const Eqn*>;
Definitions definitions_of(const Jaxpr& j);
/// The Definition that reads `defs` (which must outlive it).
Definition definition_in(const Definitions& defs);
/// `as_is` widened to the values whose sign and zeroness are those of a value kept as it is:
/// max(v, 0) / min(v, 0) (relu), reshapes, broadcasts, transposes and float converts of one.
SavedAsIs sign_faithful(SavedAsIs as_is, Definition definition, const Fills& fills);
/// Whether an equation of j, or of a jaxpr inside one, is (no input of j counts as kept as is).
bool reads_changed_by_narrowing(const Jaxpr& j, DType to);

// ---- transpose -------------------------------------------------------------------------------
/// An input of a linear equation during transposition: a known value, or an undefined linear one.
struct LinearInput {
  Array value;        // valid when not linear
  ShapedArray aval;
  bool is_linear() const { return !value.valid(); }
};
struct TransposeArgs {
  Primitive prim;
  std::span<const Tangent> ct;        // cotangents of the outputs (not all zero)
  std::span<const LinearInput> in;
  const Params& params;
  std::source_location loc;
};
/// Cotangents of the inputs (meaningful for linear inputs only; others may be zero).
using TransposeRule = std::vector<Tangent> (*)(const TransposeArgs&);
TransposeRule transpose_rule(Primitive p);

/// transpose : (r, T a -o T b) -> (r, T b) -> T a. The inputs of j with linear_in set are the
/// linear ones; the result takes (non-linear inputs, cotangents of outputs) and returns the
/// cotangents of the linear inputs (zeros materialized).
ClosedJaxpr transpose_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& linear_in);

/// Evaluates the transpose at the current trace level.
std::vector<Tangent> backward_pass(const ClosedJaxpr& j, const std::vector<bool>& linear_in,
                                   std::span<const Array> nonlinear_args, std::span<const Tangent> cts);

// ---- linearize / vjp -------------------------------------------------------------------------
/// Why jvp runs: forward mode the user asked for (jvp, linearize, jacfwd; the default) or the
/// linearization inside reverse mode (vjp, grad, jacrev, saved_residuals). A custom_vjp function
/// can be differentiated only in reverse mode. The mode is per thread, set while a scope lives.
enum class AdMode { forward, reverse };
AdMode ad_mode();
class AdModeScope {
 public:
  explicit AdModeScope(AdMode mode);
  ~AdModeScope();
  AdModeScope(const AdModeScope&) = delete;
  AdModeScope& operator=(const AdModeScope&) = delete;

 private:
  AdMode saved_;
};

struct Linearized {
  PartialEval pe;                 // known: primals -> (outs, res); staged: (res, tangents) -> t_outs
  std::vector<bool> diff_in;      // which primal inputs have tangents
};
/// linearize : (a -> b) -> a -> (b, T a -o T b), as jvp then partial_eval.
Linearized linearize_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff_in);

/// The gradient-like jaxpr: primals -> (outs..., one cotangent per diff_in input, zeros for
/// non-float ones). With `seed`, output k's cotangent is ones where seed[k] and zeros elsewhere;
/// without it, the output cotangents are extra inputs after the primals.
ClosedJaxpr vjp_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff_in,
                      const std::optional<std::vector<bool>>& seed);

/// True for f32/f64: integer and bool values carry no tangent (JAX's float0).
inline bool differentiable(const ShapedArray& a) { return is_floating(a.dtype); }

/// Cleans a jaxpr produced by a transform: DCE then CSE (typechecked with the `checks` option).
ClosedJaxpr simplify(const ClosedJaxpr& j);

}  // namespace xjax::detail
