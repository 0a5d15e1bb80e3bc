// fused_program.hpp: what the fused executor (fused.cpp, once per kernel set) and the plans
// (fused_program.cpp, once) both read from a FusedProgram: where outputs may overwrite inputs.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {

// True when no op after op `p` reads value `value`.
inline bool unread_after(const FusedProgram& prog, std::size_t p, std::int32_t value) {
  for (std::size_t q = p + 1; q < prog.ops.size(); ++q)
    for (std::int32_t src : prog.ops[q].src)
      if (src == value) return false;
  return true;
}

// Calls take(i, k) for each input i whose elements output k may be written over: output k is
// computed by an op straight into its memory (direct), input i is a float array of the shape
// read in place (not bool, scalar or broadcast), no op after that one reads it, no output is the
// input itself (it would be copied after the ops), and usable(i) (its memory may be overwritten).
// Each input serves at most one output. `taken` is working memory.
template <class Usable, class Take>
void for_each_in_place_output(const FusedProgram& prog, std::vector<char>& taken, Usable usable, Take take) {
  const auto& direct = prog.direct;
  const std::size_t ni = prog.inputs.size();
  taken.assign(ni, 0);
  for (std::size_t p = 0; p < prog.ops.size(); ++p) {
    const auto value = static_cast<std::size_t>(prog.ops[p].dst);
    if (direct[value] < 0) continue;
    for (std::size_t i = 0; i < ni; ++i) {
      const auto& input = prog.inputs[i];
      const auto iv = static_cast<std::int32_t>(i);
      if (taken[i] || input.is_bool || input.is_scalar || input.period > 0 || !unread_after(prog, p, iv)) continue;
      bool is_output = false;
      for (const auto& o : prog.outputs) is_output = is_output || o.value == iv;
      if (is_output || !usable(i)) continue;
      taken[i] = 1;
      take(i, static_cast<std::size_t>(direct[value]));
      break;
    }
  }
}

}  // namespace xjax::detail::kernels
