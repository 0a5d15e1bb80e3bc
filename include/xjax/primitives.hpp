// primitives.hpp: the one table of primitives. Every rule table is a switch generated from it (or
// checked against it) without a `default:`, so a primitive that lacks a rule is a compile error
// (-Werror=switch); docs/adding_a_primitive.md walks through adding one.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string_view>

// XJAX_PRIMITIVE_TABLE(X, Y): one row X(name, stem, Params, family, kinds, Y) per primitive.
//   name    the enumerator (Primitive::name) and, less a trailing '_', the printed name;
//   stem    the prefix of its rule functions (stem##_jvp, ...): while_'s are while_loop_*, since an
//           identifier with a double underscore is reserved;
//   Params  its parameter struct in xj::params (params.hpp; None for none): params_of<P>;
//   family  what the code may assume of it; a family's rules are written once (shape rule, kernel,
//           transpose, batching rule) and its members only give what is theirs:
//     float_unary    elementwise, floating operands only; kernel and fusion through
//                    kernels::UnaryMath<P>; not linear; batched elementwise
//     numeric_unary  the same on any number (an integer kernel in elementwise.cpp too); its own
//                    transpose (neg is linear)
//     power          integer_pow: elementwise with a parameter; its own shape rule and kernel
//     binary         elementwise of two operands of one type; kernel and fusion through
//                    kernels::BinaryMath<P>; its own transpose; batched elementwise
//     comparison     elementwise of two operands to bool, through kernels::Compare<P>; not linear;
//                    batched elementwise
//     structural     everything else of one equation (dots, reductions, shapes, indexing, ...):
//                    every rule its own
//     factorization  several outputs computed together (the matrix factorizations lu, qr, eigh, svd; sort) by
//                    kernels::stem_kernel(in, params), which bind and plans run as the equation's impl; every
//                    rule its own (batch dims are leading dims)
//     collective     over the processes of an MPI run (distributed.hpp): every rule its own
//     higher_order   carries jaxprs or functions in its params: shape, evaluation, jvp,
//                    transpose and batching rules named stem_*, no DCE or partial-eval rule
//     control_flow   higher_order with its own DCE and partial-eval rules too
//   kinds   the operand kinds the elementwise families accept (floats, numeric, any, integers =
//           ints or bool, ints; `none` else);
//   Y       passed through (the one-argument forms below use it).
#define XJAX_PRIMITIVE_TABLE(X, Y)                                                                   \
  X(neg, neg, None, numeric_unary, numeric, Y)                                                       \
  X(exp, exp, None, float_unary, floats, Y)                                                          \
  X(log, log, None, float_unary, floats, Y)                                                          \
  X(log1p, log1p, None, float_unary, floats, Y)                                                      \
  X(expm1, expm1, None, float_unary, floats, Y)                                                      \
  X(sin, sin, None, float_unary, floats, Y)                                                          \
  X(cos, cos, None, float_unary, floats, Y)                                                          \
  X(tan, tan, None, float_unary, floats, Y)                                                          \
  X(tanh, tanh, None, float_unary, floats, Y)                                                        \
  X(logistic, logistic, None, float_unary, floats, Y)                                                \
  X(sqrt, sqrt, None, float_unary, floats, Y)                                                        \
  X(rsqrt, rsqrt, None, float_unary, floats, Y)                                                      \
  X(asin, asin, None, float_unary, floats, Y)                                                       \
  X(acos, acos, None, float_unary, floats, Y)                                                       \
  X(atan, atan, None, float_unary, floats, Y)                                                       \
  X(sinh, sinh, None, float_unary, floats, Y)                                                       \
  X(cosh, cosh, None, float_unary, floats, Y)                                                       \
  X(asinh, asinh, None, float_unary, floats, Y)                                                     \
  X(acosh, acosh, None, float_unary, floats, Y)                                                     \
  X(atanh, atanh, None, float_unary, floats, Y)                                                     \
  X(erf, erf, None, float_unary, floats, Y)                                                         \
  X(erfc, erfc, None, float_unary, floats, Y)                                                       \
  X(cbrt, cbrt, None, float_unary, floats, Y)                                                       \
  X(exp2, exp2, None, float_unary, floats, Y)                                                       \
  X(log2, log2, None, float_unary, floats, Y)                                                       \
  X(floor, floor, None, float_unary, floats, Y)                                                     \
  X(ceil, ceil, None, float_unary, floats, Y)                                                       \
  X(lgamma, lgamma, None, float_unary, floats, Y)                                                   \
  X(digamma, digamma, None, float_unary, floats, Y)                                                 \
  X(erf_inv, erf_inv, None, float_unary, floats, Y)                                                 \
  X(abs, abs, None, numeric_unary, numeric, Y)                                                       \
  X(sign, sign, None, numeric_unary, numeric, Y)                                                     \
  X(integer_pow, integer_pow, IntegerPow, power, numeric, Y)                                         \
  X(add, add, None, binary, numeric, Y)                                                              \
  X(sub, sub, None, binary, numeric, Y)                                                              \
  X(mul, mul, None, binary, numeric, Y)                                                              \
  X(div, div, None, binary, numeric, Y)                                                              \
  X(max, max, None, binary, any, Y)                                                                  \
  X(min, min, None, binary, any, Y)                                                                  \
  X(pow, pow, None, binary, numeric, Y)                                                              \
  X(atan2, atan2, None, binary, floats, Y)                                                           \
  X(rem, rem, None, binary, numeric, Y)                                                              \
  X(nextafter, nextafter, None, binary, floats, Y)                                                   \
  X(bitwise_and, bitwise_and, None, binary, integers, Y)                                             \
  X(bitwise_or, bitwise_or, None, binary, integers, Y)                                               \
  X(bitwise_xor, bitwise_xor, None, binary, integers, Y)                                             \
  X(shift_left, shift_left, None, binary, ints, Y)                                                   \
  X(shift_right_logical, shift_right_logical, None, binary, ints, Y)                                 \
  X(shift_right_arithmetic, shift_right_arithmetic, None, binary, ints, Y)                           \
  X(eq, eq, None, comparison, any, Y)                                                                \
  X(ne, ne, None, comparison, any, Y)                                                                \
  X(lt, lt, None, comparison, any, Y)                                                                \
  X(le, le, None, comparison, any, Y)                                                                \
  X(gt, gt, None, comparison, any, Y)                                                                \
  X(ge, ge, None, comparison, any, Y)                                                                \
  X(select_n, select_n, None, structural, none, Y)                                                   \
  X(convert_element_type, convert_element_type, ConvertElementType, structural, none, Y)             \
  X(stop_gradient, stop_gradient, None, structural, none, Y)                                         \
  X(copy, copy, None, structural, none, Y)                                                           \
  X(dot_general, dot_general, DotGeneral, structural, none, Y)                                       \
  X(conv_general_dilated, conv_general_dilated, ConvGeneralDilated, structural, none, Y)             \
  X(reduce_sum, reduce_sum, Reduce, structural, none, Y)                                             \
  X(reduce_max, reduce_max, Reduce, structural, none, Y)                                             \
  X(reduce_min, reduce_min, Reduce, structural, none, Y)                                             \
  X(reduce_prod, reduce_prod, Reduce, structural, none, Y)                                           \
  X(round, round, Round, structural, none, Y)                                                        \
  X(bitwise_not, bitwise_not, None, structural, none, Y)                                             \
  X(population_count, population_count, None, structural, none, Y)                                   \
  X(argmax, argmax, Argmax, structural, none, Y)                                                     \
  X(argmin, argmin, Argmax, structural, none, Y)                                                     \
  X(reduce_and, reduce_and, Reduce, structural, none, Y)                                             \
  X(reduce_or, reduce_or, Reduce, structural, none, Y)                                               \
  X(is_finite, is_finite, None, structural, none, Y)                                                 \
  X(clamp, clamp, None, structural, none, Y)                                                         \
  X(cumsum, cumsum, Cumulative, structural, none, Y)                                                 \
  X(cumprod, cumprod, Cumulative, structural, none, Y)                                               \
  X(cummax, cummax, Cumulative, structural, none, Y)                                                 \
  X(cummin, cummin, Cumulative, structural, none, Y)                                                 \
  X(cumlogsumexp, cumlogsumexp, Cumulative, structural, none, Y)                                     \
  X(reduce_window_sum, reduce_window_sum, ReduceWindow, structural, none, Y)                         \
  X(reduce_window_max, reduce_window_max, ReduceWindow, structural, none, Y)                         \
  X(reduce_window_min, reduce_window_min, ReduceWindow, structural, none, Y)                         \
  X(select_and_gather_add, select_and_gather_add, SelectWindow, structural, none, Y)                 \
  X(select_and_scatter_add, select_and_scatter_add, SelectWindow, structural, none, Y)               \
  X(broadcast_in_dim, broadcast_in_dim, BroadcastInDim, structural, none, Y)                         \
  X(reshape, reshape, Reshape, structural, none, Y)                                                  \
  X(transpose, transpose, Transpose, structural, none, Y)                                            \
  X(rev, rev, Rev, structural, none, Y)                                                              \
  X(squeeze, squeeze, Squeeze, structural, none, Y)                                                  \
  X(expand_dims, expand_dims, ExpandDims, structural, none, Y)                                       \
  X(slice, slice, Slice, structural, none, Y)                                                        \
  X(pad, pad, Pad, structural, none, Y)                                                              \
  X(dynamic_slice, dynamic_slice, DynamicSlice, structural, none, Y)                                 \
  X(dynamic_update_slice, dynamic_update_slice, None, structural, none, Y)                           \
  X(concatenate, concatenate, Concatenate, structural, none, Y)                                      \
  X(gather, gather, Gather, structural, none, Y)                                                     \
  X(scatter_add, scatter_add, Scatter, structural, none, Y)                                          \
  X(scatter, scatter, Scatter, structural, none, Y)                                                  \
  X(scatter_mul, scatter_mul, Scatter, structural, none, Y)                                          \
  X(scatter_min, scatter_min, Scatter, structural, none, Y)                                          \
  X(scatter_max, scatter_max, Scatter, structural, none, Y)                                          \
  X(iota, iota, Iota, structural, none, Y)                                                           \
  X(name, name, Name, structural, none, Y)                                                           \
  X(threefry2x32, threefry2x32, None, structural, none, Y)                                           \
  X(cholesky, cholesky, None, structural, none, Y)                                                   \
  X(triangular_solve, triangular_solve, TriangularSolve, structural, none, Y)                        \
  X(lu, lu, None, factorization, none, Y)                                                            \
  X(qr, qr, Qr, factorization, none, Y)                                                              \
  X(eigh, eigh, Eigh, factorization, none, Y)                                                        \
  X(svd, svd, Svd, factorization, none, Y)                                                           \
  X(sort, sort, Sort, factorization, none, Y)                                                        \
  X(top_k, top_k, TopK, factorization, none, Y)                                                      \
  X(lu_pivots_to_permutation, lu_pivots_to_permutation, LuPivotsToPermutation, structural, none, Y)  \
  X(psum, psum, None, collective, none, Y)                                                           \
  X(pmax, pmax, None, collective, none, Y)                                                           \
  X(all_gather, all_gather, AllGather, collective, none, Y)                                          \
  X(psum_scatter, psum_scatter, PsumScatter, collective, none, Y)                                    \
  X(ppermute, ppermute, Ppermute, collective, none, Y)                                               \
  X(custom_jvp_call, custom_jvp_call, CustomJvpCall, higher_order, none, Y)                          \
  X(custom_vjp_call, custom_vjp_call, CustomVjpCall, higher_order, none, Y)                          \
  X(custom_lin, custom_lin, CustomLin, higher_order, none, Y)                                        \
  X(custom_linear_solve, custom_linear_solve, CustomLinearSolve, higher_order, none, Y)              \
  X(scan, scan, Scan, control_flow, none, Y)                                                         \
  X(cond, cond, Cond, control_flow, none, Y)                                                         \
  X(while_, while_loop, While, control_flow, none, Y)                                                \
  X(checkpoint, checkpoint, Checkpoint, control_flow, none, Y)                                       \
  X(revolve_fwd, revolve_fwd, RevolveFwd, higher_order, none, Y)                                     \
  X(online_fwd, online_fwd, OnlineFwd, higher_order, none, Y)                                        \
  X(revolve_lin, revolve_lin, Revolve, higher_order, none, Y)                                        \
  X(revolve_bwd, revolve_bwd, Revolve, higher_order, none, Y)

// X(name, stem, Params, family, kinds) for every primitive.
#define XJAX_PRIMITIVES(X) XJAX_PRIMITIVE_TABLE(XJAX_ROW_ALL, X)
#define XJAX_ROW_ALL(name, stem, S, family, kinds, X) X(name, stem, S, family, kinds)

// One-argument forms: X(name) for every primitive, for the first-order ones (one equation, a
// kernel: every family but higher_order and control_flow), for the higher-order ones.
#define XJAX_FOR_EACH_PRIMITIVE(X) XJAX_PRIMITIVE_TABLE(XJAX_ROW_NAME, X)
#define XJAX_FOR_EACH_FIRST_ORDER_PRIMITIVE(X) XJAX_PRIMITIVE_TABLE(XJAX_ROW_FIRST_ORDER, X)
#define XJAX_FOR_EACH_HIGHER_ORDER_PRIMITIVE(X) XJAX_PRIMITIVE_TABLE(XJAX_ROW_HIGHER_ORDER, X)
#define XJAX_ROW_NAME(name, stem, S, family, kinds, X) X(name)
#define XJAX_ROW_FIRST_ORDER(name, stem, S, family, kinds, X) XJAX_IF_FIRST_ORDER_##family(X(name))
#define XJAX_ROW_HIGHER_ORDER(name, stem, S, family, kinds, X) XJAX_IF_HIGHER_ORDER_##family(X(name))
// X(primitive, stem) for the higher-order primitives (their rule functions' names).
#define XJAX_FOR_EACH_HIGHER_ORDER_RULE_STEM(X) XJAX_PRIMITIVE_TABLE(XJAX_ROW_STEM, X)
#define XJAX_ROW_STEM(name, stem, S, family, kinds, X) XJAX_IF_HIGHER_ORDER_##family(X(name, stem))

// Per family: kept (first argument) or dropped. A new family must say here what it is.
#define XJAX_KEEP(...) __VA_ARGS__
#define XJAX_DROP(...)
#define XJAX_IF_FIRST_ORDER_float_unary XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_numeric_unary XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_power XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_binary XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_comparison XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_structural XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_factorization XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_collective XJAX_KEEP
#define XJAX_IF_FIRST_ORDER_higher_order XJAX_DROP
#define XJAX_IF_FIRST_ORDER_control_flow XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_float_unary XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_numeric_unary XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_power XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_binary XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_comparison XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_structural XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_factorization XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_collective XJAX_DROP
#define XJAX_IF_HIGHER_ORDER_higher_order XJAX_KEEP
#define XJAX_IF_HIGHER_ORDER_control_flow XJAX_KEEP

namespace xjax {

enum class Primitive : std::uint16_t {
#define XJAX_ENUM(name) name,
  XJAX_FOR_EACH_PRIMITIVE(XJAX_ENUM)
#undef XJAX_ENUM
};

inline constexpr int num_primitives = 0
#define XJAX_COUNT(name) +1
    XJAX_FOR_EACH_PRIMITIVE(XJAX_COUNT)
#undef XJAX_COUNT
    ;

/// The families of XJAX_PRIMITIVE_TABLE (what the code may assume of a primitive).
enum class Family : std::uint8_t {
  float_unary, numeric_unary, power, binary, comparison, structural, factorization, collective, higher_order,
  control_flow
};

/// p's family, from the table.
constexpr Family family_of(Primitive p) {
  switch (p) {
#define XJAX_FAMILY_CASE(name, stem, S, family, kinds) \
  case Primitive::name: return Family::family;
    XJAX_PRIMITIVES(XJAX_FAMILY_CASE)
#undef XJAX_FAMILY_CASE
  }
  return Family::structural;
}

/// The primitive's name as jaxprs print it (`while_` prints as `while`).
std::string_view primitive_name(Primitive p);
/// Writes primitive_name(p).
std::ostream& operator<<(std::ostream& os, Primitive p);

}  // namespace xjax
