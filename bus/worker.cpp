#include "bus/worker.hpp"

#include <algorithm>
#include <thread>

#include "bus/broker_protocol.hpp"
#include "bus/endpoint.hpp"
#include "bus/frames.hpp"
#include "bus/socket.hpp"

namespace kforge::bus {

using std::chrono::milliseconds;
namespace proto = protocol;

namespace {

zmq::message_t tag_frame() { return zmq::message_t(proto::tag.data(), proto::tag.size()); }
zmq::message_t cmd_frame(proto::command c) {
  const auto b = static_cast<std::uint8_t>(c);
  return zmq::message_t(&b, 1);
}

bool frame_is(const zmq::message_t& f, std::string_view s) {
  return f.size() == s.size() && std::equal(s.begin(), s.end(), f.data<char>());
}

}  // namespace

worker::worker(zmq::context_t& ctx, std::string endpoint, worker_options opts)
    : ctx_(&ctx),
      endpoint_(std::move(endpoint)),
      opts_(std::move(opts)),
      backoff_(opts_.reconnect_initial) {}

result<worker> worker::connect(std::string_view broker_endpoint, worker_options opts,
                               zmq::context_t& ctx) {
  auto ep = parse_connectable(broker_endpoint);
  if (!ep) return ep.err();
  if (opts.capacity == 0) return error{"bus: worker capacity must be at least 1"};
  if (opts.liveness < 1) return error{"bus: worker liveness must be at least 1"};
  if (opts.heartbeat_interval.count() <= 0)
    return error{"bus: worker heartbeat_interval must be positive"};
  worker w(ctx, ep->text, std::move(opts));
  if (auto s = w.open_session(); !s) return s.err();
  w.counters_.reconnects = 0;  // the first session is not a reconnect
  return w;
}

status worker::open_session() {
  auto s =
      open_socket(*ctx_, zmq::socket_type::dealer, {opts_.high_water_mark, opts_.high_water_mark});
  if (!s) return s.err();
  auto ep = attach(*s, {endpoint_, link::connect});
  if (!ep) return ep.err();
  const auto hb = static_cast<std::uint32_t>(opts_.heartbeat_interval.count());
  zmq::message_t ready[5] = {tag_frame(), cmd_frame(proto::command::ready),
                             u32_frame(opts_.capacity), u32_frame(hb),
                             zmq::message_t(opts_.name.data(), opts_.name.size())};
  // A fresh DEALER queues the message until the connection is up, so this does not wait.
  auto sent = send_within(*s, ready, 5, milliseconds(0));
  if (!sent) return error{"bus: worker " + opts_.name + ": " + sent.message()};
  socket_ = std::move(s).value();
  const auto now = clock::now();
  next_heartbeat_ = now + opts_.heartbeat_interval;
  broker_expiry_ = now + opts_.liveness * opts_.heartbeat_interval;
  ++counters_.reconnects;
  return status::success();
}

void worker::drop_session() {
  socket_.reset();
  counters_.abandoned += held_.size();
  held_.clear();
  inbox_.clear();
}

status worker::send_command(std::uint8_t cmd) {
  zmq::message_t frames[2] = {tag_frame(), zmq::message_t(&cmd, 1)};
  auto sent = send_within(*socket_, frames, 2, milliseconds(0));
  if (!sent) return error{"bus: worker " + opts_.name + ": " + sent.message()};
  // Not sent means the broker is not reading; its silence is handled by the liveness check.
  return status::success();
}

status worker::handle(std::size_t n, std::vector<zmq::message_t>& frames) {
  if (n < 2 || n > 3 || !frame_is(frames[0], proto::tag) || frames[1].size() != 1) {
    ++counters_.rejected;
    return status::success();
  }
  const auto cmd = static_cast<proto::command>(frames[1].data<std::uint8_t>()[0]);
  const auto now = clock::now();
  switch (cmd) {
    case proto::command::work: {
      if (n != 3) break;
      broker_expiry_ = now + opts_.liveness * opts_.heartbeat_interval;
      backoff_ = opts_.reconnect_initial;
      auto env = envelope_of(frames[2]);
      if (!env) {
        // The broker counts this item as held by us and we cannot name it back: only a new
        // session makes the broker re-queue it, so start one.
        ++counters_.rejected;
        drop_session();
        reconnect_at_ = now;
        return status::success();
      }
      const auto id = env->get().message_id();
      if (!held_.insert(id).second) {
        ++counters_.rejected;  // the broker never sends an id twice to one session
        return status::success();
      }
      inbox_.push_back(work_item{id, std::move(env).value()});
      ++counters_.received;
      return status::success();
    }
    case proto::command::broker_heartbeat:
      if (n != 2) break;
      broker_expiry_ = now + opts_.liveness * opts_.heartbeat_interval;
      backoff_ = opts_.reconnect_initial;
      return status::success();
    case proto::command::reconnect:
      if (n != 2) break;
      drop_session();
      reconnect_at_ = now;
      return status::success();
    default:
      break;
  }
  ++counters_.rejected;
  return status::success();
}

status worker::service(clock::time_point deadline, bool until_work) {
  std::vector<zmq::message_t> frames;
  for (;;) {
    auto now = clock::now();
    if (!socket_) {
      if (now >= reconnect_at_) {
        if (auto s = open_session(); !s) return s;
        continue;
      }
      if (now >= deadline) return status::success();
      // Back-off between connection attempts: there is no socket to poll meanwhile.
      std::this_thread::sleep_until(std::min(deadline, reconnect_at_));
      continue;
    }
    if (now >= broker_expiry_) {
      drop_session();
      reconnect_at_ = now + backoff_;
      backoff_ = std::min(backoff_ * 2, opts_.reconnect_max);
      continue;
    }
    if (now >= next_heartbeat_) {
      if (auto s = send_command(static_cast<std::uint8_t>(proto::command::worker_heartbeat)); !s)
        return s;
      next_heartbeat_ = now + opts_.heartbeat_interval;
    }
    for (;;) {
      auto n = receive_within(*socket_, frames, 4, milliseconds(0));
      if (!n) return error{"bus: worker " + opts_.name + ": " + n.message()};
      if (*n == 0) break;
      if (auto s = handle(*n, frames); !s) return s;
      if (!socket_) break;  // the message ended the session
    }
    if (!socket_) continue;
    if ((until_work && !inbox_.empty()) || now >= deadline) return status::success();
    const auto until = std::min({deadline, next_heartbeat_, broker_expiry_});
    auto wait = std::chrono::ceil<milliseconds>(until - clock::now());
    if (wait.count() < 0) wait = milliseconds(0);
    auto ready = wait_ready(*socket_, ZMQ_POLLIN, wait);
    if (!ready) return error{"bus: worker " + opts_.name + ": " + ready.message()};
  }
}

result<std::optional<work_item>> worker::next(milliseconds timeout) {
  const auto now = clock::now();
  const auto deadline = timeout.count() < 0 ? clock::time_point::max() : now + timeout;
  if (auto s = service(inbox_.empty() ? deadline : now, true); !s) return s.err();
  if (inbox_.empty()) return std::optional<work_item>{};
  work_item w = std::move(inbox_.front());
  inbox_.pop_front();
  return std::optional<work_item>(std::move(w));
}

status worker::tick() { return service(clock::now(), false); }

status worker::complete(std::uint64_t work_id, const messages::envelope& result) {
  if (!held_.count(work_id))
    return error{"bus: worker " + opts_.name + ": work item " + std::to_string(work_id) +
                 " is not held by this worker (never received, already completed, or dropped "
                 "with a lost session and re-queued by the broker)"};
  if (!result.valid()) return error{"bus: worker " + opts_.name + ": empty result envelope"};
  zmq::message_t frames[4] = {tag_frame(), cmd_frame(proto::command::result), u64_frame(work_id),
                              frame_of(result)};
  // A result waits at most one heartbeat interval for room; a broker that slow is about to be
  // judged silent anyway.
  auto sent = send_within(*socket_, frames, 4, opts_.heartbeat_interval);
  if (!sent) return error{"bus: worker " + opts_.name + ": " + sent.message()};
  if (!*sent)
    return error{"bus: worker " + opts_.name + ": no room to send the result of item " +
                 std::to_string(work_id) + " (broker not reading); still held, retry"};
  held_.erase(work_id);
  ++counters_.completed;
  return status::success();
}

status worker::leave() {
  if (!socket_) return status::success();
  auto s = send_command(static_cast<std::uint8_t>(proto::command::disconnect));
  drop_session();
  reconnect_at_ = clock::now();
  return s;
}

}  // namespace kforge::bus
