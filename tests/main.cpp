// The doctest runner of the whole suite. With XJAX_KERNELS naming a kernel set this CPU cannot run
// (the per-set runs of tests/meson.build), the run is skipped (exit 77) instead of failing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "xjax/runtime.hpp"

int main(int argc, char** argv) {
  if (const char* named = std::getenv("XJAX_KERNELS"); named != nullptr && *named != '\0') {
    bool runnable = false;
    for (const auto& set : xjax::build_info().runnable_sets) runnable = runnable || set == named;
    if (!runnable) {
      std::printf("XJAX_KERNELS=%s: not a kernel set this build runs on this CPU: skipped\n", named);
      return 77;
    }
  }
  return doctest::Context(argc, argv).run();
}
