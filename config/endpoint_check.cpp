#include "config/endpoint_check.hpp"

#include "bus/endpoint.hpp"

namespace kforge::pipeline {

namespace {
bool is_wildcard(const std::string& host) { return host == "*" || host == "0.0.0.0"; }
}  // namespace

// The syntax (and the ipc path limit) is bus/endpoint.hpp's; the manifest adds what a topology
// needs on top: a fixed tcp port other processes can connect to.
result<endpoint_parts> check_endpoint(std::string_view text) {
  auto e = bus::parse_endpoint(text);
  if (!e) return error{"malformed " + e.message()};
  endpoint_parts p;
  p.scheme = std::string(bus::transport_name(e->kind));
  p.address = e->address;
  if (e->kind != bus::transport::tcp) return p;
  if (!e->port || *e->port == 0)
    return error{"malformed endpoint \"" + std::string(text) +
                 "\": port must be a number in 1..65535 (a manifest needs a fixed port that "
                 "other processes can connect to)"};
  p.host = e->host == "localhost" ? "127.0.0.1" : e->host;
  p.port = *e->port;
  return p;
}

bool endpoints_clash(const endpoint_parts& a, const endpoint_parts& b) {
  if (a.scheme != b.scheme) return false;
  if (a.scheme != "tcp") return a.address == b.address;
  return a.port == b.port && (a.host == b.host || is_wildcard(a.host) || is_wildcard(b.host));
}

}  // namespace kforge::pipeline
