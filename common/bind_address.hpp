#pragma once
// The address a binding socket uses for an endpoint its peers connect to. A tcp endpoint binds
// exactly the interface it names, so a loopback endpoint is never reachable from other hosts:
//   tcp://*:PORT and tcp://0.0.0.0:PORT  every interface (the only ways to ask for that);
//   tcp://ADDRESS:PORT                   that address (IPv4 or [IPv6]);
//   tcp://NAME:PORT                      the IPv4 address NAME resolves to on this host (zmq binds
//                                        addresses and interface names, never DNS names).
// A name that does not resolve is left as written, so the bind fails naming it. A host's own name
// that resolves to loopback here (Debian's 127.0.1.1) binds loopback: endpoints that other hosts
// reach name an address they route to, or *. Other schemes bind as written. Shared by the bus
// links (runtime/process_runtime), the trainer's socket group and the port rank 0 waits on for
// ranks from other hosts.
#include <string>

namespace kforge {

std::string bind_address(const std::string& endpoint);

}  // namespace kforge
