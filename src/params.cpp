// params.cpp: what params.hpp declares: equality of parameters (generic over the reflected
// structs), which struct each primitive takes, and the error for reading the wrong one.
#include "param_reflect.hpp"
#include "xjax/errors.hpp"

namespace xjax {

namespace detail {

const char* params_struct_name(std::size_t index) {
#define XJAX_PARAMS_NAME(name, stem, S, family, kinds) \
  if (ParamsVariant(std::in_place_type<params::S>).index() == index) return #S;
  XJAX_PRIMITIVES(XJAX_PARAMS_NAME)
#undef XJAX_PARAMS_NAME
  return index == 0 ? "None" : "?";
}

void throw_wrong_params(std::size_t held, std::size_t wanted) {
  throw InternalError("parameters", std::string("the equation holds params::") + params_struct_name(held) +
                                        ", a rule read params::" + params_struct_name(wanted));
}

}  // namespace detail

static_assert(std::is_nothrow_move_constructible_v<detail::ParamsVariant> &&
                  std::is_nothrow_move_assignable_v<detail::ParamsVariant>,
              "Params' moves are declared noexcept: every parameter struct must move without throwing");
Params::Params(const Params&) = default;
Params::Params(Params&&) noexcept = default;
Params& Params::operator=(const Params&) = default;
Params& Params::operator=(Params&&) noexcept = default;
Params::~Params() = default;

// Each struct's == is memberwise: shared_ptrs (jaxprs, objects) and vectors of them compare by
// identity, the rest by value.
bool operator==(const Params& a, const Params& b) { return a.variant() == b.variant(); }

std::vector<ClosedJaxprPtr> sub_jaxprs(const Params& ps) {
  std::vector<ClosedJaxprPtr> out;
  detail::for_each_param(ps, [&](std::string_view, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, ClosedJaxprPtr>) out.push_back(v);
    else if constexpr (std::is_same_v<T, std::vector<ClosedJaxprPtr>>) out.insert(out.end(), v.begin(), v.end());
  });
  return out;
}

bool params_match(Primitive prim, const Params& p) {
  switch (prim) {
#define XJAX_PARAMS_MATCH(name) \
  case Primitive::name: return p.get_if<params_of_t<Primitive::name>>() != nullptr;
    XJAX_FOR_EACH_PRIMITIVE(XJAX_PARAMS_MATCH)
#undef XJAX_PARAMS_MATCH
  }
  return false;
}

}  // namespace xjax
