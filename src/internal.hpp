// internal.hpp: the core's private types (not installed). Read in this order: Buffer and
// ArrayImpl (what an Array holds), Tracer and Builder (how tracing records equations), bind (the
// single entry of every primitive application), then the rule tables of the core.
#pragma once
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "xjax/array.hpp"
#include "xjax/detail/flat.hpp"
#include "xjax/jaxpr.hpp"

namespace xjax::detail {

/// The memory of concrete arrays. Immutable once its array is shared. Either a counted, 64-byte
/// aligned allocation from the arena (the usual case), or external: memory xjax does not own
/// (detail::external_array, xj::adapt), only aligned for its element type, never written, never
/// freed or returned to the arena, and not counted in memory_stats(); `keep_alive` (may be null)
/// is released when the buffer dies.
struct Buffer {
  explicit Buffer(std::size_t nbytes);
  Buffer(const void* external, std::size_t nbytes, std::shared_ptr<const void> keep_alive);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data = nullptr;
  std::size_t nbytes = 0;
  bool external = false;
  std::shared_ptr<const void> keep_alive;  // external buffers: what keeps `data` valid
};

struct Builder;

/// A traced value: a variable of the jaxpr a Builder is recording.
struct Tracer {
  std::weak_ptr<Builder> builder;
  const Builder* owner = nullptr;  // identity of the builder, valid to compare after it died
  Var var;
  std::source_location created_at;
};

struct ArrayImpl {
  ShapedArray aval;
  mutable std::shared_ptr<Buffer> buffer;  // concrete arrays (released when donated)
  std::shared_ptr<const Tracer> tracer;    // tracers
  std::size_t offset = 0;                  // where the elements start in the buffer (bytes)
  /// Weakly typed (JAX's weak_type): a C++ number, or computed from weak values only. Promotion
  /// lets a weak operand adopt the other operand's dtype (ops.cpp `promoted`).
  bool weak = false;
  /// Set when the array was donated to a jit call (donate_argnums): what it was there. Its buffer
  /// went to the call; any later read is an error naming this.
  mutable std::shared_ptr<const std::string> donated;
};

/// An integer index array as gather / scatter take it (i32 or i64): narrow integers to i32, u32
/// and u64 to i64 (u64 capped at 2^62, past any array, so that it stays positive); others as
/// they are (the shape rule names a wrong dtype).
Array gather_index(const Array& i, const std::source_location& loc);
/// An Error unless `count` indices can be taken along x's axis: none from an empty axis (jnp.take's
/// IndexError; the clamped gather read zeros there; jnp.take_along_axis and at[].get fill
/// instead, and xjax's read zeros). `what` names the operation.
void require_takeable(const char* what, const Array& x, std::int64_t axis, std::int64_t count, const std::source_location& loc);

/// Whether integer dtype `index` can number every position along `axis` of an array of `shape`
/// (0 .. n-1; an empty array has none to number): argmax / argmin / top_k / argsort refuse an axis
/// their index dtype cannot number, and sort's derivative picks its positions' dtype by it.
bool numbers_positions(DType index, const Shape& shape, std::int64_t axis);

struct TypeOperand;
/// The dtype operands promote to (result_type's) and whether it is weakly typed: when every
/// operand is, or when weak operands lift the strong ones' join (an integer array times 0.5, a
/// bool array plus 3: JAX's weak float or integer), so that the result still adopts an f16 or i8
/// array's dtype later.
struct Promotion {
  DType dtype;
  bool weak;
};
Promotion promotion_of(std::span<const TypeOperand> operands);

/// jnp's promote_dtypes_inexact for one operand (x64): floats as they are, integers and bools in
/// f64 (mean, var, logsumexp, softmax, softplus ... of integers); a weakly typed x stays weak.
Array as_inexact(const Array& x, const std::source_location& loc);
/// The operands converted to their promoted dtype as p's operands are (weakly typed ones adopt
/// the strong operands' dtype; strict mode: a TypeError naming p and the dtypes).
std::vector<Array> promoted_operands(Primitive p, std::vector<Array> xs, const std::source_location& loc);

/// f(xs), and for bf16 / f16 operands (one dtype) outside any trace f of them in f32 rounded once
/// to their dtype, weak when every operand is: what a jit of f computes (its fused chain converts
/// at its ends) and JAX's jitted jax.nn functions do, where f's steps each rounded eagerly
/// (gelu's 1 + tanh cancelled: 2040 f16 ulps off).
Array rounded_once_when_eager(std::vector<Array> xs, const std::function<Array(const std::vector<Array>&)>& f,
                              const std::source_location& loc);
/// The same for one operand.
Array rounded_once_when_eager(const Array& x, const std::function<Array(const Array&)>& f, const std::source_location& loc);

/// x, marked weakly typed (a new handle: the same value or tracer).
Array weakly_typed(const Array& x);
inline bool is_weak(const Array& x) { return x.valid() && x.impl()->weak; }
/// A new handle on a concrete x's buffer (a tracer as it is): what a jitted function returns for
/// an input or a captured array it passes through, so that donating that output does not mark the
/// caller's array (or the jit's captured constant) donated too.
Array fresh_handle(const Array& x);
/// Throws an Error naming what x was donated as, if it was donated (`use` says where it is used).
void check_not_donated(const Array& x, const char* use);
/// jit's donation: a new handle on x's value, which x loses (any later use of x is an Error
/// naming `what`). A tracer is returned as it is (donation applies to concrete calls only).
Array take_donated(const Array& x, const std::string& what);

/// An array of aval `aval` whose elements are x's bytes from `byte_offset` on, sharing x's buffer
/// (no copy). It keeps the whole buffer alive.
Array buffer_view(const Array& x, std::size_t byte_offset, const ShapedArray& aval);

/// Applies a primitive: runs its kernel when all inputs are concrete and no trace is active,
/// otherwise records an equation into the innermost active trace.
std::vector<Array> bind(Primitive p, std::span<const Array> inputs, Params params = {},
                        std::source_location loc = std::source_location::current());
Array bind1(Primitive p, std::span<const Array> inputs, Params params = {},
            std::source_location loc = std::source_location::current());
inline Array bind1(Primitive p, std::initializer_list<Array> inputs, Params params = {},
                   std::source_location loc = std::source_location::current()) {
  return bind1(p, std::span<const Array>(inputs.begin(), inputs.size()), std::move(params), loc);
}

/// typecheck, literals of any rank allowed (the plans' passes make array literals): what
/// eval_jaxpr checks of a jaxpr before its first plan (src/typecheck.cpp).
void check_before_eval(const Jaxpr& j);
/// Shape/dtype rule: the avals of p's outputs. Throws ShapeError / TypeError naming the operands.
std::vector<ShapedArray> abstract_eval(Primitive p, std::span<const ShapedArray> in,
                                       const Params& params);

/// A kernel with its params unpacked: computes one output of a fixed aval from concrete inputs.
using KernelFn = std::function<Array(std::span<const Array>)>;
/// p's kernel for these params, operand avals and output aval (execution plans resolve each
/// equation once; kernels that depend on the operands' shapes work out their layout here).
KernelFn resolve_kernel(Primitive p, const Params& params, std::span<const ShapedArray> in, const ShapedArray& out);

/// Kernel: computes p's outputs on concrete inputs (out_avals from abstract_eval).
std::vector<Array> run_kernel(Primitive p, std::span<const Array> in, const Params& params,
                              std::span<const ShapedArray> out_avals);

// FlatFn and trace_flat (a function on flat lists of arrays, traced into a closed jaxpr: concrete
// arrays it captures become consts, and so do tracers of enclosing traces: closure conversion)
// are declared in xjax/detail/flat.hpp.

/// While alive, equations bound on this thread record `loc` instead of their own location: a
/// transform's rules emit equations on behalf of the user's equation they differentiate, so
/// error messages and saved_residuals name the user's line, not the rule's. (eval_jaxpr suspends
/// it: inlined equations keep their own locations.)
class LocationScope {
 public:
  explicit LocationScope(const std::source_location* loc);
  ~LocationScope();
  LocationScope(const LocationScope&) = delete;
  LocationScope& operator=(const LocationScope&) = delete;

 private:
  const std::source_location* saved_;
};

/// True while some trace is recording on this thread.
bool tracing_active();
/// True when t's trace is recording on this thread (t is not a leaked tracer).
bool tracer_in_active_trace(const Tracer& t);
/// Throws the TracerError for a tracer used after its trace ended, naming where it was created
/// and, when known, where it was used.
[[noreturn]] void tracer_escaped(const Array& a, const std::source_location* used_at = nullptr);

/// Counts one execution of p (eval_counts()).
void count_eval(Primitive p);
/// Counts n executions of p, for each (p, n) (a raw plan's run: one call for all its steps).
struct EvalCount {
  Primitive prim;
  std::int64_t n;
};
void count_evals(std::span<const EvalCount> counts);

/// The jaxpr's variables in printing order: a, b, ..., z, ba, bb, ...
std::string var_name(std::size_t index);

/// Message prefix naming a primitive application: "mul(f32[3], f32[4])".
std::string describe_application(Primitive p, std::span<const ShapedArray> in);

// ---- internal errors ---------------------------------------------------------------------------
// Each pass and evaluation entry is a function-try-block whose handler calls rethrow_internal:
//   ClosedJaxpr dce(...) try { ... } catch (...) { rethrow_internal("dce"); }
// (free when nothing throws). User code that a pass calls (a custom_jvp rule, a custom_vjp bwd, a
// checkpoint policy) runs through call_user, so its own exceptions pass through unchanged.

/// Rethrows the exception being handled: an xj::Error, std::bad_alloc, anything thrown by user
/// code (call_user) or not derived from std::exception unchanged; any other std::exception (a
/// broken invariant: std::out_of_range, std::bad_variant_access, ...) as InternalError naming `pass`.
[[noreturn]] void rethrow_internal(const char* pass);
/// Marks the exception being handled as the user's (see call_user).
void mark_user_exception();
/// f(), whose exceptions are the user's: pass guards let them through unchanged.
template <class F> decltype(auto) call_user(F&& f) {
  try {
    return f();
  } catch (...) {
    mark_user_exception();
    throw;
  }
}

}  // namespace xjax::detail
