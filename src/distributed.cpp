// distributed.cpp: xj::distributed (starting and ending a multi-process run), the communication
// layer of comm.hpp, and the user-level collective ops. The only file that includes mpi.h; built
// without MPI (meson feature `mpi` disabled or MPI absent), every run is a single process.
//
// A run has several processes when it was started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK in the environment) and xjax was built with MPI; then initialize calls
// MPI_Init_thread. Otherwise it is one process and no MPI call is ever made.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>

#include "comm.hpp"
#include "fnv_hash.hpp"
#include "internal.hpp"
#include "xjax/distributed.hpp"
#include "xjax/ops.hpp"

#if defined(XJAX_HAVE_MPI)
#define OMPI_SKIP_MPICXX 1  // the C API only (the deprecated C++ bindings do not build warning-free)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace xjax {

namespace {

struct State {
  bool initialized = false;
  bool mpi = false;         // this run communicates through MPI
  bool we_started_mpi = false;
  int rank = 0;
  int size = 1;
};
State& state() {
  static State s;
  return s;
}
std::mutex& comm_mutex() {  // one collective at a time per process
  static std::mutex m;
  return m;
}
distributed::CommunicationStats& stats() {  // guarded by comm_mutex
  static distributed::CommunicationStats s;
  return s;
}
void count(std::int64_t bytes) {
  std::lock_guard lock(comm_mutex());
  ++stats().collectives;
  stats().bytes += bytes;
}

// An exception nobody catches (escaping main or a thread) ends the whole run with its message,
// so the other processes do not wait forever in their next collective.
void abort_run_on_terminate() {
  std::string what = "terminate called";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception";
    }
  }
  distributed::abort(what.c_str(), 1);
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

#if defined(XJAX_HAVE_MPI)
MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u32: return MPI_UINT32_T;
    case DType::bool_: return MPI_UINT8_T;
    case DType::bf16: return MPI_UINT16_T;  // moved, never summed: collectives sum narrow floats in f32
    case DType::f16: return MPI_UINT16_T;
    case DType::i8: return MPI_INT8_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i16: return MPI_INT16_T;
    case DType::u16: return MPI_UINT16_T;
    case DType::u64: return MPI_UINT64_T;
  }
  return MPI_BYTE;
}
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(std::string("MPI error in ") + what);
}
#endif

void start(int* argc, char*** argv) {
  State& s = state();
  if (s.initialized) return;
#if defined(XJAX_HAVE_MPI)
  if (launched_by_mpirun()) {
    int already = 0, finalized = 0;
    MPI_Initialized(&already);
    MPI_Finalized(&finalized);
    if (finalized)
      throw Error("xj::distributed::initialize: MPI was finalized already (xj::distributed::finalize or a Session's "
                  "end); MPI cannot start twice in one process");
    if (!already) {
      int provided = 0;
      check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      s.we_started_mpi = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.size);
    s.mpi = true;
    std::set_terminate(abort_run_on_terminate);
  }
#else
  (void)argc;
  (void)argv;
  if (launched_by_mpirun() && std::getenv("OMPI_COMM_WORLD_SIZE") && std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")) > 1)
    throw Error("xj::distributed::initialize: started by mpirun with several processes, but this xjax was built "
                "without MPI (meson feature `mpi`); install libopenmpi-dev and rebuild");
#endif
  s.initialized = true;
}

}  // namespace

namespace distributed {

void initialize(int& argc, char**& argv) { start(&argc, &argv); }
void initialize() { start(nullptr, nullptr); }

void finalize() {
  State& s = state();
  if (!s.initialized) return;
#if defined(XJAX_HAVE_MPI)
  if (s.we_started_mpi) MPI_Finalize();
#endif
  s = State{};
}

bool is_initialized() { return state().initialized; }

CommunicationStats communication_stats() {
  std::lock_guard lock(comm_mutex());
  return stats();
}
void reset_communication_stats() {
  std::lock_guard lock(comm_mutex());
  stats() = {};
}
int process_index() { return state().rank; }
int process_count() { return state().size; }

void abort(const char* message, int code) {
  std::fprintf(stderr, "xjax process %d: %s\n", state().rank, message);
  std::fflush(stderr);
#if defined(XJAX_HAVE_MPI)
  if (state().mpi) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

Session::Session(int& argc, char**& argv) : exceptions_at_start_(std::uncaught_exceptions()) { initialize(argc, argv); }

Session::~Session() {
  if (std::uncaught_exceptions() > exceptions_at_start_) {
    // The exception in flight is not reachable here (std::current_exception is empty while the
    // stack unwinds towards its handler): catch it inside the session's scope to print it.
    std::string what = "aborting the run: an exception ended the distributed session (catch it inside the Session's "
                       "scope to see its message)";
    if (auto e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        what += std::string(": ") + ex.what();
      } catch (...) {
      }
    }
    abort(what.c_str(), 1);
  }
  finalize();
}

}  // namespace distributed

// ---- the communication layer -----------------------------------------------------------------

namespace detail::comm {

void require_initialized(Primitive p) {
  if (!state().initialized)
    throw Error(std::string(primitive_name(p)) + ": collectives need xj::distributed::initialize(argc, argv) first "
                "(or an xj::distributed::Session); a program not started by mpirun then runs as one process");
}
int rank() { return state().rank; }
int size() { return state().size; }

void check_same_call(Primitive p, const ShapedArray& aval, std::span<const std::int64_t> params) {
  if (!state().mpi || state().size == 1) return;
#if defined(XJAX_HAVE_MPI)
  Fnv1a fnv;
  fnv.add(static_cast<std::uint64_t>(p));
  for (auto v : params) fnv.add(static_cast<std::uint64_t>(v));
  fnv.add(static_cast<std::uint64_t>(aval.dtype));
  fnv.add(aval.shape.size());
  for (auto d : aval.shape) fnv.add(static_cast<std::uint64_t>(d));
  const std::uint64_t h = fnv.value();
  std::uint64_t mine[2] = {h, ~h}, all[2] = {0, 0};
  {
    std::lock_guard lock(comm_mutex());
    check(MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  if (all[0] != ~all[1])  // max(h) != min(h): the processes disagree
    throw ShapeError(std::string(primitive_name(p)) + ": the processes are not at the same collective (this process: " +
                     std::string(primitive_name(p)) + " of " + aval.str() + "): they pass operands of different shapes "
                     "or dtypes, or run different collectives. Every process must run the same program: branch on "
                     "the process index with arrays (xj::where), not with C++ if (docs/distributed.md)");
#else
  (void)p;
  (void)aval;
  (void)params;
#endif
}

void join_as_mismatch() {
  if (!state().mpi || state().size == 1) return;
#if defined(XJAX_HAVE_MPI)
  std::uint64_t mine[2] = {~std::uint64_t{0}, ~std::uint64_t{0}}, all[2] = {0, 0};  // max(h) != ~max(~h) everywhere
  std::lock_guard lock(comm_mutex());
  MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);  // its own error is the caller's to raise
#endif
}

#if defined(XJAX_HAVE_MPI)
namespace {
/// One MPI call's count: MPI's counts are int; past 2^31 - 1 an Error naming the collective, where
/// MPI would abort the run.
int mpi_count(std::int64_t n, const char* unit, const char* what) {
  if (n > std::numeric_limits<int>::max())
    throw Error(std::string(what) + ": " + std::to_string(n) + " " + unit + " per process exceed MPI's count limit of 2^31 - 1 "
                "for one call; split the array");
  return static_cast<int>(n);
}

// max over processes keeping NaN (lax.max's, xjax's max): MPI_MAX drops a NaN or keeps it
// depending on which process holds it.
template <class T> void nan_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    if (a[i] != a[i] || a[i] > b[i]) b[i] = a[i];
}
MPI_Op max_op(DType d) {
  if (d != DType::f32 && d != DType::f64) return MPI_MAX;
  static MPI_Op f32_max = MPI_OP_NULL, f64_max = MPI_OP_NULL;  // created once, under comm_mutex
  MPI_Op& op = d == DType::f32 ? f32_max : f64_max;
  if (op == MPI_OP_NULL) check(MPI_Op_create(d == DType::f32 ? &nan_max<float> : &nan_max<double>, 1, &op), "MPI_Op_create");
  return op;
}
}  // namespace
#endif

void allreduce(const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op) {
  xjax::count(count * static_cast<std::int64_t>(itemsize(dtype)));
  if (!state().mpi) {
    std::memcpy(out, in, static_cast<std::size_t>(count) * itemsize(dtype));
    return;
  }
#if defined(XJAX_HAVE_MPI)
  std::lock_guard lock(comm_mutex());
  check(MPI_Allreduce(in, out, mpi_count(count, "elements", "psum / pmax"), mpi_type(dtype),
                      op == ReduceOp::sum ? MPI_SUM : max_op(dtype), MPI_COMM_WORLD),
        "MPI_Allreduce");
#endif
}

void allgather(const void* in, void* out, std::int64_t bytes) {
  xjax::count(bytes);
  if (!state().mpi) {
    std::memcpy(out, in, static_cast<std::size_t>(bytes));
    return;
  }
#if defined(XJAX_HAVE_MPI)
  std::lock_guard lock(comm_mutex());
  const int n = mpi_count(bytes, "bytes", "all_gather");
  check(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
#endif
}

void reduce_scatter_sum(const void* in, void* out, std::int64_t count, DType dtype) {
  xjax::count(count * static_cast<std::int64_t>(itemsize(dtype)) * state().size);
  if (!state().mpi) {
    std::memcpy(out, in, static_cast<std::size_t>(count) * itemsize(dtype));
    return;
  }
#if defined(XJAX_HAVE_MPI)
  std::lock_guard lock(comm_mutex());
  check(MPI_Reduce_scatter_block(in, out, mpi_count(count, "elements", "psum_scatter"), mpi_type(dtype), MPI_SUM,
                                 MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block");
#endif
}

void sendrecv(const void* in, int to, void* out, int from, std::int64_t bytes) {
  xjax::count(to >= 0 ? bytes : 0);
  if (!state().mpi) {
    if (from == 0 && to == 0) std::memcpy(out, in, static_cast<std::size_t>(bytes));
    return;
  }
#if defined(XJAX_HAVE_MPI)
  std::lock_guard lock(comm_mutex());
  // In pieces of at most 1 GiB: MPI's counts are int (a 2 GiB operand aborted the run).
  constexpr std::int64_t kPiece = std::int64_t{1} << 30;
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, bytes - at));
    check(MPI_Sendrecv(static_cast<const char*>(in) + at, n, MPI_BYTE, to < 0 ? MPI_PROC_NULL : to, 0,
                       static_cast<char*>(out) + at, n, MPI_BYTE, from < 0 ? MPI_PROC_NULL : from, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  }
#endif
}

}  // namespace detail::comm

// ---- user ops ---------------------------------------------------------------------------------

namespace {
using detail::bind1;
using P = Primitive;

std::int64_t process_count_for(P p) {
  detail::comm::require_initialized(p);
  return distributed::process_count();
}

/// bind1(p, {x}, params) after the collective's checks on this process (`validate`, then its
/// shape rule): where they fail in eager execution, it joins the cross-process check as a mismatch
/// before throwing (comm::join_as_mismatch), so that the other processes raise at the same call
/// and every process stays in step (the others had paired their check with this process's next
/// collective). Not while tracing: a trace may run on one process only (make_jaxpr to print a
/// program), and a jitted program's collectives check when it runs.
template <class Validate> Array collective(P p, const Array& x, const Params& params, Validate validate,
                                           const std::source_location& loc) {
  if (detail::tracing_active()) {  // nothing to join: bind's shape rule raises on this process alone
    validate();
    return bind1(p, {x}, params, loc);
  }
  try {
    validate();
  } catch (...) {
    detail::comm::join_as_mismatch();
    throw;
  }
  bool rule_fails = false;
  try {
    const ShapedArray in[] = {x.aval()};
    (void)detail::abstract_eval(p, in, params);
  } catch (...) {
    rule_fails = true;
  }
  if (rule_fails) {
    detail::comm::join_as_mismatch();
    (void)bind1(p, {x}, params, loc);  // raises the shape rule's error again, with the caller's line, before any communication
    throw Error("internal error: " + std::string(primitive_name(p)) + "'s shape rule failed once and then passed");
  }
  return bind1(p, {x}, params, loc);
}
}  // namespace

// psum of bools counts them in i32, as JAX's psum.
Array psum(const Array& x, std::source_location loc) {
  detail::comm::require_initialized(P::psum);
  if (x.dtype() == bool_) return psum(astype(x, i32, loc), loc);
  return collective(P::psum, x, {}, [] {}, loc);
}

// pmean = psum(x) / n, a true division by a weakly typed n (JAX's): integers and bools give f64
// (x64; they floor-divided), a weakly typed x stays weak.
Array pmean(const Array& x, std::source_location loc) {
  Array s = psum(x, loc);
  s = detail::as_inexact(s, loc);
  return div(s, detail::weakly_typed(scalar(static_cast<double>(distributed::process_count()), s.dtype())), loc);
}

Array pmax(const Array& x, std::source_location loc) {
  detail::comm::require_initialized(P::pmax);
  return collective(P::pmax, x, {}, [] {}, loc);
}

Array all_gather(const Array& x, std::int64_t axis, CollectiveOptions opts, std::source_location loc) {
  std::int64_t n = process_count_for(P::all_gather);
  const std::int64_t rank = x.ndim() + (opts.tiled ? 0 : 1);  // the output's
  std::int64_t a = axis < 0 ? axis + rank : axis;
  return collective(P::all_gather, x, params::AllGather{.axis = a, .axis_size = n, .tiled = opts.tiled}, [&] {
    if (a < 0 || a >= rank)
      throw ShapeError("all_gather: axis " + std::to_string(axis) + " out of range for " + x.aval().str() +
                       (opts.tiled ? " (tiled)" : "") + " (at " + format_location(loc) + ")");
  }, loc);
}

Array psum_scatter(const Array& x, std::int64_t axis, CollectiveOptions opts, std::source_location loc) {
  std::int64_t n = process_count_for(P::psum_scatter);
  std::int64_t a = axis < 0 ? axis + x.ndim() : axis;
  return collective(P::psum_scatter, x, params::PsumScatter{.axis = a, .axis_size = n, .tiled = opts.tiled}, [&] {
    if (a < 0 || a >= x.ndim())
      throw ShapeError("psum_scatter: axis " + std::to_string(axis) + " out of range for " + x.aval().str() + " (at " +
                       format_location(loc) + ")");
  }, loc);
}

Array ppermute(const Array& x, const std::vector<std::pair<int, int>>& perm, std::source_location loc) {
  std::int64_t n = process_count_for(P::ppermute);
  params::Ints flat;
  for (auto [s, d] : perm) {
    flat.push_back(s);
    flat.push_back(d);
  }
  return collective(P::ppermute, x, params::Ppermute{.perm = flat}, [&] {
    if (std::string problem = detail::comm::pairs_problem(flat, n); !problem.empty())
      throw Error("ppermute: " + problem + " (at " + format_location(loc) + ")");
  }, loc);
}

namespace detail::comm {
std::string pairs_problem(std::span<const std::int64_t> flat, std::int64_t n) {
  if (flat.size() % 2 != 0) return "the pairs list has an odd length";
  std::vector<bool> src_seen(static_cast<std::size_t>(n), false), dst_seen(static_cast<std::size_t>(n), false);
  for (std::size_t i = 0; i < flat.size(); i += 2) {
    const std::int64_t s = flat[i], d = flat[i + 1];
    if (s < 0 || s >= n || d < 0 || d >= n)
      return "the pair (" + std::to_string(s) + ", " + std::to_string(d) + ") names a process outside [0, " + std::to_string(n) + ")";
    if (src_seen[static_cast<std::size_t>(s)] || dst_seen[static_cast<std::size_t>(d)])
      return "each process may appear at most once as a source and once as a destination";
    src_seen[static_cast<std::size_t>(s)] = dst_seen[static_cast<std::size_t>(d)] = true;
  }
  return {};
}
}  // namespace detail::comm

}  // namespace xjax
