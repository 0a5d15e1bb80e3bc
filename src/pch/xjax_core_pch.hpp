// The precompiled header of the core (meson's cpp_pch for xjax_core): the headers most of src/
// includes, parsed once instead of once per file (issue 26: about 0.7 s of a core file's compile
// on 2 cores). Meson force-includes it in every core source, which hides a file's missing
// includes; CI's sanitizer stage builds with -Db_pch=false, where a missing include fails.
// No macros, nothing that changes a header's meaning.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "internal.hpp"
#include "xjax/ops.hpp"
