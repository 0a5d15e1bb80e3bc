// dlopen_library: libxjax.so loads with dlopen under glibc's defaults (as Python's ctypes or a
// plugin host loads it) and runs there, on the loading thread and on a new one. This program is
// not linked with xjax: it loads a plugin that is (plugin.cpp), so libxjax.so comes in with
// dlopen, and its initial-exec thread_locals (src/per_thread.hpp) must fit the static TLS glibc
// keeps spare for that, 512 bytes by default ("cannot allocate memory in static TLS block"
// otherwise).
#include <dlfcn.h>

#include <cstdio>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dlopen_library path/to/plugin.so\n");
    return 2;
  }
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    std::fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  using RunFn = int (*)();
  auto run = reinterpret_cast<RunFn>(dlsym(plugin, "xjax_plugin_run"));
  if (!run) {
    std::fprintf(stderr, "FAIL: dlsym: %s\n", dlerror());
    return 1;
  }
  if (run() != 0) {
    std::fprintf(stderr, "FAIL: xjax through dlopen, on the loading thread\n");
    return 1;
  }
  int on_new_thread = 1;
  std::thread([&] { on_new_thread = run(); }).join();
  if (on_new_thread != 0) {
    std::fprintf(stderr, "FAIL: xjax through dlopen, on a new thread\n");
    return 1;
  }
  std::printf("libxjax.so loaded with dlopen and ran on two threads\n");
  return 0;
}
