// bus_bench: kforge envelopes over the bus next to raw ZeroMQ frames of the same payload size, in
// one run on one machine, so the ratio is the cost of the envelope layer (build with make_blob,
// verify with envelope::from_bytes) and nothing else.
//
// For each transport (inproc, ipc, tcp loopback) and payload (256 B, 4 KB, 64 KB):
//   throughput: one PUSH -> PULL stream, producer thread to consumer thread; msgs/s and MB/s of
//               payload; every message's sequence number, size and a payload byte are checked.
//   latency:    ping-pong over two PUSH/PULL pairs (client -> echo thread -> client); p50 and p99
//               of the round trip; each reply's sequence number is checked.
// Raw and kforge runs alternate (which goes first flips each rep), after one warm-up of each; the
// median over --reps runs is reported with its spread, and each ratio is the median of the per-rep
// kforge/raw pairs. Both use the same socket options (LINGER=0, HWM 1000) and the same context.
//
//   bus_bench [--reps N] [--scale X] [--json FILE] [--transports inproc,ipc,tcp] [--sizes 256,...]

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bus/channel.hpp"
#include "bus/context.hpp"
#include "bus/socket.hpp"
#include "messages/envelope.hpp"

namespace {

using namespace kforge;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class mode { raw, kforge };

struct config {
  int reps = 5;
  double scale = 1.0;
  std::string json_path;
  std::vector<std::string> transports{"inproc", "ipc", "tcp"};
  std::vector<std::size_t> sizes{256, 4096, 65536};
  bool default_malloc = false;
  bool breakdown = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ',') {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

struct check_failure {
  std::string what;
};

[[noreturn]] void fail(const std::string& what) { throw check_failure{what}; }

// ipc socket files this run created; zmq leaves them behind, so main() removes them at the end.
std::vector<std::string>& ipc_files() {
  static std::vector<std::string> files;
  return files;
}

// A fresh endpoint per run, so no run sees another's leftovers.
std::string endpoint_for(const std::string& transport) {
  static int n = 0;
  ++n;
  if (transport == "inproc") return "inproc://bench-" + std::to_string(n);
  if (transport == "ipc") {
    ipc_files().push_back("/tmp/kforge-bench-" + std::to_string(::getpid()) + "-" +
                          std::to_string(n));
    return "ipc://" + ipc_files().back();
  }
  return "tcp://127.0.0.1:*";
}

struct remove_ipc_files {
  ~remove_ipc_files() {
    for (const auto& f : ipc_files()) ::unlink(f.c_str());
  }
};

// The payload: seeded bytes with the sequence number in the first 8 bytes.
struct payload {
  std::vector<std::uint8_t> bytes;
  explicit payload(std::size_t size) : bytes(size) {
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);
  }
  void stamp(std::uint64_t seq) { std::memcpy(bytes.data(), &seq, sizeof seq); }
  // The receiver's check: size, sequence number, and the last byte.
  bool matches(const std::uint8_t* p, std::size_t n, std::uint64_t seq) const {
    if (n != bytes.size()) return false;
    std::uint64_t got;
    std::memcpy(&got, p, sizeof got);
    return got == seq && p[n - 1] == bytes[n - 1];
  }
};

zmq::socket_t raw_socket(zmq::socket_type t) {
  return std::move(bus::open_socket(bus::shared_context(), t, {}).value());
}

// --- kforge side -------------------------------------------------------------------------------

messages::envelope build(payload& p, std::uint64_t seq) {
  p.stamp(seq);
  return messages::make_blob({seq, seq, "bench", 0, 0}, p.bytes.data(), p.bytes.size());
}

void check_envelope(const payload& p, const messages::envelope& e, std::uint64_t seq) {
  const auto* b = e.as<messages::wire::Blob>();
  if (e->message_id() != seq || !b || !b->data() ||
      !p.matches(b->data()->data(), b->data()->size(), seq))
    fail("kforge envelope " + std::to_string(seq) + " arrived wrong");
}

messages::envelope must_receive(bus::receiver& rx) {
  auto r = rx.receive(milliseconds(10000));
  if (!r.ok()) fail(r.message());
  if (!r->has_value()) fail("nothing received within 10 s");
  return std::move(**r);
}

double kforge_throughput(const std::string& transport, std::size_t size, std::uint64_t count) {
  auto rx = bus::receiver::bind(endpoint_for(transport)).value();
  auto tx = bus::sender::connect(rx.last_endpoint()).value();
  std::string producer_error;
  const auto t0 = clock_type::now();
  std::thread producer([&] {
    payload p(size);
    for (std::uint64_t i = 1; i <= count; ++i) {
      if (auto s = tx.send(build(p, i), milliseconds(10000)); !s) {
        producer_error = s.message();
        return;
      }
    }
  });
  const payload expect(size);
  // A failing producer makes must_receive time out; its own message is reported after join.
  try {
    for (std::uint64_t i = 1; i <= count; ++i) check_envelope(expect, must_receive(rx), i);
  } catch (const check_failure&) {
    producer.join();
    if (!producer_error.empty()) fail(producer_error);
    throw;
  }
  const auto t1 = clock_type::now();
  producer.join();
  if (!producer_error.empty()) fail(producer_error);
  if (rx.counters().received != count || rx.counters().rejected != 0) fail("kforge count mismatch");
  return std::chrono::duration<double>(t1 - t0).count();
}

std::vector<double> kforge_latency(const std::string& transport, std::size_t size, int rounds) {
  auto server_rx = bus::receiver::bind(endpoint_for(transport)).value();
  auto client_rx = bus::receiver::bind(endpoint_for(transport)).value();
  auto client_tx = bus::sender::connect(server_rx.last_endpoint()).value();
  auto server_tx = bus::sender::connect(client_rx.last_endpoint()).value();
  std::string server_error;
  std::thread server([&] {
    for (int i = 0; i < rounds; ++i) {
      auto r = server_rx.receive(milliseconds(10000));
      if (!r.ok() || !r->has_value()) {
        server_error = r.ok() ? "echo server timed out" : r.message();
        return;
      }
      // The echo forwards the verified envelope: its bytes are shared, not copied.
      if (auto s = server_tx.send(**r, milliseconds(10000)); !s) {
        server_error = s.message();
        return;
      }
    }
  });
  payload p(size);
  const payload expect(size);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(rounds));
  try {
    for (int i = 1; i <= rounds; ++i) {
      const auto t0 = clock_type::now();
      if (auto s = client_tx.send(build(p, static_cast<std::uint64_t>(i)), milliseconds(10000)); !s)
        fail(s.message());
      auto e = must_receive(client_rx);
      us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
      check_envelope(expect, e, static_cast<std::uint64_t>(i));
    }
  } catch (const check_failure&) {
    server.join();
    if (!server_error.empty()) fail(server_error);
    throw;
  }
  server.join();
  if (!server_error.empty()) fail(server_error);
  return us;
}

// --- raw ZeroMQ side ---------------------------------------------------------------------------

std::string bind_raw(zmq::socket_t& s, const std::string& transport) {
  return bus::attach(s, {endpoint_for(transport), bus::link::bind}).value();
}

double raw_throughput(const std::string& transport, std::size_t size, std::uint64_t count) {
  auto rx = raw_socket(zmq::socket_type::pull);
  auto tx = raw_socket(zmq::socket_type::push);
  tx.connect(bind_raw(rx, transport));
  const auto t0 = clock_type::now();
  std::thread producer([&] {
    payload p(size);
    for (std::uint64_t i = 1; i <= count; ++i) {
      p.stamp(i);
      zmq::message_t m(p.bytes.data(), p.bytes.size());
      (void)tx.send(m, zmq::send_flags::none);
    }
  });
  const payload expect(size);
  zmq::message_t m;
  for (std::uint64_t i = 1; i <= count; ++i) {
    (void)rx.recv(m);
    if (!expect.matches(m.data<std::uint8_t>(), m.size(), i))
      fail("raw message " + std::to_string(i) + " arrived wrong");
  }
  const auto t1 = clock_type::now();
  producer.join();
  return std::chrono::duration<double>(t1 - t0).count();
}

std::vector<double> raw_latency(const std::string& transport, std::size_t size, int rounds) {
  auto server_rx = raw_socket(zmq::socket_type::pull);
  auto client_rx = raw_socket(zmq::socket_type::pull);
  auto client_tx = raw_socket(zmq::socket_type::push);
  auto server_tx = raw_socket(zmq::socket_type::push);
  client_tx.connect(bind_raw(server_rx, transport));
  server_tx.connect(bind_raw(client_rx, transport));
  std::thread server([&] {
    zmq::message_t m;
    for (int i = 0; i < rounds; ++i) {
      (void)server_rx.recv(m);
      (void)server_tx.send(m, zmq::send_flags::none);
    }
  });
  payload p(size);
  const payload expect(size);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(rounds));
  zmq::message_t reply;
  for (int i = 1; i <= rounds; ++i) {
    const auto t0 = clock_type::now();
    p.stamp(static_cast<std::uint64_t>(i));
    zmq::message_t m(p.bytes.data(), p.bytes.size());
    (void)client_tx.send(m, zmq::send_flags::none);
    (void)client_rx.recv(reply);
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    if (!expect.matches(reply.data<std::uint8_t>(), reply.size(), static_cast<std::uint64_t>(i)))
      fail("raw reply " + std::to_string(i) + " arrived wrong");
  }
  server.join();
  return us;
}

// --- breakdown: which half of the kforge path costs what ---------------------------------------
// Each runs one stream where only one end is kforge's, so a gap to raw can be put where it is:
//   build+send: make_blob + sender::send     -> raw PULL (no verification)
//   send:       sender::send of one prebuilt  -> raw PULL (the bus's send path alone)
//   receive:    raw PUSH of envelope bytes    -> receiver::receive (verification included)

enum class half { build_send, send, receive };

double half_throughput(half h, const std::string& transport, std::size_t size,
                       std::uint64_t count) {
  payload p(size);
  const auto prebuilt = build(p, 1);
  std::optional<bus::receiver> krx;
  std::optional<bus::sender> ktx;
  zmq::socket_t rrx, rtx;
  std::string ep;
  if (h == half::receive) {
    krx.emplace(bus::receiver::bind(endpoint_for(transport)).value());
    rtx = raw_socket(zmq::socket_type::push);
    rtx.connect(krx->last_endpoint());
  } else {
    rrx = raw_socket(zmq::socket_type::pull);
    ktx.emplace(bus::sender::connect(bind_raw(rrx, transport)).value());
  }
  std::string producer_error;
  const auto t0 = clock_type::now();
  std::thread producer([&] {
    payload q(size);
    for (std::uint64_t i = 1; i <= count && producer_error.empty(); ++i) {
      if (h == half::receive) {
        zmq::message_t m(prebuilt.data(), prebuilt.size());
        (void)rtx.send(m, zmq::send_flags::none);
      } else if (auto st = ktx->send(h == half::send ? prebuilt : build(q, i), milliseconds(10000));
                 !st) {
        producer_error = st.message();
      }
    }
  });
  zmq::message_t m;
  for (std::uint64_t i = 1; i <= count; ++i) {
    if (h == half::receive) {
      check_envelope(p, must_receive(*krx), 1);
    } else {
      (void)rrx.recv(m);
      if (m.size() != prebuilt.size()) fail("breakdown: wrong size");
    }
  }
  const auto t1 = clock_type::now();
  producer.join();
  if (!producer_error.empty()) fail(producer_error);
  return std::chrono::duration<double>(t1 - t0).count();
}

// --- statistics and the table ------------------------------------------------------------------

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct spread {
  double median = 0, min = 0, max = 0;
  static spread of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {percentile(v, 0.5), v.front(), v.back()};
  }
  nlohmann::json json() const { return {{"median", median}, {"min", min}, {"max", max}}; }
};

struct measured {
  spread msgs_per_s, mb_per_s, p50_us, p99_us;
};

struct row {
  std::string transport;
  std::size_t size;
  measured raw, kf;
  // kforge/raw of each rep's pair of runs, taken back to back: on a shared machine the pairs see
  // the same load, so their ratio is steadier than a ratio of medians.
  spread throughput_ratio, p50_ratio;
};

std::uint64_t stream_count(std::size_t size, double scale) {
  const double base = size <= 256 ? 100000 : size <= 4096 ? 40000 : 4000;
  return static_cast<std::uint64_t>(std::max(1000.0, base * scale));
}

int round_count(std::size_t size, double scale) {
  const double base = size <= 4096 ? 2000 : 1000;
  return static_cast<int>(std::max(200.0, base * scale));
}

row measure(const std::string& transport, std::size_t size, const config& cfg) {
  const auto n = stream_count(size, cfg.scale);
  const int rounds = round_count(size, cfg.scale);
  std::vector<double> rate[2], mbps[2], p50[2], p99[2], thr_ratio, lat_ratio;
  for (int rep = -1; rep < cfg.reps; ++rep) {  // rep -1: warm-up, not recorded
    const auto count = rep < 0 ? std::max<std::uint64_t>(n / 5, 500) : n;
    const int trips = rep < 0 ? std::max(rounds / 5, 100) : rounds;
    // Alternate which side goes first, so neither always runs on a warmer (or busier) machine.
    const mode order[2] = {rep % 2 ? mode::kforge : mode::raw, rep % 2 ? mode::raw : mode::kforge};
    for (mode m : order) {
      const int k = static_cast<int>(m);
      const double secs = m == mode::raw ? raw_throughput(transport, size, count)
                                         : kforge_throughput(transport, size, count);
      const auto lat = m == mode::raw ? raw_latency(transport, size, trips)
                                      : kforge_latency(transport, size, trips);
      if (rep < 0) continue;
      rate[k].push_back(static_cast<double>(count) / secs);
      mbps[k].push_back(static_cast<double>(count * size) / secs / 1e6);
      p50[k].push_back(percentile(lat, 0.50));
      p99[k].push_back(percentile(lat, 0.99));
    }
    if (rep < 0) continue;
    thr_ratio.push_back(rate[1].back() / rate[0].back());
    lat_ratio.push_back(p50[1].back() / p50[0].back());
  }
  auto pack = [&](int k) {
    return measured{spread::of(rate[k]), spread::of(mbps[k]), spread::of(p50[k]),
                    spread::of(p99[k])};
  };
  return row{transport, size, pack(0), pack(1), spread::of(thr_ratio), spread::of(lat_ratio)};
}

std::string size_name(std::size_t s) {
  return s >= 1024 ? std::to_string(s / 1024) + " KB" : std::to_string(s) + " B";
}

// "median (min..max)" with the spread as +-% of the median, compact enough for one table cell.
std::string cell(const spread& s, int decimals) {
  char buf[96];
  const double pm = s.median > 0 ? 100.0 * (s.max - s.min) / (2 * s.median) : 0;
  std::snprintf(buf, sizeof buf, "%.*f ±%.0f%%", decimals, s.median, pm);
  return buf;
}

void print_table(const std::vector<row>& rows) {
  std::printf(
      "\n| transport | payload | raw msgs/s | kforge msgs/s | raw MB/s | kforge MB/s "
      "| throughput kforge/raw | raw p50 µs | kforge p50 µs | raw p99 µs | kforge p99 µs "
      "| p50 kforge/raw |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf(
        "| %s | %s | %s | %s | %s | %s | **%.2f** (%.2f–%.2f) | %s | %s | %s | %s | %.2f "
        "(%.2f–%.2f) |\n",
        r.transport.c_str(), size_name(r.size).c_str(), cell(r.raw.msgs_per_s, 0).c_str(),
        cell(r.kf.msgs_per_s, 0).c_str(), cell(r.raw.mb_per_s, 1).c_str(),
        cell(r.kf.mb_per_s, 1).c_str(), r.throughput_ratio.median, r.throughput_ratio.min,
        r.throughput_ratio.max, cell(r.raw.p50_us, 1).c_str(), cell(r.kf.p50_us, 1).c_str(),
        cell(r.raw.p99_us, 1).c_str(), cell(r.kf.p99_us, 1).c_str(), r.p50_ratio.median,
        r.p50_ratio.min, r.p50_ratio.max);
  }
  std::fflush(stdout);
}

nlohmann::json to_json(const std::vector<row>& rows, const config& cfg, double seconds) {
  nlohmann::json out;
  out["benchmark"] = "bus";
  out["reps"] = cfg.reps;
  out["scale"] = cfg.scale;
  out["seconds"] = seconds;
  out["malloc_trim_threshold"] = cfg.default_malloc ? "glibc default" : "256 MiB";
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    auto side = [](const measured& m) {
      return nlohmann::json{{"msgs_per_s", m.msgs_per_s.json()},
                            {"mb_per_s", m.mb_per_s.json()},
                            {"p50_us", m.p50_us.json()},
                            {"p99_us", m.p99_us.json()}};
    };
    out["rows"].push_back({{"transport", r.transport},
                           {"payload_bytes", r.size},
                           {"raw", side(r.raw)},
                           {"kforge", side(r.kf)},
                           {"throughput_ratio", r.throughput_ratio.json()},
                           {"p50_ratio", r.p50_ratio.json()}});
  }
  return out;
}

struct breakdown_row {
  std::string transport;
  std::size_t size;
  spread raw, parts[3];  // msgs/s
  spread part_ratio[3];  // per-rep part/raw
};

breakdown_row measure_breakdown(const std::string& transport, std::size_t size, const config& cfg) {
  const auto n = stream_count(size, cfg.scale);
  std::vector<double> raw, parts[3], ratios[3];
  for (int rep = -1; rep < cfg.reps; ++rep) {
    const auto count = rep < 0 ? std::max<std::uint64_t>(n / 5, 500) : n;
    const double r = static_cast<double>(count) / raw_throughput(transport, size, count);
    double v[3];
    for (int k = 0; k < 3; ++k) {
      const int j = (k + rep + 3) % 3;  // rotate the order each rep
      v[j] = static_cast<double>(count) /
             half_throughput(static_cast<half>(j), transport, size, count);
    }
    if (rep < 0) continue;
    raw.push_back(r);
    for (int j = 0; j < 3; ++j) {
      parts[j].push_back(v[j]);
      ratios[j].push_back(v[j] / r);
    }
  }
  breakdown_row b{transport, size, spread::of(raw), {}, {}};
  for (int j = 0; j < 3; ++j) {
    b.parts[j] = spread::of(parts[j]);
    b.part_ratio[j] = spread::of(ratios[j]);
  }
  return b;
}

void print_breakdown(const std::vector<breakdown_row>& rows) {
  std::printf(
      "\n| transport | payload | raw msgs/s | make_blob+send → raw | send (prebuilt) → raw "
      "| raw → receive+verify |\n|---|---|---|---|---|---|\n");
  for (const auto& b : rows) {
    std::printf("| %s | %s | %s |", b.transport.c_str(), size_name(b.size).c_str(),
                cell(b.raw, 0).c_str());
    for (int j = 0; j < 3; ++j)
      std::printf(" %s (**%.2f**) |", cell(b.parts[j], 0).c_str(), b.part_ratio[j].median);
    std::printf("\n");
  }
  std::fflush(stdout);
}

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--reps N] [--scale X] [--json FILE] [--transports LIST] [--sizes LIST]\n"
      "                [--breakdown] [--default-malloc]\n"
      "  --reps N     measured repetitions per case, after one warm-up (default 5, min 1)\n"
      "  --scale X    multiply message and round-trip counts (default 1.0)\n"
      "  --json FILE  also write the results as JSON\n"
      "  --transports inproc,ipc,tcp (default: all)\n"
      "  --sizes      payload bytes, e.g. 256,4096,65536 (default)\n"
      "  --default-malloc  keep glibc's heap trimming (see RESULTS.md)\n"
      "  --breakdown  also time each half of the kforge path against raw (throughput)\n",
      argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(argv[0]);
      return 0;
    }
    if (a == "--default-malloc") {
      cfg.default_malloc = true;
      continue;
    }
    if (a == "--breakdown") {
      cfg.breakdown = true;
      continue;
    }
    if (i + 1 >= argc) return usage(argv[0]);
    const std::string v = argv[++i];
    try {
      if (a == "--reps")
        cfg.reps = std::stoi(v);
      else if (a == "--scale")
        cfg.scale = std::stod(v);
      else if (a == "--json")
        cfg.json_path = v;
      else if (a == "--transports")
        cfg.transports = split(v);
      else if (a == "--sizes") {
        cfg.sizes.clear();
        for (const auto& x : split(v)) cfg.sizes.push_back(std::stoul(x));
      } else
        return usage(argv[0]);
    } catch (const std::exception&) {
      return usage(argv[0]);
    }
  }
  if (cfg.reps < 1 || !(cfg.scale > 0) || cfg.sizes.empty() || cfg.transports.empty())
    return usage(argv[0]);
  for (const auto& t : cfg.transports)
    if (t != "inproc" && t != "ipc" && t != "tcp") return usage(argv[0]);
  for (auto z : cfg.sizes)
    if (z < 16) return usage(argv[0]);

  // Messages are allocated on one thread and freed on another, in bursts of up to a high-water
  // mark. glibc then keeps shrinking and regrowing the producer's heap, and page faults dominate
  // inproc runs (raw and kforge alike, but unevenly from run to run). A high trim threshold
  // keeps freed pages mapped, so the runs measure the bus, not the VM's page-fault path.
  if (!cfg.default_malloc) mallopt(M_TRIM_THRESHOLD, 256 << 20);

  const remove_ipc_files cleanup;  // on every return path below
  const auto start = clock_type::now();
  std::vector<row> rows;
  try {
    for (const auto& t : cfg.transports) {
      for (std::size_t size : cfg.sizes) {
        rows.push_back(measure(t, size, cfg));
        const auto& r = rows.back();
        std::fprintf(stderr, "%-6s %6s  throughput kforge/raw %.2f  p50 kforge/raw %.2f\n",
                     t.c_str(), size_name(size).c_str(), r.throughput_ratio.median,
                     r.p50_ratio.median);
      }
    }
  } catch (const check_failure& f) {
    std::fprintf(stderr, "bus_bench: correctness check failed: %s\n", f.what.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bus_bench: %s\n", e.what());
    return 1;
  }
  print_table(rows);
  std::vector<breakdown_row> parts;
  if (cfg.breakdown) {
    try {
      for (const auto& t : cfg.transports)
        for (std::size_t size : cfg.sizes) parts.push_back(measure_breakdown(t, size, cfg));
    } catch (const check_failure& f) {
      std::fprintf(stderr, "bus_bench: correctness check failed: %s\n", f.what.c_str());
      return 1;
    }
    print_breakdown(parts);
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  std::printf(
      "\n%d reps after a warm-up; cells are median ±half-range (max-min)/2 as %% of the "
      "median; ratios are the median (min–max) of per-rep kforge/raw pairs; %.1f s total\n",
      cfg.reps, seconds);
  if (!cfg.json_path.empty()) {
    std::ofstream f(cfg.json_path);
    auto j = to_json(rows, cfg, seconds);
    for (const auto& b : parts) {
      j["breakdown"].push_back({{"transport", b.transport},
                                {"payload_bytes", b.size},
                                {"raw_msgs_per_s", b.raw.json()},
                                {"build_send_msgs_per_s", b.parts[0].json()},
                                {"send_msgs_per_s", b.parts[1].json()},
                                {"receive_msgs_per_s", b.parts[2].json()},
                                {"build_send_ratio", b.part_ratio[0].json()},
                                {"send_ratio", b.part_ratio[1].json()},
                                {"receive_ratio", b.part_ratio[2].json()}});
    }
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "bus_bench: cannot write %s\n", cfg.json_path.c_str());
      return 1;
    }
  }
  return 0;
}
