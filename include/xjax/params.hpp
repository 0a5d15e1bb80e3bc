// params.hpp: the parameters of every primitive, one struct each, declared next to the primitive
// list. Each struct is reflected with Boost.Hana, so that printing (JAX's text form), equality
// and CSE keys are written once, generically (src/params.cpp, src/param_reflect.hpp), and a
// rule reads `ps.get<params::Pad>().lo`: a wrong name or type does not compile.
//
// Adding a parameter to a primitive is one line in its struct. Adding a primitive with
// parameters: a struct here, named in the primitive's row of XJAX_PRIMITIVE_TABLE (primitives.hpp),
// from which params_of and the variant of all structs are generated.
#pragma once
#include <boost/hana/define_struct.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
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
};

namespace params {
using Ints = std::vector<std::int64_t>;
using Object = std::shared_ptr<const ParamObject>;

/// Primitives without parameters (elementwise ops, select_n, copy, threefry2x32, ...).
struct None {
  BOOST_HANA_DEFINE_STRUCT(None);
};
struct IntegerPow {
  BOOST_HANA_DEFINE_STRUCT(IntegerPow, (std::int64_t, y));
};
struct ConvertElementType {
  BOOST_HANA_DEFINE_STRUCT(ConvertElementType, (DType, new_dtype));
};
/// out[batch, lhs free, rhs free] = sum over contracting dims of lhs * rhs.
struct DotGeneral {
  BOOST_HANA_DEFINE_STRUCT(DotGeneral, (Ints, lhs_contracting), (Ints, rhs_contracting), (Ints, lhs_batch),
                           (Ints, rhs_batch));
};
/// reduce_sum, reduce_max, reduce_min, reduce_prod.
struct Reduce {
  BOOST_HANA_DEFINE_STRUCT(Reduce, (Ints, axes));
};
struct Argmax {
  BOOST_HANA_DEFINE_STRUCT(Argmax, (Ints, axes), (DType, index_dtype));
};
struct BroadcastInDim {
  BOOST_HANA_DEFINE_STRUCT(BroadcastInDim, (Ints, shape), (Ints, broadcast_dimensions));
};
struct Reshape {
  BOOST_HANA_DEFINE_STRUCT(Reshape, (Ints, new_sizes));
};
struct Transpose {
  BOOST_HANA_DEFINE_STRUCT(Transpose, (Ints, permutation));
};
struct Squeeze {
  BOOST_HANA_DEFINE_STRUCT(Squeeze, (Ints, dimensions));
};
struct ExpandDims {
  BOOST_HANA_DEFINE_STRUCT(ExpandDims, (Ints, dimensions));
};
/// Empty strides mean 1 in every dimension.
struct Slice {
  BOOST_HANA_DEFINE_STRUCT(Slice, (Ints, start_indices), (Ints, limit_indices), (Ints, strides));
};
struct Pad {
  BOOST_HANA_DEFINE_STRUCT(Pad, (Ints, lo), (Ints, hi), (Ints, interior));
};
struct DynamicSlice {
  BOOST_HANA_DEFINE_STRUCT(DynamicSlice, (Ints, slice_sizes));
};
struct Concatenate {
  BOOST_HANA_DEFINE_STRUCT(Concatenate, (std::int64_t, dimension));
};
struct Gather {
  BOOST_HANA_DEFINE_STRUCT(Gather, (std::int64_t, axis));
};
struct ScatterAdd {
  BOOST_HANA_DEFINE_STRUCT(ScatterAdd, (std::int64_t, axis));
};
struct Iota {
  BOOST_HANA_DEFINE_STRUCT(Iota, (DType, dtype), (Ints, shape), (std::int64_t, dimension));
};
/// checkpoint_name's tag.
struct Name {
  BOOST_HANA_DEFINE_STRUCT(Name, (std::string, name));
};
/// all_gather: the new axis, of size axis_size (the process count when traced); tiled: the
/// processes' values concatenated along the existing axis instead (its size times axis_size).
struct AllGather {
  BOOST_HANA_DEFINE_STRUCT(AllGather, (std::int64_t, axis), (std::int64_t, axis_size), (bool, tiled));
};
/// psum_scatter: the axis of size axis_size (the process count) that is summed and scattered;
/// tiled: the axis has axis_size chunks and is kept, each process getting one chunk.
struct PsumScatter {
  BOOST_HANA_DEFINE_STRUCT(PsumScatter, (std::int64_t, axis), (std::int64_t, axis_size), (bool, tiled));
};
/// ppermute: (source, destination) process pairs, flattened: (s0, d0, s1, d1, ...).
struct Ppermute {
  BOOST_HANA_DEFINE_STRUCT(Ppermute, (Ints, perm));
};
struct CustomJvpCall {
  BOOST_HANA_DEFINE_STRUCT(CustomJvpCall, (ClosedJaxprPtr, call_jaxpr), (Object, jvp), (std::int64_t, num_consts));
};
struct CustomVjpCall {
  BOOST_HANA_DEFINE_STRUCT(CustomVjpCall, (ClosedJaxprPtr, call_jaxpr), (ClosedJaxprPtr, fwd_jaxpr), (Object, bwd),
                           (std::int64_t, num_consts));
};
struct CustomLin {
  BOOST_HANA_DEFINE_STRUCT(CustomLin, (Object, bwd));
};
/// snapshots: 0 stores every step for reverse mode (scan_checkpoints::all); s > 0 is the
/// binomial schedule with at most s stored carries (scan_checkpoints::binomial(s)).
struct Scan {
  BOOST_HANA_DEFINE_STRUCT(Scan, (ClosedJaxprPtr, jaxpr), (std::int64_t, length), (bool, reverse),
                           (std::int64_t, unroll), (std::int64_t, num_consts), (std::int64_t, num_carry),
                           (std::int64_t, snapshots));
};
struct Cond {
  BOOST_HANA_DEFINE_STRUCT(Cond, (std::vector<ClosedJaxprPtr>, branches));
};
/// snapshots: 0 has no reverse mode (as JAX); s > 0 reverses with at most s stored carries
/// placed online (scan_checkpoints::online(s)).
struct While {
  BOOST_HANA_DEFINE_STRUCT(While, (ClosedJaxprPtr, cond_jaxpr), (ClosedJaxprPtr, body_jaxpr),
                           (std::int64_t, cond_nconsts), (std::int64_t, body_nconsts), (std::int64_t, snapshots));
};
/// The loops reverse mode emits for a checkpointed scan or while_loop (transforms/revolve.cpp).
/// jaxpr K: (consts, carry, x) -> (carry, y, residuals), the known part of one step.
/// revolve_fwd runs K's sweep and stores snapshots; revolve_lin is the linear part of the loop
/// (linear_jaxpr: (lin consts, lin carry, residuals, lin x) -> (lin carry, lin y)); revolve_bwd
/// is its transpose (linear_jaxpr: (consts, ct carry, residuals, x, ct y) -> (ct carry, ct x)).
/// length < 0: a while_loop's trip count, known at run time (operands after the snapshots).
struct RevolveFwd {
  BOOST_HANA_DEFINE_STRUCT(RevolveFwd, (ClosedJaxprPtr, jaxpr), (std::int64_t, length), (bool, reverse),
                           (std::int64_t, snapshots), (std::int64_t, num_consts), (std::int64_t, num_carry),
                           (std::int64_t, num_res));
};
/// online_fwd: a while_loop's known part run forward (cond_jaxpr on (cond consts, carry); jaxpr
/// K on (consts, carry) -> (carry, res)), storing carries online in `snapshots` slots; it outputs
/// the final carry, the stored carries, each slot's position (i64, -1 when empty) and the trip count.
struct OnlineFwd {
  BOOST_HANA_DEFINE_STRUCT(OnlineFwd, (ClosedJaxprPtr, cond_jaxpr), (ClosedJaxprPtr, jaxpr), (std::int64_t, snapshots),
                           (std::int64_t, cond_nconsts), (std::int64_t, num_consts), (std::int64_t, num_carry));
};
struct Revolve {
  BOOST_HANA_DEFINE_STRUCT(Revolve, (ClosedJaxprPtr, jaxpr), (ClosedJaxprPtr, linear_jaxpr), (std::int64_t, length),
                           (bool, reverse), (std::int64_t, snapshots), (std::int64_t, num_consts),
                           (std::int64_t, num_carry), (std::int64_t, num_res), (std::int64_t, num_linear_consts),
                           (std::int64_t, num_linear_carry));
};
struct Checkpoint {
  BOOST_HANA_DEFINE_STRUCT(Checkpoint, (ClosedJaxprPtr, jaxpr), (Object, policy), (bool, prevent_cse),
                           (bool, differentiated));
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
// The variant of every struct the table names, each once, params::None first.
template <class... Ts> struct TypeList {};
template <class L, class... Ts> struct UniqueTypes {
  using type = L;
};
template <class... Ls, class T, class... Ts> struct UniqueTypes<TypeList<Ls...>, T, Ts...> {
  using type = typename UniqueTypes<std::conditional_t<(std::is_same_v<T, Ls> || ...), TypeList<Ls...>, TypeList<Ls..., T>>,
                                    Ts...>::type;
};
template <class L> struct VariantOf;
template <class... Ts> struct VariantOf<TypeList<Ts...>> {
  using type = std::variant<Ts...>;
};
#define XJAX_PARAMS_ALTERNATIVE(name, stem, S, family, kinds) , params::S
using ParamsVariant =
    typename VariantOf<typename UniqueTypes<TypeList<>, params::None XJAX_PRIMITIVES(XJAX_PARAMS_ALTERNATIVE)>::type>::type;
#undef XJAX_PARAMS_ALTERNATIVE
template <class T, class V> struct is_alternative;
template <class T, class... Ts> struct is_alternative<T, std::variant<Ts...>> {
  static constexpr bool value = (std::is_same_v<T, Ts> || ...);
};
/// The name of parameter struct number `index` ("DotGeneral").
const char* params_struct_name(std::size_t index);
[[noreturn]] void throw_wrong_params(std::size_t held, std::size_t wanted);
}  // namespace detail

/// The parameters of one equation: one of the params:: structs, the one params_of gives for the
/// equation's primitive (bind and typecheck check this). Printed sorted by name, as JAX does.
class Params {
 public:
  Params() = default;
  template <class T>
    requires detail::is_alternative<T, detail::ParamsVariant>::value
  Params(T p) : v_(std::move(p)) {}  // NOLINT: implicit on purpose, `bind(prim, in, params::Pad{...})`

  /// The struct; xj::InternalError (a bug in xjax) when the equation holds another.
  template <class T> const T& get() const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    detail::throw_wrong_params(v_.index(), detail::ParamsVariant(std::in_place_type<T>).index());
  }
  template <class T> T& get() {
    if (T* p = std::get_if<T>(&v_)) return *p;
    detail::throw_wrong_params(v_.index(), detail::ParamsVariant(std::in_place_type<T>).index());
  }
  /// The struct, or nullptr when the equation holds another (e.g. in a user's policy).
  template <class T> const T* get_if() const { return std::get_if<T>(&v_); }
  const detail::ParamsVariant& variant() const { return v_; }
  /// No parameters (params::None).
  bool empty() const { return v_.index() == 0; }

  /// Same struct, members equal; jaxprs and objects by identity, doubles by bit pattern.
  friend bool operator==(const Params& a, const Params& b);

 private:
  detail::ParamsVariant v_;
};

/// Whether p's type is params_of_t<prim> (checked by bind and typecheck).
bool params_match(Primitive prim, const Params& p);

/// The jaxprs ps holds (a scan's body, a cond's branches, ...), in declaration order.
std::vector<ClosedJaxprPtr> sub_jaxprs(const Params& ps);

}  // namespace xjax
