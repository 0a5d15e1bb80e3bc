// xjax-fuzz: the differential fuzzer. Builds random programs from seeds and checks oracles that a
// shared bug cannot fool (docs/testing.md).
//   xjax-fuzz [--seed-start S] [--seeds N] [--seconds T] [--verbose] [--coverage]
//             [--require-every-primitive]  (fails when a primitive is in no program's jaxprs)
//   xjax-fuzz --seed K            (one seed: reproduce a failure; prints the program with --verbose)
// Exits non-zero when any check failed.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <unistd.h>

#include "oracles.hpp"

namespace {

void on_crash(int sig) {
  const char* what = fuzz::current_activity();
  const char* head = "\nxjax-fuzz: crashed (signal) while checking ";
  (void)!write(2, head, std::strlen(head));
  (void)!write(2, what, std::strlen(what));
  (void)!write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

[[noreturn]] void usage() {
  std::cerr << "usage: xjax-fuzz [--seed-start S] [--seeds N] [--seconds T] [--verbose] [--coverage]\n"
               "                 [--require-every-primitive] | --seed K\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t start = 1;
  long seeds = -1;
  double seconds = -1;
  bool coverage = false;
  bool require_all = false;
  fuzz::Options opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--seed-start") start = std::stoull(value());
    else if (a == "--seeds") seeds = std::stol(value());
    else if (a == "--seconds") seconds = std::stod(value());
    else if (a == "--seed") start = std::stoull(value()), seeds = 1;
    else if (a == "--verbose") opts.verbose = true;
    else if (a == "--coverage") coverage = true, opts.primitives = true;
    else if (a == "--require-every-primitive") require_all = true, opts.primitives = true;
    else usage();
  }
  if (seeds < 0 && seconds < 0) seeds = 100;
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, on_crash);

  fuzz::Stats stats;
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (std::uint64_t seed = start;; ++seed) {
    if (seeds >= 0 && seed - start >= static_cast<std::uint64_t>(seeds)) break;
    if (seconds >= 0 && elapsed() >= seconds) break;
    bool ok = fuzz::check_program(seed, stats, opts, std::cout);
    if (opts.verbose) std::cout << "seed " << seed << (ok ? " ok" : " FAILED") << "\n";
    std::cout.flush();
  }
  if (coverage) {
    std::cout << "coverage (programs containing each op / variant):\n";
    for (const auto& [what, n] : stats.coverage) std::cout << "  " << what << ": " << n << "\n";
    std::cout << "checks per oracle:\n";
    for (const auto& [what, n] : stats.oracles) std::cout << "  " << what << ": " << n << "\n";
    std::cout << "programs whose jaxprs (f, grad, linearize) hold each primitive:\n";
    for (const auto& [what, n] : stats.primitives) std::cout << "  " << what << ": " << n << "\n";
  }
  if (require_all) stats.failures += fuzz::report_unfuzzed_primitives(stats, std::cout);
  std::cout << "seeds " << start << ".." << start + static_cast<std::uint64_t>(stats.programs) - 1 << " in "
            << static_cast<int>(elapsed()) << " s: " << stats.expected_errors << " documented TransformErrors, "
            << stats.fd_skipped << " programs without finite differences (near a kink)\n";
  std::cout << stats.programs << " programs, " << stats.checks << " checks, " << stats.failures << " failures\n";
  return stats.failures == 0 ? 0 : 1;
}
