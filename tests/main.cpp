// The doctest runner of the whole suite. With XJAX_KERNELS naming a kernel set this build has but
// this CPU cannot run (the per-set runs of tests/meson.build), the run is skipped (exit 77); a name
// of no set at all (a typo) fails. A per-set run of the set this CPU gets anyway (the best it runs)
// would repeat the plain run test for test, so it is skipped too, unless XJAX_KERNELS_REPEAT=1.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "xjax/runtime.hpp"

int main(int argc, char** argv) {
  if (const char* named = std::getenv("XJAX_KERNELS"); named != nullptr && *named != '\0') {
    const auto info = xjax::build_info();
    bool built = false, runnable = false;
    for (const auto& set : info.kernel_sets) built = built || set == named;
    for (const auto& set : info.runnable_sets) runnable = runnable || set == named;
    if (!built) {
      std::printf("XJAX_KERNELS=%s: this build has no such kernel set\n", named);
      return 1;
    }
    if (!runnable) {
      std::printf("XJAX_KERNELS=%s: this CPU cannot run that kernel set: skipped\n", named);
      return 77;
    }
    const char* repeat = std::getenv("XJAX_KERNELS_REPEAT");
    if (info.runnable_sets.front() == named && (repeat == nullptr || std::string(repeat) != "1")) {
      std::printf("XJAX_KERNELS=%s: the set this CPU gets without XJAX_KERNELS, so the plain run of "
                  "these tests ran it: skipped (XJAX_KERNELS_REPEAT=1 runs it)\n", named);
      return 77;
    }
  }
  return doctest::Context(argc, argv).run();
}
