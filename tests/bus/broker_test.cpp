#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "bus/broker.hpp"
#include "bus/broker_protocol.hpp"
#include "bus/channel.hpp"
#include "bus/frames.hpp"
#include "bus/socket.hpp"
#include "bus/worker.hpp"
#include "helpers.hpp"

using namespace kforge::bus;
using namespace kforge::bus::test;
using kforge::messages::envelope;
namespace proto = kforge::bus::protocol;

namespace {

// Short intervals keep the failure tests quick; liveness is generous where a loaded 2-core CI
// machine could otherwise stall a healthy thread past it.
constexpr auto hb = 20ms;

// A result for work item `id`: same sample_id (the trace id), a distinct message id, and the
// worker's name as sender so the test can see who did it.
envelope result_for(const work_item& w, const std::string& who) {
  return kforge::messages::make_blob({w.id + 1'000'000, w.work->sample_id(), who, 0, 0}, "ok", 2);
}

/// Broker options with the tests' fast heartbeat: declared dead after `liveness` silent beats.
broker_options fast_beat(int liveness) {
  broker_options o;
  o.heartbeat_interval = hb;
  o.liveness = liveness;
  return o;
}

/// A raw worker that has taken `n` items (their ids into `held`) and then does nothing by itself:
/// no result, no heartbeat unless the test asks.
worker worker_holding(const std::string& endpoint, const std::string& name, std::uint32_t n,
                      std::set<std::uint64_t>& held) {
  worker_options wo;
  wo.name = name;
  wo.capacity = n;
  wo.heartbeat_interval = hb;
  auto w = worker::connect(endpoint, wo);
  REQUIRE(w.ok());
  REQUIRE(eventually([&] { return held.size() == n; },
                     [&] {
                       auto item = w->next(20ms);
                       REQUIRE(item.ok());
                       if (item->has_value()) held.insert((*item)->id);
                     }));
  return std::move(w).value();
}

// A broker, a producer on its frontend and a consumer on its result sink, all over tcp.
struct pool {
  receiver sink;
  broker b;
  sender producer;

  static pool make(broker_options o) {
    auto sink = receiver::bind("tcp://127.0.0.1:*");
    REQUIRE(sink.ok());
    o.results = {sink->last_endpoint(), link::connect};
    auto b = broker::create(std::move(o));
    REQUIRE(b.ok());
    auto p = sender::connect(b->frontend_endpoint());
    REQUIRE(p.ok());
    return pool{std::move(sink).value(), std::move(b).value(), std::move(p).value()};
  }

  // Sends work items first..last (64-byte blobs, the item's number as its ids).
  void send(std::uint64_t first, std::uint64_t last) {
    for (std::uint64_t i = first; i <= last; ++i) REQUIRE(producer.send(blob(i, 64), 5000ms).ok());
  }

  // Reads results until `n` arrived (or the deadline); counts them per sample id and per worker.
  void collect(std::uint64_t n, std::map<std::uint64_t, int>& per_sample,
               std::map<std::string, int>& per_worker,
               std::chrono::milliseconds timeout = 10000ms) {
    std::uint64_t got = 0;
    eventually([&] { return got >= n; },
               [&] {
                 auto r = sink.receive(50ms);
                 if (!r.ok() || !r->has_value()) return;
                 ++got;
                 ++per_sample[(**r)->sample_id()];
                 ++per_worker[(**r)->sender()->str()];
               },
               timeout);
  }
};

// A worker until `stop`: take an item, send its result.
void run_worker(const std::string& endpoint, const std::string& name, const std::atomic<bool>& stop,
                std::atomic<int>& errors, int liveness = 25) {
  worker_options wo;
  wo.name = name;
  wo.capacity = 2;
  wo.heartbeat_interval = hb;
  wo.liveness = liveness;
  auto w = worker::connect(endpoint, wo);
  if (!w.ok()) {
    ++errors;
    return;
  }
  while (!stop.load()) {
    auto item = w->next(20ms);
    if (!item.ok()) {
      ++errors;
      return;
    }
    if (!item->has_value()) continue;
    if (!w->complete((*item)->id, result_for(**item, name)).ok()) ++errors;
  }
  (void)w->leave();
}

// run_worker on its own thread, several sharing one stop flag and error count.
std::thread worker_thread(const std::string& endpoint, const std::string& name,
                          std::atomic<bool>& stop, std::atomic<int>& errors, int liveness = 25) {
  return std::thread([endpoint, name, &stop, &errors, liveness] {
    run_worker(endpoint, name, stop, errors, liveness);
  });
}

// `body(stop)` on its own thread with its own stop flag; finish() sets it and joins, and so does
// the destructor, should a REQUIRE end the test first (a joinable std::thread would terminate).
class background_thread {
 public:
  template <class Body>
  explicit background_thread(Body body) : thread_([this, body] { body(stop_); }) {}
  ~background_thread() { finish(); }
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One run_worker on a background_thread; finish() stops it and says how many errors it had.
struct running_worker {
  std::atomic<int> errors{0};
  background_thread thread;  // after `errors`: joined before it goes
  running_worker(const std::string& endpoint, const std::string& name)
      : thread([this, endpoint, name](const std::atomic<bool>& stop) {
          run_worker(endpoint, name, stop, errors);
        }) {}
  int finish() {
    thread.finish();
    return errors;
  }
};

// A hand-driven DEALER that speaks the protocol frame by frame, to misbehave precisely.
struct raw_worker {
  zmq::socket_t s;

  static raw_worker connect(const std::string& endpoint) {
    auto s = open_socket(shared_context(), zmq::socket_type::dealer, {});
    REQUIRE(s.ok());
    REQUIRE(attach(*s, {endpoint, link::connect}).ok());
    return raw_worker{std::move(s).value()};
  }
  void send(std::vector<zmq::message_t> frames) {
    REQUIRE(send_within(s, frames.data(), frames.size(), 1000ms).value());
  }
  void ready(std::uint32_t credit, const std::string& name) {
    std::vector<zmq::message_t> f;
    f.emplace_back(proto::tag.data(), proto::tag.size());
    f.emplace_back("\x01", 1);
    f.push_back(u32_frame(credit));
    f.push_back(u32_frame(static_cast<std::uint32_t>(hb.count())));
    f.emplace_back(name.data(), name.size());
    send(std::move(f));
  }
  void result(std::uint64_t id, const envelope& e) {
    std::vector<zmq::message_t> f;
    f.emplace_back(proto::tag.data(), proto::tag.size());
    f.emplace_back("\x03", 1);
    f.push_back(u64_frame(id));
    f.push_back(frame_of(e));
    send(std::move(f));
  }
  // The next message's command byte and envelope (if any); nullopt when nothing is there.
  std::optional<std::pair<std::uint8_t, envelope>> poll() {
    std::vector<zmq::message_t> f;
    auto n = receive_within(s, f, 3, 0ms);
    REQUIRE(n.ok());
    if (*n == 0) return std::nullopt;
    REQUIRE(*n >= 2);
    envelope e;
    if (*n == 3) e = envelope_of(f[2]).value();
    return std::make_pair(f[1].data<std::uint8_t>()[0], e);
  }
  // Reads until a WORK message arrives, driving the broker meanwhile; returns its envelope.
  envelope await_work(broker& b) {
    envelope got;
    REQUIRE(eventually([&] { return got.valid(); },
                       [&] {
                         REQUIRE(b.poll_once(5ms).ok());
                         while (auto m = poll())
                           if (m->first == 0x11) got = m->second;
                       }));
    return got;
  }
};

}  // namespace

TEST_CASE("three workers share the work and every result comes back exactly once") {
  auto o = fast_beat(25);
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());

  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> workers;
  for (const char* name : {"w1", "w2", "w3"})
    workers.push_back(worker_thread(p.b.backend_endpoint(), name, stop, errors));

  constexpr std::uint64_t n = 3000;
  for (std::uint64_t i = 1; i <= n; ++i) REQUIRE(p.producer.send(blob(i, 256), 5000ms).ok());

  std::map<std::uint64_t, int> per_sample;
  std::map<std::string, int> per_worker;
  p.collect(n, per_sample, per_worker);
  stop = true;
  for (auto& t : workers) t.join();

  CHECK(errors == 0);
  CHECK(per_sample.size() == n);
  int duplicates = 0;
  for (auto& [id, count] : per_sample) duplicates += count != 1;
  CHECK(duplicates == 0);
  REQUIRE(per_worker.size() == 3);
  for (auto& [name, count] : per_worker) {
    CAPTURE(name);
    CHECK(count > static_cast<int>(n / 20));  // every worker took a real share
  }
  auto c = p.b.counters();
  CHECK(c.received == n);
  CHECK(c.completed == n);
  CHECK(c.failed == 0);
  CHECK(c.queued == 0);
  CHECK(c.in_flight == 0);
  CHECK(c.dispatched == n + c.requeued);
  CHECK(c.rejected == 0);
  p.b.stop();
}

TEST_CASE("a frozen broker hands out nothing and takes no result; new work is still counted") {
  auto o = fast_beat(25);
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());
  running_worker w(p.b.backend_endpoint(), "w1");
  p.send(1, 50);
  std::map<std::uint64_t, int> per_sample;
  std::map<std::string, int> per_worker;
  p.collect(50, per_sample, per_worker);

  p.b.freeze();
  p.send(51, 80);
  REQUIRE(p.b.counters_once_received(80, 10s).received == 80);
  std::this_thread::sleep_for(200ms);  // room for a dispatch that must not happen
  const auto c = p.b.counters();
  CHECK(c.received == 80);
  CHECK(c.completed == 50);
  CHECK(c.queued + c.in_flight == 30);  // the invariant the run's balance check reads
  CHECK(c.dispatched == 50 + c.in_flight);
  CHECK(w.finish() == 0);
  p.b.stop();
}

TEST_CASE("a broker's counts agree at every read: each item received is queued, held or done") {
  auto o = fast_beat(25);
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());
  running_worker w(p.b.backend_endpoint(), "w1");
  constexpr std::uint64_t n = 4000;
  int bad = 0, reads = 0;
  // Reads while the broker takes work in batches; a short sleep between reads leaves the CPU to
  // the broker, worker and collector on a loaded 2-core machine.
  background_thread reader([&](const std::atomic<bool>& stop) {
    for (; !stop.load(); ++reads) {
      const auto c = p.b.counters();
      bad += c.received != c.queued + c.in_flight + c.pending_results + c.completed + c.failed;
      std::this_thread::sleep_for(20us);
    }
  });
  p.send(1, n);
  std::map<std::uint64_t, int> per_sample;
  std::map<std::string, int> per_worker;
  p.collect(n, per_sample, per_worker, 30000ms);
  reader.finish();
  CAPTURE(reads);
  CHECK(bad == 0);
  CHECK(w.finish() == 0);
  CHECK(per_sample.size() == n);
  p.b.stop();
}

TEST_CASE("a frozen broker counts all that was sent to it, past max_queued and still in transit") {
  auto o = fast_beat(25);
  o.max_queued = 10;
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());
  p.b.freeze();
  // No wait after the sends: the last ones are still on their way (tcp) when the count is asked
  // for, as a sampler's last candidates are at the run's last report.
  p.send(1, 300);
  const auto c = p.b.counters_once_received(300, 10s);
  CHECK(c.received == 300);
  CHECK(c.queued == 300);  // in the same count: all read past max_queued, none half-counted
  CHECK(c.dispatched == 0);
  p.b.stop();
}

TEST_CASE("a frozen broker declares no worker dead: a silent worker's items stay in flight") {
  auto o = fast_beat(3);
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());
  p.send(1, 4);
  std::set<std::uint64_t> held;
  auto w = worker_holding(p.b.backend_endpoint(), "finishing", 4, held);
  p.b.freeze();
  // Silent (no next, no tick) for 10 times its liveness: as a worker finishing its last verdicts
  // at the run's end. Unfrozen, the broker would declare it dead after 3 intervals.
  std::this_thread::sleep_for(10 * o.liveness * hb);
  const auto c = p.b.counters();
  CHECK(c.workers_dead == 0);
  CHECK(c.workers_alive == 1);
  CHECK(c.in_flight == 4);
  CHECK(c.requeued == 0);
  // It then leaves (DISCONNECT): counted as left, its items still in flight (left unjudged).
  REQUIRE(w.leave().ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (p.b.counters().workers_alive != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  const auto after = p.b.counters();
  CHECK(after.workers_alive == 0);
  CHECK(after.workers_left == 1);
  CHECK(after.workers_dead == 0);
  CHECK(after.in_flight == 4);
  CHECK(after.queued == 0);
  CHECK(after.requeued == 0);
  CHECK(after.failed == 0);
  p.b.stop();
}

TEST_CASE("a worker that dies holding work: its items are re-queued and finished by the others") {
  auto o = fast_beat(25);
  auto p = pool::make(o);
  REQUIRE(p.b.start().ok());

  constexpr std::uint64_t n = 300;
  for (std::uint64_t i = 1; i <= n; ++i) REQUIRE(p.producer.send(blob(i, 128), 5000ms).ok());

  std::set<std::uint64_t> held_by_doomed;
  {
    auto doomed = worker_holding(p.b.backend_endpoint(), "doomed", 4, held_by_doomed);
    // Leaves scope without completing, heartbeating or saying goodbye: its socket just closes.
  }

  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> workers;
  for (const char* name : {"w1", "w2"})
    workers.push_back(worker_thread(p.b.backend_endpoint(), name, stop, errors));

  std::map<std::uint64_t, int> per_sample;
  std::map<std::string, int> per_worker;
  p.collect(n, per_sample, per_worker);
  // A short extra read: a duplicate would show up here.
  p.collect(1, per_sample, per_worker, 100ms);
  stop = true;
  for (auto& t : workers) t.join();

  CHECK(errors == 0);
  CHECK(per_sample.size() == n);
  int duplicates = 0;
  for (auto& [id, count] : per_sample) duplicates += count != 1;
  CHECK(duplicates == 0);
  for (auto id : held_by_doomed) CHECK(per_sample[id] == 1);
  CHECK(per_worker.count("doomed") == 0);
  auto c = p.b.counters();
  CHECK(c.requeued == 4);
  CHECK(c.workers_dead >= 1);
  CHECK(c.completed == n);
  CHECK(c.failed == 0);
  CHECK(c.received == c.queued + c.in_flight + c.pending_results + c.completed + c.failed);
}

TEST_CASE("a silent worker is declared dead; an item lost twice is failed and reported") {
  std::mutex m;
  std::vector<failed_item> failures;
  auto o = fast_beat(3);
  o.on_failed = [&](const failed_item& f) {
    std::lock_guard<std::mutex> lock(m);
    failures.push_back(f);
  };
  auto p = pool::make(o);  // driven by this thread through poll_once: fully deterministic

  REQUIRE(p.producer.send(blob(7, 32), 1000ms).ok());
  auto a = raw_worker::connect(p.b.backend_endpoint());
  a.ready(1, "silent-a");
  CHECK(a.await_work(p.b)->message_id() == 7);

  // A stays connected but says nothing: liveness (3 x 20 ms) declares it dead.
  REQUIRE(eventually([&] { return p.b.counters().requeued == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  CHECK(p.b.counters().workers_dead == 1);
  CHECK(p.b.counters().queued == 1);

  auto b = raw_worker::connect(p.b.backend_endpoint());
  b.ready(1, "silent-b");
  CHECK(b.await_work(p.b)->message_id() == 7);
  REQUIRE(eventually([&] { return p.b.counters().failed == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  {
    std::lock_guard<std::mutex> lock(m);
    REQUIRE(failures.size() == 1);
    CHECK(failures[0].work->message_id() == 7);
    CHECK(failures[0].reason.find("lost by 2 workers") != std::string::npos);
    CHECK(failures[0].reason.find("silent-b") != std::string::npos);
  }

  // A wakes up and sends a late result: dropped as stale, and A is told to reconnect.
  a.result(7, blob(1007));
  bool told = false;
  REQUIRE(eventually([&] { return told; },
                     [&] {
                       REQUIRE(p.b.poll_once(5ms).ok());
                       while (auto msg = a.poll()) told = told || msg->first == 0x13;
                     }));
  auto c = p.b.counters();
  CHECK(c.stale_results == 1);
  CHECK(c.completed == 0);
  CHECK(c.workers_dead == 2);
  CHECK(c.received == 1);
  CHECK(c.received == c.queued + c.in_flight + c.pending_results + c.completed + c.failed);
  auto nothing = p.sink.receive(0ms);
  REQUIRE(nothing.ok());
  CHECK_FALSE(nothing->has_value());
}

TEST_CASE("a worker that says DISCONNECT has left, not died; its items are re-queued") {
  auto o = fast_beat(50);
  auto p = pool::make(o);  // driven by this thread through poll_once

  REQUIRE(p.producer.send(blob(7, 32), 1000ms).ok());
  auto a = raw_worker::connect(p.b.backend_endpoint());
  a.ready(1, "leaver");
  CHECK(a.await_work(p.b)->message_id() == 7);
  {
    std::vector<zmq::message_t> f;
    f.emplace_back(proto::tag.data(), proto::tag.size());
    f.emplace_back("\x04", 1);
    a.send(std::move(f));
  }
  REQUIRE(eventually([&] { return p.b.counters().requeued == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  const auto c = p.b.counters();
  CHECK(c.workers_left == 1);
  CHECK(c.workers_dead == 0);
  CHECK(c.workers_alive == 0);
  CHECK(c.queued == 1);
  CHECK(c.received == c.queued + c.in_flight + c.pending_results + c.completed + c.failed);
}

TEST_CASE("the broker tells who joined and who was lost or left, with what became of their items") {
  std::mutex m;
  std::vector<worker_joined> joined;
  std::vector<worker_gone> gone;
  auto o = fast_beat(3);
  o.on_joined = [&](const worker_joined& j) {
    std::lock_guard<std::mutex> lock(m);
    joined.push_back(j);
  };
  o.on_gone = [&](const worker_gone& g) {
    std::lock_guard<std::mutex> lock(m);
    gone.push_back(g);
  };
  auto p = pool::make(o);  // driven by this thread through poll_once

  for (std::uint64_t i : {7, 8}) REQUIRE(p.producer.send(blob(i, 32), 1000ms).ok());
  auto a = raw_worker::connect(p.b.backend_endpoint());
  a.ready(2, "host-a");
  std::vector<std::uint64_t> given;  // both items, in one or two reads
  REQUIRE(eventually([&] { return given.size() == 2; },
                     [&] {
                       REQUIRE(p.b.poll_once(5ms).ok());
                       while (auto msg = a.poll())
                         if (msg->first == 0x11) given.push_back(msg->second->message_id());
                     }));
  a.result(given[0], blob(given[0] + 1000));
  REQUIRE(eventually([&] { return p.b.counters().completed == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  // A goes silent holding the second item: declared dead, the item goes back in the queue.
  REQUIRE(eventually([&] { return p.b.counters().requeued == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  {
    std::lock_guard<std::mutex> lock(m);
    REQUIRE(joined.size() == 1);
    CHECK(joined[0].name == "host-a");
    CHECK(joined[0].credit == 2);
    CHECK(joined[0].heartbeat_interval == hb);
    REQUIRE(gone.size() == 1);
    CHECK(gone[0].name == "host-a");
    CHECK(gone[0].died);
    CHECK(gone[0].reason.find("silent for") != std::string::npos);
    CHECK(gone[0].taken == 2);
    CHECK(gone[0].returned == 1);
    CHECK(gone[0].requeued == 1);
    CHECK(gone[0].failed == 0);
  }

  // B takes the re-queued item and leaves with it: left, not dead, and the item (lost twice) fails.
  auto b = raw_worker::connect(p.b.backend_endpoint());
  b.ready(1, "host-b");
  CHECK(b.await_work(p.b)->message_id() == given[1]);
  {
    std::vector<zmq::message_t> f;
    f.emplace_back(proto::tag.data(), proto::tag.size());
    f.emplace_back("\x04", 1);
    b.send(std::move(f));
  }
  REQUIRE(eventually([&] { return p.b.counters().failed == 1; },
                     [&] { REQUIRE(p.b.poll_once(5ms).ok()); }));
  std::lock_guard<std::mutex> lock(m);
  REQUIRE(joined.size() == 2);
  CHECK(joined[1].name == "host-b");
  REQUIRE(gone.size() == 2);
  CHECK(gone[1].name == "host-b");
  CHECK_FALSE(gone[1].died);
  CHECK(gone[1].reason == "disconnected");
  CHECK(gone[1].taken == 1);
  CHECK(gone[1].returned == 0);
  CHECK(gone[1].requeued == 0);
  CHECK(gone[1].failed == 1);
}

TEST_CASE("the broker rejects protocol garbage, duplicates and bad results, and keeps working") {
  std::vector<failed_item> failures;
  auto o = fast_beat(50);
  o.on_failed = [&](const failed_item& f) { failures.push_back(f); };  // same thread: poll_once
  auto p = pool::make(o);
  auto step = [&] { REQUIRE(p.b.poll_once(5ms).ok()); };

  // Frontend junk.
  auto raw = open_socket(shared_context(), zmq::socket_type::push, {});
  REQUIRE(raw.ok());
  REQUIRE(attach(*raw, {p.b.frontend_endpoint(), link::connect}).ok());
  raw->send(zmq::str_buffer("junk"));
  raw->send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
  raw->send(zmq::str_buffer("b"));
  // Backend junk: wrong tag, unknown command, READY without credit.
  auto w = raw_worker::connect(p.b.backend_endpoint());
  {
    std::vector<zmq::message_t> f;
    f.emplace_back("XXXX", 4);
    f.emplace_back("\x02", 1);
    w.send(std::move(f));
    std::vector<zmq::message_t> g;
    g.emplace_back(proto::tag.data(), proto::tag.size());
    g.emplace_back("\x7f", 1);
    w.send(std::move(g));
  }
  w.ready(0, "zero-credit");
  REQUIRE(eventually([&] { return p.b.counters().rejected == 5; }, step));
  CHECK(p.b.counters().workers_alive == 0);

  // A duplicate message_id while the first is still queued is failed, not merged.
  REQUIRE(p.producer.send(blob(1), 1000ms).ok());
  REQUIRE(p.producer.send(blob(1), 1000ms).ok());
  REQUIRE(eventually([&] { return p.b.counters().failed == 1; }, step));
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].reason.find("duplicate message_id 1") != std::string::npos);

  // A result that fails verification fails its item (and credit comes back).
  w.ready(1, "sloppy");
  CHECK(w.await_work(p.b)->message_id() == 1);
  {
    std::vector<zmq::message_t> f;
    f.emplace_back(proto::tag.data(), proto::tag.size());
    f.emplace_back("\x03", 1);
    f.push_back(u64_frame(1));
    f.emplace_back("garbage", 7);
    w.send(std::move(f));
  }
  REQUIRE(eventually([&] { return p.b.counters().failed == 2; }, step));
  CHECK(failures[1].reason.find("invalid result") != std::string::npos);

  // The same worker still works: the next item completes and reaches the sink.
  REQUIRE(p.producer.send(blob(2), 1000ms).ok());
  CHECK(w.await_work(p.b)->message_id() == 2);
  w.result(2, blob(1002, 8, 2));
  std::optional<envelope> out;
  REQUIRE(eventually([&] { return out.has_value(); },
                     [&] {
                       step();
                       auto r = p.sink.receive(0ms);
                       REQUIRE(r.ok());
                       if (r->has_value()) out = **r;
                     }));
  CHECK((*out)->sample_id() == 2);
  auto c = p.b.counters();
  CHECK(c.completed == 1);
  CHECK(c.received == 3);
  CHECK(c.received == c.queued + c.in_flight + c.pending_results + c.completed + c.failed);
}

TEST_CASE("a worker rebuilds its socket when the broker goes silent, and on RECONNECT") {
  // A raw ROUTER plays a broker that reads READY and then never answers.
  auto router = open_socket(shared_context(), zmq::socket_type::router, {});
  REQUIRE(router.ok());
  auto ep = attach(*router, {"tcp://127.0.0.1:*", link::bind});
  REQUIRE(ep.ok());

  worker_options wo;
  wo.name = "lonely";
  wo.heartbeat_interval = hb;
  wo.liveness = 3;
  wo.reconnect_initial = 10ms;
  auto w = worker::connect(*ep, wo);
  REQUIRE(w.ok());

  std::set<std::string> ready_from;  // routing ids that sent READY
  std::string newest;                // the latest of them
  bool keep_alive = false;           // answer every message with HEARTBEAT
  int heartbeats_from_newest = 0;
  std::vector<zmq::message_t> f;
  auto read_router = [&] {
    for (;;) {
      auto n = receive_within(*router, f, 6, 0ms);
      REQUIRE(n.ok());
      if (*n == 0) return;
      if (*n == 6 && f[2].size() == 1 && f[2].data<std::uint8_t>()[0] == 0x01) {
        newest = f[0].to_string();
        ready_from.insert(newest);
        heartbeats_from_newest = 0;
      }
      if (*n == 3 && f[2].size() == 1 && f[2].data<std::uint8_t>()[0] == 0x02 &&
          f[0].to_string() == newest)
        ++heartbeats_from_newest;
      if (keep_alive) {
        std::vector<zmq::message_t> hb_msg;
        hb_msg.emplace_back(f[0].data(), f[0].size());
        hb_msg.emplace_back(proto::tag.data(), proto::tag.size());
        hb_msg.emplace_back("\x12", 1);
        (void)send_within(*router, hb_msg.data(), hb_msg.size(), 0ms);
      }
    }
  };
  auto step = [&] {
    REQUIRE(w->next(5ms).ok());
    read_router();
  };
  REQUIRE(eventually([&] { return ready_from.size() >= 2; }, step));
  CHECK(w->counters().reconnects >= 1);

  // Now the "broker" answers; RECONNECT makes the worker start a new session at once.
  // Wait until the newest session is alive and answered (it heartbeats twice) before RECONNECT.
  keep_alive = true;
  heartbeats_from_newest = 0;
  REQUIRE(eventually([&] { return heartbeats_from_newest >= 2; }, step));
  const std::string current = newest;
  const auto before = w->counters().reconnects;
  std::vector<zmq::message_t> rc;
  rc.emplace_back(current.data(), current.size());
  rc.emplace_back(proto::tag.data(), proto::tag.size());
  rc.emplace_back("\x13", 1);
  REQUIRE(send_within(*router, rc.data(), rc.size(), 1000ms).value());
  REQUIRE(eventually([&] { return newest != current; }, step));
  CHECK(w->counters().reconnects > before);
  CHECK_FALSE(w->complete(12345, blob(1)).ok());  // never held
}
