// cond.cpp: the cond and while primitives and all their rules. (Stub: being written.)
#include "higher_order.hpp"
#include "pe_rules.hpp"

namespace xjax::detail {
namespace {
[[noreturn]] void todo(const char* what) { throw Error(std::string(what) + ": not implemented yet"); }
}  // namespace

std::vector<ShapedArray> cond_abstract_eval(std::span<const ShapedArray>, const Params&) { todo("cond"); }
std::vector<Array> cond_impl(std::span<const Array>, const Params&) { todo("cond"); }
JvpOut cond_jvp(const JvpArgs&) { todo("cond"); }
std::vector<Tangent> cond_transpose(const TransposeArgs&) { todo("cond"); }
PeSplit cond_partial_eval(const Eqn&, const std::vector<bool>&, const Saveable&) { todo("cond"); }
Eqn cond_dce(const Eqn&, const std::vector<bool>&, std::vector<bool>&) { todo("cond"); }

std::vector<ShapedArray> while__abstract_eval(std::span<const ShapedArray>, const Params&) { todo("while"); }
std::vector<Array> while__impl(std::span<const Array>, const Params&) { todo("while"); }
JvpOut while__jvp(const JvpArgs&) { todo("while"); }
std::vector<Tangent> while__transpose(const TransposeArgs&) { todo("while"); }

}  // namespace xjax::detail
