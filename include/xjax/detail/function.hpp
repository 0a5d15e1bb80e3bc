// function.hpp: std::function for xjax's public headers. With libstdc++ it is
// <bits/std_function.h>, the part of <functional> that defines std::function: the rest of
// <functional> (the algorithms, unordered_map, searchers, std::bind) is about 6% of what every file
// including <xjax/xjax.hpp> parses (docs/status.md, issue 26). Elsewhere it is <functional>.
// A file that uses more of <functional> includes it itself.
#pragma once
#if __has_include(<bits/std_function.h>)
#include <bits/std_function.h>
#else
#include <functional>
#endif
