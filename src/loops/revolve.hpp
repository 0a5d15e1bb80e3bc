// loops/revolve.hpp: the loop primitives of reverse mode under a checkpoint schedule
// (revolve_fwd, revolve_lin, revolve_bwd, online_fwd; loops/revolve.cpp evaluates them, and
// transforms/revolve.cpp emits and transforms them): the operand layouts they share and their
// plain-scan expansions. Not installed.
#pragma once
#include <algorithm>
#include <source_location>

#include "loops/loops.hpp"
#include "loops/schedule.hpp"

namespace xjax::detail {

/// The shape of K = params.jaxpr: (consts, carry, x) -> (carry, y, res).
struct StepShape {
  std::size_t nc, ncar, nx, ny, nres;
  std::int64_t length, slots;
  bool reverse;
  static StepShape of(const ClosedJaxpr& k, std::int64_t nc, std::int64_t ncar, std::int64_t nres, std::int64_t length,
                      std::int64_t snapshots, bool reverse) {
    StepShape s{static_cast<std::size_t>(nc), static_cast<std::size_t>(ncar), 0, 0, static_cast<std::size_t>(nres),
                length, length < 0 ? snapshots : std::min(snapshots, std::max<std::int64_t>(length, 1)), reverse};
    s.nx = k->invars.size() - s.nc - s.ncar;
    s.ny = k->outvars.size() - s.ncar - s.nres;
    return s;
  }
  /// The index into xs of the step visited p-th.
  std::int64_t index(std::int64_t p) const { return reverse ? length - 1 - p : p; }
};

StepShape shape_of(const params::RevolveFwd& ps);
StepShape shape_of(const params::Revolve& ps);

/// Operand positions of revolve_lin and revolve_bwd: consts, snapshots, xs, res, then the
/// linear part's consts, carry, and per-step operands.
/// A while_loop's (length < 0) has no xs and no last-step residuals, and after the snapshots the
/// slots' positions (i64[s]) and the trip count (i64[]).
struct LinLayout {
  std::size_t snaps, positions, xs, res, lin_consts, lin_carry, per_step;
  static LinLayout of(const StepShape& sh, const params::Revolve& ps) {
    const bool dynamic = ps.length < 0;
    LinLayout l{};
    l.snaps = sh.nc;
    l.positions = l.snaps + sh.ncar;
    l.xs = l.positions + (dynamic ? 2 : 0);
    l.res = l.xs + sh.nx;
    l.lin_consts = l.res + (dynamic ? 0 : sh.nres);
    l.lin_carry = l.lin_consts + static_cast<std::size_t>(ps.num_linear_consts);
    l.per_step = l.lin_carry + static_cast<std::size_t>(ps.num_linear_carry);
    return l;
  }
};

/// The avals of vs[first, first + n).
std::vector<ShapedArray> avals_of(const std::vector<Var>& vs, std::size_t first, std::size_t n);

/// Each primitive as plain scans that store every carry (the same values without the
/// schedule's memory bound): what their jvp and batching rules transform, and revolve_lin's
/// evaluation. A while_loop's revolve_lin / revolve_bwd (length < 0) have none.
FlatFn fwd_expansion(const params::RevolveFwd& ps, std::source_location loc);
FlatFn lin_expansion(const params::Revolve& ps, std::source_location loc);
FlatFn bwd_expansion(const params::Revolve& ps, std::source_location loc);

}  // namespace xjax::detail
