// raw_plan.hpp: an execution plan run on raw memory (not installed).
//
// An EvalPlan makes an Array (two shared blocks, a shape vector) for every value of every run
// and passes operands through vectors of handles; in a scan over small layers that bookkeeping
// costs as much as the arithmetic. A RawPlan is the same schedule with every value given a
// place when the plan is built: an input (memory the caller passes), an output (memory the
// caller passes: a scan's next carry or its y slice, written by the step that computes it), or
// an offset into one workspace that values with disjoint lifetimes share. A run then only
// computes pointers and calls kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "internal.hpp"
#include "kernels/kernels.hpp"

namespace xjax::detail {

struct EvalPlan;

struct RawPlan {
  /// Where a value lives during a run: index is the input or output number or the workspace
  /// offset; literal: at `literal` (a literal operand's elements); discard: nowhere (a null
  /// pointer: a fused output that only renames an input, which the fused kernel then skips). A
  /// step's output that nothing reads gets workspace for the step's duration.
  enum class Place : std::uint8_t { input, output, workspace, literal, discard };
  struct Value {
    Place place = Place::workspace;
    std::size_t index = 0;
    const void* literal = nullptr;
  };
  /// One step: an IntoKernel, or (for a primitive without one) its Array kernel run on views of
  /// the operands, the result copied into place. What every run reads comes first, its operands'
  /// values in the plan's one `operands` list (a plan of many small steps runs from memory that
  /// is not in cache: fewer lines touched per step).
  struct Step {
    kernels::IntoKernel into;
    std::uint32_t first = 0;  // operands[first ..]: num_ins input values, then num_outs output values
    std::uint32_t num_ins = 0, num_outs = 0;
    KernelFn kernel;
    std::vector<ShapedArray> in_avals;  // kernel: the operands' avals (for the views)
    std::size_t out_bytes = 0;          // kernel: the output's size
    std::vector<Primitive> counted;     // eval_counts of the step (counted one by one only when a later step throws)
  };
  std::span<const std::size_t> ins(const Step& st) const { return {operands.data() + st.first, st.num_ins}; }
  std::span<const std::size_t> outs(const Step& st) const { return {operands.data() + st.first + st.num_ins, st.num_outs}; }
  /// An output not written by a step (an input or literal passed through, an input renamed by a
  /// fused chain, a value output twice).
  struct Copy {
    std::size_t value, output, bytes;
  };
  std::vector<Value> values;
  /// The literal operands' arrays, held so their bytes (Value::literal) live as long as the plan
  /// (the jaxpr's literal may be replaced by an equal one, which keeps the plan).
  std::vector<Array> literals;
  std::vector<Step> steps;
  std::vector<std::string> labels;  // StepProfile's name of each step (the EvalPlan step's), apart: read only when profiling
  std::vector<std::size_t> operands;  // the steps' operand values, step after step
  std::vector<Copy> copies;
  std::size_t num_inputs = 0, num_outputs = 0;
  std::vector<ShapedArray> output_avals;
  std::size_t workspace_bytes = 0, output_bytes = 0;
  /// eval_counts of a run, each primitive once with its number (the steps' equations and the
  /// inlined calls), counted after the steps in one call. When a step throws, the steps before
  /// it are counted instead, as the Array executor (counting after each step) leaves them.
  std::vector<EvalCount> counted;
};

/// The plan's raw form, or nullptr when it has a step that runs sub-jaxprs (impl or call), which
/// take Arrays.
std::shared_ptr<const RawPlan> make_raw_plan(const EvalPlan& plan);

/// Working vectors of raw runs, reused by a loop (a scan) so that its runs allocate nothing.
struct RawScratch {
  std::vector<const void*> where;  // each value's address in this run
  std::vector<const void*> ins;
  std::vector<void*> outs;
};

/// Runs the plan: inputs[i] holds input i (consts first, then the jaxpr's inputs), outputs[k]
/// receives output k (none of them overlapping an input; null only for an output that is
/// copied from an input, which skips the copy), workspace has at least
/// workspace_bytes bytes (from alloc_workspace). Throws xj::Error for a wrong number of
/// inputs or outputs.
void run_raw(const RawPlan& plan, std::span<const void* const> inputs, std::span<void* const> outputs, void* workspace,
              RawScratch& scratch);
/// Runs the plan once into fresh arrays (a top-level run: consts, then the jaxpr's arguments;
/// one workspace for the call). An output that is an input passed through is that input's
/// array, as the Array executor returns it.
std::vector<Array> run_raw_to_arrays(const RawPlan& plan, std::span<const Array> consts, std::span<const Array> args);
/// Whether a top-level run takes the raw plan: its values are small (at most
/// kRawBytesPerStep of workspace and outputs per step on average), so the Array executor's
/// bookkeeping costs as much as the arithmetic; larger ones keep the Array executor, which
/// frees each value when it dies and allocates each output only when it is computed.
inline constexpr std::size_t kRawBytesPerStep = 64 * 1024;
bool raw_at_top_level(const RawPlan& plan);
/// Appends each array's elements' address (a raw run's inputs).
void append_addresses(std::vector<const void*>& to, std::span<const Array> arrays);
/// A workspace of `bytes` bytes, 64-byte aligned (a buffer: memory_stats counts it).
Array alloc_workspace(std::size_t bytes);

/// The one driver of loops run on raw plans (scan, while_loop): it holds the carries, which
/// each iteration reads from one set of buffers and writes into the other, one workspace for
/// every plan the loop runs, and the address vectors, reused so that an iteration allocates
/// nothing. An iteration: start(j, consts) lists j's consts, the loop's consts and the current
/// carries as inputs; the caller appends per-iteration inputs (a scan's x slices) and outputs
/// (next_carry() for a body, then a scan's y slices); run(plan); advance() after a body.
class RawLoop {
 public:
  RawLoop(std::span<const Array> init, std::size_t workspace_bytes);
  /// Clears the address lists and lists the inputs every iteration of j has.
  void start(const ClosedJaxpr& j, std::span<const Array> consts);
  std::vector<const void*>& inputs() { return inputs_; }
  std::vector<void*>& outputs() { return outputs_; }
  /// Appends the addresses the iteration writes the next carries to.
  void next_carry();
  void run(const RawPlan& plan);
  /// After a body's iteration: its outputs become the current carries.
  void advance() { written_ = written_ == 0 ? 1 : 0; }
  /// The current carries: fresh buffers, or the initial values when no iteration ran.
  std::vector<Array> carry() const { return written_ < 0 ? init_ : buffers_[written_]; }

 private:
  std::vector<Array> init_, buffers_[2];
  int written_ = -1;  // the set holding the current carries; -1: still the initial values
  Array workspace_;
  std::vector<const void*> inputs_;
  std::vector<void*> outputs_;
  RawScratch scratch_;
};

/// Whether plans run raw where they can (the default: loop bodies, and top-level plans that
/// raw_at_top_level accepts). A test turns raw plans off for the calling thread with
/// RawPlansOff, to compare with the Array executor.
bool raw_plans_enabled();
class RawPlansOff {
 public:
  RawPlansOff();
  ~RawPlansOff();
  RawPlansOff(const RawPlansOff&) = delete;
  RawPlansOff& operator=(const RawPlansOff&) = delete;

 private:
  bool was_;
};

}  // namespace xjax::detail
