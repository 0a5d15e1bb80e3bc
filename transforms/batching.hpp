// batching.hpp: the internal interface of vmap (transforms/vmap.cpp) and of the batching rules
// of higher-order primitives (in their own files). Not installed.
//
// A batched value is an array with one extra axis, the batch axis, of the vmap's size; its
// position (the value's batch dim) is wherever the producing rule left it, as JAX's
// BatchTracer.batch_dim: rules move it only when the primitive needs it elsewhere.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "internal.hpp"

namespace xjax::detail {

/// The batch dim of a value that does not depend on the batch member.
inline constexpr std::int64_t not_batched = -1;
using BatchDims = std::vector<std::int64_t>;

struct BatchArgs {
  Primitive prim;
  std::span<const Array> x;            // operands; a batched one has its batch axis at dims[i]
  std::span<const std::int64_t> dims;  // batch dim of each operand or not_batched (some batched)
  std::int64_t size;                   // the batch size
  const Params& params;
  std::source_location loc;
};
struct BatchOut {
  std::vector<Array> outs;
  BatchDims dims;  // batch dim of each output, or not_batched
};
/// The batching rule of a primitive: the primitive applied to every batch member at once.
using BatchRule = BatchOut (*)(const BatchArgs&);
BatchRule batch_rule(Primitive p);

/// Evaluates j on batched values at the current trace level (the rules bind primitives).
BatchOut batch_eval(const ClosedJaxpr& j, std::span<const Array> args, std::span<const std::int64_t> dims,
                    std::int64_t size);

/// vmap : (a -> b) -> ([n]a -> [n]b). The result takes j's inputs with a batch axis of `size` at
/// in_dims[i] (not_batched: as they are) and returns its outputs with the batch axis at
/// out_dims[k]; not_batched there is a TransformError if the output depends on the batch member.
ClosedJaxpr batch_jaxpr(const ClosedJaxpr& j, std::span<const std::int64_t> in_dims, std::int64_t size,
                        std::span<const std::int64_t> out_dims);

/// The form higher-order rules use: inputs with in_batched set carry the batch at axis 0; an
/// output is batched (at axis 0) when it depends on the batch or force_out says so, and
/// *out_batched (if given) reports which outputs are.
ClosedJaxpr batch_jaxpr_leading(const ClosedJaxpr& j, const std::vector<bool>& in_batched, std::int64_t size,
                                const std::vector<bool>& force_out, std::vector<bool>* out_batched);

/// x with its batch axis moved from `from` to `to`; an unbatched x (from == not_batched) is
/// broadcast along a new axis of `size` at `to`.
Array move_batch_dim(const Array& x, std::int64_t from, std::int64_t to, std::int64_t size);

/// The primitive applied to each batch member in turn (a scan over the batch axis): the rule of
/// cases no closed form covers (e.g. batched indices of dynamic_slice). Outputs batched at 0.
BatchOut batch_by_loop(const BatchArgs& a);

/// Per-member windows and indices as takes of whole rows (vmap_gather.cpp): dynamic_slice with
/// batched starts (output batched at 0, or unbatched when no window depends on the member), take
/// with operand and indices both batched (output batched at 0).
BatchOut dynamic_slice_as_take(const BatchArgs& a);
BatchOut take_both_batched(const BatchArgs& a);
/// Any scatter with batched indices, as a scatter of whole rows (output batched at 0).
BatchOut scatter_by_rows(const BatchArgs& a);

/// Batched values' dims as bools (dims[i] != not_batched).
std::vector<bool> batched_mask(std::span<const std::int64_t> dims);

/// Moves every batched operand's batch axis to 0 (leaving the others); the operands of rules that
/// re-batch a sub-jaxpr with batch_jaxpr_leading.
std::vector<Array> batch_to_front(const BatchArgs& a);

}  // namespace xjax::detail
