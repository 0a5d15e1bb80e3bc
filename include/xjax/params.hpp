// params.hpp: the parameters of every primitive, one struct each, declared next to the primitive
// table. Each struct lists its members once (XJAX_PARAMS_STRUCT_BODY), which also gives it a
// member walk, so that printing (JAX's text form), equality and CSE keys are written once,
// generically (src/params.cpp, src/param_reflect.hpp), and a rule reads `ps.get<params::Pad>().lo`:
// a wrong name or type does not compile.
//
// Adding a parameter to a primitive is one line in its struct. Adding a primitive with
// parameters: a struct here, named in the primitive's row of XJAX_PRIMITIVE_TABLE (primitives.hpp),
// from which params_of and the list of all structs Params may hold are generated.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <new>
#include <vector>

#include "xjax/dtype.hpp"
#include "xjax/primitives.hpp"

namespace xjax {

struct ClosedJaxpr;
using ClosedJaxprPtr = std::shared_ptr<const ClosedJaxpr>;

/// Extension point for parameters that are objects (a checkpoint policy, a custom rule). Compared
/// by identity; printed by repr().
struct ParamObject {
  virtual ~ParamObject() = default;
  virtual std::string repr() const = 0;
  /// Appends words standing for what the object does and returns true, where objects with equal
  /// words behave the same in any program that holds them (a built-in checkpoint policy, a rule
  /// the library makes); false, the default, where only identity says that (a user's function).
  /// The memo of transformed programs (transforms/transform_memo.cpp) remembers a program whose
  /// objects all have words.
  virtual bool structure_words(std::vector<std::uint64_t>& out) const {
    (void)out;
    return false;
  }
};

// XJAX_PARAMS_STRUCT_BODY(S, (T1, m1), (T2, m2), ...) declares the members of struct S, its
// memberwise ==, and `for_each_member(f)`, which calls f("m1", m1), f("m2", m2), ... in
// declaration order: the one reflection the printer, CSE keys, equality and sub_jaxprs use
// (src/param_reflect.hpp), written without Boost.Hana so that user code including xjax.hpp does
// not parse a reflection library for these structs. Up to 12 members.
#define XJAX_PARAMS_MEMBER(T, m) T m;
#define XJAX_PARAMS_VISIT(T, m) f(#m, m);
#define XJAX_PARAMS_APPLY(M, pair) M pair
#define XJAX_PARAMS_EACH_0(M)
#define XJAX_PARAMS_EACH_1(M, a) XJAX_PARAMS_APPLY(M, a)
#define XJAX_PARAMS_EACH_2(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_1(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_3(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_2(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_4(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_3(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_5(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_4(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_6(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_5(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_7(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_6(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_8(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_7(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_9(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_8(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_10(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_9(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_11(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_10(M, __VA_ARGS__)
#define XJAX_PARAMS_EACH_12(M, a, ...) XJAX_PARAMS_APPLY(M, a) XJAX_PARAMS_EACH_11(M, __VA_ARGS__)
#define XJAX_PARAMS_COUNT(...) XJAX_PARAMS_COUNT_(__VA_ARGS__ __VA_OPT__(,) 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define XJAX_PARAMS_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define XJAX_PARAMS_CAT(a, b) XJAX_PARAMS_CAT_(a, b)
#define XJAX_PARAMS_CAT_(a, b) a##b
#define XJAX_PARAMS_EACH(M, ...) XJAX_PARAMS_CAT(XJAX_PARAMS_EACH_, XJAX_PARAMS_COUNT(__VA_ARGS__))(M __VA_OPT__(,) __VA_ARGS__)
#define XJAX_PARAMS_STRUCT_BODY(S, ...)                                           \
  XJAX_PARAMS_EACH(XJAX_PARAMS_MEMBER, __VA_ARGS__)                               \
  template <class F> void for_each_member([[maybe_unused]] F&& f) const {         \
    XJAX_PARAMS_EACH(XJAX_PARAMS_VISIT, __VA_ARGS__)                              \
  }                                                                              \
  friend bool operator==(const S&, const S&) = default;

namespace params {
using Ints = std::vector<std::int64_t>;
using Object = std::shared_ptr<const ParamObject>;

/// Primitives without parameters (elementwise ops, select_n, copy, threefry2x32, ...).
struct None {
  XJAX_PARAMS_STRUCT_BODY(None)
};
struct IntegerPow {
  XJAX_PARAMS_STRUCT_BODY(IntegerPow, (std::int64_t, y))
};
/// weak_type: the output is weakly typed (JAX's parameter): a weak operand promotion converts
/// stays weak, so a jaxpr evaluated again inside a trace gives every value the weak type its
/// trace gave it; xj::astype's conversions are strong.
struct ConvertElementType {
  XJAX_PARAMS_STRUCT_BODY(ConvertElementType, (DType, new_dtype), (bool, weak_type))
};
/// out[batch, lhs free, rhs free] = sum over contracting dims of lhs * rhs.
struct DotGeneral {
  XJAX_PARAMS_STRUCT_BODY(DotGeneral, (Ints, lhs_contracting), (Ints, rhs_contracting), (Ints, lhs_batch), (Ints, rhs_batch))
};
/// reduce_sum, reduce_max, reduce_min, reduce_prod, reduce_and, reduce_or.
struct Reduce {
  XJAX_PARAMS_STRUCT_BODY(Reduce, (Ints, axes))
};
/// argmax and argmin: one axis, and the dtype of the index.
struct Argmax {
  XJAX_PARAMS_STRUCT_BODY(Argmax, (Ints, axes), (DType, index_dtype))
};
struct BroadcastInDim {
  XJAX_PARAMS_STRUCT_BODY(BroadcastInDim, (Ints, shape), (Ints, broadcast_dimensions))
};
struct Reshape {
  XJAX_PARAMS_STRUCT_BODY(Reshape, (Ints, new_sizes))
};
struct Transpose {
  XJAX_PARAMS_STRUCT_BODY(Transpose, (Ints, permutation))
};
struct Squeeze {
  XJAX_PARAMS_STRUCT_BODY(Squeeze, (Ints, dimensions))
};
struct ExpandDims {
  XJAX_PARAMS_STRUCT_BODY(ExpandDims, (Ints, dimensions))
};
/// Empty strides mean 1 in every dimension.
/// The cumulative primitives (cumsum, cumprod, cummax, cummin, cumlogsumexp): along `axis`,
/// from the last element to the first when `reverse`.
struct Cumulative {
  XJAX_PARAMS_STRUCT_BODY(Cumulative, (std::int64_t, axis), (bool, reverse))
};
/// round: 0 rounds halfway cases away from zero, 1 to the nearest even integer (lax.RoundingMethod).
struct Round {
  XJAX_PARAMS_STRUCT_BODY(Round, (std::int64_t, rounding_method))
};
/// sort: along `dimension`, ordered by the first `num_keys` operands (is_stable is kept for
/// JAX's spelling: xjax's sort is always stable).
struct Sort {
  XJAX_PARAMS_STRUCT_BODY(Sort, (std::int64_t, dimension), (bool, is_stable), (std::int64_t, num_keys))
};
/// top_k: the k largest along the last axis.
struct TopK {
  XJAX_PARAMS_STRUCT_BODY(TopK, (std::int64_t, k))
};
/// rev: the axes whose element order is reversed.
struct Rev {
  XJAX_PARAMS_STRUCT_BODY(Rev, (Ints, dimensions))
};
struct Slice {
  XJAX_PARAMS_STRUCT_BODY(Slice, (Ints, start_indices), (Ints, limit_indices), (Ints, strides))
};
struct Pad {
  XJAX_PARAMS_STRUCT_BODY(Pad, (Ints, lo), (Ints, hi), (Ints, interior))
};
/// conv_general_dilated (lax's). The spatial parameters have one entry per spatial dimension, in
/// the order rhs_spec lists them; padding is (padding_lo[i], padding_hi[i]), negative to crop.
/// lhs_spec / rhs_spec / out_spec are JAX's ConvDimensionNumbers: the positions of the batch (N)
/// or output-feature (O) dim, then the feature (C) or input-feature (I) dim, then the spatial dims.
struct ConvGeneralDilated {
  XJAX_PARAMS_STRUCT_BODY(ConvGeneralDilated, (Ints, window_strides), (Ints, padding_lo), (Ints, padding_hi),
                          (Ints, lhs_dilation), (Ints, rhs_dilation), (Ints, lhs_spec), (Ints, rhs_spec),
                          (Ints, out_spec), (std::int64_t, feature_group_count), (std::int64_t, batch_group_count))
};
/// reduce_window_sum / _max / _min: one entry per operand dimension; padding is
/// (padding_lo[i], padding_hi[i]); base_dilation spreads the operand, window_dilation the window.
struct ReduceWindow {
  XJAX_PARAMS_STRUCT_BODY(ReduceWindow, (Ints, window_dimensions), (Ints, window_strides), (Ints, padding_lo),
                          (Ints, padding_hi), (Ints, base_dilation), (Ints, window_dilation))
};
/// select_and_gather_add / select_and_scatter_add (the tangent and the cotangent of a max or min
/// window reduction): ReduceWindow's window, and which element a window selects (its first
/// maximum when select_max, else its first minimum).
struct SelectWindow {
  XJAX_PARAMS_STRUCT_BODY(SelectWindow, (Ints, window_dimensions), (Ints, window_strides), (Ints, padding_lo),
                          (Ints, padding_hi), (Ints, base_dilation), (Ints, window_dilation), (bool, select_max))
};
struct DynamicSlice {
  XJAX_PARAMS_STRUCT_BODY(DynamicSlice, (Ints, slice_sizes))
};
struct Concatenate {
  XJAX_PARAMS_STRUCT_BODY(Concatenate, (std::int64_t, dimension))
};
/// gather (take along `axis`): an index is counted from the end when negative; one still outside
/// [0, n) is clamped to it (JAX's GatherScatterMode.CLIP), or reads zeros when fill_or_drop
/// (FILL_OR_DROP, with 0 as the fill value).
struct Gather {
  XJAX_PARAMS_STRUCT_BODY(Gather, (std::int64_t, axis), (bool, fill_or_drop))
};
/// scatter, scatter_add, scatter_mul, scatter_min, scatter_max along `axis`: indices as gather's;
/// an update whose index is outside [0, n) is clamped onto the edge, or dropped when fill_or_drop
/// (JAX's default for scatters).
struct Scatter {
  XJAX_PARAMS_STRUCT_BODY(Scatter, (std::int64_t, axis), (bool, fill_or_drop))
};
struct Iota {
  XJAX_PARAMS_STRUCT_BODY(Iota, (DType, dtype), (Ints, shape), (std::int64_t, dimension))
};
/// checkpoint_name's tag.
struct Name {
  XJAX_PARAMS_STRUCT_BODY(Name, (std::string, name))
};
/// triangular_solve (lax.linalg's, real operands): solves op(a) x = b (left_side) or x op(a) = b,
/// op(a) = a^T when transpose_a; only a's lower (or upper) triangle is read, and its diagonal is
/// taken as ones when unit_diagonal.
struct TriangularSolve {
  XJAX_PARAMS_STRUCT_BODY(TriangularSolve, (bool, left_side), (bool, lower), (bool, transpose_a), (bool, unit_diagonal))
};
/// qr: complete (Q m x m, R m x n) rather than reduced (Q m x k, R k x n, k = min(m, n)).
struct Qr {
  XJAX_PARAMS_STRUCT_BODY(Qr, (bool, full_matrices))
};
/// eigh: the triangle of a that is read (lower, else upper).
struct Eigh {
  XJAX_PARAMS_STRUCT_BODY(Eigh, (bool, lower))
};
/// svd: complete U (m x m) and V^T (n x n) rather than reduced (m x k, k x n); compute_uv false:
/// the singular values only.
struct Svd {
  XJAX_PARAMS_STRUCT_BODY(Svd, (bool, full_matrices), (bool, compute_uv))
};
/// lu_pivots_to_permutation: the length of the permutation (the rows of the factored matrix).
struct LuPivotsToPermutation {
  XJAX_PARAMS_STRUCT_BODY(LuPivotsToPermutation, (std::int64_t, permutation_size))
};
/// all_gather: the new axis, of size axis_size (the process count when traced); tiled: the
/// processes' values concatenated along the existing axis instead (its size times axis_size).
struct AllGather {
  XJAX_PARAMS_STRUCT_BODY(AllGather, (std::int64_t, axis), (std::int64_t, axis_size), (bool, tiled))
};
/// psum_scatter: the axis of size axis_size (the process count) that is summed and scattered;
/// tiled: the axis has axis_size chunks and is kept, each process getting one chunk.
struct PsumScatter {
  XJAX_PARAMS_STRUCT_BODY(PsumScatter, (std::int64_t, axis), (std::int64_t, axis_size), (bool, tiled))
};
/// ppermute: (source, destination) process pairs, flattened: (s0, d0, s1, d1, ...).
struct Ppermute {
  XJAX_PARAMS_STRUCT_BODY(Ppermute, (Ints, perm))
};
struct CustomJvpCall {
  XJAX_PARAMS_STRUCT_BODY(CustomJvpCall, (ClosedJaxprPtr, call_jaxpr), (Object, jvp), (std::int64_t, num_consts))
};
struct CustomVjpCall {
  XJAX_PARAMS_STRUCT_BODY(CustomVjpCall, (ClosedJaxprPtr, call_jaxpr), (ClosedJaxprPtr, fwd_jaxpr), (Object, bwd), (std::int64_t, num_consts))
};
struct CustomLin {
  XJAX_PARAMS_STRUCT_BODY(CustomLin, (Object, bwd))
};
/// custom_linear_solve's jaxprs, each const-free, taking its consts as leading operands:
/// matvec (consts, x) -> b, solve (consts, b) -> x, transpose_solve (consts, b) -> x (absent, an
/// empty list, when symmetric or not given). symmetric: the operator is its own transpose.
struct CustomLinearSolve {
  XJAX_PARAMS_STRUCT_BODY(CustomLinearSolve, (ClosedJaxprPtr, matvec), (ClosedJaxprPtr, solve), (std::vector<ClosedJaxprPtr>, transpose_solve), (bool, symmetric))
};
/// snapshots: 0 stores every step for reverse mode (scan_checkpoints::all); s > 0 is the
/// binomial schedule with at most s stored carries (scan_checkpoints::binomial(s)).
struct Scan {
  XJAX_PARAMS_STRUCT_BODY(Scan, (ClosedJaxprPtr, jaxpr), (std::int64_t, length), (bool, reverse), (std::int64_t, unroll), (std::int64_t, num_consts), (std::int64_t, num_carry), (std::int64_t, snapshots))
};
struct Cond {
  XJAX_PARAMS_STRUCT_BODY(Cond, (std::vector<ClosedJaxprPtr>, branches))
};
/// snapshots: 0 has no reverse mode (as JAX); s > 0 reverses with at most s stored carries
/// placed online (scan_checkpoints::online(s)).
struct While {
  XJAX_PARAMS_STRUCT_BODY(While, (ClosedJaxprPtr, cond_jaxpr), (ClosedJaxprPtr, body_jaxpr), (std::int64_t, cond_nconsts), (std::int64_t, body_nconsts), (std::int64_t, snapshots))
};
/// The loops reverse mode emits for a checkpointed scan or while_loop (transforms/revolve.cpp).
/// jaxpr K: (consts, carry, x) -> (carry, y, residuals), the known part of one step.
/// revolve_fwd runs K's sweep and stores snapshots; revolve_lin is the linear part of the loop
/// (linear_jaxpr: (lin consts, lin carry, residuals, lin x) -> (lin carry, lin y)); revolve_bwd
/// is its transpose (linear_jaxpr: (consts, ct carry, residuals, x, ct y) -> (ct carry, ct x)).
/// length < 0: a while_loop's trip count, known at run time (operands after the snapshots).
/// revolve_fwd's stored_carries: the indices of K's carries it snapshots (those a replay needs,
/// increasing); revolve_lin's K steps only those.
struct RevolveFwd {
  XJAX_PARAMS_STRUCT_BODY(RevolveFwd, (ClosedJaxprPtr, jaxpr), (std::int64_t, length), (bool, reverse), (std::int64_t, snapshots), (std::int64_t, num_consts), (std::int64_t, num_carry), (std::int64_t, num_res), (Ints, stored_carries))
};
/// online_fwd: a while_loop's known part run forward (cond_jaxpr on (cond consts, carry); jaxpr
/// K on (consts, carry) -> (carry, res)), storing carries online in `snapshots` slots; it outputs
/// the final carry, the stored carries (those stored_carries lists, as revolve_fwd's), each
/// slot's position (i64, -1 when empty) and the trip count.
struct OnlineFwd {
  XJAX_PARAMS_STRUCT_BODY(OnlineFwd, (ClosedJaxprPtr, cond_jaxpr), (ClosedJaxprPtr, jaxpr), (std::int64_t, snapshots), (std::int64_t, cond_nconsts), (std::int64_t, num_consts), (std::int64_t, num_carry), (Ints, stored_carries))
};
struct Revolve {
  XJAX_PARAMS_STRUCT_BODY(Revolve, (ClosedJaxprPtr, jaxpr), (ClosedJaxprPtr, linear_jaxpr), (std::int64_t, length), (bool, reverse), (std::int64_t, snapshots), (std::int64_t, num_consts), (std::int64_t, num_carry), (std::int64_t, num_res), (std::int64_t, num_linear_consts), (std::int64_t, num_linear_carry))
};
struct Checkpoint {
  XJAX_PARAMS_STRUCT_BODY(Checkpoint, (ClosedJaxprPtr, jaxpr), (Object, policy), (bool, prevent_cse), (bool, differentiated))
};
}  // namespace params

/// The parameter struct of primitive P (from its row of XJAX_PRIMITIVE_TABLE).
template <Primitive P> struct params_of;
template <Primitive P> using params_of_t = typename params_of<P>::type;
#define XJAX_PARAMS_OF(name, stem, S, family, kinds) \
  template <> struct params_of<Primitive::name> { using type = params::S; };
XJAX_PRIMITIVES(XJAX_PARAMS_OF)
#undef XJAX_PARAMS_OF

namespace detail {
// The list of every struct the table names, each once, params::None first: Params holds one of
// them in place (a tagged union whose copy, move, destruction and == are in params.cpp).
template <class... Ts> struct TypeList {};
template <class L, class... Ts> struct UniqueTypes {
  using type = L;
};
template <class... Ls, class T, class... Ts> struct UniqueTypes<TypeList<Ls...>, T, Ts...> {
  using type = typename UniqueTypes<std::conditional_t<(std::is_same_v<T, Ls> || ...), TypeList<Ls...>, TypeList<Ls..., T>>,
                                    Ts...>::type;
};
#define XJAX_PARAMS_ALTERNATIVE(name, stem, S, family, kinds) , params::S
/// Every struct the table names, each once, params::None first (index 0).
using ParamsTypes = typename UniqueTypes<TypeList<>, params::None XJAX_PRIMITIVES(XJAX_PARAMS_ALTERNATIVE)>::type;
#undef XJAX_PARAMS_ALTERNATIVE
template <class T, class L> struct TypeIndex;
template <class T, class... Ts> struct TypeIndex<T, TypeList<Ts...>> {
  static constexpr bool found = (std::is_same_v<T, Ts> || ...);
  /// T's position in the list (it is in it once).
  static constexpr std::size_t value = [] {
    std::size_t i = 0;
    (void)((std::is_same_v<T, Ts> ? false : (++i, true)) && ...);
    return i;
  }();
};
template <class L> struct StorageOf;
template <class... Ts> struct StorageOf<TypeList<Ts...>> {
  static constexpr std::size_t size = [] {
    std::size_t m = 0;
    ((m = sizeof(Ts) > m ? sizeof(Ts) : m), ...);
    return m;
  }();
  static constexpr std::size_t align = [] {
    std::size_t m = 0;
    ((m = alignof(Ts) > m ? alignof(Ts) : m), ...);
    return m;
  }();
};
/// The name of parameter struct number `index` ("DotGeneral").
const char* params_struct_name(std::size_t index);
[[noreturn]] void throw_wrong_params(std::size_t held, std::size_t wanted);
}  // namespace detail

/// The parameters of one equation: one of the params:: structs, the one params_of gives for the
/// equation's primitive (bind and typecheck check this). Printed sorted by name, as JAX does.
class Params {
  using Types = detail::ParamsTypes;
  template <class T> using Index = detail::TypeIndex<T, Types>;

 public:
  Params() noexcept : Params(params::None{}) {}
  template <class T>
    requires Index<T>::found
  Params(T p) : index_(Index<T>::value) {  // NOLINT: implicit on purpose, `bind(prim, in, params::Pad{...})`
    ::new (static_cast<void*>(storage_)) T(std::move(p));
  }
  // Out of line (params.cpp): copying, moving and destroying dispatch on the held struct there,
  // so no file that copies an equation compiles code for all 50 structs.
  Params(const Params&);
  Params(Params&&) noexcept;
  Params& operator=(const Params&);
  Params& operator=(Params&&) noexcept;
  ~Params();

  /// The struct; xj::InternalError (a bug in xjax) when the equation holds another.
  template <class T> const T& get() const {
    if (const T* p = get_if<T>()) return *p;
    detail::throw_wrong_params(index_, Index<T>::value);
  }
  template <class T> T& get() {
    if (T* p = get_if<T>()) return *p;
    detail::throw_wrong_params(index_, Index<T>::value);
  }
  /// The struct, or nullptr when the equation holds another (e.g. in a user's policy).
  template <class T> const T* get_if() const {
    static_assert(Index<T>::found, "not a parameter struct");
    return index_ == Index<T>::value ? std::launder(reinterpret_cast<const T*>(storage_)) : nullptr;
  }
  template <class T> T* get_if() {
    static_assert(Index<T>::found, "not a parameter struct");
    return index_ == Index<T>::value ? std::launder(reinterpret_cast<T*>(storage_)) : nullptr;
  }
  /// The held struct's position among the parameter structs (params::None is 0).
  std::size_t index() const { return index_; }
  /// No parameters (params::None).
  bool empty() const { return index_ == 0; }

  /// Same struct, members equal; jaxprs and objects by identity, doubles by bit pattern.
  friend bool operator==(const Params& a, const Params& b);

 private:
  alignas(detail::StorageOf<Types>::align) unsigned char storage_[detail::StorageOf<Types>::size];
  std::uint8_t index_;
};

/// Whether p's type is params_of_t<prim> (checked by bind and typecheck).
bool params_match(Primitive prim, const Params& p);

/// The jaxprs ps holds (a scan's body, a cond's branches, ...), in declaration order.
std::vector<ClosedJaxprPtr> sub_jaxprs(const Params& ps);

}  // namespace xjax
