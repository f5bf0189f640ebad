#include "trainer/socket_group.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "bus/socket.hpp"
#include "common/bind_address.hpp"

namespace kforge::trainer {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

// One message: a JSON header frame, then one frame per tensor (its bytes, contiguous).
struct message {
  json header;
  std::vector<zmq::message_t> payload;
};

std::size_t byte_size(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

zmq::message_t frame_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).contiguous();
  return zmq::message_t(c.data_ptr(), byte_size(c));
}

// `bytes` as a host tensor shaped like `like` (same byte size, checked by the caller).
at::Tensor tensor_of(const at::Tensor& like, const zmq::message_t& bytes) {
  at::Tensor host = at::empty(like.sizes(), like.options().device(at::kCPU));
  std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
  return host;
}

// `bytes` into `into`, on into's device.
void copy_into(at::Tensor& into, const zmq::message_t& bytes) { into.copy_(tensor_of(into, bytes)); }

// What every rank must agree on for a call: its kind and each tensor's dtype and shape.
json shape_header(const char* op, const std::vector<at::Tensor>& tensors) {
  json shapes = json::array();
  for (const auto& t : tensors) shapes.push_back({{"dtype", std::string(c10::toString(t.scalar_type()))}, {"sizes", t.sizes().vec()}});
  return {{"op", op}, {"tensors", shapes}};
}

class socket_rank final : public collective {
 public:
  socket_rank(int rank, int size, std::chrono::milliseconds timeout, std::function<bool()> give_up)
      : rank_(rank), size_(size), timeout_(timeout), give_up_(std::move(give_up)), socket_(ctx_, rank == 0 ? zmq::socket_type::router : zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.set(zmq::sockopt::rcvhwm, 0);
    if (rank != 0) socket_.set(zmq::sockopt::routing_id, "rank-" + std::to_string(rank));
    if (rank == 0) socket_.set(zmq::sockopt::router_mandatory, true);  // a vanished rank is an error, not a drop
  }

  status join(const std::string& endpoint) {
    try {
      if (rank_ == 0) {
        socket_.bind(bind_address(endpoint));  // tcp: the interface the endpoint names
        std::vector<std::optional<message>> hello;
        if (auto s = gather("hello", hello); !s) return s;
        for (int r = 1; r < size_; ++r)
          if (hello[r]->header.value("size", -1) != size_)
            return error{"rank " + std::to_string(r) + " joined a group of " +
                         std::to_string(hello[r]->header.value("size", -1)) + " ranks, this one has " +
                         std::to_string(size_)};
        for (int r = 1; r < size_; ++r) send_to(r, {{"op", "ready"}}, {});
        return {};
      }
      socket_.connect(endpoint);
      send_to_root({{"op", "hello"}, {"rank", rank_}, {"size", size_}, {"seq", 0}}, {});
      auto ready = receive(clock_type::now() + timeout_);
      if (!ready) return error{"rank 0 at " + endpoint + " did not answer: " + ready.message()};
      return {};
    } catch (const zmq::error_t& e) {
      return error{"socket group at " + endpoint + ": " + e.what()};
    }
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }

  status all_reduce_sum(const std::vector<at::Tensor>& tensors) override {
    try {
      if (rank_ != 0) {
        std::vector<zmq::message_t> frames;
        for (const auto& t : tensors) frames.push_back(frame_of(t));
        send_to_root(numbered(shape_header("sum", tensors)), std::move(frames));
        return take_reply(tensors, "all_reduce_sum");
      }
      std::vector<std::optional<message>> parts;
      ++seq_;
      if (auto s = gather("sum", parts); !s) return s;
      if (auto why = mismatch(parts, tensors); !why.empty()) return fail_all("all_reduce_sum: " + why);
      // Rank order, as the thread group adds: bit-identical sums whichever way the ranks run.
      std::vector<at::Tensor> sums;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        at::Tensor s = tensors[i].to(at::kCPU).contiguous().clone();
        for (int r = 1; r < size_; ++r) s.add_(tensor_of(tensors[i], parts[r]->payload[i]));
        sums.push_back(std::move(s));
      }
      for (int r = 1; r < size_; ++r) {
        std::vector<zmq::message_t> frames;
        for (const auto& s : sums) frames.push_back(frame_of(s));
        send_to(r, {{"op", "result"}, {"ok", true}, {"seq", seq_}}, std::move(frames));
      }
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        at::Tensor t = tensors[i];
        t.copy_(sums[i]);
      }
      return {};
    } catch (const std::exception& e) {
      return error{std::string("all_reduce_sum: ") + e.what()};
    }
  }

  status broadcast(const std::vector<at::Tensor>& tensors, int root) override {
    try {
      if (root < 0 || root >= size_) return error{"broadcast: root " + std::to_string(root) + " is not a rank"};
      if (rank_ != 0) {
        std::vector<zmq::message_t> frames;
        if (rank_ == root)
          for (const auto& t : tensors) frames.push_back(frame_of(t));
        auto header = numbered(shape_header("broadcast", tensors));
        header["root"] = root;
        send_to_root(header, std::move(frames));
        return rank_ == root ? take_reply({}, "broadcast") : take_reply(tensors, "broadcast");
      }
      std::vector<std::optional<message>> parts;
      ++seq_;
      if (auto s = gather("broadcast", parts); !s) return s;
      if (auto why = mismatch(parts, tensors); !why.empty()) return fail_all("broadcast: " + why);
      for (int r = 1; r < size_; ++r)
        if (parts[r]->header.value("root", -1) != root)
          return fail_all("broadcast: rank " + std::to_string(r) + " names root " +
                          std::to_string(parts[r]->header.value("root", -1)) + ", rank 0 names " +
                          std::to_string(root));
      if (root != 0 && parts[root]->payload.size() != tensors.size())
        return fail_all("broadcast: the root sent " + std::to_string(parts[root]->payload.size()) + " tensors");
      for (int r = 1; r < size_; ++r) {
        std::vector<zmq::message_t> frames;
        if (r != root)
          for (std::size_t i = 0; i < tensors.size(); ++i)
            frames.push_back(root == 0 ? frame_of(tensors[i]) : zmq::message_t(parts[root]->payload[i].data(),
                                                                               parts[root]->payload[i].size()));
        send_to(r, {{"op", "result"}, {"ok", true}, {"seq", seq_}}, std::move(frames));
      }
      if (root != 0)
        for (std::size_t i = 0; i < tensors.size(); ++i) {
          at::Tensor t = tensors[i];
          copy_into(t, parts[root]->payload[i]);
        }
      return {};
    } catch (const std::exception& e) {
      return error{std::string("broadcast: ") + e.what()};
    }
  }

  // Rank 0 adds every rank's input in rank order (all_reduce_sum's order, so each chunk is
  // bit-identical to the all-reduce's) and sends each rank only its chunk of the sum.
  status reduce_scatter_sum(const at::Tensor& input, const at::Tensor& output) override {
    try {
      json header = shape_header("reduce_scatter", {input, output});
      if (rank_ != 0) {
        std::vector<zmq::message_t> frames;
        frames.push_back(frame_of(input));
        send_to_root(numbered(std::move(header)), std::move(frames));
        return take_reply({output}, "reduce_scatter_sum");
      }
      std::vector<std::optional<message>> parts;
      ++seq_;
      if (auto s = gather("reduce_scatter", parts); !s) return s;
      if (auto why = chunk_check(parts, header, input, output); !why.empty()) return fail_all("reduce_scatter_sum: " + why);
      const std::int64_t n = output.numel();
      at::Tensor sum = input.to(at::kCPU).contiguous().reshape(-1).clone();
      for (int r = 1; r < size_; ++r) sum.add_(tensor_of(sum, parts[r]->payload[0]));
      for (int r = 1; r < size_; ++r) {
        std::vector<zmq::message_t> frames;
        frames.push_back(frame_of(sum.narrow(0, n * r, n)));
        send_to(r, {{"op", "result"}, {"ok", true}, {"seq", seq_}}, std::move(frames));
      }
      output.view(-1).copy_(sum.narrow(0, 0, n));
      return {};
    } catch (const std::exception& e) {
      return error{std::string("reduce_scatter_sum: ") + e.what()};
    }
  }

  // Rank 0 puts every rank's input side by side and sends the whole to every rank.
  status all_gather(const at::Tensor& input, const at::Tensor& output) override {
    try {
      json header = shape_header("all_gather", {input, output});
      if (rank_ != 0) {
        std::vector<zmq::message_t> frames;
        frames.push_back(frame_of(input));
        send_to_root(numbered(std::move(header)), std::move(frames));
        return take_reply({output}, "all_gather");
      }
      std::vector<std::optional<message>> parts;
      ++seq_;
      if (auto s = gather("all_gather", parts); !s) return s;
      if (auto why = chunk_check(parts, header, output, input); !why.empty()) return fail_all("all_gather: " + why);
      const std::int64_t n = input.numel();
      at::Tensor whole = at::empty({output.numel()}, output.options().device(at::kCPU));
      whole.narrow(0, 0, n).copy_(input.reshape(-1));
      for (int r = 1; r < size_; ++r) {
        at::Tensor chunk = whole.narrow(0, n * r, n);
        copy_into(chunk, parts[r]->payload[0]);
      }
      for (int r = 1; r < size_; ++r) {
        std::vector<zmq::message_t> frames;
        frames.push_back(frame_of(whole));
        send_to(r, {{"op", "result"}, {"ok", true}, {"seq", seq_}}, std::move(frames));
      }
      output.view(-1).copy_(whole);
      return {};
    } catch (const std::exception& e) {
      return error{std::string("all_gather: ") + e.what()};
    }
  }

 private:
  void send(std::optional<std::string> to, const json& header, std::vector<zmq::message_t> payload) {
    if (to) socket_.send(zmq::buffer(*to), zmq::send_flags::sndmore);
    const std::string h = header.dump();
    socket_.send(zmq::buffer(h), payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < payload.size(); ++i)
      socket_.send(payload[i], i + 1 < payload.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  void send_to(int r, const json& header, std::vector<zmq::message_t> payload) {
    send("rank-" + std::to_string(r), header, std::move(payload));
  }
  void send_to_root(const json& header, std::vector<zmq::message_t> payload) {
    send(std::nullopt, header, std::move(payload));
  }

  // A header of the next call (other ranks number their calls as they make them).
  json numbered(json header) {
    header["seq"] = ++seq_;
    return header;
  }

  // The next whole message (rank 0: with the sender's rank), or an error at the deadline or when
  // give_up says so.
  result<std::pair<int, message>> receive(clock_type::time_point deadline) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    for (;;) {
      if (give_up_ && give_up_()) return error{"given up: a rank has failed"};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      if (left.count() <= 0) return error{"no message within " + std::to_string(timeout_.count()) + " ms"};
      if (zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(200))) > 0) break;
    }
    std::vector<zmq::message_t> frames;
    const auto parts = bus::receive_within(socket_, frames, std::numeric_limits<std::size_t>::max(),
                                           std::chrono::milliseconds(0));
    if (!parts) return error{parts.message()};
    std::size_t at = 0;
    int from = 0;
    if (rank_ == 0) {
      const std::string id = frames.at(at++).to_string();
      from = id.rfind("rank-", 0) == 0 ? std::atoi(id.c_str() + 5) : -1;
      if (from < 1 || from >= size_) return error{"a message from an unknown peer '" + id + "'"};
    }
    if (at >= frames.size()) return error{"an empty message"};
    message m;
    m.header = json::parse(frames[at++].to_string(), nullptr, false);
    if (m.header.is_discarded() || !m.header.is_object()) return error{"a malformed header"};
    for (; at < frames.size(); ++at) m.payload.push_back(std::move(frames[at]));
    return std::make_pair(from, std::move(m));
  }

  // Rank 0: one message `op` from every other rank (indexed by rank), or an error naming who did
  // not send one in time (or sent something else).
  status gather(const char* op, std::vector<std::optional<message>>& parts) {
    parts.clear();
    parts.resize(static_cast<std::size_t>(size_));  // messages move, never copy
    const auto deadline = clock_type::now() + timeout_;
    for (int got = 0; got < size_ - 1;) {
      auto m = receive(deadline);
      if (!m) {
        std::string missing;
        for (int r = 1; r < size_; ++r)
          if (!parts[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        return fail_all(std::string(op) + ": rank(s) " + missing + " did not take part: " + m.message());
      }
      auto& [from, msg] = *m;
      // A part of an earlier call that came after that call had failed at its deadline: not ours.
      if (msg.header.value("seq", std::int64_t{-1}) < seq_) continue;
      if (msg.header.value("seq", std::int64_t{-1}) > seq_)
        return fail_all(std::string(op) + ": rank " + std::to_string(from) + " is at call " +
                        std::to_string(msg.header.value("seq", std::int64_t{-1})) + ", rank 0 at " + std::to_string(seq_));
      if (msg.header.value("op", "") != op)
        return fail_all(std::string(op) + ": rank " + std::to_string(from) + " called " +
                        msg.header.value("op", "?") + " instead (the ranks' calls differ)");
      if (parts[from]) return fail_all(std::string(op) + ": rank " + std::to_string(from) + " sent twice");
      parts[from] = std::move(msg);
      ++got;
    }
    return {};
  }

  // Rank 0: why the other ranks' tensors do not match its own; empty when they do.
  std::string mismatch(const std::vector<std::optional<message>>& parts, const std::vector<at::Tensor>& mine) const {
    const json want = shape_header("", mine).at("tensors");
    for (int r = 1; r < size_; ++r) {
      if (parts[r]->header.value("tensors", json::array()) != want)
        return "rank " + std::to_string(r) + " passed tensors " + parts[r]->header.value("tensors", json::array()).dump() +
               ", rank 0 " + want.dump();
      if (!parts[r]->payload.empty() && parts[r]->payload.size() != mine.size())
        return "rank " + std::to_string(r) + " sent " + std::to_string(parts[r]->payload.size()) + " tensors";
      for (std::size_t i = 0; i < parts[r]->payload.size(); ++i)
        if (parts[r]->payload[i].size() != byte_size(mine[i]))
          return "rank " + std::to_string(r) + "'s tensor " + std::to_string(i) + " has " +
                 std::to_string(parts[r]->payload[i].size()) + " bytes, rank 0's " + std::to_string(byte_size(mine[i]));
    }
    return {};
  }

  // Rank 0, reduce-scatter and all-gather: why the ranks' (input, output) pairs differ from rank
  // 0's, or do not hold `big` = ranks x `small` elements, or the one frame is of another size;
  // empty when they fit.
  std::string chunk_check(const std::vector<std::optional<message>>& parts, const json& mine, const at::Tensor& big,
                          const at::Tensor& small) const {
    if (big.scalar_type() != small.scalar_type() || big.numel() != small.numel() * size_)
      return std::to_string(big.numel()) + " elements are not " + std::to_string(size_) + " chunks of " +
             std::to_string(small.numel()) + " of the same dtype";
    for (int r = 1; r < size_; ++r) {
      if (parts[r]->header.value("tensors", json::array()) != mine.at("tensors"))
        return "rank " + std::to_string(r) + " passed tensors " + parts[r]->header.value("tensors", json::array()).dump() +
               ", rank 0 " + mine.at("tensors").dump();
      const at::Tensor& sent = mine.at("op") == "all_gather" ? small : big;
      if (parts[r]->payload.size() != 1 || parts[r]->payload[0].size() != byte_size(sent))
        return "rank " + std::to_string(r) + " sent a part of the wrong size";
    }
    return {};
  }

  // Rank 0: `why` to every other rank (each returns it as its error), and as rank 0's error.
  status fail_all(const std::string& why) {
    for (int r = 1; r < size_; ++r) {
      try {
        send_to(r, {{"op", "result"}, {"ok", false}, {"why", why}, {"seq", seq_}}, {});
      } catch (const zmq::error_t&) {  // a rank that is gone hears nothing
      }
    }
    return error{why};
  }

  // Other ranks: rank 0's answer, copied into `into` (nothing to copy for an empty list).
  status take_reply(const std::vector<at::Tensor>& into, const char* what) {
    const auto deadline = clock_type::now() + timeout_;
    auto m = receive(deadline);
    // Answers to earlier calls that this rank stopped waiting for: not this call's.
    while (m && m->second.header.value("seq", std::int64_t{-1}) < seq_) m = receive(deadline);
    if (!m) return error{std::string(what) + ": rank 0 did not answer: " + m.message()};
    const auto& msg = m->second;
    if (!msg.header.value("ok", false)) return error{msg.header.value("why", std::string(what) + " failed at rank 0")};
    if (into.empty()) return {};
    if (msg.payload.size() != into.size())
      return error{std::string(what) + ": rank 0 sent " + std::to_string(msg.payload.size()) + " tensors for " +
                   std::to_string(into.size())};
    for (std::size_t i = 0; i < into.size(); ++i) {
      if (msg.payload[i].size() != byte_size(into[i])) return error{std::string(what) + ": a reply of the wrong size"};
      at::Tensor t = into[i];
      copy_into(t, msg.payload[i]);
    }
    return {};
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::function<bool()> give_up_;
  std::int64_t seq_ = 0;  ///< calls made (rank 0: the call being served)
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
};

}  // namespace

result<std::shared_ptr<collective>> make_socket_group(const std::string& endpoint, int rank, int size,
                                                      std::chrono::milliseconds timeout,
                                                      std::function<bool()> give_up) {
  if (size < 1 || rank < 0 || rank >= size)
    return error{"socket group: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank"};
  auto r = std::make_shared<socket_rank>(rank, size, timeout, std::move(give_up));
  if (size > 1)
    if (auto s = r->join(endpoint); !s) return error{"socket group, rank " + std::to_string(rank) + ": " + s.message()};
  return std::shared_ptr<collective>(std::move(r));
}

}  // namespace kforge::trainer
