// param_reflect.hpp: the one generic place that reads parameters by name (not installed). Every
// params:: struct lists its members once (XJAX_PARAMS_STRUCT_BODY, params.hpp), so they can be
// walked with their names; the printer, CSE and sub_jaxprs use these walks instead of naming
// parameters.
#pragma once
#include <string_view>

#include "xjax/jaxpr.hpp"

namespace xjax::detail {

/// Calls f(s) with the struct ps holds.
template <class F, class... Ts> void visit_params(const Params& ps, TypeList<Ts...>, F&& f) {
  std::size_t i = 0;
  (void)((i++ == ps.index() ? (f(ps.get<Ts>()), true) : false) || ...);
}
template <class F> void visit_params(const Params& ps, F&& f) { visit_params(ps, ParamsTypes{}, f); }

/// Calls f(name, value) for each member of the struct ps holds, in declaration order. A value is
/// bool, std::int64_t, DType, std::string, params::Ints, ClosedJaxprPtr,
/// std::vector<ClosedJaxprPtr> or params::Object.
template <class F> void for_each_param(const Params& ps, F&& f) {
  visit_params(ps, [&](const auto& s) { s.for_each_member([&](const char* name, const auto& v) { f(std::string_view(name), v); }); });
}

}  // namespace xjax::detail
