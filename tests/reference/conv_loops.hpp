// conv_loops.hpp: the reference convolution of the tests (test_conv.cpp): XLA's convolution
// written out from its definition as plain loops in double, and their adjoint. Compiled with
// optimization in a library of its own (tests/meson.build): the test files are built at -O0,
// where these loops were three quarters of test_conv's run time (four runs in the suite).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xjax/array.hpp"

namespace conv_reference {

using Ints = std::vector<std::int64_t>;
using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

/// One convolution: operand shapes, the conv_general_dilated arguments and the layouts' letters.
struct ConvCase {
  const char* what;
  xjax::Shape lhs, rhs;
  Ints strides;
  Pairs pads;
  Ints lhs_dil, rhs_dil;
  std::string dl, dr, dout;
  std::int64_t groups = 1, batch_groups = 1;
};

/// The convolution of x and w (row-major elements of c.lhs and c.rhs); its shape in out_shape.
std::vector<double> naive_conv(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                               xjax::Shape& out_shape);

/// The adjoint of the bilinear loop at cotangent ct: dx[l] += ct[o] w[r], dw[r] += ct[o] x[l].
std::pair<std::vector<double>, std::vector<double>> adjoint_conv(const ConvCase& c, const std::vector<double>& x,
                                                                 const std::vector<double>& w,
                                                                 const std::vector<double>& ct);

}  // namespace conv_reference
