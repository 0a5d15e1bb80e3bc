// dispatch.cpp: the entry points of the vectorized kernels forward to the active kernel set, and
// the choice of that set (kernel_sets.hpp), and xj::build_info. Compiled once, for the baseline ISA.
#include <cblas.h>

#include <atomic>
#include <cctype>
#include <cstdlib>

#include "xjax/runtime.hpp"

#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"

// The sets meson.build compiles, best first: x86-64's three with -Dsimd=dispatch, else the one.
#if defined(XJAX_KERNEL_DISPATCH)
#define XJAX_BUILT_KERNEL_SETS(X) X(avx512) X(avx2) X(baseline)
#else
#define XJAX_BUILT_KERNEL_SETS(X) X(XJAX_KERNEL_SET)
#endif

namespace xjax::detail::kernels {

#define XJAX_DECLARE_SET_TABLE(set) \
  namespace XJAX_CAT(set_, set) {   \
  const KernelSet& kernel_set();    \
  }
XJAX_BUILT_KERNEL_SETS(XJAX_DECLARE_SET_TABLE)
#undef XJAX_DECLARE_SET_TABLE

std::span<const KernelSet* const> built_kernel_sets() {
#define XJAX_SET_TABLE(set) &XJAX_CAT(set_, set)::kernel_set(),
  static const KernelSet* const sets[] = {XJAX_BUILT_KERNEL_SETS(XJAX_SET_TABLE)};
#undef XJAX_SET_TABLE
  return sets;
}

bool runs_here(const KernelSet& set) {
  const std::string name = set.name;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // The -march levels meson.build compiles these sets with (libgcc also checks the OS saves the
  // registers).
  if (name == "avx512") return __builtin_cpu_supports("x86-64-v4");
  if (name == "avx2") return __builtin_cpu_supports("x86-64-v3");
#elif defined(__x86_64__) && defined(__clang__)
  // clang before 18 has no level names: the features of x86-64-v3 and v4 that it can test.
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  if (name == "avx2") return v3;
  if (name == "avx512")
    return v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return name == "baseline" || name == "native";  // native: built for this machine (-march=native)
}

namespace {

std::atomic<const KernelSet*> active{nullptr};

std::string set_names() {
  std::string names;
  for (const KernelSet* s : built_kernel_sets())
    names += std::string(names.empty() ? "" : ", ") + s->name + (runs_here(*s) ? "" : " (not on this CPU)");
  return names;
}

const KernelSet& find_runnable(const std::string& name, const std::string& who) {
  for (const KernelSet* s : built_kernel_sets())
    if (name == s->name) {
      if (!runs_here(*s)) throw Error(who + ": kernel set '" + name + "' needs instructions this CPU lacks; sets: " + set_names());
      return *s;
    }
  throw Error(who + ": no kernel set '" + name + "' in this build; sets: " + set_names());
}

const KernelSet& choose() {
  if (const char* named = std::getenv("XJAX_KERNELS"); named != nullptr && *named != '\0')
    return find_runnable(named, "XJAX_KERNELS");
  for (const KernelSet* s : built_kernel_sets())
    if (runs_here(*s)) return *s;
  throw Error("xjax: no kernel set of this build runs on this CPU; sets: " + set_names());
}

}  // namespace

const KernelSet& active_kernel_set() {
  const KernelSet* set = active.load(std::memory_order_acquire);
  if (set == nullptr) {
    const KernelSet* chosen = &choose();
    // A concurrent first call chooses the same set; whichever store lands is the same pointer.
    active.compare_exchange_strong(set, chosen, std::memory_order_acq_rel);
    set = active.load(std::memory_order_acquire);
  }
  return *set;
}

void use_kernel_set(const std::string& name) {
  active.store(&find_runnable(name, "use_kernel_set"), std::memory_order_release);
}

namespace {

/// The vector width in bytes of OpenBLAS's kernels for `core` (openblas_get_corename(), compared
/// without case: a build for one target names it in capitals), 0 when not listed here.
int vector_bytes_of_core(std::string core) {
  for (char& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core == name) return 64;
  for (const char* name : {"sandybridge", "haswell", "zen"})
    if (core == name) return 32;
  // The SSE cores, and AMD's AVX ones (Bulldozer to Excavator), whose sgemm / dgemm kernels in
  // OpenBLAS use 16-byte registers.
  for (const char* name : {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn",
                           "dunnington", "nehalem", "athlon", "opteron", "opteron_sse3", "barcelona",
                           "nano", "bobcat", "bulldozer", "piledriver", "steamroller", "excavator"})
    if (core == name) return 16;
  return 0;
}

}  // namespace

int blas_vector_bytes() {
#if defined(__x86_64__)
  static const int bytes = vector_bytes_of_core(openblas_get_corename());
  return bytes;
#else
  return 0;  // the BLAS's vectors are taken to be as wide as the set's (NEON's 16 bytes either way)
#endif
}

int cpu_vector_bytes() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") ? 64 : __builtin_cpu_supports("avx") ? 32 : 16;
#else
  return 16;  // NEON
#endif
}

bool blas_below_cpu_width() {
  const int blas = blas_vector_bytes();
  return blas > 0 && blas < cpu_vector_bytes();
}

#define XJAX_FORWARD(name, ret, params, args) \
  ret name params { return active_kernel_set().name args; }
XJAX_KERNEL_SET_ENTRIES(XJAX_FORWARD)
#undef XJAX_FORWARD

}  // namespace xjax::detail::kernels

namespace xjax {

BuildInfo build_info() {
  BuildInfo info;
  try {
    info.kernel_set = detail::kernels::active_kernel_set().name;
  } catch (const Error&) {
    // XJAX_KERNELS names a set that was not built or cannot run here: kernel_set stays empty (the
    // first kernel call throws the error).
  }
  for (const auto* set : detail::kernels::built_kernel_sets()) {
    info.kernel_sets.emplace_back(set->name);
    if (detail::kernels::runs_here(*set)) info.runnable_sets.emplace_back(set->name);
  }
#if defined(XJAX_HAVE_MPI)
  info.mpi = true;
#endif
  info.blas_core = openblas_get_corename();
  info.cpu_vector_bytes = detail::kernels::cpu_vector_bytes();
  info.blas_vector_bytes = detail::kernels::blas_vector_bytes();
  info.blas_below_cpu_width = detail::kernels::blas_below_cpu_width();
  try {
    info.own_large_products = detail::kernels::large_products_in_loops();
  } catch (const Error&) {
    // as for kernel_set above
  }
  info.loop_threads = detail::loop_threads();
  return info;
}

}  // namespace xjax
