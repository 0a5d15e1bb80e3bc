// trace_at_exit.cpp: xjax used from a static object's destructor, after C++ has destroyed the main
// thread's thread_locals (twenty-ninth session's hunt: the trace stack was a destroyed vector; jit
// aborted with "tree_unflatten: 18446744073709551600 leaves", make_jaxpr corrupted the heap).
// Prints what it computes; exits 0 only when every value is right.
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <xjax/xjax.hpp>

namespace xj = xjax;

namespace {

bool check(bool ok, const char* what) {
  std::cout << what << (ok ? ": ok" : ": WRONG") << std::endl;
  return ok;
}

struct AtExit {
  ~AtExit() {
    bool ok = true;
    const xj::Array x = xj::array<float>({1.0f, -2.0f, 3.0f}, {3});
    ok &= check(xj::jit([](const xj::Array& v) { return v * 2.0; })(x).to_vector<float>() == std::vector<float>{2, -4, 6}, "jit");
    ok &= check(xj::grad([](const xj::Array& v) { return xj::sum(v * v); })(x).to_vector<float>() == std::vector<float>{2, -4, 6}, "grad");
    std::ostringstream jaxpr;
    jaxpr << xj::make_jaxpr([](const xj::Array& v) { return xj::sin(v); })(x);
    ok &= check(jaxpr.str().find("sin") != std::string::npos, "make_jaxpr");
    ok &= check(xj::sort(x).to_vector<float>() == std::vector<float>{-2, 1, 3}, "sort");
    // a user exception through a trace, then a custom_vjp (its fwd re-entry guard)
    bool thrown = false;
    try {
      (void)xj::jit([](const xj::Array&) -> xj::Array { throw std::runtime_error("user"); })(x);
    } catch (const std::runtime_error& e) {
      thrown = std::string(e.what()) == "user";
    }
    ok &= check(thrown, "user exception");
    auto f = xj::custom_vjp([](const xj::Array& v) { return v * 3.0f; },
                            [](const xj::Array& v) { return std::pair{v * 3.0f, v}; },
                            [](const xj::Array&, const xj::Array& g) { return std::tuple{g * 3.0f}; });
    ok &= check(xj::grad([&](const xj::Array& v) { return xj::sum(f(v)); })(x).to_vector<float>() == std::vector<float>{3, 3, 3}, "custom_vjp");
    std::cout.flush();
    if (!ok) std::_Exit(1);
  }
};

}  // namespace

int main() {
  static AtExit at_exit;  // constructed before xjax's first use: destroyed after its thread_locals
  const xj::Array y = xj::jit([](const xj::Array& v) { return v * 3.0; })(xj::ones({5}, xj::f32));
  xj::Array s = xj::sort(y);
  std::cout << "main: " << y.to_vector<float>()[0] << std::endl;
  return 0;
}
