// pe_rules.hpp: partial-evaluation rules of higher-order primitives. A first-order primitive has
// none: it is staged whole when any input is unknown. A higher-order primitive (scan, cond,
// checkpoint) splits its body instead, emitting known and staged equations.
#pragma once
#include "ad.hpp"

namespace xjax::detail {

struct PeSplit {
  std::vector<Eqn> known;   // equations to run now (they define the known outputs)
  std::vector<Eqn> staged;  // equations to run later (they define the unknown outputs)
  std::vector<bool> out_unknown;
  /// Outputs of the original equation that the known equations do not define but name by another
  /// atom (a known part inlined with fresh variables): later uses are renamed.
  std::vector<std::pair<Var, Atom>> aliases;
};
using PeRule = PeSplit (*)(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable);

/// The rule of p, or nullptr for all-or-nothing staging.
PeRule pe_rule(Primitive p);

}  // namespace xjax::detail
