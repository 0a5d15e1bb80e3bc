// conv_loops.cpp: the reference convolution of the tests (conv_loops.hpp), from the definition.
#include "reference/conv_loops.hpp"

#include <algorithm>
#include <cstddef>

namespace conv_reference {
namespace {

// Positions of the named dims of a layout string: first, second, then the spatial letters in the
// order of `rhs`'s spatial letters.
Ints positions(const std::string& spec, char first, char second, const std::string& rhs) {
  Ints out{static_cast<std::int64_t>(spec.find(first)), static_cast<std::int64_t>(spec.find(second))};
  for (char ch : rhs)
    if (ch != 'O' && ch != 'I') out.push_back(static_cast<std::int64_t>(spec.find(ch)));
  return out;
}

Ints row_major_strides(const xjax::Shape& shape) {
  Ints strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Calls visit(out_flat, lhs_flat, rhs_flat) for every product the convolution sums, the output's
// shape is returned: the definition of XLA's convolution written out as loops.
template <class F> xjax::Shape conv_loops(const ConvCase& c, F&& visit) {
  const Ints L = positions(c.dl, 'N', 'C', c.dr), R = positions(c.dr, 'O', 'I', c.dr), O = positions(c.dout, 'N', 'C', c.dr);
  const std::size_t ns = c.strides.size();
  const std::int64_t N = c.lhs[L[0]], C = c.lhs[L[1]], Oc = c.rhs[R[0]], Cg = c.rhs[R[1]];
  const std::int64_t G = c.groups, B = c.batch_groups, Nout = N / B;
  Ints in(ns), win(ns), outs(ns);
  for (std::size_t i = 0; i < ns; ++i) {
    in[i] = c.lhs[L[i + 2]];
    win[i] = c.rhs[R[i + 2]];
    const std::int64_t padded = (in[i] - 1) * c.lhs_dil[i] + 1 + c.pads[i].first + c.pads[i].second;
    const std::int64_t extent = (win[i] - 1) * c.rhs_dil[i] + 1;
    outs[i] = padded < extent ? 0 : (padded - extent) / c.strides[i] + 1;
  }
  xjax::Shape out_shape(ns + 2);
  out_shape[O[0]] = Nout;
  out_shape[O[1]] = Oc;
  for (std::size_t i = 0; i < ns; ++i) out_shape[O[i + 2]] = outs[i];
  std::int64_t npos = 1, nwin = 1;
  for (std::size_t i = 0; i < ns; ++i) npos *= outs[i], nwin *= win[i];
  // flat index = sum of index * stride (row-major); the counters are reused, nothing is allocated
  // in the loops
  const Ints ls = row_major_strides(c.lhs), rs = row_major_strides(c.rhs), os = row_major_strides(out_shape);
  Ints s(ns), k(ns);  // the output's spatial position, the window position
  for (std::int64_t n = 0; n < Nout; ++n)
    for (std::int64_t o = 0; o < Oc; ++o)
      for (std::int64_t sp = 0; sp < npos; ++sp) {
        for (std::int64_t r = sp, i = static_cast<std::int64_t>(ns) - 1; i >= 0; --i) s[i] = r % outs[i], r /= outs[i];
        std::int64_t of = n * os[O[0]] + o * os[O[1]];
        for (std::size_t i = 0; i < ns; ++i) of += s[i] * os[O[i + 2]];
        const std::int64_t gf = o / (Oc / G), gb = o / (Oc / B);
        for (std::int64_t ch = 0; ch < Cg; ++ch)
          for (std::int64_t kp = 0; kp < nwin; ++kp) {
            for (std::int64_t r = kp, i = static_cast<std::int64_t>(ns) - 1; i >= 0; --i) k[i] = r % win[i], r /= win[i];
            std::int64_t lf = (gb * Nout + n) * ls[L[0]] + (gf * Cg + ch) * ls[L[1]];
            std::int64_t rf = o * rs[R[0]] + ch * rs[R[1]];
            bool inside = true;
            for (std::size_t i = 0; i < ns && inside; ++i) {
              const std::int64_t q = s[i] * c.strides[i] + k[i] * c.rhs_dil[i] - c.pads[i].first;
              inside = q >= 0 && q % c.lhs_dil[i] == 0 && q / c.lhs_dil[i] < in[i];
              lf += q / std::max<std::int64_t>(c.lhs_dil[i], 1) * ls[L[i + 2]];
              rf += k[i] * rs[R[i + 2]];
            }
            if (inside) visit(of, lf, rf);
          }
        (void)C;
      }
  return out_shape;
}

}  // namespace

std::vector<double> naive_conv(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                               xjax::Shape& out_shape) {
  std::vector<double> out;
  out_shape = conv_loops(c, [](std::int64_t, std::int64_t, std::int64_t) {});
  out.assign(static_cast<std::size_t>(xjax::shape_size(out_shape)), 0.0);
  conv_loops(c, [&](std::int64_t o, std::int64_t l, std::int64_t r) { out[o] += x[l] * w[r]; });
  return out;
}

std::pair<std::vector<double>, std::vector<double>> adjoint_conv(const ConvCase& c, const std::vector<double>& x,
                                                                 const std::vector<double>& w,
                                                                 const std::vector<double>& ct) {
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  conv_loops(c, [&](std::int64_t o, std::int64_t l, std::int64_t r) {
    dx[l] += ct[o] * w[r];
    dw[r] += ct[o] * x[l];
  });
  return {dx, dw};
}

}  // namespace conv_reference
