// primitives.hpp: the one list of primitives. Every rule table is a switch over it without a
// `default:`, so a primitive that lacks a rule is a compile error (-Werror=switch).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string_view>

// X(name): elementwise unary float ops first, then binary, comparisons, structural ops, the
// collectives (over the processes of an MPI run: distributed.hpp), and last the higher-order
// primitives (their rules live together in one file of transforms/ each).
#define XJAX_FOR_EACH_FIRST_ORDER_PRIMITIVE(X)                                                          \
  X(neg) X(exp) X(log) X(log1p) X(expm1) X(sin) X(cos) X(tan) X(tanh) X(logistic) X(sqrt)        \
  X(rsqrt) X(abs) X(sign) X(integer_pow)                                                         \
  X(add) X(sub) X(mul) X(div) X(max) X(min) X(pow)                                               \
  X(eq) X(ne) X(lt) X(le) X(gt) X(ge)                                                            \
  X(select_n) X(convert_element_type) X(stop_gradient) X(copy)                                   \
  X(dot_general)                                                                                 \
  X(reduce_sum) X(reduce_max) X(reduce_min) X(reduce_prod) X(argmax)                             \
  X(broadcast_in_dim) X(reshape) X(transpose) X(squeeze) X(expand_dims)                          \
  X(slice) X(pad) X(dynamic_slice) X(dynamic_update_slice) X(concatenate)                        \
  X(gather) X(scatter_add) X(iota) X(name) X(threefry2x32)                                      \
  X(psum) X(pmax) X(all_gather) X(psum_scatter) X(ppermute)

// Primitives that carry jaxprs or functions in their params; rules in transforms/<family>.cpp.
#define XJAX_FOR_EACH_HIGHER_ORDER_PRIMITIVE(X) X(custom_jvp_call) X(custom_vjp_call) X(custom_lin) X(scan) \
  X(cond) X(while_) X(checkpoint) X(revolve_fwd) X(online_fwd) X(revolve_lin) \
  X(revolve_bwd)

#define XJAX_FOR_EACH_PRIMITIVE(X) XJAX_FOR_EACH_FIRST_ORDER_PRIMITIVE(X) XJAX_FOR_EACH_HIGHER_ORDER_PRIMITIVE(X)

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

/// The primitive's name as jaxprs print it (`while_` prints as `while`).
std::string_view primitive_name(Primitive p);
/// Writes primitive_name(p).
std::ostream& operator<<(std::ostream& os, Primitive p);

}  // namespace xjax
