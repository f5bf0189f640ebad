#include "bus/context.hpp"

namespace kforge::bus {

zmq::context_t& shared_context() {
  static zmq::context_t ctx = [] {
    zmq::context_t c(1);
    c.set(zmq::ctxopt::blocky, false);
    return c;
  }();
  return ctx;
}

}  // namespace kforge::bus
