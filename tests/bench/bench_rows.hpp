// bench_rows.hpp: what xjax-bench's workload files share: the table's Row, timing (median of
// timed runs) and small helpers. Workloads live in bench.cpp and, grouped by issue, in
// bench_*.cpp files that add their rows through a function declared at the end.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <limits>
#include <string>
#include <vector>

namespace bench {

inline std::vector<float> randn(std::int64_t n, unsigned seed, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = static_cast<float>(scale) * normal(rng);
  return v;
}

inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// max |a - b| / max |b|.
inline double rel_err(const float* a, const float* b, std::int64_t n) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// ---- results ---------------------------------------------------------------------------------

/// A peak or ideal-bytes column a row did not measure (printed as '-', JSON null).
inline constexpr double unmeasured = std::numeric_limits<double>::quiet_NaN();

struct Row {
  std::string workload, variant, impl;
  double median_s = 0;
  double ratio = 0;       // xjax / reference median (reference rows: 1)
  double gflops = 0;      // useful flops of the variant's arithmetic / median
  double peak_mib = 0;    // bytes allocated beyond the inputs, peak
  double ideal_ratio = 0; // peak bytes / ideal bytes (residuals + gradients)
  std::string note;
  bool has_mem() const {
    return workload != "P4" && workload != "F1" && workload != "O1" && workload != "T1" && workload != "L1" && workload != "K1" && workload != "K2" && workload != "D1" && workload != "G1" &&
           workload[0] != 'C' && impl != "libtorch";
  }  // peak columns measured
};

inline std::string fmt(const char* f, double v) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// The median of `reps` timed runs of `run`, after one untimed warm-up.
template <class F> double median_seconds(F&& run, int reps) {
  run();
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    run();
    ts.push_back(now() - t0);
  }
  return median(ts);
}

/// C1-C3 (issue 30, bench_conv.cpp): convolutions and pooling, forward and backward, against
/// libtorch (where built with it) and the GEMM-bound limit, at 1 and 2 OpenBLAS threads.
void bench_conv(std::vector<Row>& rows, bool quick, int reps, int torch_threads_after);
/// K2 (issue 28): each elementwise primitive's kernel against a scalar loop of the C library's
/// function on n f32 elements (bench_elementwise.cpp).
void bench_elementwise(std::vector<Row>& rows, std::int64_t n, int reps);
/// G1: each kernel set's small-product loops against cblas_sgemm (bench_gemm.cpp).
void bench_small_products(std::vector<Row>& rows, int reps);

}  // namespace bench
