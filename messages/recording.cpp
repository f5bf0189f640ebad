#include "messages/recording.hpp"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/clock.hpp"

namespace kforge::messages {

namespace {

constexpr char magic[8] = {'K', 'F', 'R', 'E', 'C', '0', '0', '1'};
constexpr std::uint32_t max_header_bytes = 1u << 16;

// Fixed-width little-endian fields, so a recording reads the same on any host.
template <class T>
void put(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
}

template <class T>
T get(const unsigned char* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

result<recording_writer> recording_writer::create(const std::string& path, const std::string& link,
                                                  std::uint64_t max_bytes) {
  auto f = file_writer::open(path, file_writer::mode::truncate);
  if (!f) return error{"recording: " + f.message()};
  recording_writer w(std::move(*f));
  w.max_bytes_ = max_bytes;
  const auto meta = nlohmann::json{{"schema_hash", std::string(schema_hash())},
                                   {"link", link},
                                   {"created_ns", wall_time_ns()}}
                        .dump();
  std::string head(magic, sizeof magic);
  put<std::uint32_t>(head, static_cast<std::uint32_t>(meta.size()));
  head += meta;
  if (auto s = w.file_.append(head); !s) return error{"recording header: " + s.message()};
  w.bytes_ = head.size();
  return w;
}

status recording_writer::write(const envelope& e, std::int64_t receive_time_ns) {
  if (!failed_) return failed_;
  const std::uint64_t need = 12 + e.size();
  if (!e.valid() || bytes_ + need > max_bytes_) {
    ++dropped_;
    return {};
  }
  // One append for the whole record: a crash leaves whole records and the start of one at most.
  std::string rec;
  rec.reserve(need);
  put<std::uint32_t>(rec, static_cast<std::uint32_t>(e.size()));
  put<std::int64_t>(rec, receive_time_ns);
  rec.append(reinterpret_cast<const char*>(e.data()), e.size());
  if (auto s = file_.append(rec); !s) {
    ++dropped_;
    failed_ = error{"recording: " + s.message()};
    return failed_;
  }
  bytes_ += need;
  ++written_;
  return {};
}

status recording_writer::close() {
  if (!failed_) return failed_;
  auto s = file_.sync();
  if (auto c = file_.close(); s) s = c;
  if (!s) failed_ = error{"recording: " + s.message()};
  return failed_;
}

result<recording_reader> recording_reader::open(const std::string& path) {
  recording_reader r;
  r.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.file_) return error{sys_error("cannot open recording", path)};
  r.path_ = path;
  unsigned char head[12];
  if (std::fread(head, 1, sizeof head, r.file_.get()) != sizeof head ||
      std::memcmp(head, magic, sizeof magic) != 0)
    return error{path + ": not a kforge recording (bad or missing \"KFREC001\" header)"};
  const auto n = get<std::uint32_t>(head + 8);
  if (n > max_header_bytes) return error{path + ": recording header of " + std::to_string(n) +
                                         " bytes is implausibly large"};
  std::string meta(n, '\0');
  if (std::fread(meta.data(), 1, n, r.file_.get()) != n)
    return error{path + ": recording header is truncated"};
  auto j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("schema_hash") ||
      !j["schema_hash"].is_string())
    return error{path + ": recording header is not valid JSON with a schema_hash"};
  r.info_.schema_hash = j["schema_hash"].get<std::string>();
  if (j.contains("link") && j["link"].is_string()) r.info_.link = j["link"].get<std::string>();
  if (j.contains("created_ns") && j["created_ns"].is_number_integer())
    r.info_.created_ns = j["created_ns"].get<std::int64_t>();
  if (r.info_.schema_hash != schema_hash())
    return error{path + ": recorded under message schema " + r.info_.schema_hash.substr(0, 12) +
                 "..., this build speaks " + std::string(schema_hash().substr(0, 12)) +
                 "...; replay it with the kforge build that wrote it"};
  r.offset_ = sizeof head + n;
  return r;
}

result<std::optional<record>> recording_reader::next() {
  unsigned char head[12];
  const auto got = std::fread(head, 1, sizeof head, file_.get());
  if (got == 0 && std::feof(file_.get())) return std::optional<record>{};
  const auto at = " at byte " + std::to_string(offset_);
  if (got != sizeof head) return error{path_ + ": truncated record header" + at};
  const auto size = get<std::uint32_t>(head);
  if (size > max_envelope_bytes)
    return error{path_ + ": record of " + std::to_string(size) + " bytes is too large" + at};
  std::vector<std::uint8_t> bytes(size);
  if (std::fread(bytes.data(), 1, size, file_.get()) != size)
    return error{path_ + ": truncated record" + at};
  auto env = envelope::from_bytes(std::move(bytes));
  if (!env) return error{path_ + ": invalid envelope" + at + ": " + env.message()};
  offset_ += sizeof head + size;
  return std::optional<record>{record{get<std::int64_t>(head + 4), std::move(*env)}};
}

}  // namespace kforge::messages
