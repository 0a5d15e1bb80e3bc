// distributed_abort.cpp: process 1 throws an exception nobody catches while process 0 waits in a
// collective. The run must end at once with the exception's message (xj::distributed aborts the
// communicator from std::terminate), not hang: meson expects a failure well within its timeout.
#include <stdexcept>

#include <xjax/xjax.hpp>

namespace xj = xjax;

int main(int argc, char** argv) {
  xj::distributed::initialize(argc, argv);
  if (xj::distributed::process_index() == 1) throw std::runtime_error("deliberate failure on process 1");
  (void)xj::psum(xj::scalar(1.0, xj::f64)).item<double>();  // process 0 waits here
  xj::distributed::finalize();
  return 0;
}
