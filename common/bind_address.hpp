#pragma once
// The address a binding socket uses for an endpoint its peers connect to: tcp://HOST:PORT binds
// every interface (tcp://*:PORT), so peers on other nodes reach it at the HOST they were given;
// other schemes bind as written. Shared by the bus links (pipeline/process_runtime), the trainer's
// socket group and the port rank 0 waits on for ranks from other hosts.
#include <string>

namespace kforge {

inline std::string bind_address(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return endpoint;
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? endpoint : "tcp://*" + endpoint.substr(colon);
}

}  // namespace kforge
