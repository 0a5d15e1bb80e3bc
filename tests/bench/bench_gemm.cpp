// G1 (issue 32): the small-product loops of each kernel set against OpenBLAS's sgemm on the same
// operands, one product at a time (src/kernels/small_gemm.cpp). It shows where each set's loops
// beat BLAS and where the 128^3 limit lies on this machine. OpenBLAS picks its own kernels at run
// time (OPENBLAS_CORETYPE=Haswell makes it run its AVX2 ones, as on an AVX2 machine).
#include <cblas.h>

#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "kernels/kernel_sets.hpp"

namespace {

namespace kernels = xjax::detail::kernels;

/// Median seconds of one call of f, timed over enough calls to last about a millisecond.
template <class F> double per_call(F f, int reps) {
  int calls = 1;
  for (double t0 = bench::now(); bench::now() - t0 < 1e-3; calls *= 2)
    for (int i = 0; i < calls; ++i) f();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = bench::now();
    for (int i = 0; i < calls; ++i) f();
    times.push_back((bench::now() - t0) / calls);
  }
  return bench::median(times);
}

}  // namespace

namespace bench {

void bench_small_products(std::vector<Row>& rows, int reps) {
  struct Size {
    std::int64_t m, n, k;
  };
  for (const Size s : {Size{16, 32, 32}, Size{32, 32, 32}, Size{64, 64, 64}, Size{96, 96, 96}, Size{128, 128, 128},
                       Size{160, 160, 160}}) {
    const auto a = bench::randn(s.m * s.k, 1, 1.0), b = bench::randn(s.k * s.n, 2, 1.0);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n)), ref(c.size());
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const std::string shape = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
    const double blas = per_call([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                  static_cast<int>(s.k), 1.0f, a.data(), static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0f,
                  ref.data(), static_cast<int>(s.n));
    }, reps);
    rows.push_back({"G1", shape, "reference", blas, 1.0, flops / blas * 1e-9, 0, 0, "cblas_sgemm"});
    for (const kernels::KernelSet* set : kernels::built_kernel_sets()) {
      if (!kernels::runs_here(*set)) continue;
      const kernels::SmallGemm g{s.m, s.n, s.k, false, false};
      if (!set->small_gemm_f32(g, a.data(), b.data(), c.data())) {
        rows.push_back({"G1", shape, "xjax", blas, 1.0, flops / blas * 1e-9, 0, 0,
                        std::string("kernel set ") + set->name + ": BLAS (no loops for this size or set)"});
        continue;
      }
      const double t = per_call([&] { set->small_gemm_f32(g, a.data(), b.data(), c.data()); }, reps);
      rows.push_back({"G1", shape, "xjax", t, t / blas, flops / t * 1e-9, 0, 0,
                      std::string("kernel set ") + set->name + " (its loops; the dispatch uses them up to 128^3)" +
                          " err=" + bench::fmt("%.1e", bench::rel_err(c.data(), ref.data(), s.m * s.n))});
    }
  }
}

}  // namespace bench
