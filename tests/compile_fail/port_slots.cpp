// Compile-fail test of a positional slip (meson: tests/compile_fail/meson.build): var's and std's
// third parameter is ddof, where mean's is keepdims, so `var(x, {0}, true)` would have taken
// keepdims for ddof = 1; a bool there does not compile (the control passes ddof as a number);
// nor does a bool as flip's axis, or a character as eigh's UPLO ('U' converted to lower = true).
#include "xjax/linalg.hpp"
#include "xjax/ops.hpp"

int main() {
  const xjax::Array x = xjax::zeros({4});
#if defined(XJAX_CONTROL)
  const xjax::Array v = xjax::var(x, {0}, 0, true) + xjax::std(x, {0}, 1) + xjax::flip(x, 0) +
                        xjax::linalg::eigh(xjax::zeros({2, 2}), "U").first;
#elif defined(XJAX_VAR_BOOL)
  const xjax::Array v = xjax::var(x, {0}, true);
#elif defined(XJAX_STD_BOOL)
  const xjax::Array v = xjax::std(x, {0}, true);
#elif defined(XJAX_FLIP_BOOL)
  const xjax::Array v = xjax::flip(x, true);  // a bool is not an axis
#elif defined(XJAX_EIGH_CHAR)
  const xjax::Array v = xjax::linalg::eigh(xjax::zeros({2, 2}), 'U').first;  // a char converted to lower = true
#endif
  return v.ndim();
}
