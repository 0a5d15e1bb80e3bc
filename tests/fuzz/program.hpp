// program.hpp: the differential fuzzer's random programs. A Program is a small tree of blocks,
// each a list of op nodes over the block's inputs; wrapper nodes (checkpoint, scan, cond, ...)
// own sub-blocks. The same Program is generated from a seed, printed, and interpreted into an
// xj::Array computation in two modes: Full (every wrapper is the real xjax transform) and Plain
// (every wrapper replaced by its C++ meaning: the function itself, an unrolled loop, the branch
// chosen in C++). See docs/testing.md.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <xjax/xjax.hpp>

namespace fuzz {

namespace xj = xjax;
using xj::Array;
using xj::Shape;
using Arrays = std::vector<Array>;

// ---- known bugs: generation avoids these patterns until the fixes land --------------------------
// Known bug, reenable when fixed: CSE (transforms/cse.cpp) merges literals equal to 6 decimals.
// Until then every constant is a multiple of 1/8, so no two distinct literals are that close, and
// no program draws random numbers (random::normal's literals 2^-23 and 2^-52 merge with 0).
inline constexpr bool kCseLiteralBugFixed = true;
// Known bug, reenable when fixed: linearize of a while_loop nested in a while_loop throws
// std::out_of_range. Until then the linearize oracle skips programs with nested whiles.
inline constexpr bool kNestedWhileLinearizeBugFixed = true;
// Known bug, reenable when fixed: jvp and linearize of a custom_vjp function disagree (one raises
// TransformError, the other does not). Until then linearize is not run on custom_vjp programs.
inline constexpr bool kCustomVjpLinearizeBugFixed = true;
// Known bug, reenable when fixed (found by this fuzzer, seed 1140): xj::vjp of a function that
// feeds a custom_jvp output into a custom_vjp raises "forward-mode differentiation of a custom_vjp
// function" when the custom_jvp rule's output tangent does not depend on the input tangents
// (e.g. the rule returns zeros_like(x)); grad of the same function works. Until then the vjp
// oracle accepts a TransformError on programs with both custom_jvp and custom_vjp.
inline constexpr bool kVjpCustomJvpIntoCustomVjpBugFixed = true;
// Known bug, reenable when fixed: reduce_prod's derivative divides by the input (wrong at an
// exact 0). Until then prod only sees 1.5 + tanh(x), which is never 0.
inline constexpr bool kReduceProdZeroBugFixed = true;

enum class Op {
  // leaves (constants)
  Const, Iota, RandNormal,
  // elementwise unary, smooth everywhere
  Neg, Sin, Cos, Tanh, Logistic, Softplus, Gelu, Exp, Expm1, Log1pSq, LogOnePlusSq, Rational,
  SqrtOnePlusSq, RsqrtOnePlusSq, RecipOnePlusSq, Square, IntPow, TanBounded, Elementary, PowScalar, Squash,
  ScaleShift, CastRoundTrip, StopGradient, Name,
  Silu, LogSigmoid,
  // elementwise unary with a kink or a jump at 0
  Abs, Relu, Sign, Elu, LeakyRelu, Bitwise,
  Logic,  // is_finite, all, any, clamp (scalar or array bounds), argmin (issue 28's primitives)
  // elementwise binary (broadcasting)
  Add, Sub, Mul, DivSafe, PowSafe, Maximum, Minimum, SelectGt, Atan2, RemSafe, NextAfter, LogAddExp,
  // reductions
  Sum, Mean, Max, Min, ProdPos, LogSumExp, Softmax, LogSoftmax, Var, Cumulative, Sort, Window,
  // linear algebra
  Matmul, Dot, Einsum, DotGeneral, Cholesky, TriangularSolve, ChoSolve, Lu, Solve, LuSolve, Inv, Slogdet, Qr, Eigh, Svd, Conv,
  // shape
  Reshape, Transpose, Flip, BroadcastTo, ExpandDims, Squeeze, Concat, Stack, Slice, DynSlice,
  DynUpdateSlice, Take, Index, Fit,
  At,  // xj::at(x, idx): get / set / add / mul / min / max (issue 28's scatters)
  // training-loop pieces (issue 34): take_along_axis, the normalizations, the optax losses
  TakeAlongAxis, Norm, Loss,
  // wrappers (own sub-blocks)
  Checkpoint, Scan, ForiLoop, While, Cond, Switch, Jit, CustomJvp, CustomVjp,
  InnerGrad,  // xj::grad of a sub-block inside the program (nested differentiation)
  Count_
};
const char* op_name(Op op);
std::int64_t size_of(const Shape& s);
/// NumPy broadcasting of two shapes; nullopt when incompatible.
std::optional<Shape> broadcast(const Shape& a, const Shape& b);
bool is_wrapper(Op op);

struct Node;
/// A straight-line block. Its environment is: inputs, then captures (values of the enclosing
/// block, read by closure), then the outputs of each node in order.
struct Block {
  std::vector<Shape> in;
  std::vector<int> captures;  // indices into the enclosing block's environment
  std::vector<Node> nodes;
  std::vector<int> outs;      // indices into this block's environment
};

struct Node {
  Op op = Op::Sin;
  std::vector<int> args;      // indices into the block's environment
  std::vector<Shape> outs;    // one shape per output
  std::vector<std::int64_t> ints, ints2;  // axes, shapes, indices, ... (per op)
  double c = 0;               // a constant (per op)
  int variant = 0;            // a choice among spellings / policies / formulas (per op)
  bool flag = false;          // keepdims, reverse, ... (per op)
  bool narrowed_residuals = false;  // checkpoint: its policy saves residuals .as(Runner::residuals_as)
  std::string text;           // a checkpoint name, an einsum spec
  std::vector<Block> subs;
};

/// What a program contains, for the oracles (which transforms must raise) and for coverage.
struct Features {
  bool has_while = false;         // reverse mode raises TransformError
  bool has_nested_while = false;  // a while inside a while
  bool has_custom_vjp = false;    // forward mode raises TransformError
  bool has_narrowed_residuals = false;  // an f64 run's derivatives read residuals rounded to f32
  std::map<std::string, int> counts;  // op name (and wrapper variant) -> occurrences
};

struct Program {
  std::uint64_t seed = 0;
  Block main;  // main.in: the program's inputs; main.outs: one output
  Features features;
};

/// The program of `seed` (deterministic: std::mt19937_64).
Program generate(std::uint64_t seed);
/// Readable text of the program (one line per node, sub-blocks indented).
std::string print(const Program& p);

// ---- interpretation ---------------------------------------------------------------------------

/// Decisions the Plain mode takes in C++ (branch indices, loop trip counts, stop_gradient
/// values), recorded by one concrete run and replayed by later runs, so that Plain stays one fixed
/// smooth function of its inputs while it is traced (grad) or perturbed (finite differences).
struct Tape {
  std::vector<std::variant<std::int64_t, Array>> entries;
  std::size_t pos = 0;
  bool recording = false;
};

/// The smallest distance of a kink or branch decision to its switching point seen by a
/// concrete Plain run: where it is small, finite differences (or rounding) may cross it.
struct Monitor {
  double margin = std::numeric_limits<double>::infinity();
  void note(double m) {
    if (m < margin) margin = m;
  }
};

enum class Mode { Full, Plain };

struct Runner {
  Mode mode = Mode::Full;
  xj::DType dtype = xj::f64;
  Tape* tape = nullptr;       // Plain only
  Monitor* monitor = nullptr; // Plain recording run only
  bool schedules_off = false; // Full: binomial(s) scans run unscheduled (the residual oracle's reference)
  /// Full: the dtype a checkpoint marked `narrowed_residuals` saves its residuals in (f32 narrows
  /// an f64 run's, changes nothing in an f32 run; the narrowing oracle's bf16 narrows an f32 run's).
  xj::DType residuals_as = xj::f32;
  /// The block's outputs for its inputs; `parent` is the enclosing block's environment.
  Arrays run(const Block& b, const Arrays& inputs, const Arrays& parent) const;
  /// The program as a function of its inputs (one output).
  Array operator()(const Program& p, const Arrays& inputs) const;

 private:
  Arrays node(const Node& n, const Arrays& env) const;
  Arrays wrapper(const Node& n, const Arrays& args, const Arrays& env) const;
  Arrays plain_wrapper(const Node& n, const Arrays& args, const Arrays& env) const;
};

/// The custom-rule formulas (independently written derivatives of small elementwise functions).
int formula_count();
int formula_arity(int k);
const char* formula_name(int k);
Array formula_f(int k, const Arrays& x);
Array formula_jvp(int k, const Arrays& x, const Arrays& t);
Arrays formula_vjp(int k, const Arrays& x, const Array& ct);

}  // namespace fuzz
