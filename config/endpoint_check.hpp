#pragma once
// The manifest's check of endpoint strings, so a bad one is rejected before anything starts:
// bus/endpoint.hpp's parser plus the rule a topology adds (a fixed tcp port).

#include <string>
#include <string_view>

#include "common/result.hpp"

namespace kforge::pipeline {

/// An endpoint split into its parts.
struct endpoint_parts {
  std::string scheme;   ///< "inproc", "ipc" or "tcp"
  std::string address;  ///< everything after "://"
  std::string host;     ///< tcp only; "localhost" is normalised to "127.0.0.1"
  int port = 0;         ///< tcp only
};

/// Checks `scheme://address` with scheme inproc, ipc or tcp and a non-empty address; tcp needs
/// HOST:PORT with a fixed port, ipc a path short enough for a Unix socket. The error's message is
/// the reason only: the caller adds file and key.
result<endpoint_parts> check_endpoint(std::string_view endpoint);

/// Whether two checked endpoints would bind the same socket (same string, or tcp on the same port
/// where one host is a wildcard or both are the same host).
bool endpoints_clash(const endpoint_parts& a, const endpoint_parts& b);

}  // namespace kforge::pipeline
