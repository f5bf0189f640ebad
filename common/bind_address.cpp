#include "common/bind_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <string_view>

namespace kforge {
namespace {

// NAME's first IPv4 address on this host, or NAME itself when it has none. IPv4 because kforge's
// sockets leave ZMQ_IPV6 off, so an IPv6 address could not be bound anyway.
std::string resolve_ipv4(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return name;
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) == nullptr) return name;
  return text;
}

bool is_ip_literal(const std::string& host) {
  if (!host.empty() && host.front() == '[') return true;  // IPv6, written in brackets
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

}  // namespace

std::string bind_address(const std::string& endpoint) {
  constexpr std::string_view scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return endpoint;
  const auto colon = endpoint.rfind(':');
  if (colon < scheme.size()) return endpoint;  // no :PORT: let the bind report it
  const std::string host = endpoint.substr(scheme.size(), colon - scheme.size());
  const std::string port = endpoint.substr(colon);
  if (host == "*" || host == "0.0.0.0") return "tcp://*" + port;
  if (is_ip_literal(host)) return endpoint;
  return "tcp://" + resolve_ipv4(host) + port;
}

}  // namespace kforge
