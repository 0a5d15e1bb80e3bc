// fused_program.cpp: the parts of a FusedProgram's meaning that need no vector instructions
// (compiled once, not per kernel set): its completion, renamed outputs, in-place pairs.
#include "kernels/fused_program.hpp"

namespace xjax::detail::kernels {

std::int64_t renamed_input(const FusedProgram& prog, std::size_t k) {
  const auto& o = prog.outputs[k];
  const auto value = static_cast<std::size_t>(o.value);
  if (value >= prog.inputs.size()) return -1;
  const auto& input = prog.inputs[value];
  return !input.is_scalar && input.period == 0 && input.is_bool == o.is_bool ? static_cast<std::int64_t>(value) : -1;
}

void finish_program(FusedProgram& prog) {
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
  }
}

InPlacePairs in_place_outputs(const FusedProgram& prog, const std::function<bool(std::size_t)>& usable) {
  std::vector<char> taken;
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for_each_in_place_output(prog, taken, usable, [&](std::size_t i, std::size_t k) { pairs.emplace_back(i, k); });
  return pairs;
}

}  // namespace xjax::detail::kernels
