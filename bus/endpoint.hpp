#pragma once
// Endpoint strings, parsed and checked before a socket ever sees them, so a manifest or a caller
// gets "which string, what is wrong" instead of zmq's bare EINVAL at bind time.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace kforge::bus {

/// The transports kforge uses; zmq's others (pgm, udp, vmci, ...) are refused on purpose.
enum class transport { inproc, ipc, tcp };

/// A parsed endpoint. `text` is what zmq is given; the other fields are its parts.
struct endpoint {
  transport kind = transport::inproc;
  std::string text;     ///< the full string, e.g. "tcp://127.0.0.1:5555"
  std::string address;  ///< everything after "://"
  std::string host;     ///< tcp only: "*", an IPv4/IPv6 address (IPv6 without brackets) or a name
  std::optional<std::uint16_t> port;  ///< tcp only; empty for "*" (the OS picks one at bind)

  /// Only reachable from inside this process (inproc): a manifest must not name it for a link
  /// between processes.
  bool is_local_only() const noexcept { return kind == transport::inproc; }
  /// Reachable only from this host (inproc, ipc, or tcp on a loopback address).
  bool is_host_local() const noexcept;
  /// Host "*" (all interfaces) or port "*" (ephemeral): fine to bind, impossible to connect to.
  bool is_wildcard() const noexcept;
};

/// Parses and checks `text` (inproc://NAME, ipc://PATH, tcp://HOST:PORT with HOST or PORT
/// possibly "*"). The error names the string and the reason.
result<endpoint> parse_endpoint(std::string_view text);

/// Parses `text` and also checks that a peer can connect to it (no "*" host or port).
result<endpoint> parse_connectable(std::string_view text);

/// Whether binding both would collide: same inproc name, same ipc path, or tcp on the same fixed
/// port where the hosts are equal or one is "*". Ephemeral ports never clash.
bool clashes(const endpoint& a, const endpoint& b) noexcept;

/// "inproc", "ipc" or "tcp".
std::string_view transport_name(transport t) noexcept;

}  // namespace kforge::bus
