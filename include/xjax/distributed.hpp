// distributed.hpp: beyond one machine. A program started by `mpirun -np N` runs as N processes
// (SPMD: every process runs the same program on its own data). Collectives are primitives like
// any other, with JAX's multi-process semantics and derivatives, so they work inside jit, grad,
// vmap, scan and checkpoint. Without mpirun (or in a build without MPI) the same program runs as
// one process, where every collective is the identity it reduces to. See docs/distributed.md.
#pragma once
#include <cstdint>
#include <source_location>
#include <type_traits>
#include <utility>
#include <vector>

#include "xjax/array.hpp"
#include "xjax/pytree.hpp"

namespace xjax {

namespace distributed {
/// Starts the processes' communication: MPI when the program was started by mpirun (and xjax was
/// built with MPI), a single process otherwise. Call once, before any collective; idempotent.
void initialize(int& argc, char**& argv);
void initialize();
/// Ends it (MPI_Finalize). Collectives afterwards are an xj::Error (MPI cannot be initialized again).
void finalize();
bool is_initialized();
/// This process's index in [0, process_count()), and the number of processes (1 before
/// initialize).
int process_index();
int process_count();
/// What this process has communicated since the last reset: collectives run and the bytes of
/// their operands as sent (an allreduce of a 1 MiB f32 gradient counts 1 MiB; psum / pmax /
/// psum_scatter of bf16, f16 and 8- or 16-bit integers reduce in a wider type, f32 or i32, and
/// count its bytes: twice a bf16 operand's; psum of bools sums them as i32, pmax of bools sends
/// a byte each). The type checks collectives make first (docs/distributed.md) are not counted.
struct CommunicationStats {
  std::int64_t collectives = 0;
  std::int64_t bytes = 0;
};
CommunicationStats communication_stats();
void reset_communication_stats();
/// Ends every process of the run at once, with `code` (MPI_Abort), after printing `message` to
/// stderr: what a process that cannot continue must do so that the others do not wait forever.
[[noreturn]] void abort(const char* message, int code = 1);

/// initialize() for the scope; finalize() when it ends. If the scope ends by an exception, the
/// whole run is aborted (the other processes would otherwise wait in their next collective); the
/// exception's message is not reachable while it unwinds: catch it inside the scope to print it.
class Session {
 public:
  Session(int& argc, char**& argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  int exceptions_at_start_;
};
}  // namespace distributed

/// The sum of x over all processes; every process gets the same (bitwise) result.
/// d psum(x) = psum(dx); its transpose is psum (the derivative of the sum over processes of each
/// process's output).
Array psum(const Array& x, std::source_location loc = std::source_location::current());
/// psum(x) / process_count().
Array pmean(const Array& x, std::source_location loc = std::source_location::current());
/// The elementwise maximum of x over all processes.
Array pmax(const Array& x, std::source_location loc = std::source_location::current());
/// Options of all_gather and psum_scatter.
struct CollectiveOptions {
  /// JAX's tiled: all_gather concatenates along `axis` instead of stacking along a new one, and
  /// psum_scatter splits `axis` into process_count() chunks instead of removing it (FSDP / ZeRO:
  /// gather a weight sharded along its leading axis, scatter its gradient back).
  bool tiled = false;
};

/// Every process's x, stacked along a new axis `axis` in process order (shape: x's with
/// process_count() inserted at axis); with {.tiled = true} concatenated along x's axis `axis`
/// (its size times process_count()). Its transpose is psum_scatter with the same options.
Array all_gather(const Array& x, std::int64_t axis = 0, CollectiveOptions opts = {},
                 std::source_location loc = std::source_location::current());
/// x's axis `axis` must have size process_count(): process p gets slice p of the sum over
/// processes (that axis removed). With {.tiled = true} the axis must be a multiple of
/// process_count() and process p gets chunk p of it (the axis kept, its size divided). Its
/// transpose is all_gather with the same options.
Array psum_scatter(const Array& x, std::int64_t axis = 0, CollectiveOptions opts = {},
                   std::source_location loc = std::source_location::current());
/// Sends x along each (source, destination) pair: process d gets source s's x; a process no pair
/// sends to gets zeros. Sources and destinations must each be distinct and in range. Its
/// transpose is ppermute along the inverted pairs.
Array ppermute(const Array& x, const std::vector<std::pair<int, int>>& perm,
               std::source_location loc = std::source_location::current());

/// psum / pmean / pmax of every leaf of a pytree (e.g. a gradient struct in data-parallel
/// training).
template <class T>
  requires(!std::is_same_v<T, Array>)
T psum(const T& tree) {
  return tree_map([](const Array& x) { return psum(x); }, tree);
}
template <class T>
  requires(!std::is_same_v<T, Array>)
T pmean(const T& tree) {
  return tree_map([](const Array& x) { return pmean(x); }, tree);
}

}  // namespace xjax
