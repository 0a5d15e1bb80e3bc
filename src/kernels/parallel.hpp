// parallel.hpp: xjax's own kernel loops on several threads (not installed).
//
// One knob sets every thread count: xjax's loops use as many threads as OpenBLAS does
// (OPENBLAS_NUM_THREADS, or openblas_set_num_threads at run time), so a program that pins BLAS
// to one thread pins xjax too, and a benchmark "at 2 threads" means the same for both.
// The workers are made on first use and kept (parallel.cpp); a loop split into chunks gives each
// output to exactly one chunk, so results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <type_traits>

namespace xjax::detail {

/// The threads xjax's kernel loops may use now: OpenBLAS's thread count (at least 1).
int kernel_threads();

/// What a loop's chunks may call. OpenBLAS's pthreads build keeps its worker threads spinning for
/// about 0.1 s after each threaded call, so in a program that multiplies matrices between its
/// other loops, xjax's own sleeping workers find the other cores taken and a loop split in two
/// runs no faster than one thread (measured: parallel.cpp). A loop whose chunks never call BLAS
/// runs on OpenBLAS's workers instead (its exported gotoblas_pthread, where the build has it); a
/// chunk that calls BLAS must not (OpenBLAS would wait for the very thread running it).
enum class ChunkCalls { may_call_blas, no_blas };

/// Runs chunk(context, begin, end) over [0, n) split into contiguous chunks of at least `grain`
/// units (at most kernel_threads() of them; one when n < 2 grain), the calling thread taking its
/// share; returns when all are done and rethrows the first exception a chunk threw. A call made
/// from inside a chunk, or while another thread's loop holds the workers, runs on its caller alone.
void parallel_chunks(std::int64_t n, std::int64_t grain, void (*chunk)(void*, std::int64_t, std::int64_t), void* context,
                     ChunkCalls calls = ChunkCalls::may_call_blas);

/// Throws InternalError naming `who` when called from a chunk of a ChunkCalls::no_blas loop, on
/// any thread: xjax's BLAS calls check it, so a chunk that calls BLAS after all fails in the tests
/// instead of hanging an OpenBLAS worker.
void check_blas_allowed(const char* who);

/// One BLAS or LAPACK call of xjax's, as a scope around that call alone (no loop or other BLAS
/// call inside it): checks check_blas_allowed(who) and holds the calls' shared lock, which fork()
/// takes exclusively (prepare_fork), so a fork waits for the products in flight. OpenBLAS's own
/// fork handler shuts its workers down: a threaded product running at a fork hung the parent,
/// and the child inherited OpenBLAS's held level-3 lock, its first product waiting forever.
class BlasCall {
 public:
  explicit BlasCall(const char* who);
  ~BlasCall();
  BlasCall(const BlasCall&) = delete;
  BlasCall& operator=(const BlasCall&) = delete;
};

/// Which threads the loops of ChunkCalls::no_blas run on: "openblas" (OpenBLAS's workers) or
/// "own" (xjax's, where OpenBLAS lends none: a sequential or OpenMP build, or XJAX_LOOP_THREADS=own
/// in the environment, read at the first loop).
const char* loop_threads();

/// The fewest elements an elementwise loop (one op, or a fused chain of them) gives one chunk:
/// fewer are not worth waking a thread for. Waking a sleeping worker costs 10-30 us in a VM (an
/// idle vCPU woken by an interrupt), as much as a cheap op on 100k-200k floats: measured at two
/// threads, jitted, 2026-12-05 (AMD EPYC VM, CPU family 26: Zen 5), a product of 65536 / 131072 / 262144 floats
/// took 10-24 / 34-37 / 41-43 us split in two against 6-9 / 16-17 / 32-35 us on one thread, and
/// tanh(1.1 x + 0.3) 36-43 / 35-63 / 64-67 against 21-24 / 42-48 / 84-95 us; from 524288 floats
/// (and from 262144 for the tanh chain) the split wins. At 32768, V2's 65536-element products
/// ran 4-10% slower at two threads than before the split existed (bf16293).
inline constexpr std::int64_t kParallelElements = std::int64_t{1} << 17;

/// The same when the loops are lent to OpenBLAS's workers and these are known to be spinning (a
/// lent loop or a threaded product ended within the last few milliseconds: they spin 2^28
/// cycles, 67 ms or more, after each job): a job then starts within microseconds. T1 small at two
/// threads (Zen 4 VM, 2026-12-06), its layer-sized chains of 131072 floats split: 1<<17 gave
/// 0.072-0.080 s a step, 1<<15 0.068-0.077 and 1<<14 0.068-0.077 (interleaved runs).
inline constexpr std::int64_t kParallelElementsWarm = std::int64_t{1} << 15;

/// The grain an elementwise loop of n elements passes: kParallelElementsWarm while OpenBLAS's
/// workers are lent and spinning, else kParallelElements. A loop too short to split either way
/// gets kParallelElements without a look at the clock (P2's 2000 small chains a call read it
/// 2000 times: 1.6% of the call).
std::int64_t parallel_elements(std::int64_t n);

/// Called after a BLAS product of `multiply_adds` returns: one large enough for OpenBLAS to run it
/// on its threads (above 2^18, its threshold) leaves its workers spinning.
void note_blas_product(std::int64_t multiply_adds);

/// How many loops have run split into two chunks or more since the process started (tests check
/// that a kernel's loop did split), and how many of them ran on OpenBLAS's workers.
std::int64_t split_loops();
std::int64_t loops_on_blas_threads();

/// Hands the calling thread's cache of freed buffers to the shared arena (runtime.cpp). A worker
/// calls it after each chunk: what a chunk freed stays reachable by other threads and by
/// release_arena_memory while the worker sleeps (a sleeping worker never answers a release).
void flush_thread_cache();

/// parallel_chunks with a callable body(begin, end).
template <class Body> void parallel_for(std::int64_t n, std::int64_t grain, Body&& body, ChunkCalls calls = ChunkCalls::may_call_blas) {
  using B = std::remove_reference_t<Body>;
  parallel_chunks(
      n, grain, [](void* b, std::int64_t begin, std::int64_t end) { (*static_cast<B*>(b))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)), calls);
}

}  // namespace xjax::detail
