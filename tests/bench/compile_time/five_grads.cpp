// Five distinct grad calls: what each further transform costs once the shared code is compiled.
#include <xjax/xjax.hpp>
namespace xj = xjax;
int main() {
  int r = 0;
#define XJAX_ONE_GRAD(k)                                                                          \
  {                                                                                               \
    auto f = [](const xj::Array& x) { return xj::sum(xj::sin(x) * x * double(k)); };              \
    r += static_cast<int>(xj::grad(f)(xj::ones({3})).shape().size());                             \
  }
  XJAX_ONE_GRAD(1) XJAX_ONE_GRAD(2) XJAX_ONE_GRAD(3) XJAX_ONE_GRAD(4) XJAX_ONE_GRAD(5)
  return r == 5 ? 0 : 1;
}
