// param_reflect.hpp: the one generic place that reads parameters by name (not installed). Every
// params:: struct is a Boost.Hana Struct, so its members can be walked with their names; the
// printer, CSE, equality and sub_jaxprs use these walks instead of naming parameters.
#pragma once
#include <boost/hana/accessors.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <string_view>

#include "xjax/jaxpr.hpp"

namespace xjax::detail {

/// Calls f(name, value) for each member of the struct ps holds, in declaration order. A value is
/// bool, std::int64_t, DType, std::string, params::Ints, ClosedJaxprPtr,
/// std::vector<ClosedJaxprPtr> or params::Object.
template <class F> void for_each_param(const Params& ps, F&& f) {
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        boost::hana::for_each(boost::hana::accessors<S>(), [&](auto pair) {
          f(std::string_view(boost::hana::to<const char*>(boost::hana::first(pair))), boost::hana::second(pair)(s));
        });
      },
      ps.variant());
}

}  // namespace xjax::detail
