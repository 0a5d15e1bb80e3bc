// The precompiled header of a kernel set (meson's cpp_pch for each xjax_kernels_<set>; built once
// per set, with that set's -march flags and XJAX_KERNEL_SET): xsimd and the kernels' headers,
// parsed once per set instead of once per file (issue 26: about 1.8 s of each of the 30 files).
// As src/pch/xjax_core_pch.hpp: CI's sanitizer stage builds without it (-Db_pch=false), so a file
// that forgets an include still fails there. A precompiled header does not carry diagnostic
// pragmas: the set's warning flags are on its command line (meson.build).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernel_sets.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "windows.hpp"
