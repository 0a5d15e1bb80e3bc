// Compile-fail test of typed parameters (meson: tests/compile_fail/meson.build). Each case is
// built twice: with -DXJAX_CONTROL it is correct and must compile; without, it has one mistake a
// string-keyed map would only have reported at run time, and it must not compile.
#include "xjax/jaxpr.hpp"

int main() {
  xjax::params::DotGeneral dn{};
#if defined(XJAX_CONTROL)
  dn.lhs_contracting = {1};
#elif defined(XJAX_WRONG_NAME)
  dn.lhs_contractin = {1};  // misspelled parameter name
#elif defined(XJAX_WRONG_TYPE)
  dn.lhs_contracting = "1";  // a string where the parameter is a list of ints
#elif defined(XJAX_WRONG_STRUCT)
  xjax::Params bad = std::string("lhs_contracting");  // Params holds only the params:: structs
#endif
  xjax::Params ps = dn;
  return ps.get<xjax::params::DotGeneral>().lhs_contracting.size() == 1 ? 0 : 1;
}
