// guide_checks.cpp: the main of docs/guide.md's code blocks (check_code_blocks.py appends it to
// them). It runs each function the guide defines and checks what the guide says it prints or
// returns, the expectations copied from the guide's comments and computed here independently
// (closed forms, plain loops), so a library change that alters a stated result fails. An edit of
// the guide's comments is not compared with this file: change both together. Not a standalone
// file: it uses the guide's functions and includes.
#include <array>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace guide_checks {

int failures = 0;

// What f writes to std::cout (std::cout's buffer restored however f ends).
std::string printed(const std::function<void()>& f) {
  std::ostringstream out;
  struct Redirect {
    std::streambuf* saved;
    ~Redirect() { std::cout.rdbuf(saved); }
  } redirect{std::cout.rdbuf(out.rdbuf())};
  f();
  return out.str();
}

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "guide check failed: " << what << "\n";
    ++failures;
  }
}

void expect_printed(const std::string& out, const std::string& want, const std::string& where) {
  expect(out.find(want) != std::string::npos, where + " prints \"" + want + "\"; it printed:\n" + out);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& where) {
  bool ok = got.size() == want.size();
  for (std::size_t i = 0; ok && i < got.size(); ++i) ok = std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
  expect(ok, where);
}

std::vector<double> values(const xj::Array& a) { return xj::astype(a, xj::f64).to_vector<double>(); }

}  // namespace guide_checks

int main() {
  using namespace guide_checks;
  // "f32[3] [2.682942, 3.818595, 3.28224]": sin(x) * 2 + x
  expect_printed(printed(eager), "f32[3] [2.682942, 3.818595, 3.28224]", "eager()");
  expect_near({2 * std::sin(1.0) + 1, 2 * std::sin(2.0) + 2, 2 * std::sin(3.0) + 3}, {2.682942, 3.818595, 3.28224}, 1e-6,
              "eager()'s stated values are sin(x) * 2 + x");
  expect_printed(printed(show_jaxpr), "d:f32[] = reduce_sum[axes=(0,)] c", "show_jaxpr()");
  // d2 = 2 cos t - t sin t at 0.5
  const std::string composed = printed(compose);
  expect_printed(composed, "f32[] [1.5154524]", "compose()");
  expect_near({2 * std::cos(0.5) - 0.5 * std::sin(0.5)}, {1.5154524}, 1e-7, "compose()'s stated second derivative");
  // gradient 2, value 6; then gradient 5 (traced again), value still 6 (jit's cache)
  expect_printed(printed(caching_rules), "f32[3] [2, 2, 2]f32[] [6]\nf32[3] [5, 5, 5]f32[] [6]", "caching_rules()");
  // w - 0.5 (0.1 + 0.05 + 0.1 / 3) from ones
  const std::string stepped = printed(jit_numbers_and_donation);
  const double w_final = 1 - 0.5 * (0.1 + 0.05 + 0.1 / 3);
  expect(stepped.find("f32[4] [") != std::string::npos && std::abs(std::stod(stepped.substr(8)) - w_final) < 1e-6,
         "jit_numbers_and_donation() leaves w = " + std::to_string(w_final) + ": " + stepped);
  // one SGD step of mean((x w + b - y)^2) from w = 1, b = 0 with x, y ones: err = 2, dw = db = 4 -> w 0.6, b -0.4
  {
    Params p{xj::ones({3, 1}), xj::zeros({1})};
    sgd_step(p, xj::ones({4, 3}), xj::ones({4, 1}));
    expect_near(values(p.w), {0.6, 0.6, 0.6}, 1e-6, "sgd_step's w");
    expect_near(values(p.b), {-0.4}, 1e-6, "sgd_step's b");
  }
  transforms_tour();
  vmap_tour();
  {  // "xj::grad(stack_loss)(weights, x) has the shape of weights."
    const xj::Array weights = xj::random::normal(xj::random::key(3), {4, 5, 5}) * 0.3, x = xj::ones({2, 5});
    expect(xj::grad(stack_loss)(weights, x).shape() == weights.shape(), "grad(stack_loss) has the shape of weights");
    expect_printed(printed([&] { measure(weights, x); }), "matmuls: ", "measure()");
  }
  // cond: a * a when the sum is positive, else -a; fori_loop doubles five times
  expect_near(values(piecewise(xj::array({1.f, 2.f}))), {1, 4}, 0, "piecewise of a positive sum");
  expect_near(values(piecewise(xj::array({-1.f, -2.f}))), {1, 2}, 0, "piecewise of a negative sum");
  expect_near(values(power_of_two(xj::array({1.f, 3.f}))), {32, 96}, 0, "power_of_two");
  // custom rules: the cotangent 5 clipped to 1; log1pexp's derivative is the logistic, finite at 1000
  expect_near(values(xj::grad([](const xj::Array& x) { return xj::sum(clip_gradient(x) * 5.0); })(xj::array({1.f, 2.f}))), {1, 1}, 0,
              "clip_gradient");
  expect_near(values(xj::grad([](const xj::Array& x) { return xj::sum(log1pexp(x)); })(xj::array({0.f, 100.f, 1000.f}))), {0.5, 1, 1},
              1e-7, "log1pexp's derivative");
  draw();
  train();
  // "row 0 twice: 2, row 2: 1"; "elements (0, 0) and (2, 2)" set to -1
  const std::string updated = printed(indexed_updates);
  expect_printed(updated, "f32[4,3] [2, 2, 2, 0, 0, 0, 1, 1, 1, 0, 0, 0]", "indexed_updates()'s add");
  expect_printed(updated, "f32[4,3] [-1, 2, 2, 0, 0, 0, 1, 1, -1, 0, 0, 0]", "indexed_updates()'s set");
  // "bf16, like its primal"; "the update in f32"; bf16's eps is 2^-7
  expect(std::ldexp(1.0, -7) == 0.0078125, "bf16's eps");
  expect_printed(printed(mixed_precision), "bf16[64,64] f32[64,64] 0.0078125", "mixed_precision()");
  expect_printed(printed(save_and_load), "f32[3,1] [1, 1, 1]", "save_and_load()");
  {  // "b again"; -b^T a^-1 b / s^2 at s = 2 (a^-1 b by Cramer's rule); m^-T
    const std::string la = printed(linear_algebra);
    expect_printed(la, "f64[3] [1, 2, 3]", "linear_algebra()'s a x");
    using M3 = std::array<std::array<double, 3>, 3>;
    auto det3 = [](const M3& m) {
      return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
             m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    };
    const M3 a{{{4, 1, 0}, {1, 3, 1}, {0, 1, 2}}};
    const std::array<double, 3> b{1, 2, 3};
    double quadratic = 0;
    for (int c = 0; c < 3; ++c) {
      M3 replaced = a;
      for (int r = 0; r < 3; ++r) replaced[r][c] = b[r];
      quadratic -= b[c] * det3(replaced) / det3(a) / 4;
    }
    const std::size_t at = la.find("f64[] [");
    expect(at != std::string::npos && std::abs(std::stod(la.substr(at + 7)) - quadratic) < 1e-12,
           "linear_algebra()'s d/ds is -b^T a^-1 b / s^2 = " + std::to_string(quadratic) + ": " + la);
    expect_printed(la, "f64[2,2] [-0.5, 0.5, 1, 0] f64[2,2] [-0.5, 0.5, 1, 0]", "linear_algebra()'s m^-T");
  }
  {  // "SAME" 3x3 sums of the 4x4 ramp, by a loop; stride 2 gives 2x2; VALID's input gradient is 4x4; pooling maxima
    std::ostringstream want;
    want << "f32[1,1,4,4] [";
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        int s = 0;
        for (int di = -1; di <= 1; ++di)
          for (int dj = -1; dj <= 1; ++dj)
            if (i + di >= 0 && i + di < 4 && j + dj >= 0 && j + dj < 4) s += 4 * (i + di) + (j + dj);
        want << s << (i == 3 && j == 3 ? "]" : ", ");
      }
    const std::string conv_out = printed(convolution);
    expect_printed(conv_out, want.str(), "convolution()'s SAME sums");
    expect_printed(conv_out, "2x2\n4\nf32[1,2,2,1] [5, 7, 13, 15]", "convolution()'s shapes and max_pool");
  }
  check();
  interop();
  if (failures) {
    std::cerr << failures << " of the guide's stated results differ from what its code does\n";
    return 1;
  }
  std::cout << "the guide's stated results checked\n";
  return 0;
}
