// params.cpp: what params.hpp declares: equality of parameters (generic over the reflected
// structs), which struct each primitive takes, and the error for reading the wrong one.
#include <new>

#include "param_reflect.hpp"
#include "xjax/errors.hpp"

namespace xjax {

namespace detail {

const char* params_struct_name(std::size_t index) {
#define XJAX_PARAMS_NAME(name, stem, S, family, kinds) \
  if (TypeIndex<params::S, ParamsTypes>::value == index) return #S;
  XJAX_PRIMITIVES(XJAX_PARAMS_NAME)
#undef XJAX_PARAMS_NAME
  return index == 0 ? "None" : "?";
}

void throw_wrong_params(std::size_t held, std::size_t wanted) {
  throw InternalError("parameters", std::string("the equation holds params::") + params_struct_name(held) +
                                        ", a rule read params::" + params_struct_name(wanted));
}

namespace {
/// What Params does with the struct it holds, one entry per struct, indexed as ParamsTypes.
template <class L> struct StructOps;
template <class... Ts> struct StructOps<TypeList<Ts...>> {
  static_assert(sizeof...(Ts) <= 256, "Params keeps the struct's index in one byte");
  static_assert((std::is_nothrow_move_constructible_v<Ts> && ...),
                "Params' moves are declared noexcept: every parameter struct must move without throwing");
  // The storage's address is not the struct's: each pointer is laundered, as get_if does.
  template <class T> static T* held(void* p) { return std::launder(static_cast<T*>(p)); }
  template <class T> static const T* held(const void* p) { return std::launder(static_cast<const T*>(p)); }
  static constexpr void (*copy[])(void*, const void*) = {[](void* to, const void* from) { ::new (to) Ts(*held<Ts>(from)); }...};
  static constexpr void (*move[])(void*, void*) = {[](void* to, void* from) { ::new (to) Ts(std::move(*held<Ts>(from))); }...};
  static constexpr void (*destroy[])(void*) = {[](void* at) { held<Ts>(at)->~Ts(); }...};
  // Each struct's == is memberwise: shared_ptrs (jaxprs, objects) and vectors of them compare by
  // identity, the rest by value.
  static constexpr bool (*equal[])(const void*, const void*) = {
      [](const void* a, const void* b) { return *held<Ts>(a) == *held<Ts>(b); }...};
};
using Ops = StructOps<ParamsTypes>;
}  // namespace

}  // namespace detail

Params::Params(const Params& other) : index_(other.index_) { detail::Ops::copy[index_](storage_, other.storage_); }
Params::Params(Params&& other) noexcept : index_(other.index_) { detail::Ops::move[index_](storage_, other.storage_); }
Params& Params::operator=(const Params& other) {
  if (this != &other) *this = Params(other);  // copied first: a throwing copy leaves *this as it was
  return *this;
}
Params& Params::operator=(Params&& other) noexcept {
  if (this == &other) return *this;
  detail::Ops::destroy[index_](storage_);
  index_ = other.index_;
  detail::Ops::move[index_](storage_, other.storage_);
  return *this;
}
Params::~Params() { detail::Ops::destroy[index_](storage_); }

bool operator==(const Params& a, const Params& b) {
  return a.index_ == b.index_ && detail::Ops::equal[a.index_](a.storage_, b.storage_);
}

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
