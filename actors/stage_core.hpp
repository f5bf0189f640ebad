#pragma once
// The bookkeeping every stage actor shares, kept out of CAF so it is plain to test: envelope
// headers (sender, message ids, sample ids), the counters, and timed, exception-proof logic calls.

#include <cstdint>
#include <deque>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "actors/stage_metrics.hpp"
#include "common/clock.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::actors {

/// A child sample id: the same (parent, index) gives the same id in every run and process, which
/// replay relies on; different indexes give unrelated ids (a splitmix64 mix).
std::uint64_t derive_sample_id(std::uint64_t parent, std::uint64_t index) noexcept;

class stage_core {
 public:
  stage_core() = default;
  /// `stage` is the kind ("sampler"), `name` the instance and envelope sender ("sampler/0").
  stage_core(std::string stage, std::string name);

  const std::string& name() const noexcept { return metrics_.name; }

  /// A header for the next outgoing envelope: this stage as sender, the next message id (counting
  /// up by one per sender, with the sender's name hash in the top 24 bits so ids of different
  /// senders do not collide), the given sample id and policy version, send time stamped when sealed.
  messages::header next_header(std::uint64_t sample_id, std::uint64_t policy_version);
  /// A fresh sample id for a sample this stage originates (derived from its name and a counter).
  std::uint64_t new_sample_id() noexcept;

  void count_received() noexcept { ++metrics_.received; }
  void count_sent(std::uint64_t n = 1) noexcept { metrics_.sent += n; }
  void count_dropped(std::uint64_t n = 1) noexcept { metrics_.dropped += n; }
  /// Adds `n` to the stage-specific counter `name` (stage_metrics::extra).
  void count_extra(const std::string& name, std::uint64_t n = 1) { metrics_.extra[name] += n; }
  /// Sets the stage-specific gauge `name` (stage_metrics::extra): a value, not a count.
  void set_extra(const std::string& name, std::uint64_t value) { metrics_.extra[name] = value; }
  /// Counts an error and keeps its message (prefixed with the instance name) as last_error, unless
  /// a fatal error was counted before: that one stays last_error.
  void count_error(const error& e);
  /// Counts an error the stage cannot go on from (fatal_counter) and keeps its message as
  /// last_error, where no later ordinary error replaces it: the head that ends the run on it reads
  /// this cause. The input's own fate (sent, failed) is counted apart.
  void count_fatal(const error& e);

  /// Calls the logic through `f` (returning a result<T> or status), timing it into the latency
  /// histogram and the busy time (record_call). An exception escaping the logic becomes an error
  /// value here: it never crosses the actor.
  template <class F>
  auto call(F&& f) -> decltype(f()) {
    struct timer {
      stage_core& core;
      std::int64_t t0;
      ~timer() { core.record_call(monotonic_ns() - t0); }
    } t{*this, monotonic_ns()};
    return guarded(std::forward<F>(f));
  }

  /// `f` with its exceptions turned into error values, untimed: for a caller that runs the logic
  /// on another thread than the one owning this core (the sandbox worker), times it there and
  /// hands the duration to record_call under its own lock.
  template <class F>
  static auto guarded(F&& f) -> decltype(f()) {
    using R = decltype(f());
    static_assert(std::is_constructible<R, error>::value, "logic must return result<T> or status");
    try {
      return f();
    } catch (const std::exception& e) {
      return R(error{"stage logic threw: " + std::string(e.what())});
    } catch (...) {
      return R(error{"stage logic threw a non-standard exception"});
    }
  }

  /// Counts one logic call of `nanoseconds`: a latency sample, and time added to the busy total
  /// that snapshot() reports as the extra counter "busy_us" (wall time spent inside logic calls,
  /// from which the head derives each GPU group's idle fraction).
  void record_call(std::int64_t nanoseconds) noexcept;

  /// The counters with the given queue depth (which only the actor can see), and "busy_us" in
  /// extra (always present, 0 before the first call).
  stage_metrics snapshot(std::uint64_t queue_depth) const;

 private:
  stage_metrics metrics_;
  latency_histogram latency_;
  std::uint64_t busy_ns_ = 0;  ///< summed duration of the logic calls
  std::uint64_t next_message_id_ = 1;
  std::uint64_t next_sample_ = 0;
  std::uint64_t name_hash_ = 0;
  bool fatal_ = false;  ///< a fatal error was counted: last_error is its message
};

/// The state every stage actor keeps besides its logic and downstream; `Input` is its work message.
template <class Input>
struct stage_base {
  stage_core core;
  bool paused = false;
  std::deque<Input> held;  ///< inputs that arrived while paused, in arrival order
};

}  // namespace kforge::actors
