// raw_plan.cpp: make_raw_plan, which places every value of an EvalPlan (input, output or
// workspace offset), and run_raw, which runs the steps on those places (raw_plan.hpp).
#include "raw_plan.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "per_thread.hpp"
#include "plan.hpp"
#include "step_profile.hpp"
#include "xjax/detail/external.hpp"

namespace xjax::detail {
namespace {

thread_local bool t_raw_plans XJAX_INITIAL_EXEC_TLS = true;

constexpr std::size_t kAlign = 64;  // every workspace value starts on a cache line

/// A thread's scratch for top-level raw runs, and whether a run holds it.
struct ThreadScratch {
  RawScratch scratch;
  bool busy = false;
};

/// Offsets into one workspace for values taken and given back in plan order: take returns the
/// lowest free range that fits (or grows the workspace), give frees a range again.
class WorkspacePacker {
 public:
  std::size_t take(std::size_t bytes) {
    bytes = rounded(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= bytes) {
        const std::size_t at = it->first, left = it->second - bytes;
        free_.erase(it);
        if (left) free_[at + bytes] = left;
        return at;
      }
    std::size_t at = end_;
    if (!free_.empty()) {  // a free range at the end grows into the new one
      auto last = std::prev(free_.end());
      if (last->first + last->second == end_) {
        at = last->first;
        free_.erase(last);
      }
    }
    end_ = at + bytes;
    return at;
  }
  void give(std::size_t at, std::size_t bytes) {
    auto it = free_.emplace(at, rounded(bytes)).first;
    if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin())
      if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
  }
  std::size_t size() const { return end_; }

 private:
  static std::size_t rounded(std::size_t n) { return std::max<std::size_t>(kAlign, (n + kAlign - 1) / kAlign * kAlign); }
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes
  std::size_t end_ = 0;
};

// A step without an IntoKernel: its Array kernel on views of the operands' memory (dropped with
// the result, which is copied into place, before the step ends).
void run_on_views(const RawPlan::Step& st, RawScratch& scratch) {
  std::vector<Array> views;
  views.reserve(st.num_ins);
  for (std::size_t i = 0; i < st.num_ins; ++i) views.push_back(external_array(scratch.ins[i], st.in_avals[i], nullptr));
  const Array result = st.kernel(views);
  if (st.out_bytes) std::memcpy(scratch.outs[0], result.raw_data(), st.out_bytes);
}

// A fused step's outputs that may take the place of an input dying at the step (a workspace
// value of the program's aval, read once by the step and by nothing later): the chain then works
// in place, as run_fused does on an input handed over (a GEMM's output becomes its relu's). An
// output placed in the caller's memory stays there.
void place_in_place_outputs(const EvalPlan& plan, const EvalPlan::Step& st, std::vector<RawPlan::Value>& values,
                            std::vector<char>& placed, std::vector<std::size_t>& handed_on) {
  const ShapedArray float_aval{st.fused->shape, st.fused->storage};
  auto usable = [&](std::size_t i) {
    const auto& op = st.ins[i];
    if (op.literal || values[op.slot].place != RawPlan::Place::workspace || plan.slot_avals[op.slot] != float_aval) return false;
    const auto reads = std::count_if(st.ins.begin(), st.ins.end(), [&](const auto& o) { return !o.literal && o.slot == op.slot; });
    return reads == 1 && std::find(st.free_after.begin(), st.free_after.end(), op.slot) != st.free_after.end();
  };
  for (auto [i, k] : kernels::in_place_outputs(*st.fused, usable)) {
    const std::size_t in = st.ins[i].slot, out = st.outs[k];
    if (out == EvalPlan::npos || placed[out]) continue;
    values[out] = values[in];
    placed[out] = 1;
    handed_on.push_back(in);
  }
}

// True when step st is a reshape, squeeze or expand_dims of one array operand into one read
// output: a step that only renames bytes.
bool renames_bytes(const EvalPlan::Step& st) {
  if (st.kind != EvalPlan::Kind::kernel || st.ins.size() != 1 || st.outs.size() != 1 || st.outs[0] == EvalPlan::npos ||
      st.ins[0].literal)
    return false;
  const Primitive p = st.eqn->prim;
  return p == Primitive::reshape || p == Primitive::squeeze || p == Primitive::expand_dims;
}

// A reshape, squeeze or expand_dims step keeps every byte where it is: its output may take the
// place of its input when that input is a workspace value dying at the step (read by nothing
// later), and the step then moves nothing (a dot's output reshaped into heads was copied whole).
bool renames_dying_input(const EvalPlan& plan, const EvalPlan::Step& st, const std::vector<RawPlan::Value>& values,
                         const std::vector<char>& placed) {
  if (!renames_bytes(st)) return false;
  const auto& in = st.ins[0];
  return !placed[st.outs[0]] && values[in.slot].place == RawPlan::Place::workspace &&
         std::find(st.free_after.begin(), st.free_after.end(), in.slot) != st.free_after.end() &&
         plan.slot_avals[in.slot].nbytes() == plan.slot_avals[st.outs[0]].nbytes();
}

// Likewise when the input lives in memory no step writes after its producer: a plan input (the
// caller's array or a const) or a plan output. The output then reads the same bytes, live or not
// (a layer's input reshaped for its product while the layer reads it again). Not for a plan
// output (one output twice is copied after the steps, and at top level a copy from an input's
// place shares that input's array, whose shape is not the output's).
bool renames_read_only_bytes(const EvalPlan::Step& st, const std::vector<RawPlan::Value>& values, const std::vector<char>& placed,
                             const std::vector<std::size_t>& times_output) {
  if (!renames_bytes(st) || placed[st.outs[0]] || times_output[st.outs[0]] > 0) return false;
  const auto place = values[st.ins[0].slot].place;
  return place == RawPlan::Place::input || place == RawPlan::Place::output;
}

// Places the value a renaming step reads in the memory of the plan output it renames into, when
// that value dies at the step and has no place yet: its producer then writes the output's bytes
// and the step moves nothing (a residual reshaped to (B T, d) for its product was copied into the
// body's output each step). Steps are visited last to first, so a chain of renames ending in an
// output is placed whole. Sets moves_nothing[step] for each such step. Output memory is written by
// its producer alone (no step works in place on anything but workspace), so the value is whole for
// its every reader.
void place_renamed_outputs(const EvalPlan& plan, std::vector<RawPlan::Value>& values, std::vector<char>& placed,
                           std::vector<char>& moves_nothing) {
  for (std::size_t i = plan.steps.size(); i-- > 0;) {
    const auto& st = plan.steps[i];
    if (!renames_bytes(st)) continue;
    const std::size_t in = st.ins[0].slot, out = st.outs[0];
    if (placed[in] || !placed[out] || values[out].place != RawPlan::Place::output ||
        plan.slot_avals[in].nbytes() != plan.slot_avals[out].nbytes() ||
        std::find(st.free_after.begin(), st.free_after.end(), in) == st.free_after.end())
      continue;
    values[in] = values[out];
    placed[in] = 1;
    moves_nothing[i] = 1;
  }
}

// The kernel of a step whose output is its input's bytes in place: nothing to do.
void nothing_to_move(const void*, const void* const*, void* const*) {}

// One more execution of p in counts.
void add_count(std::vector<EvalCount>& counts, Primitive p) {
  for (auto& c : counts)
    if (c.prim == p) return void(++c.n);
  counts.push_back({p, 1});
}

}  // namespace

std::shared_ptr<const RawPlan> make_raw_plan(const EvalPlan& plan) {
  using Place = RawPlan::Place;
  for (const auto& st : plan.steps)
    if (st.kind != EvalPlan::Kind::kernel && st.kind != EvalPlan::Kind::fused) return nullptr;
  auto fp = std::make_shared<RawPlan>();
  auto& values = fp->values;
  values.resize(plan.num_slots);
  std::vector<char> placed(plan.num_slots, 0);
  for (std::size_t s : plan.const_slots) {
    if (s != EvalPlan::npos) values[s] = {Place::input, fp->num_inputs, nullptr}, placed[s] = 1;
    ++fp->num_inputs;
  }
  for (std::size_t s : plan.in_slots) {
    if (s != EvalPlan::npos) values[s] = {Place::input, fp->num_inputs, nullptr}, placed[s] = 1;
    ++fp->num_inputs;
  }
  std::map<const Literal*, std::size_t> literal_values;
  auto value_of = [&](const EvalPlan::Operand& op) {
    if (!op.literal) return op.slot;
    auto [it, fresh] = literal_values.emplace(op.literal, values.size());
    if (fresh) {
      fp->literals.push_back(op.literal->value);
      values.push_back({Place::literal, 0, fp->literals.back().raw_data()});
    }
    return it->second;
  };
  auto aval_of = [&](const EvalPlan::Operand& op) -> const ShapedArray& {
    return op.literal ? op.literal->value.aval() : plan.slot_avals[op.slot];
  };
  // The plan input each slot holds: an input's own slot, or a fused output that only renames an
  // input (kernels::renamed_input). Such an output is the input's place (its readers read the
  // input; the fused step writes nothing for it), and a plan output of it is a copy of the input
  // (which a top-level run shares).
  std::vector<std::size_t> input_held_by_slot(plan.num_slots, EvalPlan::npos);
  for (std::size_t s = 0; s < plan.num_slots; ++s)
    if (placed[s]) input_held_by_slot[s] = s;
  for (const auto& st : plan.steps)
    if (st.kind == EvalPlan::Kind::fused)
      for (std::size_t k = 0; k < st.outs.size(); ++k)
        if (const std::int64_t i = kernels::renamed_input(*st.fused, k); i >= 0 && st.outs[k] != EvalPlan::npos)
          if (const auto& op = st.ins[static_cast<std::size_t>(i)]; !op.literal) {
            const std::size_t held = input_held_by_slot[op.slot];
            input_held_by_slot[st.outs[k]] = held;
            if (held != EvalPlan::npos) values[st.outs[k]] = values[held], placed[st.outs[k]] = 1;
          }
  std::size_t discard = EvalPlan::npos;  // the value of fused outputs nothing is written to
  // A value computed by a step and output once is computed in its output's memory; the other
  // outputs are copied after the steps.
  std::vector<std::size_t> times_output(plan.num_slots, 0);
  for (const auto& op : plan.outs)
    if (!op.literal) ++times_output[op.slot];
  fp->num_outputs = plan.outs.size();
  for (std::size_t k = 0; k < plan.outs.size(); ++k) {
    const auto& op = plan.outs[k];
    fp->output_avals.push_back(aval_of(op));
    fp->output_bytes += aval_of(op).nbytes();
    if (!op.literal && input_held_by_slot[op.slot] != EvalPlan::npos) {
      fp->copies.push_back({input_held_by_slot[op.slot], k, aval_of(op).nbytes()});
    } else if (!op.literal && !placed[op.slot] && times_output[op.slot] == 1) {
      values[op.slot] = {Place::output, k, nullptr};
      placed[op.slot] = 1;
    } else {
      fp->copies.push_back({value_of(op), k, aval_of(op).nbytes()});
    }
  }
  std::vector<char> moves_nothing(plan.steps.size(), 0);
  place_renamed_outputs(plan, values, placed, moves_nothing);
  WorkspacePacker workspace;
  for (std::size_t step = 0; step < plan.steps.size(); ++step) {
    const auto& st = plan.steps[step];
    RawPlan::Step& f = fp->steps.emplace_back();
    auto& operands = fp->operands;
    f.first = static_cast<std::uint32_t>(operands.size());
    f.num_ins = static_cast<std::uint32_t>(st.ins.size());
    f.num_outs = static_cast<std::uint32_t>(st.outs.size());
    for (const auto& op : st.ins) operands.push_back(value_of(op));
    std::vector<std::pair<std::size_t, std::size_t>> unread;  // (offset, bytes) of outputs nothing reads
    std::vector<std::size_t> handed_on;  // dying inputs whose place an output took
    if (st.kind == EvalPlan::Kind::fused) place_in_place_outputs(plan, st, values, placed, handed_on);
    // A rename placed before the steps, or one taking its operand's place now.
    bool renamed = moves_nothing[step] != 0;
    const bool takes_dying = !renamed && renames_dying_input(plan, st, values, placed);
    if (takes_dying || (!renamed && renames_read_only_bytes(st, values, placed, times_output))) {
      values[st.outs[0]] = values[st.ins[0].slot];
      placed[st.outs[0]] = 1;
      if (takes_dying) handed_on.push_back(st.ins[0].slot);
      renamed = true;
    }
    for (std::size_t k = 0; k < st.outs.size(); ++k) {
      const std::size_t s = st.outs[k];
      if (s == EvalPlan::npos) {  // kernel steps only (a fused step outputs only what is read)
        const std::size_t bytes = st.eqn->outputs[k].aval().nbytes();
        unread.emplace_back(workspace.take(bytes), bytes);
        operands.push_back(values.size());
        values.push_back({Place::workspace, unread.back().first, nullptr});
        continue;
      }
      if (input_held_by_slot[s] != EvalPlan::npos) {  // a renamed input: the step skips a null output
        if (discard == EvalPlan::npos) discard = values.size(), values.push_back({Place::discard, 0, nullptr});
        operands.push_back(discard);
        continue;
      }
      if (!placed[s]) values[s] = {Place::workspace, workspace.take(plan.slot_avals[s].nbytes()), nullptr};
      placed[s] = 1;
      operands.push_back(s);
    }
    if (st.kind == EvalPlan::Kind::fused) {
      f.into = kernels::fused_into(st.fused);
    } else if (renamed) {
      f.into.fn = nothing_to_move;
    } else if (!(f.into = st.into)) {
      f.kernel = st.kernel;
      for (const auto& op : st.ins) f.in_avals.push_back(aval_of(op));
      f.out_bytes = st.eqn->outputs[0].aval().nbytes();
    }
    if (!f.into && !f.kernel) return nullptr;
    for (auto [at, bytes] : unread) workspace.give(at, bytes);
    for (std::size_t s : st.free_after)
      if (values[s].place == Place::workspace && std::find(handed_on.begin(), handed_on.end(), s) == handed_on.end())
        workspace.give(values[s].index, plan.slot_avals[s].nbytes());
    for (Primitive p : st.counted) add_count(fp->counted, p);
    f.counted = st.counted;
    fp->labels.push_back(st.label);
  }
  for (Primitive p : plan.inlined_calls) add_count(fp->counted, p);
  fp->workspace_bytes = workspace.size();
  return fp;
}

Array alloc_workspace(std::size_t bytes) {
  return alloc_array(ShapedArray{{static_cast<std::int64_t>(bytes)}, DType::bool_});
}

void run_raw(const RawPlan& plan, std::span<const void* const> inputs, std::span<void* const> outputs, void* workspace,
              RawScratch& scratch) {
  using Place = RawPlan::Place;
  if (inputs.size() != plan.num_inputs || outputs.size() != plan.num_outputs)
    throw Error("run_raw: a plan of " + std::to_string(plan.num_inputs) + " inputs and " + std::to_string(plan.num_outputs) +
                " outputs run with " + std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  auto& where = scratch.where;
  where.resize(plan.values.size());
  char* const base = static_cast<char*>(workspace);
  for (std::size_t i = 0; i < plan.values.size(); ++i) {
    const auto& v = plan.values[i];
    switch (v.place) {
      case Place::input: where[i] = inputs[v.index]; break;
      case Place::output: where[i] = outputs[v.index]; break;
      case Place::workspace: where[i] = base + v.index; break;
      case Place::literal: where[i] = v.literal; break;
      case Place::discard: where[i] = nullptr; break;
    }
  }
  std::size_t done = 0;  // steps run
  StepTimer timer;
  try {
    for (const auto& st : plan.steps) {
      scratch.ins.clear();
      for (std::size_t v : plan.ins(st)) scratch.ins.push_back(where[v]);
      scratch.outs.clear();
      for (std::size_t v : plan.outs(st)) scratch.outs.push_back(const_cast<void*>(where[v]));
      timer.start();
      if (st.into) st.into(scratch.ins.data(), scratch.outs.data());
      else run_on_views(st, scratch);
      timer.stop(plan.labels[done]);
      ++done;
    }
  } catch (...) {
    for (std::size_t i = 0; i < done; ++i)
      for (Primitive p : plan.steps[i].counted) count_eval(p);
    throw;
  }
  for (const auto& c : plan.copies)
    if (c.bytes && outputs[c.output]) std::memcpy(outputs[c.output], where[c.value], c.bytes);
  count_evals(plan.counted);
}

std::vector<Array> run_raw_to_arrays(const RawPlan& plan, std::span<const Array> consts, std::span<const Array> args) {
  // The thread's scratch vectors, unless a run on this thread holds them already (a kernel
  // never runs a plan, but nothing here depends on that) or the thread is ending.
  RawScratch own;
  ThreadScratch* mine = PerThread<ThreadScratch>::get();
  const bool take = mine && !mine->busy;
  RawScratch& scratch = take ? mine->scratch : own;
  struct Release {
    ThreadScratch* held;
    ~Release() {
      if (held) held->busy = false;
    }
  } release{take ? mine : nullptr};
  if (take) mine->busy = true;
  std::vector<const void*> inputs;
  inputs.reserve(consts.size() + args.size());
  append_addresses(inputs, consts);
  append_addresses(inputs, args);
  // An output that is an input passed through is that input's array, as the Array executor
  // returns it (no copy: run_raw skips a copy into a null output; eval_jaxpr renews the handle).
  std::vector<Array> result(plan.num_outputs);
  std::vector<void*> outputs(plan.num_outputs, nullptr);
  for (const auto& c : plan.copies)
    if (const auto& v = plan.values[c.value]; v.place == RawPlan::Place::input)
      result[c.output] = v.index < consts.size() ? consts[v.index] : args[v.index - consts.size()];
  for (std::size_t k = 0; k < plan.num_outputs; ++k)
    if (!result[k].valid()) {
      result[k] = alloc_array(plan.output_avals[k]);
      outputs[k] = mutable_data(result[k]);
    }
  const Array workspace = plan.workspace_bytes ? alloc_workspace(plan.workspace_bytes) : Array();
  run_raw(plan, inputs, outputs, plan.workspace_bytes ? mutable_data(workspace) : nullptr, scratch);
  return result;
}

bool raw_at_top_level(const RawPlan& plan) {
  return t_raw_plans && plan.workspace_bytes + plan.output_bytes <= kRawBytesPerStep * std::max<std::size_t>(1, plan.steps.size());
}

void append_addresses(std::vector<const void*>& to, std::span<const Array> arrays) {
  for (const auto& a : arrays) to.push_back(a.raw_data());
}

RawLoop::RawLoop(std::span<const Array> init, std::size_t workspace_bytes)
    : init_(init.begin(), init.end()), workspace_(alloc_workspace(workspace_bytes)) {}

void RawLoop::start(const ClosedJaxpr& j, std::span<const Array> consts) {
  inputs_.clear();
  outputs_.clear();
  append_addresses(inputs_, j.consts);
  append_addresses(inputs_, consts);
  append_addresses(inputs_, written_ < 0 ? init_ : buffers_[written_]);
}

void RawLoop::next_carry() {
  auto& next = buffers_[written_ == 0 ? 1 : 0];
  if (next.empty())
    for (const auto& c : init_) next.push_back(alloc_array(c.aval()));
  for (const auto& c : next) outputs_.push_back(mutable_data(c));
}

void RawLoop::run(const RawPlan& plan) { run_raw(plan, inputs_, outputs_, mutable_data(workspace_), scratch_); }

bool raw_plans_enabled() { return t_raw_plans; }
RawPlansOff::RawPlansOff() : was_(t_raw_plans) { t_raw_plans = false; }
RawPlansOff::~RawPlansOff() { t_raw_plans = was_; }

}  // namespace xjax::detail
