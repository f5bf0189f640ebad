#include <doctest/doctest.h>

#include "bus/channel.hpp"
#include "common/bind_address.hpp"

using kforge::bind_address;
using namespace kforge::bus;

TEST_CASE("a tcp endpoint binds the interface it names, a wildcard every interface") {
  CHECK(bind_address("tcp://127.0.0.1:5555") == "tcp://127.0.0.1:5555");
  CHECK(bind_address("tcp://10.0.0.7:5555") == "tcp://10.0.0.7:5555");
  CHECK(bind_address("tcp://[::1]:5555") == "tcp://[::1]:5555");
  CHECK(bind_address("tcp://localhost:5555") == "tcp://127.0.0.1:5555");  // zmq binds no names
  CHECK(bind_address("tcp://*:5555") == "tcp://*:5555");
  CHECK(bind_address("tcp://0.0.0.0:*") == "tcp://*:*");
  CHECK(bind_address("ipc:///tmp/kforge.ipc") == "ipc:///tmp/kforge.ipc");
  CHECK(bind_address("inproc://kforge.tasks") == "inproc://kforge.tasks");
}

TEST_CASE("a loopback endpoint is bound to loopback only") {
  for (const char* endpoint : {"tcp://127.0.0.1:*", "tcp://localhost:*"}) {
    CAPTURE(endpoint);
    auto rx = receiver::bind(bind_address(endpoint));
    REQUIRE(rx.ok());
    // ZMQ_LAST_ENDPOINT: the address the socket listens on (tcp://0.0.0.0:PORT for every one).
    CHECK(rx->last_endpoint().rfind("tcp://127.0.0.1:", 0) == 0);
  }
}

TEST_CASE("a host name that does not resolve fails the bind naming it") {
  const std::string endpoint = "tcp://no-such-host.invalid:5555";
  CHECK(bind_address(endpoint) == endpoint);
  auto rx = receiver::bind(bind_address(endpoint));
  REQUIRE_FALSE(rx.ok());
  CHECK(rx.message().find("no-such-host.invalid") != std::string::npos);
}
