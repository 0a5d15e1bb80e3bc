// param_reflect.hpp: the one generic place that reads parameters by name (not installed). Every
// params:: struct lists its members once (XJAX_PARAMS_STRUCT_BODY, params.hpp), so they can be
// walked with their names; the printer, CSE and sub_jaxprs use these walks instead of naming
// parameters.
#pragma once
#include <string_view>

#include "xjax/jaxpr.hpp"

namespace xjax::detail {

/// Calls f(name, value) for each member of the struct ps holds, in declaration order. A value is
/// bool, std::int64_t, DType, std::string, params::Ints, ClosedJaxprPtr,
/// std::vector<ClosedJaxprPtr> or params::Object.
template <class F> void for_each_param(const Params& ps, F&& f) {
  std::visit([&](const auto& s) { s.for_each_member([&](const char* name, const auto& v) { f(std::string_view(name), v); }); },
             ps.variant());
}

}  // namespace xjax::detail
