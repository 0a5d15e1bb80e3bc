// The precompiled header of the examples (meson's cpp_pch, tests only: a build-speed device, not
// something a user's program needs). The examples compile once each into one object library that
// shares this header, parsed once instead of once per example (issue 26: about 2.5 s of each
// example's 4 s), and each program links its own object. Meson force-includes it, which hides an
// example's missing include; CI's sanitizer stage builds with -Db_pch=false, where it fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include <xjax/xjax.hpp>
