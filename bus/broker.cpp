#include "bus/broker.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bus/broker_protocol.hpp"
#include "bus/frames.hpp"

namespace kforge::bus {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace proto = protocol;

namespace {

// Messages read from one socket per iteration, so a busy frontend cannot starve heartbeats.
constexpr int read_batch = 512;
// Upper bound on one wait of the broker's own thread, so stop() is noticed promptly.
constexpr milliseconds max_thread_wait{50};

struct work_entry {
  messages::envelope env;
  std::uint64_t id = 0;
  int losses = 0;  // times a worker holding it was lost
};

struct worker_state {
  std::string name;
  std::uint32_t credit = 0;
  milliseconds interval{0};
  clock::time_point expiry;
  std::uint64_t last_dispatch = 0;  // dispatch sequence number, for least-recently-used ties
  std::uint64_t taken = 0, returned = 0;  // this session's items given and results sent back
  std::unordered_set<std::uint64_t> held;
};

struct flight {
  work_entry work;
  std::string worker;  // routing id
};

enum class route_outcome { sent, full, gone };

bool frame_is(const zmq::message_t& f, std::string_view s) {
  return f.size() == s.size() && std::equal(s.begin(), s.end(), f.data<char>());
}

long long ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration_cast<milliseconds>(b - a).count();
}

}  // namespace

struct broker::impl {
  broker_options opts;
  zmq::socket_t frontend, backend, results;
  std::string frontend_ep, backend_ep, results_ep;

  std::deque<work_entry> queue;
  std::unordered_set<std::uint64_t> queued_ids;
  std::unordered_map<std::uint64_t, flight> in_flight;
  std::map<std::string, worker_state> workers;  // by routing id
  std::deque<messages::envelope> outbox;
  clock::time_point next_heartbeat = clock::now();
  std::uint64_t dispatch_seq = 0;
  std::vector<zmq::message_t> frames;

  // The counts, kept by the loop's thread alone; a copy is published at the end of each loop
  // iteration, so a reader never sees an item counted as received before it is counted as queued
  // (the run's balance check read such a half-way state once: 35 candidates received, none queued).
  broker_counters c;
  mutable std::mutex published_mutex;
  broker_counters published;

  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<bool> frozen{false};  ///< freeze(): no dispatch, no results taken
  mutable std::mutex error_mutex;
  std::string last_error;

  ~impl() { stop(); }

  void stop() {
    stopping = true;
    if (thread.joinable()) thread.join();
  }

  // Sends [routing id, tag, cmd, payload?] to a worker without waiting.
  result<route_outcome> route(const std::string& id, proto::command cmd,
                              const messages::envelope* payload) {
    const auto cmd_byte = static_cast<std::uint8_t>(cmd);
    zmq::message_t out[4] = {zmq::message_t(id.data(), id.size()),
                             zmq::message_t(proto::tag.data(), proto::tag.size()),
                             zmq::message_t(&cmd_byte, 1), zmq::message_t()};
    if (payload) out[3] = frame_of(*payload);
    const std::size_t n = payload ? 4 : 3;
    try {
      // ROUTER_MANDATORY reports an unknown or full peer on the routing-id frame, before anything
      // of the message is queued.
      if (!backend.send(out[0], zmq::send_flags::dontwait | zmq::send_flags::sndmore))
        return route_outcome::full;
      for (std::size_t i = 1; i < n; ++i)
        (void)backend.send(out[i], i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none);
      return route_outcome::sent;
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return route_outcome::gone;
      return error{std::string("bus: broker backend send failed: ") + e.what()};
    }
  }

  void fail(const work_entry& w, std::string reason) {
    ++c.failed;
    if (!opts.on_failed) return;
    try {
      opts.on_failed(failed_item{w.env, std::move(reason)});
    } catch (...) {
      // A throwing callback must not take the broker down; the item is already counted failed.
    }
  }

  // Declares a worker gone: every item it held goes back to the queue front or fails. `died`:
  // lost (silent, unroutable, a new session), counted dead; false: it said DISCONNECT, counted as
  // left (a worker leaving at the end of a run is not a failure). Frozen (the run's last counts),
  // its items stay in flight: left unjudged, neither re-queued nor failed.
  void lose_worker(const std::string& id, const std::string& why, bool died = true) {
    auto it = workers.find(id);
    if (it == workers.end()) return;
    const worker_state& w = it->second;
    std::vector<std::uint64_t> held;  // frozen: none taken back, all stay in flight
    if (!frozen.load()) held.assign(w.held.begin(), w.held.end());
    worker_gone gone{w.name, why, died, w.taken, w.returned, 0, 0, w.held.size() - held.size()};
    // Oldest work first, for a stable order at the front of the queue.
    std::sort(held.rbegin(), held.rend());
    for (auto wid : held) {
      auto node = in_flight.extract(wid);
      if (node.empty()) continue;
      work_entry work = std::move(node.mapped().work);
      ++work.losses;
      if (work.losses > opts.max_requeues) {
        fail(work, "lost by " + std::to_string(work.losses) + " workers (last: " + w.name + ", " +
                       why + ")");
        ++gone.failed;
      } else {
        queued_ids.insert(work.id);
        queue.push_front(std::move(work));
        ++c.requeued;
        ++gone.requeued;
      }
    }
    workers.erase(it);
    ++(died ? c.workers_dead : c.workers_left);
    tell(opts.on_gone, gone);
  }

  // A throwing observer must not take the broker down: it only watches.
  template <typename F, typename T>
  static void tell(const F& f, const T& what) {
    if (!f) return;
    try {
      f(what);
    } catch (...) {
    }
  }

  void send_reconnect(const std::string& id) {
    // Best effort: if it fails the worker notices the broker's silence and reconnects anyway.
    (void)route(id, proto::command::reconnect, nullptr);
  }

  void handle_backend(std::size_t n, clock::time_point now) {
    if (n < 3 || n > 6 || !frame_is(frames[1], proto::tag) || frames[2].size() != 1) {
      ++c.rejected;
      return;
    }
    const std::string id = frames[0].to_string();
    const auto cmd = static_cast<proto::command>(frames[2].data<std::uint8_t>()[0]);
    auto it = workers.find(id);

    switch (cmd) {
      case proto::command::ready: {
        const auto credit = n == 6 ? read_u32(frames[3]) : std::nullopt;
        const auto hb = n == 6 ? read_u32(frames[4]) : std::nullopt;
        if (!credit || !hb || *credit == 0) {
          ++c.rejected;
          return;
        }
        // A second READY on one routing id means the worker restarted its session.
        if (it != workers.end()) lose_worker(id, "sent READY again");
        worker_state w;
        w.name = frames[5].to_string();
        w.credit = *credit;
        w.interval = *hb > 0 ? milliseconds(*hb) : opts.heartbeat_interval;
        w.expiry = now + opts.liveness * w.interval;
        const worker_joined joined{w.name, w.credit, w.interval};
        workers.emplace(id, std::move(w));
        tell(opts.on_joined, joined);
        return;
      }
      case proto::command::worker_heartbeat:
        if (n != 3) break;
        if (it == workers.end()) {
          send_reconnect(id);
        } else {
          it->second.expiry = now + opts.liveness * it->second.interval;
        }
        return;
      case proto::command::result: {
        if (n != 5) break;
        const auto wid = read_u64(frames[3]);
        if (!wid) break;
        if (frozen.load()) return;  // the item stays in flight: left unjudged at the run's end
        if (it == workers.end()) {
          ++c.stale_results;
          send_reconnect(id);
          return;
        }
        worker_state& w = it->second;
        w.expiry = now + opts.liveness * w.interval;
        if (w.held.erase(*wid) == 0) {
          ++c.stale_results;
          return;
        }
        ++w.returned;
        auto node = in_flight.extract(*wid);
        auto env = envelope_of(frames[4]);
        if (!env) {
          ++c.rejected;
          fail(node.mapped().work,
               "worker " + w.name + " returned an invalid result: " + env.message());
          return;
        }
        outbox.push_back(std::move(env).value());
        return;
      }
      case proto::command::disconnect:
        if (n != 3) break;
        lose_worker(id, "disconnected", false);
        return;
      default:
        break;
    }
    ++c.rejected;
  }

  status read_backend(clock::time_point now) {
    for (int i = 0; i < read_batch; ++i) {
      auto n = receive_within(backend, frames, 6, milliseconds(0));
      if (!n) return error{"bus: broker backend " + backend_ep + ": " + n.message()};
      if (*n == 0) break;
      handle_backend(*n, now);
    }
    return status::success();
  }

  // Back-pressure: the frontend is read while fewer than max_queued items wait. Frozen (the run's
  // last counts), it is read regardless, so everything a sampler sent is counted as received.
  bool takes_work() const { return frozen.load() || queue.size() < opts.max_queued; }

  status read_frontend() {
    for (int i = 0; i < read_batch && takes_work(); ++i) {
      auto n = receive_within(frontend, frames, 1, milliseconds(0));
      if (!n) return error{"bus: broker frontend " + frontend_ep + ": " + n.message()};
      if (*n == 0) break;
      if (*n != 1) {
        ++c.rejected;
        continue;
      }
      auto env = envelope_of(frames[0]);
      if (!env) {
        ++c.rejected;
        continue;
      }
      ++c.received;
      if (opts.on_received) opts.on_received(*env);
      work_entry w{std::move(env).value(), 0, 0};
      w.id = w.env->message_id();
      if (queued_ids.count(w.id) || in_flight.count(w.id)) {
        fail(w, "duplicate message_id " + std::to_string(w.id) +
                    ": an item with this id is already queued or in flight");
        continue;
      }
      queued_ids.insert(w.id);
      queue.push_back(std::move(w));
    }
    return status::success();
  }

  status flush_outbox() {
    try {
      while (!outbox.empty()) {
        auto f = frame_of(outbox.front());
        if (!results.send(f, zmq::send_flags::dontwait)) break;
        outbox.pop_front();
        ++c.completed;
      }
      return status::success();
    } catch (const zmq::error_t& e) {
      return error{"bus: broker result sink " + results_ep + ": " + e.what()};
    }
  }

  // The alive worker with the most free credit, least recently used on ties; nullptr when none.
  std::pair<const std::string, worker_state>* pick(const std::vector<std::string>& skip) {
    std::pair<const std::string, worker_state>* best = nullptr;
    std::size_t best_free = 0;
    for (auto& kv : workers) {
      const auto& w = kv.second;
      if (w.held.size() >= w.credit) continue;
      if (std::find(skip.begin(), skip.end(), kv.first) != skip.end()) continue;
      const std::size_t free = w.credit - w.held.size();
      if (!best || free > best_free ||
          (free == best_free && w.last_dispatch < best->second.last_dispatch)) {
        best = &kv;
        best_free = free;
      }
    }
    return best;
  }

  status dispatch() {
    if (frozen.load()) return status::success();
    std::vector<std::string> skip;  // workers whose pipe was full this round
    // Results waiting for the sink hold back new work: the sink is the pool's real speed.
    while (!queue.empty() && outbox.size() < opts.max_queued) {
      auto* target = pick(skip);
      if (!target) break;
      const std::string id = target->first;
      work_entry& w = queue.front();
      auto r = route(id, proto::command::work, &w.env);
      if (!r) return r.err();
      if (*r == route_outcome::full) {
        skip.push_back(id);
        continue;
      }
      if (*r == route_outcome::gone) {
        lose_worker(id, "unroutable (its connection is gone)");
        continue;
      }
      target->second.held.insert(w.id);
      target->second.last_dispatch = ++dispatch_seq;
      ++target->second.taken;
      queued_ids.erase(w.id);
      const auto wid = w.id;
      in_flight.emplace(wid, flight{std::move(w), id});
      queue.pop_front();
      ++c.dispatched;
    }
    return status::success();
  }

  status heartbeat_and_expire(clock::time_point now) {
    std::vector<std::pair<std::string, std::string>> lost;
    if (now >= next_heartbeat) {
      for (auto& kv : workers) {
        auto r = route(kv.first, proto::command::broker_heartbeat, nullptr);
        if (!r) return r.err();
        if (*r == route_outcome::gone)
          lost.emplace_back(kv.first, "unroutable (its connection is gone)");
        // full: the worker has not read for a while; its own silence will decide.
      }
      next_heartbeat = now + opts.heartbeat_interval;
    }
    // Frozen (the run's last counts): nothing is dispatched or taken, so no worker is declared dead.
    // One finishing its last verdicts without ticking is silent: it stays. One whose connection is
    // gone (its process stopped, or its DISCONNECT was dropped) has left. Items stay in flight,
    // counted as left unjudged.
    if (frozen.load()) {
      for (auto& [id, why] : lost) lose_worker(id, why, /*died=*/false);
      return status::success();
    }
    for (auto& kv : workers) {
      if (now > kv.second.expiry)
        lost.emplace_back(kv.first,
                          "silent for " +
                              std::to_string(ms_between(
                                  kv.second.expiry - opts.liveness * kv.second.interval, now)) +
                              " ms");
    }
    for (auto& [id, why] : lost) lose_worker(id, why);
    return status::success();
  }

  void publish_gauges() {
    c.queued = queue.size();
    c.in_flight = in_flight.size();
    c.pending_results = outbox.size();
    c.workers_alive = workers.size();
    std::lock_guard<std::mutex> lock(published_mutex);
    published = c;
  }

  status poll(milliseconds timeout) {
    auto now = clock::now();
    auto wait = std::min(timeout, std::chrono::ceil<milliseconds>(next_heartbeat - now));
    if (!frozen.load())  // frozen, expiry is not checked: a silent worker must not make this spin
      for (auto& kv : workers)
        wait = std::min(wait, std::chrono::ceil<milliseconds>(kv.second.expiry - now));
    if (wait.count() < 0) wait = milliseconds(0);

    zmq_pollitem_t items[3];
    int n = 0;
    items[n++] = {backend.handle(), 0, ZMQ_POLLIN, 0};
    const int fe = takes_work() ? n++ : -1;
    if (fe >= 0) items[fe] = {frontend.handle(), 0, ZMQ_POLLIN, 0};
    const int rs = !outbox.empty() ? n++ : -1;
    if (rs >= 0) items[rs] = {results.handle(), 0, ZMQ_POLLOUT, 0};
    try {
      zmq::poll(items, static_cast<std::size_t>(n), wait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return error{std::string("bus: broker poll failed: ") + e.what()};
    }

    now = clock::now();
    status s;
    if (items[0].revents & ZMQ_POLLIN) s = read_backend(now);
    if (s && fe >= 0 && (items[fe].revents & ZMQ_POLLIN)) s = read_frontend();
    if (s) s = heartbeat_and_expire(now);
    if (s) s = dispatch();
    if (s) s = flush_outbox();
    publish_gauges();
    return s;
  }

  void run() {
    while (!stopping.load()) {
      auto s = poll(std::min(opts.heartbeat_interval, max_thread_wait));
      if (!s) {
        std::lock_guard<std::mutex> lock(error_mutex);
        last_error = s.message();
        // A terminated context will not come back; anything else may be transient.
        if (s.message().find("Context was terminated") != std::string::npos) return;
      }
    }
  }
};

result<broker> broker::create(broker_options opts, zmq::context_t& ctx) {
  if (!opts.results.endpoint.size())
    return error{"bus: broker needs a result sink endpoint (broker_options::results)"};
  if (opts.liveness < 1) return error{"bus: broker liveness must be at least 1"};
  if (opts.heartbeat_interval.count() <= 0)
    return error{"bus: broker heartbeat_interval must be positive"};
  auto p = std::make_unique<impl>();
  const socket_options so{opts.high_water_mark, opts.high_water_mark};
  auto fe = open_socket(ctx, zmq::socket_type::pull, so);
  if (!fe) return fe.err();
  auto be = open_socket(ctx, zmq::socket_type::router, so);
  if (!be) return be.err();
  auto rs = open_socket(ctx, zmq::socket_type::push, so);
  if (!rs) return rs.err();
  try {
    be->set(zmq::sockopt::router_mandatory, true);
  } catch (const zmq::error_t& e) {
    return error{std::string("bus: broker cannot set ROUTER_MANDATORY: ") + e.what()};
  }
  auto fe_ep = attach(*fe, opts.frontend);
  if (!fe_ep) return error{"broker frontend: " + fe_ep.message()};
  auto be_ep = attach(*be, opts.backend);
  if (!be_ep) return error{"broker backend: " + be_ep.message()};
  auto rs_ep = attach(*rs, opts.results);
  if (!rs_ep) return error{"broker result sink: " + rs_ep.message()};
  p->frontend = std::move(fe).value();
  p->backend = std::move(be).value();
  p->results = std::move(rs).value();
  p->frontend_ep = std::move(fe_ep).value();
  p->backend_ep = std::move(be_ep).value();
  p->results_ep = std::move(rs_ep).value();
  p->opts = std::move(opts);
  return broker(std::move(p));
}

broker::broker(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
broker::broker(broker&&) noexcept = default;
broker& broker::operator=(broker&&) noexcept = default;
broker::~broker() = default;

status broker::start() {
  if (impl_->thread.joinable()) return error{"bus: broker already started"};
  impl_->stopping = false;
  try {
    impl_->thread = std::thread([p = impl_.get()] { p->run(); });
  } catch (const std::system_error& e) {
    return error{std::string("bus: cannot start the broker thread: ") + e.what()};
  }
  return status::success();
}

void broker::stop() {
  if (impl_) impl_->stop();
}

status broker::poll_once(milliseconds timeout) {
  if (impl_->thread.joinable()) return error{"bus: poll_once on a started broker"};
  return impl_->poll(timeout);
}

void broker::freeze() { impl_->frozen = true; }

broker_counters broker::counters() const {
  std::lock_guard<std::mutex> lock(impl_->published_mutex);
  return impl_->published;
}

broker_counters broker::counters_once_received(std::uint64_t n, milliseconds at_most) const {
  const auto deadline = clock::now() + at_most;
  auto c = counters();
  while (c.received < n && clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    c = counters();
  }
  return c;
}

const std::string& broker::frontend_endpoint() const noexcept { return impl_->frontend_ep; }
const std::string& broker::backend_endpoint() const noexcept { return impl_->backend_ep; }
const std::string& broker::results_endpoint() const noexcept { return impl_->results_ep; }

std::string broker::last_error() const {
  std::lock_guard<std::mutex> lock(impl_->error_mutex);
  return impl_->last_error;
}

}  // namespace kforge::bus
