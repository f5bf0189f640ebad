#include <doctest/doctest.h>

#include "bus/channel.hpp"
#include "bus/endpoint.hpp"

using namespace kforge::bus;

TEST_CASE("good endpoints parse into their parts") {
  auto a = parse_endpoint("inproc://rollout.candidates");
  REQUIRE(a.ok());
  CHECK(a->kind == transport::inproc);
  CHECK(a->address == "rollout.candidates");
  CHECK(a->is_local_only());
  CHECK(a->is_host_local());
  CHECK_FALSE(a->is_wildcard());

  auto b = parse_endpoint("ipc:///tmp/kforge/sandbox.ipc");
  REQUIRE(b.ok());
  CHECK(b->kind == transport::ipc);
  CHECK(b->address == "/tmp/kforge/sandbox.ipc");
  CHECK_FALSE(b->is_local_only());
  CHECK(b->is_host_local());

  auto c = parse_endpoint("tcp://10.0.0.7:5555");
  REQUIRE(c.ok());
  CHECK(c->host == "10.0.0.7");
  REQUIRE(c->port.has_value());
  CHECK(*c->port == 5555);
  CHECK_FALSE(c->is_host_local());
  CHECK_FALSE(c->is_wildcard());

  auto d = parse_endpoint("tcp://*:6000");
  REQUIRE(d.ok());
  CHECK(d->host == "*");
  CHECK(d->is_wildcard());

  auto e = parse_endpoint("tcp://127.0.0.1:*");
  REQUIRE(e.ok());
  CHECK_FALSE(e->port.has_value());
  CHECK(e->is_wildcard());
  CHECK(e->is_host_local());

  auto f = parse_endpoint("tcp://[::1]:80");
  REQUIRE(f.ok());
  CHECK(f->host == "::1");
  CHECK(f->is_host_local());

  CHECK(parse_endpoint("tcp://trainer-0.cluster.local:7000").ok());
  CHECK(parse_endpoint("ipc://@abstract-name").ok());
  CHECK(parse_endpoint("tcp://localhost:1").ok());
  CHECK(parse_endpoint("tcp://localhost:65535").ok());
}

TEST_CASE("bad endpoints fail with the string and the reason") {
  struct bad_case {
    std::string text;
    std::string reason;
  };
  const bad_case cases[] = {
      {"", "expected inproc://NAME"},
      {"localhost:5555", "expected inproc://NAME"},
      {"udp://127.0.0.1:5", "unknown transport \"udp\""},
      {"inproc://", "empty"},
      {"ipc://" + std::string(200, 'p'), "Unix socket path"},
      {"tcp://127.0.0.1", "no ':PORT'"},
      {"tcp://127.0.0.1:0", "port 0"},
      {"tcp://127.0.0.1:65536", "not in 1..65535"},
      {"tcp://127.0.0.1:http", "not a number"},
      {"tcp://127.0.0.1:", "port is empty"},
      {"tcp://:5555", "host is empty"},
      {"tcp://::1:5555", "brackets"},
      {"tcp://[::1:5555", "[ADDRESS]"},
      {"tcp://[zz::1]:5555", "IPv6 host contains"},
      {"tcp://host/x:5555", "host contains '/'"},
      {"tcp://eth0;10.0.0.1:5555", "source-address"},
      {"tcp://127.0.0.1: 5555", "whitespace"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = parse_endpoint(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("\"" + c.text + "\"") != std::string::npos);
    CHECK(r.message().find(c.reason) != std::string::npos);
  }
}

TEST_CASE("wildcards can be bound but not connected to") {
  CHECK(parse_connectable("tcp://127.0.0.1:5555").ok());
  CHECK(parse_connectable("inproc://x").ok());
  auto r = parse_connectable("tcp://*:5555");
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("not connected to") != std::string::npos);
  CHECK_FALSE(parse_connectable("tcp://127.0.0.1:*").ok());
}

TEST_CASE("clashes: same name, path, or fixed port on overlapping hosts") {
  auto p = [](const char* s) { return parse_endpoint(s).value(); };
  CHECK(clashes(p("inproc://a"), p("inproc://a")));
  CHECK_FALSE(clashes(p("inproc://a"), p("inproc://b")));
  CHECK(clashes(p("ipc:///tmp/a"), p("ipc:///tmp/a")));
  CHECK(clashes(p("tcp://*:5555"), p("tcp://127.0.0.1:5555")));
  CHECK(clashes(p("tcp://10.0.0.1:5555"), p("tcp://10.0.0.1:5555")));
  CHECK_FALSE(clashes(p("tcp://10.0.0.1:5555"), p("tcp://10.0.0.2:5555")));
  CHECK_FALSE(clashes(p("tcp://127.0.0.1:*"), p("tcp://127.0.0.1:*")));
  CHECK_FALSE(clashes(p("tcp://127.0.0.1:5555"), p("tcp://127.0.0.1:5556")));
  CHECK_FALSE(clashes(p("inproc://a"), p("ipc://a")));
}

TEST_CASE("opening a socket on a bad or taken endpoint is an error value, not an exception") {
  auto bad = receiver::bind("tcp://127.0.0.1:0");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("port 0") != std::string::npos);

  auto first = receiver::bind("tcp://127.0.0.1:*");
  REQUIRE(first.ok());
  auto second = receiver::bind(first->last_endpoint());
  REQUIRE_FALSE(second.ok());
  CHECK(second.message().find(first->last_endpoint()) != std::string::npos);

  auto twice = receiver::bind("inproc://endpoint-test-twice");
  REQUIRE(twice.ok());
  CHECK_FALSE(receiver::bind("inproc://endpoint-test-twice").ok());

  auto wild = sender::connect("tcp://*:5555");
  REQUIRE_FALSE(wild.ok());
}
