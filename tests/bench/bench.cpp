// xjax-bench: xjax against hand-written C++ references (cblas_sgemm + loops) on the workloads of
// issue 6. Each workload runs xjax and its reference in the same process, alternating, several
// repetitions; the table reports medians. `--quick` uses small sizes, `--json` prints JSON rows.
// With libtorch (meson option `torch`, XJAX_BENCH_TORCH), P1, P2 and E1 get libtorch rows
// (bench_torch.cpp). See docs/performance.md.
#include <cblas.h>
#include <lapacke.h>
#include <malloc.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "xjax/xjax.hpp"
#include "bench_rows.hpp"
#include "../../examples/transformer_model.hpp"

#if XJAX_BENCH_TORCH
#include "bench_torch.hpp"
#endif

namespace xj = xjax;

namespace {

using namespace bench;

// ---- byte accounting for the references -------------------------------------------------------

struct RefMem {
  std::int64_t live = 0;
  std::int64_t peak = 0;
};
RefMem g_mem;

/// A buffer of T whose bytes the reference accounting counts (live and peak).
template <class T> class CountedBuf {
 public:
  CountedBuf() = default;
  explicit CountedBuf(std::int64_t n) : n_(n), p_(new T[static_cast<std::size_t>(n)]) {
    g_mem.live += n * bytes_each;
    g_mem.peak = std::max(g_mem.peak, g_mem.live);
  }
  CountedBuf(CountedBuf&& o) noexcept : n_(o.n_), p_(std::move(o.p_)) { o.n_ = 0; }
  CountedBuf& operator=(CountedBuf&& o) noexcept {
    release();
    n_ = o.n_;
    p_ = std::move(o.p_);
    o.n_ = 0;
    return *this;
  }
  CountedBuf(const CountedBuf&) = delete;
  CountedBuf& operator=(const CountedBuf&) = delete;
  ~CountedBuf() { release(); }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::int64_t size() const { return n_; }

 private:
  static constexpr std::int64_t bytes_each = static_cast<std::int64_t>(sizeof(T));
  void release() {
    g_mem.live -= n_ * bytes_each;
    n_ = 0;
    p_.reset();
  }
  std::int64_t n_ = 0;
  std::unique_ptr<T[]> p_;
};
using Buf = CountedBuf<float>;
using MaskBuf = CountedBuf<std::uint8_t>;  // relu masks, one byte each as xjax's bool arrays

/// Row-major C = alpha op(A) op(B) + beta C with op(A) m x k, op(B) k x n.
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
          const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}


/// One timed pair: run xjax and reference alternately `reps` times after one warm-up each.
struct Measured {
  double xj_s, ref_s;
  std::int64_t xj_peak, ref_peak;
};
/// settle_s: an idle pause after each reference run, so that the reference's idle threads are
/// asleep when xjax's run starts. OpenBLAS's workers spin for 2^28 TSC cycles (its THREAD_TIMEOUT,
/// about 0.1 s) after each call: a libtorch step at two OpenBLAS threads left one spinning on the
/// second core through most of xjax's next step (T1 small at two threads, Zen 5 VM, 2026-12-05:
/// xjax 0.094 s a step measured right after libtorch's, 0.073 s with OPENBLAS_THREAD_TIMEOUT=4,
/// 0.076 s after a 150 ms pause; 30 ms was not enough: 0.090 s).
Measured measure(int reps, const std::function<void()>& run_xj, const std::function<void()>& run_ref, double settle_s = 0);
Measured measure(int reps, const std::function<void()>& run_xj, const std::function<void()>& run_ref, double settle_s) {
  std::vector<double> tx, tr;
  std::int64_t px = 0, pr = 0;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (trace, transform, first allocations)
    std::int64_t live_before = xj::memory_stats().live_bytes;
    xj::reset_peak_memory();
    double t0 = now();
    run_xj();
    double t1 = now();
    if (r >= 0) tx.push_back(t1 - t0);
    px = std::max(px, xj::memory_stats().peak_bytes - live_before);
    g_mem.peak = g_mem.live;
    std::int64_t ref_before = g_mem.live;
    t0 = now();
    run_ref();
    t1 = now();
    if (r >= 0) tr.push_back(t1 - t0);
    pr = std::max(pr, g_mem.peak - ref_before);
    if (settle_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(settle_s));
  }
  return {median(tx), median(tr), px, pr};
}

/// ideal_bytes 0: no ideal defined (the column prints '-'); ref_peak_measured false where the
/// reference is an xjax program too (its allocations are not the reference counter's).
void add_rows(std::vector<Row>& rows, const std::string& workload, const std::string& variant, const Measured& m,
              double flops, double ideal_bytes, const std::string& note, bool ref_peak_measured = true) {
  const double mib = 1024.0 * 1024.0;
  const auto over_ideal = [ideal_bytes](double bytes) { return ideal_bytes > 0 ? bytes / ideal_bytes : unmeasured; };
  rows.push_back({workload, variant, "xjax", m.xj_s, m.xj_s / m.ref_s, flops / m.xj_s * 1e-9, double(m.xj_peak) / mib,
                  over_ideal(double(m.xj_peak)), note});
  rows.push_back({workload, variant, "reference", m.ref_s, 1.0, flops / m.ref_s * 1e-9,
                  ref_peak_measured ? double(m.ref_peak) / mib : unmeasured, ref_peak_measured ? over_ideal(double(m.ref_peak)) : unmeasured, ""});
}

#if XJAX_BENCH_TORCH
int g_torch_threads = 0;  // libtorch's intra-op threads, set in main (torch_threads())

/// libtorch's intra-op threads: 1, as xjax (one thread outside OpenBLAS); libtorch's GEMMs still
/// use OpenBLAS's threads. XJAX_BENCH_TORCH_THREADS overrides: with 2 OpenMP threads next to 2
/// OpenBLAS threads on 2 cores, libgomp's spinning workers slow libtorch down about 3x.
int torch_threads() {
  const char* env = std::getenv("XJAX_BENCH_TORCH_THREADS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : 1;
}

/// "xjax 3.1x faster" (or "libtorch 1.2x faster"): libtorch's median over xjax's, each as a ratio
/// to the lean reference measured alternately with it. The two are measured one after the other,
/// and a shared machine's speed drifts between them (medians moved by 30% on a noisy VM); the
/// reference, run in both, takes the drift out.
std::string speedup(const Measured& xj, const Measured& torch) {
  const double x = xj.xj_s / xj.ref_s, t = torch.xj_s / torch.ref_s;
  return x <= t ? "xjax " + fmt("%.2f", t / x) + "x faster" : "libtorch " + fmt("%.2f", x / t) + "x faster";
}
#endif

// ---- P1 / P2: y = relu(y @ W[i]), loss = sum(final^2), gradient w.r.t. W ---------------------

std::pair<xj::Array, xj::None> relu_layer(const xj::Array& y, const xj::Array& w) {
  return {xj::relu(xj::matmul(y, w)), xj::None{}};
}

/// The buffers of the relu chain's reference, allocated once before timing: the reference is
/// lean (no allocation per call), as a hand-written training loop keeps its buffers.
struct ReluChainWork {
  Buf ys, y, z, dW, g;  // layer inputs, output, scratch, gradient, cotangent
  MaskBuf masks;        // relu masks (1 or 0) without checkpoint
  ReluChainWork(std::int64_t L, std::int64_t d, std::int64_t N, bool checkpoint)
      : ys(L * N * d), y(N * d), z(N * d), dW(L * d * d), g(N * d), masks(checkpoint ? MaskBuf() : MaskBuf(L * N * d)) {}
};

/// Reference gradient of the relu chain into w.dW. checkpoint: store layer inputs only and
/// recompute each layer's matmul + relu mask in the backward pass; otherwise store the masks too.
void ref_relu_chain(ReluChainWork& w, const std::vector<float>& W, const std::vector<float>& y0, std::int64_t L,
                    std::int64_t d, std::int64_t N, bool checkpoint) {
  const std::int64_t nd = N * d, dd = d * d;
  Buf &ys = w.ys, &y = w.y, &dW = w.dW;
  float* z = w.z.data();
  float* g = w.g.data();
  std::memcpy(ys.data(), y0.data(), static_cast<std::size_t>(nd) * 4);
  for (std::int64_t i = 0; i < L; ++i) {
    const float* yi = ys.data() + i * nd;
    gemm(false, false, N, d, d, yi, d, W.data() + i * dd, d, 0.0f, z, d);
    float* out = i + 1 < L ? ys.data() + (i + 1) * nd : y.data();
    std::uint8_t* mk = checkpoint ? nullptr : w.masks.data() + i * nd;
    for (std::int64_t k = 0; k < nd; ++k) {
      bool pos = z[k] > 0;
      out[k] = pos ? z[k] : 0.0f;
      if (mk) mk[k] = pos ? 1 : 0;
    }
  }
  for (std::int64_t k = 0; k < nd; ++k) g[k] = 2.0f * y.data()[k];
  for (std::int64_t i = L - 1; i >= 0; --i) {
    const float* yi = ys.data() + i * nd;
    const float* wi = W.data() + i * dd;
    if (checkpoint) {
      gemm(false, false, N, d, d, yi, d, wi, d, 0.0f, z, d);
      for (std::int64_t k = 0; k < nd; ++k)
        if (!(z[k] > 0)) g[k] = 0.0f;
    } else {
      const std::uint8_t* mk = w.masks.data() + i * nd;
      for (std::int64_t k = 0; k < nd; ++k)
        if (!mk[k]) g[k] = 0.0f;
    }
    gemm(true, false, d, d, N, yi, d, g, d, 0.0f, dW.data() + i * dd, d);
    if (i > 0) {
      gemm(false, true, N, d, d, g, d, wi, d, 0.0f, z, d);
      std::swap(g, z);
    }
  }
}

/// Allocates a reference's buffers once and reports their bytes (the reference's memory: it
/// allocates nothing while it runs).
template <class Work, class... A> std::pair<std::unique_ptr<Work>, std::int64_t> preallocate(A... args) {
  std::int64_t before = g_mem.live;
  auto w = std::make_unique<Work>(args...);
  return {std::move(w), g_mem.live - before};
}

void bench_relu_chain(std::vector<Row>& rows, const std::string& name, std::int64_t L, std::int64_t d, std::int64_t N,
                      int reps) {
  auto Wv = randn(L * d * d, 11, std::sqrt(2.0 / double(d)));
  auto yv = randn(N * d, 12, 1.0);
  xj::Array W = xj::array<float>(Wv, {L, d, d});
  xj::Array y0 = xj::array<float>(yv, {N, d});
  const double nd = double(N) * double(d), gemm_flops = 2.0 * nd * double(d);
  for (bool ckpt : {true, false}) {
    auto loss = [ckpt](const xj::Array& w, const xj::Array& y) {
      xj::Array out = ckpt ? xj::scan(xj::checkpoint(relu_layer), y, w).first : xj::scan(relu_layer, y, w).first;
      return xj::sum(out * out);
    };
    auto g = xj::jit(xj::grad(loss, xj::argnums<0>));  // traced once; grad alone traces per call
    xj::Array gx;
    auto [work, work_bytes] = preallocate<ReluChainWork>(L, d, N, ckpt);
    auto run_ref = [&] { ref_relu_chain(*work, Wv, yv, L, d, N, ckpt); };
    Measured m = measure(reps, [&] { gx = xj::Array(); gx = g(W, y0); }, run_ref);
    m.ref_peak = work_bytes;
    double err = rel_err(gx.data<float>(), work->dW.data(), work->dW.size());
    // flops: forward 1 GEMM, backward 2 GEMMs (+1 recompute with checkpoint) per layer.
    double flops = double(L) * gemm_flops * (ckpt ? 4.0 : 3.0);
    // ideal bytes: stored layer inputs (+ masks as bytes without checkpoint) + the gradient + one
    // layer's backward working set (the cotangent and the next one, N x d each).
    double ideal = double(L) * nd * 4.0 + (ckpt ? 0.0 : double(L) * nd) + double(L) * double(d) * double(d) * 4.0 +
                   2.0 * nd * 4.0;
    std::string sizes = "L=" + std::to_string(L) + " d=" + std::to_string(d) + " N=" + std::to_string(N);
    add_rows(rows, name, ckpt ? "scan(checkpoint)" : "scan", m, flops, ideal, sizes + " err=" + fmt("%.1e", err));
    // The cost of tracing on every call: grad without jit (trace + transform + plan each call).
    auto g_traced = xj::grad(loss, xj::argnums<0>);
    Measured t = measure(reps, [&] { gx = xj::Array(); gx = g_traced(W, y0); }, [&] { gx = xj::Array(); gx = g(W, y0); });
    rows.push_back({name, std::string(ckpt ? "scan(checkpoint)" : "scan") + ", grad without jit", "xjax", t.xj_s,
                    t.xj_s / m.ref_s, flops / t.xj_s * 1e-9, unmeasured, unmeasured, fmt("%.2f", t.xj_s / t.ref_s) + "x jit(grad)"});
    if (!ckpt && d * N <= 4096) {
      // The same stack written as a C++ loop of layers (no scan): a jaxpr of L layers whose
      // top-level plan runs raw (small values), against the same reference.
      std::vector<xj::Array> layers;
      for (std::int64_t i = 0; i < L; ++i)
        layers.push_back(xj::array<float>(std::vector<float>(Wv.begin() + i * d * d, Wv.begin() + (i + 1) * d * d), {d, d}));
      auto unrolled = xj::jit(xj::grad([](const std::vector<xj::Array>& ws, const xj::Array& y) {
        xj::Array out = y;
        for (const auto& w : ws) out = xj::relu(xj::matmul(out, w));
        return xj::sum(out * out);
      }));
      std::vector<xj::Array> gu;
      Measured mu = measure(reps, [&] { gu.clear(); gu = unrolled(layers, y0); }, run_ref);
      mu.ref_peak = work_bytes;
      double worst = 0;  // the gradient of layer i against the reference's
      for (std::int64_t i = 0; i < L; ++i)
        worst = std::max(worst, rel_err(gu[static_cast<std::size_t>(i)].data<float>(), work->dW.data() + i * d * d, d * d));
      add_rows(rows, name, "unrolled (no scan)", mu, flops, ideal, sizes + " err=" + fmt("%.1e", worst));
    }
#if XJAX_BENCH_TORCH
    // libtorch doing the same arithmetic (plain autograd, or a hand-written per-layer recompute
    // for checkpoint), timed alternately with the same lean reference; its gradient against xjax's.
    bench_torch::ReluChain torch_chain(Wv, yv, L, d, N, ckpt);
    Measured tt = measure(reps, [&] { torch_chain.run(); }, run_ref);
    std::vector<float> tg = torch_chain.grad();
    rows.push_back({name, ckpt ? "per-layer recompute" : "plain autograd", "libtorch", tt.xj_s, tt.xj_s / tt.ref_s,
                    flops / tt.xj_s * 1e-9, 0, 0,
                    sizes + " err=" + fmt("%.1e", rel_err(tg.data(), gx.data<float>(), L * d * d)) + " vs xjax; " +
                        speedup(m, tt) + "; intra-op threads " + std::to_string(g_torch_threads)});
#endif
  }
}

// ---- P3: residual MLP y += relu(y @ W1) @ W2 ---------------------------------------------------

using Weights = std::pair<xj::Array, xj::Array>;

std::pair<xj::Array, xj::None> mlp_layer(const xj::Array& y, const Weights& w) {
  xj::Array h = xj::checkpoint_name(xj::relu(xj::matmul(y, w.first)), "hidden");
  return {y + xj::matmul(h, w.second), xj::None{}};
}

/// What the reference keeps for the backward pass besides each layer's input: what xjax keeps
/// under the variant (relu's derivative reads the sign of its output, as PyTorch's does).
enum class Store {
  hidden,   // no checkpoint, save_only_these_names(hidden): h = relu(z); the mask is h > 0
  nothing,  // nothing_saveable: recompute z = y W1 (a GEMM), then h and the mask
  preact,   // dots_saveable: z; h and the mask are recomputed from it
};

/// The buffers of the residual MLP's reference, allocated once before timing (lean: no
/// allocation per call); what it stores depends on the variant, as xjax's residuals do.
struct MlpWork {
  Buf ys, acts, y, zt, dW1, dW2, g, dz, ht, zr;
  MlpWork(std::int64_t L, std::int64_t d, std::int64_t N, Store store) {
    const std::int64_t H = 4 * d, nd = N * d, nh = N * H, dh = d * H;
    const bool keep_h = store == Store::hidden;
    ys = Buf(L * nd);                                            // layer inputs
    if (store != Store::nothing) acts = Buf(L * nh);              // h, or z under preact
    y = Buf(nd);
    zt = Buf(nh);
    dW1 = Buf(L * dh);
    dW2 = Buf(L * dh);
    g = Buf(nd);
    dz = Buf(nh);
    if (!keep_h) ht = Buf(nh);                   // recomputed h
    if (store == Store::nothing) zr = Buf(nh);  // recomputed z
  }
};

/// Reference gradients of the residual MLP into w.dW1, w.dW2.
void ref_mlp(MlpWork& w, const std::vector<float>& W1, const std::vector<float>& W2, const std::vector<float>& y0,
             std::int64_t L, std::int64_t d, std::int64_t N, Store store) {
  const std::int64_t H = 4 * d, nd = N * d, nh = N * H, dh = d * H;
  const bool keep_h = store == Store::hidden;
  std::memcpy(w.ys.data(), y0.data(), static_cast<std::size_t>(nd) * 4);
  for (std::int64_t i = 0; i < L; ++i) {
    const float* yi = w.ys.data() + i * nd;
    float* out = i + 1 < L ? w.ys.data() + (i + 1) * nd : w.y.data();
    float* z = store == Store::preact ? w.acts.data() + i * nh : w.zt.data();
    float* h = keep_h ? w.acts.data() + i * nh : w.zt.data();
    gemm(false, false, N, H, d, yi, d, W1.data() + i * dh, H, 0.0f, z, H);
    for (std::int64_t k = 0; k < nh; ++k) h[k] = z[k] > 0 ? z[k] : 0.0f;
    std::memcpy(out, yi, static_cast<std::size_t>(nd) * 4);
    gemm(false, false, N, d, H, h, H, W2.data() + i * dh, d, 1.0f, out, d);
  }
  float* g = w.g.data();
  for (std::int64_t k = 0; k < nd; ++k) g[k] = 2.0f * w.y.data()[k];
  for (std::int64_t i = L - 1; i >= 0; --i) {
    const float* yi = w.ys.data() + i * nd;
    const float* w1 = W1.data() + i * dh;
    const float* w2 = W2.data() + i * dh;
    const float* z = store == Store::preact ? w.acts.data() + i * nh : w.zr.data();
    if (store == Store::nothing) gemm(false, false, N, H, d, yi, d, w1, H, 0.0f, w.zr.data(), H);  // recompute the pre-activation
    const float* h = keep_h ? w.acts.data() + i * nh : w.ht.data();
    if (!keep_h)
      for (std::int64_t k = 0; k < nh; ++k) w.ht.data()[k] = z[k] > 0 ? z[k] : 0.0f;
    gemm(true, false, H, d, N, h, H, g, d, 0.0f, w.dW2.data() + i * dh, d);
    gemm(false, true, N, H, d, g, d, w2, d, 0.0f, w.dz.data(), H);
    const float* sign = keep_h ? h : z;  // h > 0 exactly where z > 0
    for (std::int64_t k = 0; k < nh; ++k)
      if (!(sign[k] > 0)) w.dz.data()[k] = 0.0f;
    gemm(true, false, d, H, N, yi, d, w.dz.data(), H, 0.0f, w.dW1.data() + i * dh, H);
    if (i > 0) gemm(false, true, N, d, H, w.dz.data(), H, w1, H, 1.0f, g, d);
  }
}

void bench_mlp(std::vector<Row>& rows, std::int64_t L, std::int64_t d, std::int64_t N, int reps) {
  namespace cp = xj::checkpoint_policies;
  const std::int64_t H = 4 * d;
  auto W1v = randn(L * d * H, 21, 1.0 / std::sqrt(double(d)));
  auto W2v = randn(L * H * d, 22, 0.1 / std::sqrt(double(H)));
  auto yv = randn(N * d, 23, 1.0);
  xj::Array W1 = xj::array<float>(W1v, {L, d, H});
  xj::Array W2 = xj::array<float>(W2v, {L, H, d});
  xj::Array y0 = xj::array<float>(yv, {N, d});
  struct Variant {
    std::string name;
    std::optional<xj::Policy> policy;  // nullopt with checkpoint=false: no checkpoint at all
    bool checkpoint;
    Store store;
  };
  std::vector<Variant> variants = {
      {"no checkpoint", std::nullopt, false, Store::hidden},
      {"nothing_saveable", cp::nothing_saveable, true, Store::nothing},
      {"dots_saveable", cp::dots_saveable, true, Store::preact},
      {"save_only_these_names(hidden)", cp::save_only_these_names({"hidden"}), true, Store::hidden},
  };
  const double gemm_flops = 2.0 * double(N) * double(d) * double(H);
  for (const auto& v : variants) {
    xj::CheckpointOptions opts{.policy = v.policy};
    bool ckpt = v.checkpoint;
    auto loss = [opts, ckpt](const xj::Array& a, const xj::Array& b, const xj::Array& y) {
      xj::Array out = ckpt ? xj::scan(xj::checkpoint(mlp_layer, opts), y, Weights{a, b}).first
                           : xj::scan(mlp_layer, y, Weights{a, b}).first;
      return xj::sum(out * out);
    };
    auto g = xj::grad(loss, xj::argnums<0, 1>);
    std::tuple<xj::Array, xj::Array> gx;
    auto [work, work_bytes] = preallocate<MlpWork>(L, d, N, v.store);
    MlpWork& gr = *work;
    Measured m = measure(reps, [&] { gx = {}; gx = g(W1, W2, y0); }, [&] { ref_mlp(gr, W1v, W2v, yv, L, d, N, v.store); });
    m.ref_peak = work_bytes;
    double err = std::max(rel_err(std::get<0>(gx).data<float>(), gr.dW1.data(), gr.dW1.size()),
                          rel_err(std::get<1>(gx).data<float>(), gr.dW2.data(), gr.dW2.size()));
    std::string arbiter;
    if (&v == &variants.front()) {  // once: both float32 gradients against a float64 computation
      auto g64 = g(xj::astype(W1, xj::f64), xj::astype(W2, xj::f64), xj::astype(y0, xj::f64));
      auto as_f32 = [](const xj::Array& a) { return xj::astype(a, xj::f32); };
      xj::Array e1 = as_f32(std::get<0>(g64)), e2 = as_f32(std::get<1>(g64));
      double x64 = std::max(rel_err(std::get<0>(gx).data<float>(), e1.data<float>(), e1.size()),
                            rel_err(std::get<1>(gx).data<float>(), e2.data<float>(), e2.size()));
      double r64 = std::max(rel_err(gr.dW1.data(), e1.data<float>(), e1.size()),
                            rel_err(gr.dW2.data(), e2.data<float>(), e2.size()));
      arbiter = " vs f64: xjax " + fmt("%.1e", x64) + " reference " + fmt("%.1e", r64);
    }
    // flops per layer: forward 2 GEMMs, backward 4, + 1 recompute (y @ W1) when z is not kept.
    const bool recompute = v.store == Store::nothing;
    double flops = double(L) * gemm_flops * (recompute ? 7.0 : 6.0);
    // ideal bytes: the residuals the variant keeps (layer inputs; h or z, N x 4d floats), the
    // gradients, and one layer's backward working set: the cotangent of h (N x 4d), the
    // recomputed h or z unless h is stored (N x 4d), and two N x d (the cotangent carry and the
    // next one).
    const double Ld = double(L), nd = double(N) * double(d), nh = double(N) * double(H);
    double residuals = Ld * nd * 4.0 + (v.store == Store::nothing ? 0.0 : Ld * nh * 4.0);
    double working = ((v.store == Store::hidden ? 1.0 : 2.0) * nh + 2.0 * nd) * 4.0;
    double ideal = residuals + 2.0 * Ld * double(d) * double(H) * 4.0 + working;
    std::string sizes = "L=" + std::to_string(L) + " d=" + std::to_string(d) + " N=" + std::to_string(N);
    add_rows(rows, "P3", v.name, m, flops, ideal, sizes + " err=" + fmt("%.1e", err) + arbiter);
  }
}

// ---- B1, B2, D1: the narrow dtypes (issue 27) -------------------------------------------------

// B1: P3 without checkpointing with bf16 weights and activations (every product and reduction
// accumulated in f32, each result rounded once to bf16) against the same program in f32.
// B2: P3 with each layer's input named too, under save_only_these_names(hidden, layer_input) with
// the residuals saved as bf16 (Policy::as) against the same policy in f32: time, the saved
// residuals' bytes (saved_residuals), and the gradients' relative difference.
void bench_mixed_precision(std::vector<Row>& rows, std::int64_t L, std::int64_t d, std::int64_t N, int reps) {
  namespace cp = xj::checkpoint_policies;
  const std::int64_t H = 4 * d;
  const xj::Array W1 = xj::array<float>(randn(L * d * H, 21, 1.0 / std::sqrt(double(d))), {L, d, H});
  const xj::Array W2 = xj::array<float>(randn(L * H * d, 22, 0.1 / std::sqrt(double(H))), {L, H, d});
  const xj::Array y0 = xj::array<float>(randn(N * d, 23, 1.0), {N, d});
  const std::string sizes = "L=" + std::to_string(L) + " d=" + std::to_string(d) + " N=" + std::to_string(N);
  auto loss_with = [](std::optional<xj::Policy> policy) {
    return [policy](const xj::Array& a, const xj::Array& b, const xj::Array& y) {
      xj::Array out = policy ? xj::scan(xj::checkpoint(mlp_layer, {.policy = policy}), y, Weights{a, b}).first
                             : xj::scan(mlp_layer, y, Weights{a, b}).first;
      return xj::sum(out * out);
    };
  };
  auto grads_err = [](const std::tuple<xj::Array, xj::Array>& got, const std::tuple<xj::Array, xj::Array>& want) {
    auto as_f32 = [](const xj::Array& a) { return xj::astype(a, xj::f32); };
    const xj::Array g1 = as_f32(std::get<0>(got)), g2 = as_f32(std::get<1>(got));
    const xj::Array w1 = as_f32(std::get<0>(want)), w2 = as_f32(std::get<1>(want));
    return std::max(rel_err(g1.data<float>(), w1.data<float>(), g1.size()), rel_err(g2.data<float>(), w2.data<float>(), g2.size()));
  };
  const double flops = double(L) * 2.0 * double(N) * double(d) * double(H) * 6.0;
  {  // B1
    auto g = xj::grad(loss_with(std::nullopt), xj::argnums<0, 1>);
    const xj::Array b1 = xj::astype(W1, xj::bf16), b2 = xj::astype(W2, xj::bf16), by = xj::astype(y0, xj::bf16);
    // Each run's gradients die with it, so that a peak counts them whole in both dtypes (holding
    // the last run's would discount its bytes: 16 MiB in bf16, 32 in f32).
    Measured m = measure(reps, [&] { (void)g(b1, b2, by); }, [&] { (void)g(W1, W2, y0); });
    m.ref_peak = 0;
    const std::tuple<xj::Array, xj::Array> g16 = g(b1, b2, by), g32 = g(W1, W2, y0);
    const double err = grads_err(g16, g32);
    rows.push_back({"B1", "P3 no checkpoint, bf16 vs f32", "xjax bf16", m.xj_s, m.xj_s / m.ref_s, flops / m.xj_s * 1e-9,
                    double(m.xj_peak) / (1024.0 * 1024.0), 0,
                    sizes + " grad rel. diff vs f32 " + fmt("%.1e", err)});
    // the f32 run's own peak, measured alone
    Measured f = measure(reps, [&] { (void)g(W1, W2, y0); }, [] {});
    rows.push_back({"B1", "P3 no checkpoint, bf16 vs f32", "xjax f32", m.ref_s, 1.0, flops / m.ref_s * 1e-9,
                    double(f.xj_peak) / (1024.0 * 1024.0), 0, "peak bf16 / f32 " + fmt("%.2f", double(m.xj_peak) / double(f.xj_peak))});
  }
  {  // B2
    // The layer names its input as well as h, so that the policy can save every activation the
    // backward pass reads (each layer's input and h); the weights are arguments, which no policy
    // copies.
    auto loss_named = [](const xj::Policy& policy) {
      return [policy](const xj::Array& a, const xj::Array& b, const xj::Array& y) {
        auto layer = [](const xj::Array& in, const Weights& w) { return mlp_layer(xj::checkpoint_name(in, "layer_input"), w); };
        const xj::Array out = xj::scan(xj::checkpoint(layer, {.policy = policy}), y, Weights{a, b}).first;
        return xj::sum(out * out);
      };
    };
    const xj::Policy f32_policy = cp::save_only_these_names({"hidden", "layer_input"});
    auto g32 = xj::grad(loss_named(f32_policy), xj::argnums<0, 1>);
    auto g16 = xj::grad(loss_named(f32_policy.as(xj::bf16)), xj::argnums<0, 1>);
    // the saved residuals' bytes: those the program keeps beyond its arguments (what the policy
    // costs in memory), and all of them (the arguments W1, W2 counted too, as saved_residuals lists them;
    // an argument's description is "from the argument N", xj::Residual's documented wording)
    auto residual_bytes = [&](const xj::Policy& p, bool with_arguments) {
      double bytes = 0;
      for (const auto& r : xj::saved_residuals(loss_named(p), W1, W2, y0))
        if (with_arguments || r.description.find("argument") == std::string::npos) bytes += double(r.aval.nbytes());
      return bytes;
    };
    const double r32 = residual_bytes(f32_policy, false), r16 = residual_bytes(f32_policy.as(xj::bf16), false);
    const double a32 = residual_bytes(f32_policy, true), a16 = residual_bytes(f32_policy.as(xj::bf16), true);
    std::tuple<xj::Array, xj::Array> a, b;
    Measured m = measure(reps, [&] { a = {}; a = g16(W1, W2, y0); }, [&] { b = {}; b = g32(W1, W2, y0); });
    const double err = grads_err(a, b);
    rows.push_back({"B2", "save_only_these_names(hidden, layer_input).as(bf16) vs f32", "xjax", m.xj_s, m.xj_s / m.ref_s,
                    flops / m.xj_s * 1e-9, double(m.xj_peak) / (1024.0 * 1024.0), unmeasured,
                    sizes + " residual bytes " + fmt("%.2f", r16 / r32) + "x (" + fmt("%.0f", r16 / 1048576.0) + " of " +
                        fmt("%.0f", r32 / 1048576.0) + " MiB; with the arguments " + fmt("%.2f", a16 / a32) +
                        "x); grad rel. diff " + fmt("%.1e", err)});
    rows.push_back({"B2", "save_only_these_names(hidden, layer_input).as(bf16) vs f32", "reference", m.ref_s, 1.0,
                    flops / m.ref_s * 1e-9, unmeasured, unmeasured, "the f32 policy (an xjax program: its peak is in the xjax row's note)"});
  }
}

// The reference loop of D1: scalar by request (the compiler would vectorize it otherwise).
#if defined(__GNUC__) && !defined(__clang__)
#define XJAX_BENCH_SCALAR __attribute__((optimize("no-tree-vectorize")))
#else
#define XJAX_BENCH_SCALAR
#endif
XJAX_BENCH_SCALAR void scalar_to_bf16(const float* x, std::uint16_t* o, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    o[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? static_cast<std::uint16_t>((u >> 16) | 0x40u)
                                           : static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}
XJAX_BENCH_SCALAR void scalar_from_bf16(const std::uint16_t* x, float* o, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(o + i, &u, 4);
  }
}

// D1: astype f32 -> bf16 and back on n elements (one eager primitive, its output allocated)
// against a scalar loop into preallocated memory. Issue 27's target: at least 4x the loop.
void bench_conversions(std::vector<Row>& rows, std::int64_t n, int reps) {
  const std::vector<float> v = randn(n, 31, 3.0);
  const xj::Array x = xj::array<float>(v, {n});
  std::vector<std::uint16_t> h(static_cast<std::size_t>(n));
  std::vector<float> back(static_cast<std::size_t>(n));
  xj::Array hx, bx;
  const double t_to = median_seconds([&] { hx = xj::astype(x, xj::bf16); }, reps);
  const double r_to = median_seconds([&] { scalar_to_bf16(v.data(), h.data(), h.size()); }, reps);
  const double t_from = median_seconds([&] { bx = xj::astype(hx, xj::f32); }, reps);
  const double r_from = median_seconds([&] { scalar_from_bf16(h.data(), back.data(), back.size()); }, reps);
  const bool same = std::memcmp(hx.raw_data(), h.data(), h.size() * 2) == 0 && std::memcmp(bx.raw_data(), back.data(), back.size() * 4) == 0;
  const std::string what = fmt("%.0f elements", double(n)) + (same ? "; bits equal the loop's" : "; BITS DIFFER from the loop's");
  rows.push_back({"D1", "f32 -> bf16", "xjax", t_to, t_to / r_to, 0, 0, 0, what});
  rows.push_back({"D1", "f32 -> bf16", "scalar loop", r_to, 1.0, 0, 0, 0, ""});
  rows.push_back({"D1", "bf16 -> f32", "xjax", t_from, t_from / r_from, 0, 0, 0, what});
  rows.push_back({"D1", "bf16 -> f32", "scalar loop", r_from, 1.0, 0, 0, 0, ""});
}

// ---- P4: trace + transform cost ---------------------------------------------------------------

std::int64_t count_eqns(const xj::Jaxpr& j) {
  std::int64_t n = static_cast<std::int64_t>(j.eqns.size());
  for (const auto& e : j.eqns)
    for (const auto& sub : xj::sub_jaxprs(e.params))
      if (sub) n += count_eqns(*sub->jaxpr);
  return n;
}

void bench_trace(std::vector<Row>& rows, std::int64_t d, std::int64_t N, int reps) {
  const std::int64_t L = 64, H = 4 * d;
  xj::Array W1 = xj::zeros({L, d, H});
  xj::Array W2 = xj::zeros({L, H, d});
  xj::Array y0 = xj::zeros({N, d});
  for (bool ckpt : {false, true}) {
    auto loss = [ckpt](const xj::Array& a, const xj::Array& b, const xj::Array& y) {
      xj::Array out = ckpt ? xj::scan(xj::checkpoint(mlp_layer), y, Weights{a, b}).first
                           : xj::scan(mlp_layer, y, Weights{a, b}).first;
      return xj::sum(out * out);
    };
    std::vector<double> ts, plan_ts;
    std::int64_t top = 0, total = 0;
    for (int r = -1; r < reps; ++r) {
      double t0 = now();
      xj::ClosedJaxpr j = xj::make_jaxpr(xj::grad(loss, xj::argnums<0, 1>))(W1, W2, y0);
      double t1 = now();
      xj::prepare(j);  // the execution plans of the jaxpr and its scan / checkpoint bodies
      double t2 = now();
      if (r >= 0) {
        ts.push_back(t2 - t0);
        plan_ts.push_back(t2 - t1);
      }
      top = static_cast<std::int64_t>(j->eqns.size());
      total = count_eqns(*j);
    }
    Row row{"P4", ckpt ? "trace+transform+plan grad scan(checkpoint)" : "trace+transform+plan grad scan", "xjax",
            median(ts), 0, 0, 0, 0,
            "L=64 eqns: top " + std::to_string(top) + ", total " + std::to_string(total) + "; plan " +
                fmt("%.2g", median(plan_ts) * 1e3) + " ms"};
    rows.push_back(row);
  }
}

// ---- V1 / V2: vmap ------------------------------------------------------------------------------

struct Mlp3 {
  BOOST_HANA_DEFINE_STRUCT(Mlp3, (xj::Array, w1), (xj::Array, w2), (xj::Array, w3));
};

// One example's loss: x [d] through two tanh layers to a scalar.
xj::Array mlp3_loss(const Mlp3& p, const xj::Array& x, const xj::Array& y) {
  xj::Array h = xj::tanh(xj::matmul(xj::tanh(xj::matmul(x, p.w1)), p.w2));
  return xj::sum(xj::square(xj::matmul(h, p.w3) - y));
}

xj::Array from(const std::vector<float>& v, const xj::Shape& s) { return xj::array<float>(v, s); }

/// V1: per-example gradients of a 3-layer MLP. jit(vmap(grad)) against (a) a loop of jit(grad)
/// over the examples and (b) one jit(grad) of the summed loss (no per-example results: the
/// floor for any batched computation).
void bench_per_example(std::vector<Row>& rows, std::int64_t d, std::int64_t B, int reps) {
  const double sc = 1.0 / std::sqrt(static_cast<double>(d));
  Mlp3 p{from(randn(d * d, 1, sc), {d, d}), from(randn(d * d, 2, sc), {d, d}), from(randn(d, 3, sc), {d, 1})};
  xj::Array x = from(randn(B * d, 4, 1.0), {B, d}), y = from(randn(B, 5, 1.0), {B, 1});
  auto batched = xj::jit(xj::vmap(xj::grad(mlp3_loss), std::tuple{xj::None{}, 0, 0}));
  auto one = xj::jit(xj::grad(mlp3_loss));
  std::vector<xj::Array> xs, ys;
  for (std::int64_t i = 0; i < B; ++i) {
    xs.push_back(xj::squeeze(xj::slice_in_dim(x, i, i + 1), {0}));
    ys.push_back(xj::squeeze(xj::slice_in_dim(y, i, i + 1), {0}));
  }
  auto summed = [](const Mlp3& q, const xj::Array& xb, const xj::Array& yb) {
    xj::Array h = xj::tanh(xj::matmul(xj::tanh(xj::matmul(xb, q.w1)), q.w2));
    return xj::sum(xj::square(xj::matmul(h, q.w3) - yb));
  };
  auto whole = xj::jit(xj::grad(summed));
  Mlp3 g_vmap, g_whole;
  std::vector<Mlp3> g_loop(static_cast<std::size_t>(B));
  double flops = 3.0 * 2.0 * static_cast<double>(B) * static_cast<double>(2 * d * d + d);
  std::string sizes = "d=" + std::to_string(d) + " B=" + std::to_string(B);
  Measured m = measure(reps, [&] { g_vmap = batched(p, x, y); },
                       [&] {
                         for (std::int64_t i = 0; i < B; ++i) g_loop[static_cast<std::size_t>(i)] = one(p, xs[i], ys[i]);
                       });
  // Agreement: member 0 and the last member against the loop's.
  double err = 0;
  for (std::int64_t i : {std::int64_t{0}, B - 1}) {
    xj::Array row = xj::squeeze(xj::slice_in_dim(g_vmap.w1, i, i + 1), {0});
    auto a = row.to_vector<float>(), b = g_loop[static_cast<std::size_t>(i)].w1.to_vector<float>();
    err = std::max(err, rel_err(a.data(), b.data(), static_cast<std::int64_t>(a.size())));
  }
  add_rows(rows, "V1", "vmap(grad) vs loop of grad", m, flops, 0, sizes + " err=" + fmt("%.1e", err), false);
  Measured m2 = measure(reps, [&] { g_vmap = batched(p, x, y); }, [&] { g_whole = whole(p, x, y); });
  add_rows(rows, "V1", "vmap(grad) vs grad of the summed loss", m2, flops, 0, sizes, false);
  // The floor of any per-example computation: writing its result once (a memset of a buffer of
  // the per-example gradients' size, allocated before timing).
  Buf out(B * (2 * d * d + d));
  Measured m3 = measure(reps, [&] { g_vmap = batched(p, x, y); },
                        [&] { std::memset(out.data(), 0, static_cast<std::size_t>(out.size()) * sizeof(float)); });
  add_rows(rows, "V1", "vmap(grad) vs writing its result once", m3, flops, 0,
           sizes + fmt(" (%.0f MiB)", double(out.size()) * 4.0 / 1048576.0));
}

/// V2: jacrev of f : R^d -> R^d, f(x) = W2 tanh(W1 x). xjax's jit(jacrev) (one batched vjp)
/// against (a) the loop over basis vectors jacrev used before vmap and (b) a hand-written batched
/// Jacobian, J = W2 diag(1 - tanh^2(W1 x)) W1 (one GEMM).
void bench_jacrev(std::vector<Row>& rows, std::int64_t d, int reps) {
  const double sc = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> w1 = randn(d * d, 11, sc), w2 = randn(d * d, 12, sc), xv = randn(d, 13, 1.0);
  xj::Array W1 = from(w1, {d, d}), W2 = from(w2, {d, d}), x = from(xv, {d});
  auto f = [W1, W2](const xj::Array& v) { return xj::matmul(W2, xj::tanh(xj::matmul(W1, v))); };
  auto jac = xj::jit([f](const xj::Array& v) { return xj::jacrev(f)(v); });
  // The old way: one vjp per output basis vector (jitted pullback of a cotangent).
  auto pullback = xj::jit([f](const xj::Array& v, const xj::Array& ct) { return std::get<0>(xj::vjp(f, v).second(ct)); });
  std::vector<xj::Array> basis;
  for (std::int64_t i = 0; i < d; ++i) {
    std::vector<float> e(static_cast<std::size_t>(d), 0.0f);
    e[static_cast<std::size_t>(i)] = 1.0f;
    basis.push_back(from(e, {d}));
  }
  xj::Array J;
  std::vector<xj::Array> rows_loop(static_cast<std::size_t>(d));
  Buf Jref(d * d), z(d), scaled(d * d);
  auto hand = [&] {
    gemm(false, false, d, 1, d, w1.data(), d, xv.data(), 1, 0.0f, z.data(), 1);
    for (std::int64_t i = 0; i < d; ++i) {
      float t = std::tanh(z.data()[i]), s = 1.0f - t * t;
      for (std::int64_t k = 0; k < d; ++k) scaled.data()[i * d + k] = s * w1[static_cast<std::size_t>(i * d + k)];
    }
    gemm(false, false, d, d, d, w2.data(), d, scaled.data(), d, 0.0f, Jref.data(), d);
  };
  double flops = 2.0 * static_cast<double>(d * d * d);
  std::string sizes = "d=" + std::to_string(d);
  Measured loop = measure(reps, [&] { J = jac(x); },
                          [&] {
                            for (std::int64_t i = 0; i < d; ++i) rows_loop[static_cast<std::size_t>(i)] = pullback(x, basis[i]);
                          });
  add_rows(rows, "V2", "jacrev vs loop over basis vectors", loop, flops, 0, sizes, false);
  Measured m = measure(reps, [&] { J = jac(x); }, hand);
  std::vector<float> ref(Jref.data(), Jref.data() + d * d);
  add_rows(rows, "V2", "jacrev vs hand-written batched", m, flops, 0,
           sizes + " err=" + fmt("%.1e", rel_err(J.to_vector<float>().data(), ref.data(), d * d)));
}

// ---- S1: a binomial checkpoint schedule against scan(checkpoint) ------------------------------------

/// S1: the relu stack's gradient reversed with scan_checkpoints::binomial(s) (plain layer) against
/// scan(checkpoint(layer)) (one carry stored per layer). Both are xjax; the "reference" row is
/// scan(checkpoint). The schedule should cost time in proportion to the body executions it makes
/// (forward steps: t(L, s) + L against 2 L), and its memory should not grow with L.
void bench_schedule(std::vector<Row>& rows, std::int64_t L, std::int64_t d, std::int64_t N, std::int64_t s, int reps) {
  xj::Array W = from(randn(L * d * d, 21, 1.0 / std::sqrt(static_cast<double>(d))), {L, d, d});
  xj::Array y0 = from(randn(N * d, 22, 1.0), {N, d});
  auto loss = [](xj::ScanCheckpoints cp, bool ckpt) {
    return [cp, ckpt](const xj::Array& w, const xj::Array& y) {
      std::function<std::pair<xj::Array, xj::None>(const xj::Array&, const xj::Array&)> layer = relu_layer;
      if (ckpt) layer = xj::checkpoint(relu_layer);
      xj::Array out = xj::scan(layer, y, w, {.checkpoints = cp}).first;
      return xj::sum(out * out);
    };
  };
  auto binomial = xj::jit(xj::grad(loss(xj::scan_checkpoints::binomial(s), false)));
  auto per_layer = xj::jit(xj::grad(loss(xj::scan_checkpoints::all(), true)));
  xj::Array g_bin, g_ckpt;
  std::vector<double> tb, tc;
  std::int64_t pb = 0, pc = 0;
  for (int r = -1; r < reps; ++r) {
    for (int which = 0; which < 2; ++which) {
      std::int64_t before = xj::memory_stats().live_bytes;
      xj::reset_peak_memory();
      double t0 = now();
      if (which == 0) g_bin = binomial(W, y0);
      else g_ckpt = per_layer(W, y0);
      double t = now() - t0;
      std::int64_t peak = xj::memory_stats().peak_bytes - before;
      if (r < 0) continue;
      (which == 0 ? tb : tc).push_back(t);
      (which == 0 ? pb : pc) = std::max(which == 0 ? pb : pc, peak);
    }
  }
  const auto st = xj::scan_schedule_stats(L, xj::scan_checkpoints::binomial(s));
  const double steps_ratio = static_cast<double>(st.forward_steps) / static_cast<double>(2 * L);
  const double time_ratio = median(tb) / median(tc);
  auto a = g_bin.to_vector<float>(), b = g_ckpt.to_vector<float>();
  const double flops = 3.0 * 2.0 * static_cast<double>(L * N * d * d);
  const double mib = 1024.0 * 1024.0;
  std::string sizes = "L=" + std::to_string(L) + " d=" + std::to_string(d) + " N=" + std::to_string(N) + " s=" + std::to_string(s);
  rows.push_back({"S1", "binomial(s) vs scan(checkpoint)", "xjax", median(tb), time_ratio, flops / median(tb) * 1e-9,
                  double(pb) / mib, 0,
                  sizes + " steps " + std::to_string(st.forward_steps) + " vs " + std::to_string(2 * L) + " (ratio " +
                      fmt("%.3f", steps_ratio) + "); time ratio / steps ratio " + fmt("%.3f", time_ratio / steps_ratio) +
                      " err=" + fmt("%.1e", rel_err(a.data(), b.data(), static_cast<std::int64_t>(a.size())))});
  rows.push_back({"S1", "binomial(s) vs scan(checkpoint)", "reference", median(tc), 1.0, flops / median(tc) * 1e-9,
                  double(pc) / mib, 0, "scan(checkpoint(layer))"});
}

// ---- E1: per-op cost of eager mode -------------------------------------------------------------

/// E1: 10,000 small ops (add, mul, matmul of 32x32 floats) run eagerly (each op a separate
/// xjax call outside any trace, as a user debugging code writes them), against the same ops
/// under jit (chains of 100 ops in one jitted function) and a lean C++ reference (loops, one
/// cblas_sgemm per matmul, buffers preallocated). The ratio is eager / reference; the note gives
/// the time per op of each. With libtorch, a third row times the same ops in libtorch eager mode
/// (under NoGradGuard), alternately with the same reference.
void bench_eager(std::vector<Row>& rows, std::int64_t n_ops, int reps) {
  const std::int64_t d = 32, chain = 100;
  std::vector<float> av = randn(d * d, 31, 1.0);
  xj::Array a = from(av, {d, d});
  Buf ra(d * d), rb(d * d), rc(d * d);
  std::memcpy(ra.data(), av.data(), av.size() * 4);
  for (int op = 0; op < 3; ++op) {
    const char* name = op == 0 ? "add" : op == 1 ? "mul" : "matmul";
    // b keeps 10,000 repeated applications in range (no overflow, no denormals): small for add,
    // near 1 for mul, near the identity for matmul.
    std::vector<float> bv = randn(d * d, 32, op == 0 ? 0.1 : 1e-3);
    for (std::int64_t k = 0; k < d * d; ++k)
      if (op == 1 || (op == 2 && k % (d + 1) == 0)) bv[static_cast<std::size_t>(k)] += 1.0f;
    xj::Array b = from(bv, {d, d});
    std::memcpy(rb.data(), bv.data(), bv.size() * 4);
    auto apply = [op](const xj::Array& x, const xj::Array& y) {
      return op == 0 ? x + y : op == 1 ? x * y : xj::matmul(x, y);
    };
    auto chained = xj::jit([apply, chain](const xj::Array& x, const xj::Array& y) {
      xj::Array c = x;
      for (std::int64_t i = 0; i < chain; ++i) c = apply(c, y);
      return c;
    });
    xj::Array c;
    // Each run starts from a again: the 10,000 ops of one run stay in range, but runs chained
    // on the last one's result drifted into denormals (mul: b^(10,000 k) elementwise), which
    // made the reference 2.4x slower in the libtorch phase ("libtorch 1.17x faster").
    auto run_ref = [&] {
      std::memcpy(ra.data(), av.data(), av.size() * 4);
      float* x = ra.data();
      float* out = rc.data();
      const float* y = rb.data();
      for (std::int64_t i = 0; i < n_ops; ++i) {
        if (op == 2) gemm(false, false, d, d, d, x, d, y, d, 0.0f, out, d);
        else if (op == 1)
          for (std::int64_t k = 0; k < d * d; ++k) out[k] = x[k] * y[k];
        else
          for (std::int64_t k = 0; k < d * d; ++k) out[k] = x[k] + y[k];
        std::swap(x, out);
      }
    };
    Measured eager = measure(reps,
                             [&] {
                               c = a;
                               for (std::int64_t i = 0; i < n_ops; ++i) c = apply(c, b);
                             },
                             run_ref);
    Measured jitted = measure(reps,
                              [&] {
                                c = a;
                                for (std::int64_t i = 0; i < n_ops / chain; ++i) c = chained(c, b);
                              },
                              [] {});
    const double us = 1e6 / static_cast<double>(n_ops);
    rows.push_back({"E1", std::string(name) + " 32x32 eager", "xjax", eager.xj_s, eager.xj_s / eager.ref_s, 0, unmeasured, unmeasured,
                    fmt("%.2f", eager.xj_s * us) + " us/op eager, " + fmt("%.2f", jitted.xj_s * us) + " us/op jit, " +
                        fmt("%.3f", eager.ref_s * us) + " us/op reference; " + std::to_string(n_ops) + " ops"});
    rows.push_back({"E1", std::string(name) + " 32x32 eager", "reference", eager.ref_s, 1.0, 0, unmeasured, unmeasured, ""});
#if XJAX_BENCH_TORCH
    bench_torch::Eager torch_ops(av, bv, d, op);
    Measured tt = measure(reps, [&] { torch_ops.run(n_ops); }, run_ref);
    std::vector<float> tc = torch_ops.result();
    rows.push_back({"E1", std::string(name) + " 32x32 eager", "libtorch", tt.xj_s, tt.xj_s / tt.ref_s, 0, 0, 0,
                    fmt("%.2f", tt.xj_s * us) + " us/op libtorch (NoGradGuard), " + fmt("%.2f", eager.xj_s * us) +
                        " us/op xjax eager: " + speedup(eager, tt) + "; err=" +
                        fmt("%.1e", rel_err(tc.data(), c.data<float>(), d * d)) + " vs xjax; " +
                        "intra-op threads " + std::to_string(g_torch_threads)});
#endif
  }
}

// ---- output ------------------------------------------------------------------------------------

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

/// The libtorch line of the table's header: version and threads, or why there are no rows.
std::string torch_line() {
#if XJAX_BENCH_TORCH
  return std::string("libtorch ") + bench_torch::version() + ", intra-op threads: " +
         std::to_string(g_torch_threads) +
         " (torch::set_num_threads; its GEMMs use OpenBLAS's threads); glibc keeps freed blocks up to 32 MiB (mallopt)";
#else
  return "libtorch rows skipped: built without libtorch (libtorch-dev not installed, or -Dtorch=disabled)";
#endif
}

void print_json(const std::vector<Row>& rows, bool quick) {
  std::printf("{\"quick\": %s, \"blas_threads\": %d, \"libtorch\": %s, \"rows\": [\n", quick ? "true" : "false",
              openblas_get_num_threads(), json_str(torch_line()).c_str());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    bool p4 = r.workload == "P4", mem = r.has_mem();
    std::printf("  {\"workload\": %s, \"variant\": %s, \"impl\": %s, \"median_s\": %.6g, \"ratio\": %s, "
                "\"gflops\": %s, \"peak_mib\": %s, \"ideal_bytes_ratio\": %s, \"note\": %s}%s\n",
                json_str(r.workload).c_str(), json_str(r.variant).c_str(), json_str(r.impl).c_str(), r.median_s,
                p4 ? "null" : fmt("%.4g", r.ratio).c_str(), p4 ? "null" : fmt("%.4g", r.gflops).c_str(),
                mem && std::isfinite(r.peak_mib) ? fmt("%.4g", r.peak_mib).c_str() : "null",
                mem && std::isfinite(r.ideal_ratio) ? fmt("%.4g", r.ideal_ratio).c_str() : "null",
                json_str(r.note).c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::printf("]}\n");
}

// Where OpenBLAS's kernels are narrower than the CPU's vectors: which, and how to widen them.
std::string blas_width_note(const xjax::BuildInfo& info) {
  if (!info.blas_below_cpu_width) return "";
  if (info.cpu_vector_bytes == 64)
    return ", narrower than this CPU's AVX-512 (OPENBLAS_CORETYPE=SkylakeX runs its AVX-512 ones)";
  return ", narrower than this CPU's AVX2 (OPENBLAS_CORETYPE=Haswell runs its AVX2 ones)";
}

void print_table(const std::vector<Row>& rows, bool quick) {
  const xjax::BuildInfo info = xjax::build_info();
  std::printf("xjax-bench (%s sizes, float32, OpenBLAS threads: %d; xjax kernel set %s; OpenBLAS kernels %s%s; xjax's loops on %s workers)\n%s\n\n",
              quick ? "quick" : "full", openblas_get_num_threads(), info.kernel_set.c_str(), info.blas_core.c_str(),
              blas_width_note(info).c_str(),
              info.loop_threads == "openblas" ? "OpenBLAS's" : "xjax's own", torch_line().c_str());
  std::printf("| workload | variant | impl | median s | ratio | GFLOP/s | peak MiB | / ideal bytes | note |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---|\n");
  for (const Row& r : rows) {
    bool p4 = r.workload == "P4", mem = r.has_mem();
    std::printf("| %s | %s | %s | %.4g | %s | %s | %s | %s | %s |\n", r.workload.c_str(), r.variant.c_str(),
                r.impl.c_str(), r.median_s, p4 ? "-" : fmt("%.2f", r.ratio).c_str(),
                p4 ? "-" : fmt("%.2f", r.gflops).c_str(), mem && std::isfinite(r.peak_mib) ? fmt("%.1f", r.peak_mib).c_str() : "-",
                mem && std::isfinite(r.ideal_ratio) ? fmt("%.2f", r.ideal_ratio).c_str() : "-", r.note.c_str());
  }
}

#if XJAX_BENCH_TORCH
// O1: xj::optim::adam and adamw against torch.optim.Adam and AdamW on the same gradients (issue
// 29): the largest difference of the parameters over `steps` steps, relative to their scale.
void bench_optimizers(std::vector<Row>& rows, std::int64_t n, int steps) {
  const std::vector<float> p0 = randn(n, 50, 1.0);
  std::vector<std::vector<float>> grads;
  for (int k = 0; k < steps; ++k) grads.push_back(randn(n, 60 + static_cast<unsigned>(k), 0.1 + 0.05 * k));
  for (bool decoupled : {false, true}) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = decoupled ? 0.1 : 0.0;
    const auto opt = decoupled ? xj::optim::adamw(lr, b1, b2, eps, 0.0, std::nullopt, wd) : xj::optim::adam(lr, b1, b2, eps);
    double t0 = now();
    xj::Array p = from(p0, {n});
    xj::optim::OptState s = opt.init(p);
    std::vector<std::vector<float>> mine;
    for (const auto& g : grads) {
      auto [u, s2] = opt.update(from(g, {n}), s, p);
      p = xj::optim::apply_updates(p, u);
      s = s2;
      mine.push_back(p.to_vector<float>());
    }
    double t1 = now();
    const auto theirs = bench_torch::adam_trajectory(p0, grads, lr, b1, b2, eps, wd, decoupled);
    double t2 = now();
    double worst = 0;
    for (int k = 0; k < steps; ++k) worst = std::max(worst, rel_err(mine[static_cast<std::size_t>(k)].data(), theirs[static_cast<std::size_t>(k)].data(), n));
    const std::string name = decoupled ? "adamw (weight decay 0.1)" : "adam";
    rows.push_back({"O1", name, "xjax", t1 - t0, (t1 - t0) / (t2 - t1), 0, 0, 0,
                    fmt("max abs(p_xjax - p_torch) / max abs(p) over the steps: %.2g", worst) +
                        fmt(" (%.0f eager steps, each read back: times are not a target)", steps)});
    rows.push_back({"O1", name, "libtorch", t2 - t1, 1.0, 0, 0, 0, "torch.optim"});
  }
}
#endif

// T1's floor: the matrix products of one training step alone, with the model's shapes (each
// forward product C = A B and its two backward products dA = dC B^T, dB = A^T dC; recompute:
// the blocks' forward products once more), as cblas_sgemm calls on preallocated buffers.
// libtorch runs its products on OpenBLAS, so it cannot beat this time; xjax runs them on OpenBLAS
// too, except where OpenBLAS's kernels are narrower than xjax's kernel set's (build_info's
// own_large_products: then its own loops, small_gemm.cpp blocked_gemm, which can).
double gemm_floor_seconds(std::int64_t T, std::int64_t d, std::int64_t heads, std::int64_t L, std::int64_t B,
                          std::int64_t V, bool recompute, int reps) {
  struct Product {
    std::int64_t m, k, n, count;
  };
  const std::int64_t bt = B * T, hd = d / heads;
  const std::vector<Product> block = {{bt, d, 3 * d, 1}, {T, hd, T, B * heads}, {T, T, hd, B * heads},
                                      {bt, d, d, 1},     {bt, d, 4 * d, 1},      {bt, 4 * d, d, 1}};
  std::int64_t biggest = bt * V;
  for (const auto& p : block) biggest = std::max({biggest, p.m * p.k, p.k * p.n, p.m * p.n});
  std::vector<float> a = randn(std::max(biggest, d * V), 71, 1.0), b = randn(std::max(biggest, d * V), 72, 1.0), c(static_cast<std::size_t>(std::max(biggest, d * V)));
  auto forward = [&](const Product& p) {
    for (std::int64_t i = 0; i < p.count; ++i) gemm(false, false, p.m, p.n, p.k, a.data(), p.k, b.data(), p.n, 0.0f, c.data(), p.n);
  };
  auto backward = [&](const Product& p) {
    for (std::int64_t i = 0; i < p.count; ++i) {
      gemm(false, true, p.m, p.k, p.n, c.data(), p.n, b.data(), p.n, 0.0f, a.data(), p.k);  // dA = dC B^T
      gemm(true, false, p.k, p.n, p.m, a.data(), p.k, c.data(), p.n, 0.0f, b.data(), p.n);  // dB = A^T dC
    }
  };
  const Product head{bt, d, V, 1};
  std::vector<double> ts;
  for (int r = -1; r < reps; ++r) {
    const double t0 = now();
    for (std::int64_t l = 0; l < L; ++l)
      for (const auto& p : block) forward(p);
    forward(head);
    backward(head);
    for (std::int64_t l = 0; l < L; ++l)
      for (const auto& p : block) {
        if (recompute) forward(p);
        backward(p);
      }
    if (r >= 0) ts.push_back(now() - t0);
  }
  return median(ts);
}

#if XJAX_BENCH_TORCH
// T1 (issue 29): one training step (forward, backward, adamw update) of the GPT of
// examples/transformer_model.hpp against its libtorch twin (bench_torch::Gpt), from the same
// parameters on the same batches: without checkpoint (plain autograd) and with nothing_saveable
// per block (torch: a hand-written per-block recompute), at 1 and 2 OpenBLAS threads (libtorch's
// intra-op threads stay at g_torch_threads). Checked first: three steps' losses and the
// parameters after them agree.
void bench_transformer(std::vector<Row>& rows, const std::string& size, std::int64_t T, std::int64_t d,
                       std::int64_t heads, std::int64_t L, std::int64_t B, int reps) {
  const std::int64_t V = 256;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.01;
  std::mt19937 rng(5);
  std::vector<std::vector<std::int32_t>> batches(4);  // random bytes: the step's cost does not depend on them
  for (auto& b : batches)
    for (std::int64_t i = 0; i < B * (T + 1); ++i) b.push_back(static_cast<std::int32_t>(rng() % V));
  const auto opt = xj::optim::adamw(lr, b1, b2, eps, 0.0, std::nullopt, wd);
  const xj::Array causal = gpt::causal_mask(T, xj::f32);
  // Useful flops of one step: 3x the forward's (GEMMs of 12 L d^2 + V d per token, attention's
  // 4 L T d per token); recompute not counted.
  const double tokens = static_cast<double>(B * T);
  const double flops = 3.0 * 2.0 * tokens *
                       (12.0 * double(L) * double(d) * double(d) + double(V) * double(d) + 2.0 * double(L) * double(T) * double(d));
  const int blas_threads = openblas_get_num_threads();
  double peak_none = 0;
  for (const std::string policy : {"none", "nothing_saveable"}) {
    gpt::Gpt params = gpt::init(V, T, d, L, xj::f32, 0);
    std::vector<bench_torch::Gpt::Leaf> leaves;
    for (const xj::Array& a : xj::tree_flatten(params).first) leaves.push_back({a.to_vector<float>(), a.shape()});
    bench_torch::Gpt twin(leaves, heads, lr, b1, b2, eps, wd, policy == "nothing_saveable");
    const gpt::BlockFn body = gpt::body_for(policy, causal, heads);
    auto step = xj::jit(
        [&](const gpt::Gpt& p, const xj::optim::OptState& s, const xj::Array& toks) {
          auto [value, g] = xj::value_and_grad([&](const gpt::Gpt& q) { return gpt::loss_of(q, toks, body); })(p);
          auto [updates, s2] = opt.update(g, s, p);
          return std::tuple{xj::optim::apply_updates(p, updates), s2, value};
        },
        {.donate_argnums = {0, 1}});
    xj::optim::OptState state = opt.init(params);
    std::size_t k = 0;
    double loss_xj = 0, loss_torch = 0;
    auto run_xj = [&] {
      xj::Array value;
      std::tie(params, state, value) = step(params, state, xj::array<std::int32_t>(batches[k % batches.size()], {B, T + 1}));
      loss_xj = value.item<double>();
    };
    auto run_torch = [&] {
      loss_torch = twin.step(batches[k % batches.size()], B);
      ++k;
    };
    // Agreement: three steps from the same parameters on the same batches.
    double worst_loss = 0;
    for (int s = 0; s < 3; ++s) {
      run_xj();
      run_torch();
      worst_loss = std::max(worst_loss, std::abs(loss_xj - loss_torch) / std::abs(loss_torch));
    }
    const auto theirs = twin.parameters();
    const auto mine = xj::tree_flatten(params).first;
    double worst_param = 0;  // in units of the learning rate (one adamw step moves a parameter about lr)
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const std::vector<float> v = mine[i].to_vector<float>();
      for (std::size_t j = 0; j < v.size(); ++j) worst_param = std::max(worst_param, std::abs(double(v[j]) - double(theirs[i][j])) / lr);
    }
    const std::string agree = fmt("after 3 steps: losses agree to %.1e relative", worst_loss) +
                              fmt(", parameters to %.2g lr", worst_param);
    for (int threads : {1, 2}) {
      openblas_set_num_threads(threads);
      Measured m = measure(reps, run_xj, run_torch, threads > 1 ? 0.15 : 0.0);
      const std::string variant = size + " " + policy + ", " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "");
      const double peak = double(m.xj_peak) / (1024.0 * 1024.0);
      if (policy == "none" && threads == 1) peak_none = peak;
      std::string note = fmt("%.0f tokens/s", tokens / m.xj_s) + fmt(" (libtorch %.0f): ", tokens / m.ref_s) +
                         fmt("%.2fx libtorch's; ", m.ref_s / m.xj_s) + fmt("step peak %.1f MiB", peak);
      if (policy != "none") note += fmt(" (%.2fx of none)", peak / peak_none);
      if (threads == 1) note += "; " + agree;
      rows.push_back({"T1", variant, "xjax", m.xj_s, m.xj_s / m.ref_s, flops / m.xj_s * 1e-9, peak, 0, note});
      rows.push_back({"T1", variant, "libtorch", m.ref_s, 1.0, flops / m.ref_s * 1e-9, 0, 0,
                      "intra-op threads " + std::to_string(g_torch_threads) +
                          (policy == "none" ? ", plain autograd" : ", per-block recompute")});
      const double floor = gemm_floor_seconds(T, d, heads, L, B, V, policy != "none", reps);
      rows.push_back({"T1", variant, "GEMMs only", floor, floor / m.ref_s, flops / floor * 1e-9, 0, 0,
                      "the step's matrix products alone (cblas_sgemm); libtorch / this = " + fmt("%.2f", m.ref_s / floor) +
                          ": the most any implementation on OpenBLAS's products could gain over libtorch" +
                          (xj::build_info().own_large_products
                               ? " (xjax's products here: its own loops, OpenBLAS's kernels being narrower than the CPU's)"
                               : "")});
    }
  }
  openblas_set_num_threads(blas_threads);
}
#endif

// F1: a parameter tree of `mib` MiB (f32 leaves of 1 MiB... 4 MiB) saved as safetensors (written
// atomically: temporary file, fsync, rename) and loaded back, against copying the saved file
// (std::filesystem::copy_file, what cp does) followed by an fsync, so both sides reach the disk.
void bench_files(std::vector<Row>& rows, std::int64_t mib, int reps) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("xjax_bench_files_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "params.safetensors").string(), copy = (dir / "copy.safetensors").string();
  std::map<std::string, xj::Array> tree;
  for (std::int64_t i = 0; i < mib / 4; ++i) tree["layer" + std::to_string(i)] = from(randn(1 << 20, 40 + static_cast<unsigned>(i), 1.0), {1024, 1024});
  std::vector<double> ts, tl, tc;
  for (int r = 0; r <= reps; ++r) {
    double t0 = now();
    xj::save_safetensors(path, tree);
    double t1 = now();
    const auto back = xj::load_safetensors(path, tree);
    double t2 = now();
    fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
    const int fd = ::open(copy.c_str(), O_RDONLY);
    if (fd >= 0) {
      (void)::fsync(fd);
      ::close(fd);
    }
    double t3 = now();
    if (r == 0) {  // warm-up; check the round trip once
      if (std::memcmp(back.at("layer0").raw_data(), tree.at("layer0").raw_data(), 4 << 20) != 0)
        throw std::runtime_error("F1: the loaded tree differs from the saved one");
      continue;
    }
    ts.push_back(t1 - t0);
    tl.push_back(t2 - t1);
    tc.push_back(t3 - t2);
  }
  fs::remove_all(dir);
  const double cp = median(tc), bytes = static_cast<double>(mib) * (1 << 20);
  const std::string where = "files in " + fs::temp_directory_path().string() + ", " + fmt("%.0f", bytes / (1 << 20)) + " MiB";
  rows.push_back({"F1", "save_safetensors", "xjax", median(ts), median(ts) / cp, 0, 0, 0, where + "; GB/s " + fmt("%.2f", bytes / median(ts) * 1e-9)});
  rows.push_back({"F1", "load_safetensors", "xjax", median(tl), median(tl) / cp, 0, 0, 0, "GB/s " + fmt("%.2f", bytes / median(tl) * 1e-9)});
  rows.push_back({"F1", "copy_file + fsync (cp)", "reference", cp, 1.0, 0, 0, 0, "GB/s " + fmt("%.2f", bytes / cp * 1e-9)});
}

// L1 (issue 31): x = A^-1 B through cholesky and cho_solve (A 512 x 512 SPD, B 512 x 16, f64),
// and the gradient of sum(x) in A and B, jitted, against LAPACK's potrf + potrs directly and the
// structure-aware adjoint B̄ = A^-1 1, Ā = -(B̄ x^T + x B̄^T) / 2 (one more potrs and a gemm; the
// symmetric part, as cholesky's symmetrize_input). xjax (as JAX) differentiates through the
// factorization instead: cholesky's jvp transposed costs two n x n triangular solves and a product
// (about 5 n^3 flops against potrf's n^3 / 3), which the ratio shows.
void bench_linalg(std::vector<Row>& rows, std::int64_t n, std::int64_t k, int reps) {
  std::vector<double> m(static_cast<std::size_t>(n * n)), a(m.size(), 0.0), b(static_cast<std::size_t>(n * k));
  const std::vector<float> r = randn(n * n + n * k, 71, 1.0);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = r[i];
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = r[m.size() + i];
  // A = M M^T / n + I: symmetric positive definite, well conditioned.
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(n), 1.0 / double(n), m.data(), int(n), m.data(), int(n), 0.0,
              a.data(), int(n));
  for (std::int64_t i = 0; i < n; ++i) a[static_cast<std::size_t>(i * n + i)] += 1.0;
  const xj::Array A = xj::array<double>(a, {n, n}), B = xj::array<double>(b, {n, k});
  auto f = [](const xj::Array& a, const xj::Array& b) { return xj::sum(xj::linalg::cho_solve(xj::linalg::cholesky(a), b)); };
  auto fwd = xj::jit(f);
  auto grad = xj::jit(xj::grad(f, xj::argnums<0, 1>));
  // The same function as one implicitly differentiated solve (jax.scipy.linalg.solve(a, b,
  // assume_a="pos") on the symmetrized a, as cholesky symmetrizes): the gradient solves again with
  // the factor instead of differentiating the factorization.
  auto f_pos = [](const xj::Array& a, const xj::Array& b) {
    return xj::sum(xj::linalg::solve(0.5 * (a + xj::matrix_transpose(a)), b, "pos"));
  };
  auto grad_pos = xj::jit(xj::grad(f_pos, xj::argnums<0, 1>));
  std::vector<double> l(a.size()), x(b.size()), bbar(b.size()), abar(a.size());
  auto lapack_forward = [&] {
    std::copy(a.begin(), a.end(), l.begin());
    std::copy(b.begin(), b.end(), x.begin());
    LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', int(n), l.data(), int(n));
    LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', int(n), int(k), l.data(), int(n), x.data(), int(k));
  };
  auto lapack_gradient = [&] {
    lapack_forward();
    std::fill(bbar.begin(), bbar.end(), 1.0);
    LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', int(n), int(k), l.data(), int(n), bbar.data(), int(k));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(k), -0.5, bbar.data(), int(k), x.data(), int(k), 0.0,
                abar.data(), int(n));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(k), -0.5, x.data(), int(k), bbar.data(), int(k), 1.0,
                abar.data(), int(n));
  };
  auto time = [&](auto&& run) { return median_seconds(run, reps); };
  xj::Array value, ga, gb;
  const double xf = time([&] { value = fwd(A, B); });
  const double rf = time(lapack_forward);
  const double xg = time([&] { std::tie(ga, gb) = grad(A, B); });
  const double rg = time(lapack_gradient);
  xj::Array pa, pb;
  const double xp = time([&] { std::tie(pa, pb) = grad_pos(A, B); });
  double sum_x = 0, scale = 0;
  for (double e : x) sum_x += e;
  for (double e : abar) scale = std::max(scale, std::abs(e));
  for (double e : bbar) scale = std::max(scale, std::abs(e));
  // max |grad - adjoint| / max |adjoint| over both gradients.
  auto error_of = [&](const xj::Array& ga_, const xj::Array& gb_) {
    double worst = 0;
    const auto gav = ga_.to_vector<double>(), gbv = gb_.to_vector<double>();
    for (std::size_t i = 0; i < abar.size(); ++i) worst = std::max(worst, std::abs(gav[i] - abar[i]));
    for (std::size_t i = 0; i < bbar.size(); ++i) worst = std::max(worst, std::abs(gbv[i] - bbar[i]));
    return worst / scale;
  };
  const std::string shape = fmt("n = %.0f, ", double(n)) + fmt("%.0f right-hand sides, f64", double(k));
  rows.push_back({"L1", "cholesky + cho_solve", "xjax", xf, xf / rf, 0, 0, 0,
                  shape + fmt("; |sum x - LAPACK's| / |sum x| %.1e", std::abs(value.item<double>() - sum_x) / std::abs(sum_x))});
  rows.push_back({"L1", "cholesky + cho_solve", "LAPACK", rf, 1.0, 0, 0, 0, "potrf + potrs"});
  rows.push_back({"L1", "gradient in A and B", "xjax", xg, xg / rg, 0, 0, 0,
                  fmt("through cholesky's jvp; max |grad - adjoint| / max |adjoint| %.1e", error_of(ga, gb))});
  rows.push_back({"L1", "gradient in A and B", "xjax solve pos", xp, xp / rg, 0, 0, 0,
                  fmt("custom_linear_solve; max |grad - adjoint| / max |adjoint| %.1e", error_of(pa, pb))});
  rows.push_back({"L1", "gradient in A and B", "LAPACK + adjoint", rg, 1.0, 0, 0, 0, "potrf + 2 potrs + 2 gemm (the solve's adjoint)"});
}

// K1: cumsum along 1M elements (f32, eager, one primitive) and along the rows of a 1000 x 1000
// matrix's first axis, against std::partial_sum over the same memory in the same run.
void bench_cumulative(std::vector<Row>& rows, std::int64_t n, int reps) {
  const std::vector<float> v = randn(n, 81, 1.0);
  const xj::Array x = from(v, {n});
  std::vector<float> out(v.size());
  auto time = [&](auto&& run) { return median_seconds(run, reps); };
  xj::Array y;
  const double xt = time([&] { y = xj::cumsum(x, 0); });
  const double rt = time([&] { std::partial_sum(v.begin(), v.end(), out.begin()); });
  const auto got = y.to_vector<float>();
  double worst = 0;
  for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - out[i])) / (1.0 + std::abs(out[i])));
  const std::string shape = fmt("%.0f elements, f32", double(n));
  rows.push_back({"K1", "cumsum of a vector", "xjax", xt, xt / rt, 0, 0, 0, shape + fmt("; max rel. difference %.1e", worst)});
  rows.push_back({"K1", "cumsum of a vector", "std::partial_sum", rt, 1.0, 0, 0, 0, shape});
  // Down the first axis of a matrix: each step adds a contiguous row.
  const std::int64_t side = static_cast<std::int64_t>(std::sqrt(double(n)));
  const xj::Array m = from(std::vector<float>(v.begin(), v.begin() + side * side), {side, side});
  const double xm = time([&] { y = xj::cumsum(m, 0); });
  const double rm = time([&] {
    std::copy(v.begin(), v.begin() + side, out.begin());
    for (std::int64_t r = 1; r < side; ++r)
      for (std::int64_t c = 0; c < side; ++c) out[std::size_t(r * side + c)] = out[std::size_t((r - 1) * side + c)] + v[std::size_t(r * side + c)];
  });
  rows.push_back({"K1", "cumsum down a matrix's columns", "xjax", xm, xm / rm, 0, 0, 0, fmt("%.0f x ", double(side)) + fmt("%.0f, f32", double(side))});
  rows.push_back({"K1", "cumsum down a matrix's columns", "loop", rm, 1.0, 0, 0, 0, "row += previous row"});
  // sort of the vector against std::stable_sort, top_k (k = 100) against std::partial_sort.
  std::vector<float> sorted(v);
  const double xs = time([&] { y = xj::sort(x); });
  const double rs = time([&] {
    std::copy(v.begin(), v.end(), sorted.begin());
    std::stable_sort(sorted.begin(), sorted.end());
  });
  rows.push_back({"K1", "sort of a vector", "xjax", xs, xs / rs, 0, 0, 0, shape + (y.to_vector<float>() == sorted ? "; equal" : "; DIFFERENT")});
  rows.push_back({"K1", "sort of a vector", "std::stable_sort", rs, 1.0, 0, 0, 0, shape});
  const std::int64_t k = 100;
  const double xk = time([&] { y = xj::top_k(x, k).first; });
  const double rk = time([&] {
    std::copy(v.begin(), v.end(), sorted.begin());
    std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<float>());
  });
  rows.push_back({"K1", "top_k, k = 100", "xjax", xk, xk / rk, 0, 0, 0, shape + "; the top_k primitive: a partial sort of positions"});
  rows.push_back({"K1", "top_k, k = 100", "std::partial_sort", rk, 1.0, 0, 0, 0, shape});
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, json = false;
  std::string only;  // run one workload (P1..P4, V1, V2, S1, E1, F1, L1, K1, K2, B1, B2, D1, O1, T1, C1..C3, G1); empty: all
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: xjax-bench [--quick] [--json] [--only P1|P2|P3|P4|V1|V2|S1|E1|F1|L1|K1|K2|B1|B2|D1|O1|T1|C1|C2|C3|G1]\n");
      return 2;
    }
  }
  // --only names one workload of the usage line; its rows alone are printed (C1..C3 and B1 / B2
  // are measured together)
  const std::vector<std::string> workloads{"P1", "P2", "P3", "P4", "V1", "V2", "S1", "E1", "F1", "L1", "K1",
                                           "K2", "B1", "B2", "D1", "O1", "T1", "C1", "C2", "C3", "G1"};
  if (!only.empty() && std::find(workloads.begin(), workloads.end(), only) == workloads.end()) {
    std::fprintf(stderr, "xjax-bench: unknown workload '%s' (--only P1|P2|P3|P4|V1|V2|S1|E1|F1|L1|K1|K2|B1|B2|D1|O1|T1|C1|C2|C3|G1)\n", only.c_str());
    return 2;
  }
#if !XJAX_BENCH_TORCH
  if (only == "O1" || only == "T1") {
    std::fprintf(stderr, "xjax-bench: %s compares with libtorch, which this build has not\n", only.c_str());
    return 2;
  }
#endif
  auto run = [&](const char* workload) { return only.empty() || only == workload; };
  std::vector<Row> rows;
  // glibc returns freed blocks above its (adaptive) mmap threshold to the system, so a library
  // that allocates its tensors with malloc (libtorch) may touch fresh pages on every step: in this
  // project's VMs a page fault is expensive, and the libtorch rows moved up to 10x between runs
  // (2026-12-05: oneDNN's convolution kernels spent a third of a C2 run in page faults). xjax
  // keeps freed blocks in its own arena. Fixed thresholds keep glibc's freed blocks (up to 32 MiB
  // each, the most glibc allows) for reuse too, so both sides run on recycled memory.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#if XJAX_BENCH_TORCH
  g_torch_threads = bench_torch::set_threads(torch_threads());
#endif
  try {
    const int reps = 5;  // after one untimed warm-up each
    if (run("P1")) bench_relu_chain(rows, "P1", quick ? 8 : 64, quick ? 128 : 512, quick ? 64 : 512, reps);
    if (run("P2")) bench_relu_chain(rows, "P2", quick ? 100 : 1000, 32, 16, quick ? reps : 4 * reps);
    if (run("P3")) bench_mlp(rows, quick ? 4 : 16, quick ? 64 : 256, quick ? 256 : 2048, reps);
    if (run("P4")) bench_trace(rows, quick ? 64 : 256, quick ? 256 : 2048, reps);
    if (run("V1")) bench_per_example(rows, quick ? 64 : 256, quick ? 64 : 256, reps);
    if (run("V2")) bench_jacrev(rows, quick ? 64 : 256, reps);
    if (run("E1")) bench_eager(rows, 10000, reps);
    if (run("F1")) bench_files(rows, quick ? 16 : 100, reps);
    if (run("L1")) bench_linalg(rows, quick ? 128 : 512, 16, reps);
    if (run("K1")) bench_cumulative(rows, quick ? 65536 : 1000000, reps);
    if (run("K2")) bench_elementwise(rows, quick ? 65536 : 1000000, reps);
    if (run("B1") || run("B2")) bench_mixed_precision(rows, quick ? 4 : 16, quick ? 64 : 256, quick ? 256 : 2048, reps);
    if (run("D1")) bench_conversions(rows, quick ? 1 << 20 : 1 << 24, reps);
#if XJAX_BENCH_TORCH
    if (run("O1")) bench_optimizers(rows, quick ? 1000 : 100000, 20);
    if (run("T1")) {  // T = 64, d = 128, 4 heads, 6 layers, batch 16; T = 128, d = 256, 8 heads, 8 layers, batch 8
      // 9 timed steps each: medians of 5 moved by 10-15% between invocations in a noisy VM
      const int steps = quick ? reps : 9;
      bench_transformer(rows, "small", quick ? 16 : 64, quick ? 32 : 128, quick ? 2 : 4, quick ? 2 : 6, quick ? 4 : 16, steps);
      if (!quick) bench_transformer(rows, "medium", 128, 256, 8, 8, 8, steps);
    }
#endif
    if (only.empty() || only == "C1" || only == "C2" || only == "C3") {
#if XJAX_BENCH_TORCH
      bench_conv(rows, quick, reps, g_torch_threads);
#else
      bench_conv(rows, quick, reps, 1);
#endif
    }
    if (run("G1")) bench_small_products(rows, reps);
    if (run("S1")) bench_schedule(rows, quick ? 1000 : 10000, 64, 64, quick ? 10 : 100, quick ? 1 : 3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xjax-bench: %s\n", e.what());
    return 1;
  }
  if (!only.empty()) std::erase_if(rows, [&](const Row& r) { return r.workload != only; });
  if (json) print_json(rows, quick);
  else print_table(rows, quick);
  return 0;
}
