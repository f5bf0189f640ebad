#include "bus/endpoint.hpp"

#include <cctype>

namespace kforge::bus {
namespace {

// sizeof(sockaddr_un::sun_path) - 1 on Linux: libzmq cannot bind a longer ipc path.
constexpr std::size_t max_ipc_path = 107;
// RFC 1035 bound on a host name; also keeps a runaway string out of error messages' way.
constexpr std::size_t max_host = 253;

error bad(std::string_view text, const std::string& why) {
  return error{"endpoint \"" + std::string(text) + "\": " + why};
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

bool is_ipv6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

// Checks HOST:PORT of a tcp endpoint and fills host and port.
status parse_tcp(std::string_view text, endpoint& e) {
  const std::string& a = e.address;
  if (a.find(';') != std::string::npos)
    return bad(text, "source-address syntax (\"SRC;HOST:PORT\") is not supported");
  const auto colon = a.rfind(':');
  if (colon == std::string::npos) return bad(text, "tcp needs HOST:PORT, and there is no ':PORT'");
  std::string host = a.substr(0, colon);
  const std::string port = a.substr(colon + 1);
  if (host.empty()) return bad(text, "tcp host is empty (write * for all interfaces)");

  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']')
      return bad(text, "IPv6 host must be written [ADDRESS]");
    host = host.substr(1, host.size() - 2);
    for (char c : host)
      if (!is_ipv6_char(c)) return bad(text, "IPv6 host contains '" + std::string(1, c) + "'");
    if (host.find(':') == std::string::npos) return bad(text, "IPv6 host has no ':'");
  } else if (host != "*") {
    if (host.find(':') != std::string::npos)
      return bad(text, "IPv6 host must be written in brackets, e.g. tcp://[::1]:5555");
    if (host.size() > max_host)
      return bad(text, "host is longer than " + std::to_string(max_host) + " characters");
    for (char c : host)
      if (!is_name_char(c)) return bad(text, "host contains '" + std::string(1, c) + "'");
  }
  e.host = std::move(host);

  if (port == "*") return status::success();
  if (port.empty()) return bad(text, "port is empty (write * for an ephemeral port)");
  if (port.size() > 5) return bad(text, "port \"" + port + "\" is not in 1..65535");
  for (char c : port)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return bad(text, "port \"" + port + "\" is not a number (or *)");
  const int n = std::stoi(port);
  if (n == 0) return bad(text, "port 0 is not allowed: write * for an ephemeral port");
  if (n > 65535) return bad(text, "port " + port + " is not in 1..65535");
  e.port = static_cast<std::uint16_t>(n);
  return status::success();
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

std::string_view transport_name(transport t) noexcept {
  switch (t) {
    case transport::inproc:
      return "inproc";
    case transport::ipc:
      return "ipc";
    case transport::tcp:
      return "tcp";
  }
  return "unknown";
}

bool endpoint::is_host_local() const noexcept {
  return kind != transport::tcp || is_loopback(host);
}

bool endpoint::is_wildcard() const noexcept {
  switch (kind) {
    case transport::inproc:
      return false;
    case transport::ipc:
      return address == "*";
    case transport::tcp:
      return host == "*" || !port.has_value();
  }
  return false;
}

result<endpoint> parse_endpoint(std::string_view text) {
  const auto sep = text.find("://");
  if (sep == std::string_view::npos)
    return bad(text, "expected inproc://NAME, ipc://PATH or tcp://HOST:PORT");
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\0')
      return bad(text, "contains whitespace or a NUL byte");
  }
  endpoint e;
  e.text = std::string(text);
  e.address = std::string(text.substr(sep + 3));
  const auto scheme = text.substr(0, sep);
  if (scheme == "inproc") {
    e.kind = transport::inproc;
  } else if (scheme == "ipc") {
    e.kind = transport::ipc;
  } else if (scheme == "tcp") {
    e.kind = transport::tcp;
  } else {
    return bad(text,
               "unknown transport \"" + std::string(scheme) + "\" (expected inproc, ipc or tcp)");
  }
  if (e.address.empty()) return bad(text, "address after \"://\" is empty");

  switch (e.kind) {
    case transport::inproc:
      break;
    case transport::ipc:
      if (e.address.size() > max_ipc_path)
        return bad(text, "ipc path is " + std::to_string(e.address.size()) +
                             " bytes; a Unix socket path holds at most " +
                             std::to_string(max_ipc_path));
      break;
    case transport::tcp:
      if (auto s = parse_tcp(text, e); !s) return s.err();
      break;
  }
  return e;
}

result<endpoint> parse_connectable(std::string_view text) {
  auto e = parse_endpoint(text);
  if (e.ok() && e->is_wildcard())
    return bad(text, "a wildcard (\"*\") can be bound but not connected to");
  return e;
}

bool clashes(const endpoint& a, const endpoint& b) noexcept {
  if (a.kind != b.kind) return false;
  if (a.kind != transport::tcp) return a.address == b.address && a.address != "*";
  if (!a.port || !b.port || *a.port != *b.port) return false;
  return a.host == b.host || a.host == "*" || b.host == "*";
}

}  // namespace kforge::bus
