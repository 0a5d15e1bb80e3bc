// shape_errors.hpp: the errors of the shape rules (shape_rules.cpp, windows.cpp): a ShapeError or
// TypeError naming the application (`foo(f32[3], i32[])`) and why it is rejected.
#pragma once
#include <span>
#include <string>

#include "internal.hpp"

namespace xjax::detail {

[[noreturn]] inline void shape_fail(Primitive p, std::span<const ShapedArray> in, const std::string& why) {
  throw ShapeError(describe_application(p, in) + ": " + why);
}
[[noreturn]] inline void type_fail(Primitive p, std::span<const ShapedArray> in, const std::string& why) {
  throw TypeError(describe_application(p, in) + ": " + why);
}

}  // namespace xjax::detail
