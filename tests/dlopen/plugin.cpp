// plugin: a shared module linked against libxjax, loaded by dlopen_library with dlopen (which
// loads libxjax.so with it, as a plugin host or Python's ctypes would).
#include "xjax/xjax.hpp"

namespace xj = xjax;

/// 0 when a jitted gradient computes 2 x at x = 1.5 and a new array reads back, else 1.
extern "C" __attribute__((visibility("default"))) int xjax_plugin_run() {
  auto square_grad = xj::jit(xj::grad([](const xj::Array& x) { return xj::sum(x * x); }));
  xj::Array g = square_grad(xj::full({4}, 1.5, xj::f32));
  xj::Array ones = xj::ones({1000}, xj::f32);
  bool ok = g.to_vector<float>() == std::vector<float>(4, 3.0f) && ones.to_vector<float>()[999] == 1.0f;
  return ok ? 0 : 1;
}
