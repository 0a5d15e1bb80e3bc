// runtime.hpp: what the runtime lets a user observe: buffer memory and primitive executions.
// All counters are atomic: safe to read and reset from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xjax {

struct MemoryStats {
  std::int64_t live_bytes = 0;   // bytes of array buffers alive now (not xj::adapt-ed memory)
  std::int64_t peak_bytes = 0;   // most live bytes since the last reset_peak_memory()
  std::int64_t allocations = 0;  // buffers created since the process started
  /// Of those, the ones whose memory came from the system rather than the arena (freed buffers
  /// are kept in an arena by size and reused: in steady state a repeated computation adds none).
  std::int64_t system_allocations = 0;
  /// Freed memory the arena (the shared one and each thread's cache) holds for reuse now.
  std::int64_t arena_bytes = 0;
  /// Most bytes held from the system (live buffers + arena, in 64-byte blocks; from 256 KiB in
  /// size classes up to 12.5% larger) since reset_peak_memory().
  std::int64_t peak_reserved_bytes = 0;
};

MemoryStats memory_stats();
/// Sets the peaks to the current live (and reserved) bytes.
void reset_peak_memory();
/// Returns the arena's freed blocks to the system: the shared arena's and the calling thread's at
/// once, other threads' cached blocks at their next allocation or free. The shared arena keeps at
/// most XJAX_ARENA_BYTES bytes (default 512 MiB), each thread's cache at most min(that, 16 MiB);
/// set it to 0 to disable reuse.
void release_arena_memory();

/// Executions per primitive name since the last reset_eval_counts() (primitives never run are absent).
std::map<std::string, std::int64_t> eval_counts();
void reset_eval_counts();

/// Where a program's time goes: while a StepProfile lives, the execution plans run on the
/// calling thread (jitted programs, loop bodies, eval_jaxpr) time each of their steps into it. A
/// step is labelled by its primitives and first output, "dot_general f32[1024,384]" or
/// "fused(mul,add,tanh) f32[1024,512]"; loops, conditionals and checkpoints are not steps of
/// their own (their bodies' steps are), so the seconds add up to the programs' time. The
/// innermost live profile of the thread collects; other threads are not seen. Profiles may end
/// in any order. Costs a clock read per step while alive, and one check per plan run otherwise.
/// Not thread-safe itself: read and destroy it on the thread that made it (it lives in that
/// thread's chain of profiles).
class StepProfile {
 public:
  struct Entry {
    std::string step;
    double seconds = 0;
    std::int64_t count = 0;
  };
  StepProfile();
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;
  /// The steps seen, most total time first.
  std::vector<Entry> entries() const;
  /// The first `lines` entries as a table: seconds, count, label.
  std::string str(std::size_t lines = 40) const;
  /// Adds one step's time (the plan runners call it).
  void record(const std::string& step, double seconds);

 private:
  std::map<std::string, Entry> by_step_;
  StepProfile* outer_;   // the profile made before it on its thread, collecting again once it ends
  StepProfile** head_;   // its thread's innermost live profile
};

/// How this library was built and which of its vectorized kernels run (docs/performance.md,
/// "Kernel sets"). The default x86-64 build has three kernel sets, best first: "avx512"
/// (x86-64-v4), "avx2" (x86-64-v3: AVX2 and FMA) and "baseline" (x86-64); -Dsimd=native builds one,
/// "native", and -Dsimd=baseline (or any build off x86-64) one, "baseline". The best set this CPU runs is used unless the XJAX_KERNELS environment variable names
/// another (read at the first kernel call).
struct BuildInfo {
  std::string kernel_set;                   // the set running now (empty: XJAX_KERNELS names none that runs)
  std::vector<std::string> kernel_sets;     // the sets built, best first
  std::vector<std::string> runnable_sets;   // those of them this CPU runs
  bool mpi = false;                         // collectives over MPI (else every run is one process)
  /// The kernels OpenBLAS runs (its openblas_get_corename(): "Haswell" and "Zen" are AVX2 ones,
  /// "SkylakeX", "Cooperlake" and "SapphireRapids" AVX-512 ones, "Prescott" its SSE3 fallback for
  /// a CPU it does not know). Large products, and the libtorch rows' GEMMs in xjax-bench, run at
  /// this rate.
  std::string blas_core;
  /// The width in bytes of this CPU's widest vectors: 64 (AVX-512F), 32 (AVX), 16 (SSE2, NEON).
  int cpu_vector_bytes = 0;
  /// The width of those kernels' vectors in bytes: 16 (SSE), 32 (AVX / AVX2), 64 (AVX-512); 0 for
  /// a core xjax does not know.
  int blas_vector_bytes = 0;
  /// True where OpenBLAS runs kernels narrower than the CPU's widest vectors: Debian 12's OpenBLAS
  /// 0.3.21 runs its Haswell ones on AMD Zen 4 / Zen 5 (half the products' possible rate there,
  /// docs/performance.md, "OpenBLAS's kernels on AMD's AVX-512 CPUs") and its SSE3 "Prescott" ones
  /// on Intel CPUs newer than it (Emerald Rapids, family 6 model 207, measured). OPENBLAS_CORETYPE
  /// set before the program starts (SkylakeX on AVX-512 CPUs, Haswell on AVX2 ones) makes it run
  /// wider ones. xjax changes nothing in the environment by itself.
  bool blas_below_cpu_width = false;
  /// True where xjax's own loops (small_gemm.cpp, blocked_gemm) run the float products past the
  /// small sizes: the active kernel set's vectors are wider than OpenBLAS's kernels' (a known
  /// core's), so those loops outrun it. Elsewhere OpenBLAS runs them.
  bool own_large_products = false;
  /// The threads xjax's own kernel loops run on besides the caller: "openblas" (OpenBLAS's
  /// workers, lent through its pthreads server; they spin between products, so a job starts at
  /// once) or "own" (xjax's workers: OpenBLAS's OpenMP or sequential builds, or
  /// XJAX_LOOP_THREADS=own in the environment). Either way as many as OpenBLAS's thread count.
  std::string loop_threads;
};
BuildInfo build_info();

}  // namespace xjax
