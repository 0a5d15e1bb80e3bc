// errors.hpp: the exception hierarchy. Every xjax error derives from xj::Error.
#pragma once
#include <source_location>
#include <stdexcept>
#include <string>

namespace xjax {

/// Base of all xjax errors.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Operand shapes that an operation cannot accept.
struct ShapeError : Error { using Error::Error; };
/// Operand dtypes that an operation cannot accept.
struct TypeError : Error { using Error::Error; };
/// A tracer used outside the trace that created it, or a concrete value demanded of a tracer.
struct TracerError : Error { using Error::Error; };
/// check_grads found a derivative that disagrees with finite differences.
struct GradCheckError : Error { using Error::Error; };
/// A transform applied to something it cannot handle (e.g. reverse mode of while_loop).
struct TransformError : Error { using Error::Error; };
/// A failure inside xjax that no user input should cause (a broken invariant of a pass). The
/// transforms and eval_jaxpr raise it instead of letting a standard library exception (such as
/// std::out_of_range) escape; `what()` names the pass.
struct InternalError : Error {
  InternalError(const std::string& pass, const std::string& what)
      : Error("internal error in xjax (this is a bug in xjax, please report it): " + pass + ": " + what) {}
};

/// "file:line" of a source location.
std::string format_location(const std::source_location& loc);

}  // namespace xjax
