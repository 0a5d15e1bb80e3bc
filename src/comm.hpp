// comm.hpp: the communication layer under the collective primitives (not installed): MPI when
// the run has several processes, plain copies for one. Implemented in src/distributed.cpp, the
// only file that includes mpi.h. Every function is called by all processes in the same order
// (SPMD), from one thread at a time.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "xjax/dtype.hpp"
#include "xjax/primitives.hpp"

namespace xjax::detail::comm {

enum class ReduceOp { sum, max };

/// xj::Error unless distributed::initialize ran (names the collective).
void require_initialized(Primitive p);
int rank();
int size();

/// Raises xj::ShapeError on every process unless all processes are at the same collective: the
/// same primitive, parameters (`params`: axis, pairs, ...) and operand type. A mismatch would
/// otherwise hang or corrupt memory inside MPI.
void check_same_call(Primitive p, const ShapedArray& aval, std::span<const std::int64_t> params = {});

/// Joins the cross-process check of the collective this process was about to run as a mismatch,
/// where its own checks (arguments, shape rule) failed: every other process then raises at the
/// same call instead of pairing its check with this process's next collective. The caller throws.
void join_as_mismatch();

/// What is wrong with ppermute's flattened (source, destination) pairs on n processes (a process
/// outside [0, n), a source or destination named twice), or empty.
std::string pairs_problem(std::span<const std::int64_t> flat, std::int64_t n);

/// out = op over processes of in (count elements of dtype each; max keeps NaN, as lax.max).
void allreduce(const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op);
/// out = the processes' `bytes` bytes each, in process order.
void allgather(const void* in, void* out, std::int64_t bytes);
/// in holds size() chunks of `count` elements; out = the sum over processes of chunk rank().
void reduce_scatter_sum(const void* in, void* out, std::int64_t count, DType dtype);
/// Sends `bytes` bytes of in to process `to` and receives into out from process `from` (either may
/// be -1: none).
void sendrecv(const void* in, int to, void* out, int from, std::int64_t bytes);

}  // namespace xjax::detail::comm
