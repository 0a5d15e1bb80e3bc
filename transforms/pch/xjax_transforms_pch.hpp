// The precompiled header of libxjax's own sources (transforms/; meson's cpp_pch): the core's
// headers and the transformation rules' (higher_order.hpp brings ad.hpp, batching.hpp and
// pe_rules.hpp), parsed once (issue 26). As src/pch/xjax_core_pch.hpp: CI's sanitizer stage
// builds without it (-Db_pch=false), so a file that forgets an include still fails there.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "higher_order.hpp"
#include "internal.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"
