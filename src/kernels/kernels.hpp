// kernels.hpp: the CPU kernels' internal interface (not installed).
//
// kernels.cpp maps every primitive to one entry point declared here; each family of entry points
// lives in its own file (elementwise.cpp, reduce.cpp, dot.cpp, shape.cpp). An entry point takes
// concrete inputs and the aval of its single output (computed by the shape rule) and returns a
// fresh array, or one that shares an input's buffer (buffers are immutable once shared).
// The small helpers at the top (dtype dispatch, strides, raw pointers) are shared by the families.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "internal.hpp"

namespace xjax::detail::kernels {

/// Threefry-2x32 (20 rounds) of each counter pair under the key (random.cpp).
Array threefry2x32_kernel(const Array& key, const Array& counters, const ShapedArray& out);
/// The lower Cholesky factor of each matrix (its lower triangle read; NaN where not positive
/// definite) and triangular solves (linalg.cpp).
Array cholesky_kernel(const Array& x, const ShapedArray& out);
Array triangular_solve_kernel(const Array& a, const Array& b, const params::TriangularSolve& ps, const ShapedArray& out);
/// The row order of each matrix of pivots (row i exchanged with row pivots[i], in order, from
/// 0..n-1); a pivot outside 0..n-1 exchanges nothing.
Array lu_pivots_to_permutation_kernel(const Array& pivots, const ShapedArray& out);
/// The factorizations (several outputs, run as their equations' impl rule): lu's (lu, pivots,
/// permutation) of each matrix (LAPACK getrf; a singular matrix's factors as getrf leaves them).
std::vector<Array> lu_kernel(std::span<const Array> in, const params::None&);
/// qr's (q, r) (LAPACK geqrf and orgqr), eigh's (v, w) (syevd; NaN where it does not converge) and
/// svd's (s, u, vt) or (s) (gesdd; NaN where it does not converge) of each matrix.
std::vector<Array> qr_kernel(std::span<const Array> in, const params::Qr& ps);
std::vector<Array> eigh_kernel(std::span<const Array> in, const params::Eigh& ps);
std::vector<Array> svd_kernel(std::span<const Array> in, const params::Svd& ps);
/// sort's operands, each line along the dimension permuted by the stable order of the first
/// num_keys (floats in JAX's total order: -0 = 0, NaN last) (sort.cpp).
std::vector<Array> sort_kernel(std::span<const Array> in, const params::Sort& ps);
/// top_k: the k largest of each line along the last axis, descending, ties and equal values
/// in index order; floats in sort's total order (NaN largest: first, as XLA; -0 equals 0). Two
/// outputs: the values and their indices (i32) (sort.cpp).
std::vector<Array> top_k_kernel(std::span<const Array> in, const params::TopK& ps);

using Ints = std::vector<std::int64_t>;

// ---- shared helpers ----------------------------------------------------------------------------

/// Throws xj::Error: dtype `d` reached the kernel of `p`, which does not support it.
[[noreturn]] void unsupported_dtype(Primitive p, DType d);

/// The dims of a rank-`rank` dot_general operand that are neither contracting nor batch, in order.
Ints free_dims(std::int64_t rank, const Ints& contracting, const Ints& batch);

/// Row-major strides of `shape`, in elements.
Ints row_major_strides(const Shape& shape);

/// A new array with aval `aval` that shares x's buffer (same bytes, new shape).
Array share_buffer(const Array& x, const ShapedArray& aval);

/// Reads a rank-0 integer (or bool) array as int64 (dynamic_slice starts and the like).
std::int64_t read_index_scalar(const Array& x);

/// Typed access to element storage. bool elements are stored as std::uint8_t (0 or 1).
/// The elements of a concrete array, inline (kernels only ever see concrete arrays, so the
/// tracer checks of Array::raw_data are not repeated for every operand of every step).
inline char* elements_of(const Array& a) {
  const ArrayImpl& im = *a.impl();
  return im.buffer ? static_cast<char*>(im.buffer->data) + im.offset : nullptr;
}
template <class T> const T* in_ptr(const Array& a) { return reinterpret_cast<const T*>(elements_of(a)); }
template <class T> T* out_ptr(const Array& a) { return reinterpret_cast<T*>(elements_of(a)); }

/// Narrow dtypes (bf16, f16, i8, u8, i16, u16) have no kernels of their own: run_kernel widens
/// their operands to compute_dtype (bf16, f16 -> f32; i8, i16 -> i32; u8, u16 -> u32), runs the
/// wide kernel and converts its result back once, as XLA's CPU backend computes bf16 in f32.
bool is_narrow(DType d);
DType compute_dtype(DType d);
/// x in its compute dtype (x itself if it is not narrow), its bits read as `p` reads them (see
/// read_as in kernels.cpp: the bit operations read a narrow integer's low bits).
Array widen(Primitive p, const Array& x);
/// A wide result converted back to out's dtype (itself if it has it already).
Array narrow_to(const Array& wide, const ShapedArray& out);
/// A several-output kernel (sort, top_k, the factorizations) on narrow operands: `kernel` run on
/// them widened, the outputs that carry an operand's values converted back to its dtype.
std::vector<Array> run_widened(Primitive p, std::span<const Array> in,
                               const std::function<std::vector<Array>(std::span<const Array>)>& kernel);

/// Calls f(std::type_identity<T>{}) with T the storage type of `d`:
/// float, double, int32_t, int64_t, uint32_t, uint64_t, or uint8_t for bool. A narrow dtype is an
/// Error (its operands are widened before any kernel sees them).
template <class F> decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f(std::type_identity<float>{});
    case DType::f64: return f(std::type_identity<double>{});
    case DType::i32: return f(std::type_identity<std::int32_t>{});
    case DType::i64: return f(std::type_identity<std::int64_t>{});
    case DType::u32: return f(std::type_identity<std::uint32_t>{});
    case DType::u64: return f(std::type_identity<std::uint64_t>{});
    case DType::bool_: return f(std::type_identity<std::uint8_t>{});
    case DType::bf16: case DType::f16: case DType::i8: case DType::u8: case DType::i16: case DType::u16: break;
  }
  throw Error(std::string("visit_dtype: ") + dtype_name(d) + " reached a kernel unwidened (a bug: run_kernel widens narrow dtypes)");
}

/// The dtype of a kernel's storage type T (uint8_t is bool's).
template <class T> constexpr DType storage_dtype() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return DType::bool_;
  else return dtype_of_v<T>;
}

/// A kernel's scratch memory: n elements of T from xjax's buffer arena, uninitialized, alive while
/// `buffer` is. Counted in the peak and reused from call to call: a fresh, zeroed, megabytes-large
/// std::vector per call made glibc grow and trim its heap around each one and page-fault it in
/// again (the convolution's im2col tile, 2026-12-04). Take it on the calling thread, not on a
/// kernel worker: a block freed there stays in that worker's cache, out of reach of
/// release_arena_memory().
template <class T> struct ArenaScratch {
  Array buffer;
  T* data;
  explicit ArenaScratch(std::int64_t n) : buffer(alloc_array(ShapedArray{{n}, storage_dtype<T>()})), data(out_ptr<T>(buffer)) {}
};

/// A kernel writing into memory its caller provides (flat plans, flat_plan.hpp): it reads operand
/// i's elements at ins[i] and writes output k's at outs[k], memory that overlaps no operand's.
/// Resolved once for fixed operand and output avals; `ctx` holds what it was resolved with.
struct IntoKernel {
  using Fn = void (*)(const void* ctx, const void* const* ins, void* const* outs);
  Fn fn = nullptr;
  std::shared_ptr<const void> ctx;
  explicit operator bool() const { return fn != nullptr; }
  void operator()(const void* const* ins, void* const* outs) const { fn(ctx.get(), ins, outs); }
};

// ---- scalar arithmetic shared by the families --------------------------------------------------

/// Two's-complement wrap-around integer arithmetic (no signed-overflow UB).
template <class T> T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class T> T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <class T> T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
template <class T> T wrap_neg(T a) { return wrap_sub(T{0}, a); }

/// Truncating integer division; x / 0 = 0 and MIN / -1 wraps to MIN (neither traps).
template <class T> T safe_div(T a, T b) {
  if (b == 0) return T{0};
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_neg(a);
  }
  return static_cast<T>(a / b);
}

/// Truncated remainder with the dividend's sign (C's %), XLA's rule at the edges: x % 0 = x and
/// MIN % -1 = 0 (neither traps).
template <class T> T safe_rem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return T{0};
  }
  return static_cast<T>(a % b);
}

/// XLA's shifts: the amount read as unsigned, so a negative or too large one shifts everything out
/// (0; for the arithmetic right shift, the sign: -1 or 0).
template <class T> T shift_left_values(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const auto n = static_cast<U>(b);
  return n >= sizeof(T) * 8 ? T{0} : static_cast<T>(static_cast<U>(a) << n);
}
template <class T> T shift_right_logical_values(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const auto n = static_cast<U>(b);
  return n >= sizeof(T) * 8 ? T{0} : static_cast<T>(static_cast<U>(a) >> n);
}
template <class T> T shift_right_arithmetic_values(T a, T b) {
  using U = std::make_unsigned_t<T>;
  using S = std::make_signed_t<T>;
  const auto n = static_cast<U>(b);
  const auto s = static_cast<S>(a);
  if (n >= sizeof(T) * 8) return static_cast<T>(s < 0 ? S{-1} : S{0});
  return static_cast<T>(s >> n);  // arithmetic for signed operands (C++20)
}

/// a + b for any storage type: wraps for integers, logical or for bool (uint8_t).
template <class T> T add_values(T a, T b) {
  if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<T>(a | b);
  else if constexpr (std::is_integral_v<T>) return wrap_add(a, b);
  else return a + b;
}

// ---- elementwise.cpp ---------------------------------------------------------------------------

/// neg exp log log1p expm1 sin cos tan tanh logistic sqrt rsqrt abs sign.
Array unary_kernel(Primitive p, const Array& x, const ShapedArray& out);
/// x^y for an integer exponent y (negative only for floats).
Array integer_pow_kernel(const Array& x, std::int64_t y, const ShapedArray& out);
/// add sub mul div max min pow.
Array binary_kernel(Primitive p, const Array& x, const Array& y, const ShapedArray& out);
/// eq ne lt le gt ge: bool output.
Array compare_kernel(Primitive p, const Array& x, const Array& y, const ShapedArray& out);
/// select_n(which, case0, case1, ...).
Array select_n_kernel(std::span<const Array> in, const ShapedArray& out);
/// convert_element_type to out.dtype.
Array convert_element_type_kernel(const Array& x, const ShapedArray& out);
/// copy: the same elements in a new buffer.
Array copy_kernel(const Array& x, const ShapedArray& out);
/// The unary, integer_pow, binary, comparison, convert_element_type and copy kernels as an
/// IntoKernel (operands of the output's shape); empty for other primitives.
IntoKernel elementwise_into(Primitive p, const Params& params, std::span<const ShapedArray> in, const ShapedArray& out);

// ---- fused.cpp ---------------------------------------------------------------------------------

/// A chain of elementwise equations over one shape, run block by block (a few KiB at a time) so
/// that intermediates never exist as whole arrays. Float values of dtype `compute`; bools are
/// carried as 0/1 in `compute` inside the block. Value numbers: the inputs first, then one per op.
struct FusedProgram {
  struct Input {
    bool is_bool = false;    // stored as bool (uint8) instead of `compute`
    bool is_scalar = false;  // rank 0: broadcast over the shape
    /// > 0: a float array of `period` elements broadcast over the shape, its dims a run of the
    /// shape's dims followed by `repeat` elements: element i of the shape reads element
    /// (i / repeat) % period (a bias row: repeat 1; a column, one value per row: period = the
    /// rows, repeat = the row length).
    std::int64_t period = 0;
    std::int64_t repeat = 1;
    /// A bool array read only as select_n's predicate: read as bytes, not widened (set by
    /// finish_program when the program is built).
    bool read_as_bytes = false;
    /// A row broadcast (repeat 1) whose period divides kBlock: every block reads the same
    /// elements (blocks start at multiples of kBlock), so its row is filled once per run, like a
    /// scalar's. Set by finish_program.
    bool same_every_block = false;
  };
  /// Elements per block of a run (fused.cpp): rows of 2-4 KiB stay in L1.
  static constexpr std::int64_t kBlock = 512;
  struct Op {
    Primitive prim;  // unary, integer_pow, binary, comparison, select_n (2 cases), convert
    std::int32_t dst = 0;
    std::int32_t src[3] = {0, 0, 0};
    std::int64_t y = 0;     // integer_pow's exponent
    bool to_bool = false;   // convert_element_type to bool (x != 0); otherwise a copy
  };
  struct Output {
    std::int32_t value = 0;
    bool is_bool = false;
  };
  // The fields a run reads first, together (a plan of many small steps runs from memory that
  // is not in cache: fewer lines touched per step).
  DType compute = DType::f32;  // f32 or f64
  /// The dtype of the float inputs and outputs in memory: `compute`, or bf16 / f16 (then compute
  /// is f32, each dense input is widened a block at a time and each output rounded once when it is
  /// stored: a narrow chain keeps its intermediates in f32, XLA's excess precision).
  DType storage = DType::f32;
  std::int32_t num_values = 0;
  std::int64_t size = 0;  // elements of `shape` (set by finish_program)
  std::vector<Input> inputs;
  std::vector<Op> ops;
  std::vector<Output> outputs;
  /// Per value: the output an op computes it straight into (its first float output), or -1.
  /// Set by finish_program.
  std::vector<std::int64_t> direct;
  /// Per value: the scratch row it occupies in a block. Input i has row i; an op's value takes a
  /// row no value still read holds (a value nothing reads after an op gives its row back after
  /// that op's value took one, so no op writes a row it reads), so a long chain works in a few
  /// rows that stay in L1. `rows`: how many. Set by finish_program.
  std::vector<std::int32_t> row_of;
  std::int32_t rows = 0;
  Shape shape;
};

/// Completes a built program: Input::read_as_bytes for the bool inputs that only choose a
/// select_n's case, `direct`, and the values' rows.
void finish_program(FusedProgram& prog);
/// Simplifies a built program (before finish_program) without changing what any output holds,
/// bit for bit: a strict comparison of a select against its own predicate's bound is the
/// predicate, max(x, c) > c compares x (relu's derivative mask read from its recomputed output,
/// relu(x) > 0, is x > 0), and ops nothing reads any more are dropped (values renumbered).
void simplify_program(FusedProgram& prog);
/// add sub mul div max min pow: the binary primitives of float_binary (simd.hpp).
constexpr bool is_float_binary(Primitive p) { return family_of(p) == Family::binary; }
/// neg exp log log1p expm1 sin cos tan tanh logistic sqrt rsqrt abs sign integer_pow: the unary
/// arithmetic primitives (each element computed from the operand's).
constexpr bool is_unary_math(Primitive p) {
  return family_of(p) == Family::float_unary || family_of(p) == Family::numeric_unary || family_of(p) == Family::power;
}
/// The comparison family (eq ne lt le gt ge).
constexpr bool is_comparison(Primitive p) { return family_of(p) == Family::comparison; }

/// Runs the program on its inputs (one array per FusedProgram::Input); `outs` (cleared first)
/// receives the outputs: fresh arrays, or inputs' buffers (shared or handed over).
void run_fused(const FusedProgram& prog, std::span<const Array> in, std::vector<Array>& outs);
/// The program as an IntoKernel: every output written, none shared with an input, except that
/// an output that only renames an input (renamed_input) may be given a null pointer and is then
/// skipped.
IntoKernel fused_into(std::shared_ptr<const FusedProgram> prog);
/// The input whose buffer output k shares (an output that only renames a whole input: a name
/// or stop_gradient of a value from outside the chain), or -1 when output k is computed.
std::int64_t renamed_input(const FusedProgram& prog, std::size_t k);
/// The (input, output) pairs whose output may be written over the input's elements when the
/// input's memory may be overwritten (`usable`): the fused chain then works in place, as run_fused
/// does with an input handed over at its last use. At most one output per input and input per output.
using InPlacePairs = std::vector<std::pair<std::size_t, std::size_t>>;
InPlacePairs in_place_outputs(const FusedProgram& prog, const std::function<bool(std::size_t)>& usable);

// ---- reduce.cpp --------------------------------------------------------------------------------

/// reduce_sum reduce_max reduce_min reduce_prod over `axes` (sorted, unique).
Array reduce_kernel(Primitive p, const Array& x, const Ints& axes, const ShapedArray& out);
/// argmax / argmin along `axis`; out.dtype is the index dtype (i32 or i64).
Array arg_reduce_kernel(Primitive p, const Array& x, std::int64_t axis, const ShapedArray& out);
/// round on floats: halfway away from zero, or to the nearest even integer.
Array round_kernel(const Array& x, bool to_nearest_even, const ShapedArray& out);
/// bitwise_not and population_count on integers (bitwise_not on bool: logical not).
Array bitwise_unary_kernel(Primitive p, const Array& x, const ShapedArray& out);
/// is_finite on floats: bool.
Array is_finite_kernel(const Array& x, const ShapedArray& out);
/// clamp(lo, x, hi) = min(max(x, lo), hi) (hi when lo > hi; NaN when any operand is); lo and hi
/// rank 0 or x's shape.
Array clamp_kernel(const Array& lo, const Array& x, const Array& hi, const ShapedArray& out);

// ---- cumulative.cpp ----------------------------------------------------------------------------

/// cumsum, cumprod, cummax, cummin, cumlogsumexp along `axis` (from the end when `reverse`).
Array cumulative_kernel(Primitive p, const Array& x, std::int64_t axis, bool reverse, const ShapedArray& out);

// ---- dot.cpp -----------------------------------------------------------------------------------

/// conv_general_dilated, f32/f64 (conv.cpp).
Array conv_general_dilated_kernel(const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p,
                                  const ShapedArray& out);
/// reduce_window_sum / _max / _min (window.cpp).
Array reduce_window_kernel(Primitive p, const Array& x, const params::ReduceWindow& w, const ShapedArray& out);
/// select_and_gather_add(t, x) / select_and_scatter_add(ct, x), f32/f64 (window.cpp).
Array select_window_kernel(Primitive p, const Array& values, const Array& x, const params::SelectWindow& w,
                           const ShapedArray& out);
/// dot_general with params lhs_contracting, rhs_contracting, lhs_batch, rhs_batch.
Array dot_general_kernel(const Array& lhs, const Array& rhs, const params::DotGeneral& dn,
                         const ShapedArray& out);
/// dot_general for operands of avals lhs and rhs, its GEMM layout worked out once (plans).
KernelFn resolved_dot_general(const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs,
                              const ShapedArray& out);
/// dot_general as an IntoKernel, for f32/f64 operands that are read in place (as stored or
/// transposed by a GEMM flag); empty for the rest (integers, operands that need a copy).
IntoKernel dot_general_into(const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs,
                            const ShapedArray& out);

// ---- shape.cpp ---------------------------------------------------------------------------------

Array broadcast_in_dim_kernel(const Array& x, const Ints& broadcast_dimensions,
                              const ShapedArray& out);
/// out.shape[i] = x.shape[perm[i]]; also used by dot.cpp to bring operands into GEMM layout.
Array transpose_kernel(const Array& x, std::span<const std::int64_t> perm);
Array slice_kernel(const Array& x, const Ints& start, const Ints& strides, const ShapedArray& out);
/// x with the element order reversed along each of `dimensions`.
Array rev_kernel(const Array& x, const Ints& dimensions, const ShapedArray& out);
Array pad_kernel(const Array& x, const Array& padding_value, const Ints& lo, const Ints& interior,
                 const ShapedArray& out);
Array dynamic_slice_kernel(std::span<const Array> in, const ShapedArray& out);
Array dynamic_update_slice_kernel(std::span<const Array> in, const ShapedArray& out);
Array concatenate_kernel(std::span<const Array> in, std::int64_t dimension, const ShapedArray& out);
/// broadcast_in_dim, transpose, slice, rev and concatenate as IntoKernels (their strided copies
/// worked out once from the avals); empty for other primitives.
IntoKernel shape_into(Primitive p, const Params& ps, std::span<const ShapedArray> in, const ShapedArray& out);
Array gather_kernel(const Array& x, const Array& indices, const params::Gather& ps, const ShapedArray& out);
/// scatter, scatter_add, scatter_mul, scatter_min, scatter_max (params::Scatter).
Array scatter_kernel(Primitive p, const Array& x, const Array& indices, const Array& updates,
                     const params::Scatter& ps, const ShapedArray& out);
Array iota_kernel(std::int64_t dimension, const ShapedArray& out);

// ---- collectives.cpp (communication: src/comm.hpp) ---------------------------------------------

/// psum (op sum) and pmax (op max) over the processes. The collectives check that every process
/// is at the same call, with the process count the parameters name.
Array allreduce_kernel(Primitive p, const Array& x, const ShapedArray& out);
/// tiled: concatenated along axis (the same bytes as stacked along a new axis at `axis`).
Array all_gather_kernel(const Array& x, const params::AllGather& ps, const ShapedArray& out);
/// tiled: axis split into out's size chunks (the same bytes as an axis of one entry per process
/// followed by the chunk's).
Array psum_scatter_kernel(const Array& x, const params::PsumScatter& ps, const ShapedArray& out);
Array ppermute_kernel(const Array& x, const Ints& perm, const ShapedArray& out);

}  // namespace xjax::detail::kernels
