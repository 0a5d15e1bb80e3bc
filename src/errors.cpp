// errors.cpp: turning exceptions that escape a pass into xj::InternalError (see internal.hpp).
#include <exception>
#include <new>

#include "internal.hpp"
#include "per_thread.hpp"
#include "xjax/errors.hpp"

namespace xjax::detail {
namespace {
// The last exception user code threw on this thread (compared by identity: a rethrown exception
// is the same object).
struct UserException {
  std::exception_ptr thrown;
};
std::exception_ptr& user_exception() { return per_thread_always<UserException>().thrown; }
}  // namespace

void mark_user_exception() { user_exception() = std::current_exception(); }

void rethrow_internal(const char* pass) {
  std::exception_ptr current = std::current_exception();
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    if (current == user_exception()) throw;
    throw InternalError(pass, e.what());
  }
  // Not a std::exception: only user code throws those; it propagated from the try above.
}

}  // namespace xjax::detail
