// checkpoint.cpp: the checkpoint primitive and all its rules. (Stub: being written.)
#include "higher_order.hpp"
#include "pe_rules.hpp"

namespace xjax::detail {
namespace {
[[noreturn]] void todo() { throw Error("checkpoint: not implemented yet"); }
}  // namespace

std::vector<ShapedArray> checkpoint_abstract_eval(std::span<const ShapedArray>, const Params&) { todo(); }
std::vector<Array> checkpoint_impl(std::span<const Array>, const Params&) { todo(); }
JvpOut checkpoint_jvp(const JvpArgs&) { todo(); }
std::vector<Tangent> checkpoint_transpose(const TransposeArgs&) { todo(); }
PeSplit checkpoint_partial_eval(const Eqn&, const std::vector<bool>&, const Saveable&) { todo(); }
Eqn checkpoint_dce(const Eqn&, const std::vector<bool>&, std::vector<bool>&) { todo(); }

}  // namespace xjax::detail
