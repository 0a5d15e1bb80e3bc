// The precompiled header of xjax-tests (meson's cpp_pch): the headers nearly every test file
// includes, parsed once instead of once per file (about 3 s of each file's compile on 2 cores,
// issue 26). Meson force-includes it in every source of xjax-tests, so it must stay a subset of
// what the files could include themselves: no macros that change a header's meaning (main.cpp,
// which defines DOCTEST_CONFIG_IMPLEMENT, is compiled outside this target for that reason).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <xjax/xjax.hpp>

#include "internal.hpp"
#include "test_util.hpp"
