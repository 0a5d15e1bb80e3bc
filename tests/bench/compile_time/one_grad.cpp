// The translation unit of issue 26's compile-time target: the umbrella header and one grad call.
#include <xjax/xjax.hpp>
namespace xj = xjax;
int main() {
  auto f = [](const xj::Array& x) { return xj::sum(xj::sin(x) * x); };
  auto g = xj::grad(f);
  auto y = g(xj::ones({3}));
  return y.shape().size() == 1 ? 0 : 1;
}
