// collectives.cpp: the kernels of the collective primitives, on top of src/comm.hpp. Each checks
// first that every process passes the same type (a mismatch is a ShapeError, not a hang).
#include <array>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>

#include "comm.hpp"
#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {

namespace {
/// x's elements, contiguous in row-major order (every array's buffer is).
const void* input_bytes(const Array& x) { return x.raw_data(); }

// psum, pmax and psum_scatter of a narrow operand (bf16, f16, i8 ...) run in its compute dtype and
// round once, as XLA's CPU backend does; the cross-process check sees the dtype the caller passed
// first (widened before it, bf16 on one process and f32 on another passed unnoticed).
ShapedArray widened(const ShapedArray& out) { return {out.shape, is_narrow(out.dtype) ? compute_dtype(out.dtype) : out.dtype}; }

// A jaxpr built by hand (eval_jaxpr) reaches the kernels without the user-level checks: a gather
// or scatter over another process count than the run's sizes its buffers wrongly.
void check_axis_size(Primitive p, std::int64_t axis_size) {
  if (axis_size != comm::size())
    throw ShapeError(std::string(primitive_name(p)) + ": axis_size " + std::to_string(axis_size) + " on a run of " +
                     std::to_string(comm::size()) + " processes");
}
}  // namespace

Array allreduce_kernel(Primitive p, const Array& x, const ShapedArray& out) {
  comm::require_initialized(p);
  comm::check_same_call(p, x.aval());
  if (out.size() == 0) return alloc_array(out);
  const Array wide = widen(p, x);
  Array result = alloc_array(widened(out));
  comm::allreduce(input_bytes(wide), mutable_data(result), out.size(), result.dtype(),
                  p == Primitive::psum ? comm::ReduceOp::sum : comm::ReduceOp::max);
  return narrow_to(result, out);
}

namespace {
// The processes' x in process order as [n, x.shape...], then the new axis moved into place.
Array gather_untiled(const Array& x, std::int64_t axis, std::int64_t n) {
  ShapedArray stacked{x.shape(), x.dtype()};
  stacked.shape.insert(stacked.shape.begin(), n);
  Array gathered = alloc_array(stacked);
  if (stacked.size() > 0) comm::allgather(input_bytes(x), mutable_data(gathered), static_cast<std::int64_t>(x.aval().nbytes()));
  if (axis == 0) return gathered;
  Ints perm;
  for (std::int64_t i = 1; i <= axis; ++i) perm.push_back(i);
  perm.push_back(0);
  for (std::int64_t i = axis + 1; i < stacked.ndim(); ++i) perm.push_back(i);
  return transpose_kernel(gathered, perm);
}

// The scattered axis (one entry per process) moved to the front (contiguous chunks), then a
// reduce-scatter of the chunks.
Array scatter_untiled(const Array& x, std::int64_t axis, const ShapedArray& out) {
  Array front = x;
  if (axis != 0) {
    Ints perm{axis};
    for (std::int64_t i = 0; i < x.ndim(); ++i)
      if (i != axis) perm.push_back(i);
    front = transpose_kernel(x, perm);
  }
  Array result = alloc_array(out);
  if (out.size() > 0) comm::reduce_scatter_sum(input_bytes(front), mutable_data(result), out.size(), out.dtype);
  return result;
}
}  // namespace

// Tiled, the result is the untiled one's bytes: [..., n, d, ...] read as [..., n d, ...].
Array all_gather_kernel(const Array& x, const params::AllGather& ps, const ShapedArray& out) {
  const auto [axis, axis_size, tiled] = std::tuple{ps.axis, ps.axis_size, ps.tiled};
  comm::require_initialized(Primitive::all_gather);
  comm::check_same_call(Primitive::all_gather, x.aval(), std::array{axis, axis_size, std::int64_t{tiled}});
  check_axis_size(Primitive::all_gather, axis_size);
  if (!tiled) return gather_untiled(x, axis, out.shape[static_cast<std::size_t>(axis)]);
  if (x.dim(axis) == 0) return alloc_array(out);
  return buffer_view(gather_untiled(x, axis, out.shape[static_cast<std::size_t>(axis)] / x.dim(axis)), 0, out);
}

// Tiled, x is read as [..., n, d / n, ...] (the same bytes).
Array psum_scatter_kernel(const Array& x, const params::PsumScatter& ps, const ShapedArray& out) {
  const auto [axis, axis_size, tiled] = std::tuple{ps.axis, ps.axis_size, ps.tiled};
  comm::require_initialized(Primitive::psum_scatter);
  comm::check_same_call(Primitive::psum_scatter, x.aval(), std::array{axis, axis_size, std::int64_t{tiled}});
  check_axis_size(Primitive::psum_scatter, axis_size);
  const Array wide = widen(Primitive::psum_scatter, x);
  if (!tiled) return narrow_to(scatter_untiled(wide, axis, widened(out)), out);
  const std::int64_t chunk = out.shape[static_cast<std::size_t>(axis)];
  if (chunk == 0) return alloc_array(out);
  ShapedArray split = wide.aval();
  split.shape[static_cast<std::size_t>(axis)] = chunk;
  split.shape.insert(split.shape.begin() + axis, x.dim(axis) / chunk);
  return narrow_to(scatter_untiled(buffer_view(wide, 0, split), axis, widened(out)), out);
}

Array ppermute_kernel(const Array& x, const Ints& perm, const ShapedArray& out) {
  comm::require_initialized(Primitive::ppermute);
  comm::check_same_call(Primitive::ppermute, x.aval(), perm);
  if (std::string problem = comm::pairs_problem(perm, comm::size()); !problem.empty()) throw Error("ppermute: " + problem);
  int me = comm::rank(), to = -1, from = -1;
  for (std::size_t i = 0; i + 1 < perm.size(); i += 2) {
    if (perm[i] == me) to = static_cast<int>(perm[i + 1]);
    if (perm[i + 1] == me) from = static_cast<int>(perm[i]);
  }
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  if (from < 0) std::memset(mutable_data(result), 0, out.nbytes());  // no one sends here: zeros
  comm::sendrecv(input_bytes(x), to, mutable_data(result), from, static_cast<std::int64_t>(out.nbytes()));
  return result;
}

}  // namespace xjax::detail::kernels
