// quickstart: the first xjax program to read.
//
// A function written once on xj::Array runs eagerly on concrete arrays, and the same function
// can be traced into a jaxpr: the typed list of primitive equations that every transform
// (grad, vmap, checkpoint, scan, ...) rewrites.
#include <xjax/xjax.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace xj = xjax;

int main() {
  // An ordinary C++ callable on arrays.
  auto f = [](const xj::Array& x) { return xj::sin(xj::sin(x)); };
  xj::Array x = xj::array({1.f, 2.f, 3.f});

  // Eager: outside any transform, ops compute at once.
  xj::Array y = xj::sin(x);
  std::cout << "sin([1, 2, 3]) = [";
  auto v = y.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) std::cout << (i ? ", " : "") << v[i];
  std::cout << "]\n";

  // Traced: make_jaxpr shows what f does, primitive by primitive.
  std::cout << "make_jaxpr(f):\n" << xj::make_jaxpr(f)(x) << "\n";

  // The example checks itself so the test suite notices when it breaks.
  if (v.size() != 3 || std::fabs(v[0] - std::sin(1.f)) > 1e-6f) {
    std::fprintf(stderr, "quickstart: unexpected result\n");
    return 1;
  }
  return 0;
}
