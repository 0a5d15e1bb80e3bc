// example_flags.hpp: the examples' command lines, parsed one strict way, and their main wrapped so
// that an error is a message, not an abort.
//
//   example_flags::Flags flags("char_rnn", "usage: char_rnn [--steps S] [--lr LR]\n");
//   flags.integer("--steps", steps, 1);  // an integer >= 1, the whole argument ("10x" is refused)
//   flags.real("--lr", lr);              // a finite number > 0
//   flags.parse(argc, argv);
//
// Every argument must be a known flag, and a flag that takes a value must have one. `--help` (or
// `-h`) prints the usage to stdout and exits 0; anything else wrong prints "NAME: <problem>" and
// the usage to stderr and exits 2. guarded_main runs an example's body and turns an exception that
// escapes it (an xj::Error, a failed allocation) into "NAME: <what>" on stderr and exit status 1.
#pragma once

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace example_flags {

// The whole of s as a decimal integer (no sign but '-', no spaces, no suffix).
inline bool parse_integer(const std::string& s, std::int64_t& out) {
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return !s.empty() && ec == std::errc() && ptr == end;
}

// The whole of s as a finite number.
inline bool parse_real(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE && std::isfinite(out);
}

class Flags {
 public:
  // usage: the text --help prints and an error follows with, "usage: NAME [--flag V] ...\n" (and
  // any lines that explain the flags).
  Flags(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  // A flag whose value `accept` checks and stores: it returns "" when it takes the value, else
  // the problem ("needs ..."), which is reported after the flag's name.
  void value(const std::string& flag, std::function<std::string(const std::string&)> accept) {
    flags_.push_back({flag, true, std::move(accept), nullptr});
  }
  // A flag without a value: `on_seen` runs when it is given.
  void toggle(const std::string& flag, std::function<void()> on_seen) { flags_.push_back({flag, false, nullptr, std::move(on_seen)}); }

  void integer(const std::string& flag, std::int64_t& target, std::int64_t min) {
    value(flag, [&target, min](const std::string& v) -> std::string {
      std::int64_t n = 0;
      if (!parse_integer(v, n) || n < min) return "needs an integer >= " + std::to_string(min);
      target = n;
      return "";
    });
  }
  void integer(const std::string& flag, int& target, int min) {
    value(flag, [&target, min](const std::string& v) -> std::string {
      std::int64_t n = 0;
      if (!parse_integer(v, n) || n < min || n > 1000000000) return "needs an integer from " + std::to_string(min) + " to 1000000000";
      target = static_cast<int>(n);
      return "";
    });
  }
  // A finite number > 0.
  void real(const std::string& flag, double& target) {
    value(flag, [&target](const std::string& v) -> std::string {
      double x = 0;
      if (!parse_real(v, x) || !(x > 0)) return "needs a number > 0";
      target = x;
      return "";
    });
  }
  // One of `choices`.
  void choice(const std::string& flag, std::string& target, const std::vector<std::string>& choices) {
    std::string names;
    for (const std::string& c : choices) names += (names.empty() ? "" : ", ") + c;
    value(flag, [&target, choices, names](const std::string& v) -> std::string {
      for (const std::string& c : choices)
        if (v == c) {
          target = v;
          return "";
        }
      return "needs one of " + names;
    });
  }
  void text(const std::string& flag, std::string& target) {
    value(flag, [&target](const std::string& v) -> std::string {
      if (v.empty()) return "needs a non-empty value";
      target = v;
      return "";
    });
  }

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(usage_.c_str(), stdout);
        std::exit(0);
      }
      const Flag* f = find(a);
      if (!f) fail("unknown argument '" + a + "'");
      if (!f->takes_value) {
        f->on_seen();
        continue;
      }
      if (i + 1 >= argc) fail(a + " needs a value");
      const std::string v = argv[++i];
      const std::string problem = f->accept(v);
      if (!problem.empty()) fail(a + " " + problem + ", got '" + v + "'");
    }
  }

  // "NAME: problem" and the usage on stderr, exit status 2: for checks across flags after parse.
  [[noreturn]] void fail(const std::string& problem) const {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), problem.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  struct Flag {
    std::string name;
    bool takes_value;
    std::function<std::string(const std::string&)> accept;
    std::function<void()> on_seen;
  };
  const Flag* find(const std::string& name) const {
    for (const Flag& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }

  std::string program_, usage_;
  std::vector<Flag> flags_;
};

// main's body, run so that an exception is a one-line message and exit status 1, not an abort.
inline int guarded_main(const char* program, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: an unknown exception\n", program);
  }
  return 1;
}

}  // namespace example_flags
