// fused_program.cpp: the parts of a FusedProgram's meaning that need no vector instructions
// (compiled once, not per kernel set): its completion, renamed outputs, in-place pairs.
#include "kernels/fused_program.hpp"

#include <algorithm>

namespace xjax::detail::kernels {

std::int64_t renamed_input(const FusedProgram& prog, std::size_t k) {
  const auto& o = prog.outputs[k];
  const auto value = static_cast<std::size_t>(o.value);
  if (value >= prog.inputs.size()) return -1;
  const auto& input = prog.inputs[value];
  return !input.is_scalar && input.period == 0 && input.is_bool == o.is_bool ? static_cast<std::int64_t>(value) : -1;
}

namespace {

// row_of and rows (kernels.hpp): the inputs' rows first, then each op's value in the lowest row
// free when the op runs; a value's row is freed after the last op that reads it, unless an
// output reads it (outputs are copied out at the end of the block).
void assign_rows(FusedProgram& prog) {
  const auto nv = static_cast<std::size_t>(prog.num_values);
  const std::size_t ni = prog.inputs.size();
  std::vector<std::int64_t> last_read(nv, -1);
  for (std::size_t j = 0; j < prog.ops.size(); ++j)
    for (auto src : prog.ops[j].src) last_read[static_cast<std::size_t>(src)] = static_cast<std::int64_t>(j);
  for (const auto& o : prog.outputs) last_read[static_cast<std::size_t>(o.value)] = static_cast<std::int64_t>(prog.ops.size());
  prog.row_of.assign(nv, 0);
  for (std::size_t i = 0; i < ni; ++i) prog.row_of[i] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> free_rows;  // kept sorted, lowest last
  auto next_row = static_cast<std::int32_t>(ni);
  for (std::size_t j = 0; j < prog.ops.size(); ++j) {
    const auto& op = prog.ops[j];
    std::int32_t row = next_row;
    if (free_rows.empty()) ++next_row;
    else {
      row = free_rows.back();
      free_rows.pop_back();
    }
    prog.row_of[static_cast<std::size_t>(op.dst)] = row;
    auto give_back = [&](std::int32_t value) {
      if (static_cast<std::size_t>(value) < ni) return;
      free_rows.push_back(prog.row_of[static_cast<std::size_t>(value)]);
      std::sort(free_rows.rbegin(), free_rows.rend());
    };
    for (int k = 0; k < 3; ++k) {
      const auto src = op.src[k];
      bool first = true;  // a value read twice by this op is given back once
      for (int q = 0; q < k; ++q) first = first && op.src[q] != src;
      if (first && last_read[static_cast<std::size_t>(src)] == static_cast<std::int64_t>(j)) give_back(src);
    }
    if (last_read[static_cast<std::size_t>(op.dst)] < 0) give_back(op.dst);  // read by nothing
  }
  prog.rows = next_row;
}

}  // namespace

void finish_program(FusedProgram& prog) {
  prog.size = shape_size(prog.shape);
  // direct (see run_blocks): each value's first float output, when an op computes it.
  prog.direct.assign(static_cast<std::size_t>(prog.num_values), -1);
  for (std::size_t k = 0; k < prog.outputs.size(); ++k) {
    const auto value = static_cast<std::size_t>(prog.outputs[k].value);
    if (value >= prog.inputs.size() && !prog.outputs[k].is_bool && prog.direct[value] < 0)
      prog.direct[value] = static_cast<std::int64_t>(k);
  }
  for (std::size_t i = 0; i < prog.inputs.size(); ++i) {
    auto& input = prog.inputs[i];
    const auto value = static_cast<std::int32_t>(i);
    bool only_predicate = input.is_bool && !input.is_scalar && input.period == 0;
    for (const auto& op : prog.ops)
      for (int k = 0; k < 3; ++k)
        if (op.src[k] == value && !(op.prim == Primitive::select_n && k == 0)) only_predicate = false;
    for (const auto& o : prog.outputs)
      if (o.value == value) only_predicate = false;
    input.read_as_bytes = only_predicate;
    input.same_every_block = input.period > 0 && input.repeat == 1 && FusedProgram::kBlock % input.period == 0;
  }
  assign_rows(prog);
}

namespace {

// Each use of a value read through `to` (a value folded into another).
void read_through(FusedProgram& prog, const std::vector<std::int32_t>& to) {
  for (auto& op : prog.ops)
    for (auto& src : op.src) src = to[static_cast<std::size_t>(src)];
  for (auto& o : prog.outputs) o.value = to[static_cast<std::size_t>(o.value)];
}

// max(x, c) > c is x > c, and min(x, c) < c is x < c (either operand order): where x beats c
// both hold; elsewhere max gives c (false) or NaN when x is NaN (false again, as NaN > c).
// Rewrites the comparison to read x, so a max only it read is dropped (relu's mask read from its
// recomputed output).
void compare_clamped_operand(FusedProgram& prog) {
  std::vector<const FusedProgram::Op*> defined_by(static_cast<std::size_t>(prog.num_values), nullptr);
  for (auto& op : prog.ops) {
    defined_by[static_cast<std::size_t>(op.dst)] = &op;
    const Primitive clamp = op.prim == Primitive::gt ? Primitive::max : op.prim == Primitive::lt ? Primitive::min : Primitive::add;
    if (clamp == Primitive::add) continue;
    const FusedProgram::Op* c = defined_by[static_cast<std::size_t>(op.src[0])];
    if (!c || c->prim != clamp) continue;
    if (c->src[1] == op.src[1]) op.src[0] = c->src[0];
    else if (c->src[0] == op.src[1]) op.src[0] = c->src[1];
  }
}

// cmp(select_n(p, c, x), c) = p where p = cmp(x, c) and cmp is < or >: where p holds the select
// gives x, and cmp(x, c) is p; elsewhere it gives c, and cmp(c, c) is false (NaN too).
void fold_masks_of_selected_values(FusedProgram& prog) {
  const auto nv = static_cast<std::size_t>(prog.num_values);
  std::vector<std::int32_t> to(nv);
  for (std::size_t v = 0; v < nv; ++v) to[v] = static_cast<std::int32_t>(v);
  std::vector<const FusedProgram::Op*> defined_by(nv, nullptr);
  bool folded = false;
  for (auto& op : prog.ops) {
    for (auto& src : op.src) src = to[static_cast<std::size_t>(src)];
    defined_by[static_cast<std::size_t>(op.dst)] = &op;
    if (op.prim != Primitive::gt && op.prim != Primitive::lt) continue;
    const FusedProgram::Op* select = defined_by[static_cast<std::size_t>(op.src[0])];
    if (!select || select->prim != Primitive::select_n || select->src[1] != op.src[1]) continue;
    const FusedProgram::Op* mask = defined_by[static_cast<std::size_t>(select->src[0])];
    if (!mask || mask->prim != op.prim || mask->src[0] != select->src[2] || mask->src[1] != op.src[1]) continue;
    to[static_cast<std::size_t>(op.dst)] = mask->dst;
    folded = true;
  }
  if (folded) read_through(prog, to);
}

// Drops the ops whose values no later op and no output reads, and numbers the values of the
// others consecutively after the inputs.
void drop_unread_ops(FusedProgram& prog) {
  const auto nv = static_cast<std::size_t>(prog.num_values);
  std::vector<char> read(nv, 0);
  for (const auto& o : prog.outputs) read[static_cast<std::size_t>(o.value)] = 1;
  std::vector<FusedProgram::Op> kept;
  for (auto op = prog.ops.rbegin(); op != prog.ops.rend(); ++op) {
    if (!read[static_cast<std::size_t>(op->dst)]) continue;
    for (int k = 0; k < 3; ++k) read[static_cast<std::size_t>(op->src[k])] = 1;
    kept.push_back(*op);
  }
  if (kept.size() == prog.ops.size()) return;
  std::reverse(kept.begin(), kept.end());
  std::vector<std::int32_t> to(nv);
  for (std::size_t v = 0; v < prog.inputs.size(); ++v) to[v] = static_cast<std::int32_t>(v);
  auto next = static_cast<std::int32_t>(prog.inputs.size());
  for (const auto& op : kept) to[static_cast<std::size_t>(op.dst)] = next++;
  prog.ops = std::move(kept);
  for (auto& op : prog.ops) op.dst = to[static_cast<std::size_t>(op.dst)];
  read_through(prog, to);
  prog.num_values = next;
}

}  // namespace

void simplify_program(FusedProgram& prog) {
  compare_clamped_operand(prog);
  fold_masks_of_selected_values(prog);
  drop_unread_ops(prog);
}

InPlacePairs in_place_outputs(const FusedProgram& prog, const std::function<bool(std::size_t)>& usable) {
  std::vector<char> taken;
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for_each_in_place_output(prog, taken, usable, [&](std::size_t i, std::size_t k) { pairs.emplace_back(i, k); });
  return pairs;
}

}  // namespace xjax::detail::kernels
