#pragma once
// The process's one zmq context. Sockets are owned by exactly one object (and so one thread) at a
// time; only this context is shared, which is what zmq allows (zguide ch. 2, "one context per
// process").

#include <zmq.hpp>

namespace kforge::bus {

/// The process-wide context, created on first use with one I/O thread and BLOCKY off, so that
/// terminating it never waits on unsent messages (every kforge socket also sets LINGER=0).
/// It lives until static destruction; every socket must be closed by then.
zmq::context_t& shared_context();

}  // namespace kforge::bus
