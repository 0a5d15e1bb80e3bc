// residual_mlp_policies: what each checkpoint policy saves for one residual MLP layer.
//
// Reverse mode keeps "residuals": values computed in the forward pass that the backward pass
// needs. xj::checkpoint(f) keeps only f's inputs and recomputes the rest in the backward pass; a
// policy picks intermediates to keep anyway. xj::saved_residuals / xj::print_saved_residuals
// report what is kept, with its shape and where it comes from. docs/checkpointing.md explains
// each line printed here.
#include <xjax/xjax.hpp>

#include "example_flags.hpp"

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace xj = xjax;
namespace policies = xjax::checkpoint_policies;

// y + relu(y @ W1) @ W2, with the pre-activation and the hidden activation named.
xj::Array layer(const xj::Array& y, const xj::Array& w1, const xj::Array& w2) {
  xj::Array z = xj::checkpoint_name(xj::matmul(y, w1), "pre");
  xj::Array h = xj::checkpoint_name(xj::relu(z), "hidden");
  return y + xj::matmul(h, w2);
}

int example_main(int argc, char** argv) {
  example_flags::Flags("residual_mlp_policies", "usage: residual_mlp_policies   (no flags)\n").parse(argc, argv);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "residual_mlp_policies: FAILED: %s\n", what.c_str());
      ++failures;
    }
  };

  const std::int64_t N = 8, d = 4, H = 16;
  xj::Array k = xj::random::split(xj::random::key(0), 3);
  xj::Array y = xj::random::normal(k[0], {N, d});
  xj::Array w1 = xj::random::normal(k[1], {d, H}) * 0.5;
  xj::Array w2 = xj::random::normal(k[2], {H, d}) * 0.25;

  struct Case {
    std::string name;
    bool checkpointed;
    std::optional<xj::Policy> policy;
  };
  std::vector<Case> cases = {
      {"no checkpoint", false, std::nullopt},
      {"checkpoint (no policy = nothing_saveable)", true, std::nullopt},
      {"everything_saveable", true, policies::everything_saveable},
      {"dots_saveable", true, policies::dots_saveable},
      {"dots_with_no_batch_dims_saveable", true, policies::dots_with_no_batch_dims_saveable},
      {"save_only_these_names({hidden})", true, policies::save_only_these_names({"hidden"})},
      {"save_only_these_names({pre})", true, policies::save_only_these_names({"pre"})},
      {"save_any_names_but_these({hidden})", true, policies::save_any_names_but_these({"hidden"})},
      {"save_anything_except_these_names({pre, hidden})", true,
       policies::save_anything_except_these_names({"pre", "hidden"})},
      {"save_from_both_policies(dots_saveable, save_only_these_names({hidden}))", true,
       policies::save_from_both_policies(policies::dots_saveable, policies::save_only_these_names({"hidden"}))},
  };

  // The reference gradient (no checkpoint) of a scalar loss of the layer w.r.t. all three
  // arguments, passed as one pytree (a tuple) so the gradient is a tuple too.
  using Args = std::tuple<xj::Array, xj::Array, xj::Array>;
  auto loss_of = [](auto f) {
    return [f](const Args& a) {
      xj::Array out = f(std::get<0>(a), std::get<1>(a), std::get<2>(a));
      return xj::sum(out * out);
    };
  };
  Args args{y, w1, w2};
  Args want = xj::grad(loss_of(layer))(args);

  for (const auto& c : cases) {
    // The policy is an option of checkpoint; without checkpoint there is no policy.
    std::function<xj::Array(const xj::Array&, const xj::Array&, const xj::Array&)> f = layer;
    if (c.checkpointed) f = xj::checkpoint(layer, {.policy = c.policy});

    std::cout << "== " << c.name << " ==\n";
    xj::print_saved_residuals(f, y, w1, w2);  // one line per residual: type, then its origin

    // The same information as data: count what is not an argument.
    std::vector<std::string> computed;
    for (const auto& r : xj::saved_residuals(f, y, w1, w2))
      if (r.description.rfind("from the argument", 0) != 0) computed.push_back(r.description);
    auto has = [&](const std::string& prefix) {
      for (const auto& s : computed)
        if (s.rfind(prefix, 0) == 0) return true;
      return false;
    };

    // (relu's mask is rebuilt from its saved output, so 'hidden' is the one intermediate kept)
    if (c.name == "no checkpoint") expect(computed.size() == 1 && has("named 'hidden'"), c.name + ": saves the hidden activation");
    if (c.name.rfind("checkpoint (no policy", 0) == 0) expect(computed.empty(), c.name + ": saves only the arguments");
    if (c.name == "save_only_these_names({hidden})")
      expect(computed.size() == 1 && has("named 'hidden'"), c.name + ": saves exactly 'hidden'");
    if (c.name == "save_only_these_names({pre})")
      expect(computed.size() == 1 && has("named 'pre'"), c.name + ": saves exactly 'pre'");
    if (c.name == "save_any_names_but_these({hidden})")
      expect(!has("named 'hidden'") && has("named 'pre'"), c.name + ": saves 'pre' but not 'hidden'");
    if (c.name == "save_anything_except_these_names({pre, hidden})")
      expect(!has("named 'hidden'") && !has("named 'pre'"), c.name + ": saves neither name");

    // The policy changes what is stored, never the derivative.
    Args got = xj::grad(loss_of(f))(args);
    auto same = [](const xj::Array& a, const xj::Array& b) {
      auto va = a.to_vector<double>(), vb = b.to_vector<double>();
      for (std::size_t i = 0; i < va.size(); ++i)
        if (std::fabs(va[i] - vb[i]) > 1e-5 * (1 + std::fabs(vb[i]))) return false;
      return va.size() == vb.size();
    };
    expect(same(std::get<0>(got), std::get<0>(want)) && same(std::get<1>(got), std::get<1>(want)) &&
               same(std::get<2>(got), std::get<2>(want)),
           c.name + ": same gradient as without checkpoint");
    std::cout << "\n";
  }

  if (failures) return 1;
  std::cout << "residual_mlp_policies: all checks passed\n";
  return 0;
}

int main(int argc, char** argv) { return example_flags::guarded_main("residual_mlp_policies", example_main, argc, argv); }
