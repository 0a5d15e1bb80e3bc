// scatter_rules.hpp: the scatter family's rules that are more than a line (scatter_rules.cpp);
// jvp.cpp, transpose.cpp and vmap.cpp list them in their tables. Not installed.
#pragma once
#include "ad.hpp"
#include "batching.hpp"

namespace xjax::detail {

/// jvp of scatter_mul, scatter_min, scatter_max (scatter and scatter_add are linear: jvp.cpp).
JvpOut scatter_mul_jvp(const JvpArgs& a);
JvpOut scatter_min_jvp(const JvpArgs& a);
JvpOut scatter_max_jvp(const JvpArgs& a);

/// Which updates of scatter(x, i, u) survive in its result (bool, u's shape): update j unless a
/// later update set the same element or j was dropped (out of range in fill_or_drop mode).
Array surviving_updates(const Array& indices, const ShapedArray& operand, const ShapedArray& updates,
                        const params::Scatter& ps, std::source_location loc);

/// The batching rule of every scatter (indices batched or not).
BatchOut scatter_family_batch(const BatchArgs& a);

}  // namespace xjax::detail
