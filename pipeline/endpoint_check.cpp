#include "pipeline/endpoint_check.hpp"

#include <cctype>

namespace kforge::pipeline {
namespace {

// sizeof(sockaddr_un::sun_path) - 1 on Linux: libzmq fails to bind a longer ipc path.
constexpr std::size_t max_ipc_path = 107;

bool is_wildcard(const std::string& host) { return host == "*" || host == "0.0.0.0"; }

}  // namespace

result<endpoint_parts> check_endpoint(std::string_view endpoint) {
  const auto sep = endpoint.find("://");
  if (sep == std::string_view::npos)
    return error{"malformed endpoint \"" + std::string(endpoint) +
                 "\": expected inproc://NAME, ipc://PATH or tcp://HOST:PORT"};
  for (char c : endpoint)
    if (std::isspace(static_cast<unsigned char>(c)))
      return error{"malformed endpoint \"" + std::string(endpoint) + "\": contains whitespace"};
  endpoint_parts p;
  p.scheme = std::string(endpoint.substr(0, sep));
  p.address = std::string(endpoint.substr(sep + 3));
  if (p.scheme != "inproc" && p.scheme != "ipc" && p.scheme != "tcp")
    return error{"malformed endpoint \"" + std::string(endpoint) + "\": unknown scheme \"" +
                 p.scheme + "\" (expected inproc, ipc or tcp)"};
  if (p.address.empty())
    return error{"malformed endpoint \"" + std::string(endpoint) + "\": empty address"};
  if (p.scheme == "ipc" && p.address.size() > max_ipc_path)
    return error{"ipc path of endpoint \"" + std::string(endpoint) + "\" is " +
                 std::to_string(p.address.size()) + " bytes, more than a Unix socket allows (" +
                 std::to_string(max_ipc_path) + ")"};
  if (p.scheme != "tcp") return p;

  const auto colon = p.address.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return error{"malformed endpoint \"" + std::string(endpoint) + "\": tcp needs HOST:PORT"};
  p.host = p.address.substr(0, colon);
  const std::string port = p.address.substr(colon + 1);
  // Other processes must know where to connect, so an ephemeral port ("*" or 0) cannot work here.
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  p.port = digits ? std::stoi(port) : 0;
  if (p.port < 1 || p.port > 65535)
    return error{"malformed endpoint \"" + std::string(endpoint) +
                 "\": port must be a number in 1..65535 (a manifest needs a fixed port that "
                 "other processes can connect to)"};
  if (p.host == "localhost") p.host = "127.0.0.1";
  return p;
}

bool endpoints_clash(const endpoint_parts& a, const endpoint_parts& b) {
  if (a.scheme != b.scheme) return false;
  if (a.scheme != "tcp") return a.address == b.address;
  return a.port == b.port && (a.host == b.host || is_wildcard(a.host) || is_wildcard(b.host));
}

}  // namespace kforge::pipeline
