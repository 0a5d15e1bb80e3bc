// A tiny program built against an *installed* xjax, once with pkg-config and once with CMake's
// find_package(xjax) (see run.sh). It proves that the installed headers, library and the flags
// carried by xjax.pc / xjaxConfig.cmake are enough for a consumer, including one that uses the
// xtensor interop header (xtensor's and xsimd's headers, XTENSOR_USE_XSIMD).
#include <xjax/xjax.hpp>
#include <xjax/xtensor.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#ifndef XTENSOR_USE_XSIMD
#error "XTENSOR_USE_XSIMD must come from xjax's package flags (it changes xtensor's allocator type)"
#endif
#if __cplusplus < 202002L
#error "xjax's package flags must select C++20"
#endif

namespace xj = xjax;

int main() {
  // Eager: computes at once.
  xj::Array y = xj::sin(xj::array({1.f, 2.f}));
  auto v = y.to_vector<float>();
  if (v.size() != 2 || std::fabs(v[0] - std::sin(1.f)) > 1e-6f ||
      std::fabs(v[1] - std::sin(2.f)) > 1e-6f) {
    std::fprintf(stderr, "consumer: wrong eager sin result\n");
    return 1;
  }

  // Traced: the jaxpr printer lives in the compiled library.
  auto jaxpr = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::array({1.f, 2.f}));
  std::ostringstream os;
  os << jaxpr;
  if (os.str().find("sin") == std::string::npos) {
    std::fprintf(stderr, "consumer: unexpected jaxpr: %s\n", os.str().c_str());
    return 1;
  }
  // xtensor interop: a zero-copy array on an xarray, and a zero-copy view of the result.
  xt::xarray<float> xs = {1.f, 2.f, 3.f};
  xj::Array xa = xj::adapt(xs);
  auto doubled = xj::as_xtensor<float>(xa * 2.0f);
  if (xa.raw_data() != static_cast<const void*>(xs.data()) || doubled(2) != 6.f) {
    std::fprintf(stderr, "consumer: xtensor interop failed\n");
    return 1;
  }
  std::printf("consumer ok: sin([1, 2]) = [%g, %g]; jaxpr %s\n", v[0], v[1], os.str().c_str());
  return 0;
}
