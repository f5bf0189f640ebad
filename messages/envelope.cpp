#include "messages/envelope.hpp"

#include <flatbuffers/idl.h>

#include "common/clock.hpp"

namespace kforge::messages {

namespace detail {
extern const std::uint8_t schema_bfbs[];
extern const std::size_t schema_bfbs_size;
}  // namespace detail

namespace {

// Bounds for hostile buffers: deep nesting and huge table counts are refused before reading.
constexpr flatbuffers::uoffset_t max_depth = 64;
constexpr flatbuffers::uoffset_t max_tables = 1u << 22;

std::string verify(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return "envelope of " + std::to_string(size) + " bytes is too short";
  if (size > max_envelope_bytes)
    return "envelope of " + std::to_string(size) + " bytes exceeds the limit of " +
           std::to_string(max_envelope_bytes);
  if (!flatbuffers::BufferHasIdentifier(data, wire::EnvelopeIdentifier()))
    return "not a kforge envelope (file identifier is not \"KFEV\")";
  flatbuffers::Verifier v(data, size, max_depth, max_tables);
  if (!wire::VerifyEnvelopeBuffer(v)) return "envelope failed FlatBuffers verification";
  if (wire::GetEnvelope(data)->payload_type() == wire::Payload::NONE)
    return "envelope has no payload";
  return {};
}

}  // namespace

result<envelope> envelope::from_bytes(const void* data, std::size_t size) {
  if (size > max_envelope_bytes || size < 8)
    return error{verify(static_cast<const std::uint8_t*>(data), size)};
  const auto* p = static_cast<const std::uint8_t*>(data);
  return from_bytes(std::vector<std::uint8_t>(p, p + size));
}

result<envelope> envelope::from_bytes(std::vector<std::uint8_t> bytes) {
  if (auto why = verify(bytes.data(), bytes.size()); !why.empty()) return error{std::move(why)};
  return envelope(std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes)));
}

envelope envelope::from_builder(flatbuffers::FlatBufferBuilder& fbb) {
  auto* p = fbb.GetBufferPointer();
  std::vector<std::uint8_t> bytes(p, p + fbb.GetSize());
#ifndef NDEBUG
  if (auto why = verify(bytes.data(), bytes.size()); !why.empty())
    throw std::logic_error("kforge built an invalid envelope: " + why);
#endif
  return envelope(std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes)));
}

const std::vector<std::uint8_t>& envelope::bytes() const {
  static const std::vector<std::uint8_t> none;
  return valid() ? *bytes_ : none;
}

bool operator==(const envelope& a, const envelope& b) noexcept {
  if (a.bytes_ == b.bytes_) return true;
  return a.valid() && b.valid() && *a.bytes_ == *b.bytes_;
}

envelope seal(flatbuffers::FlatBufferBuilder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload) {
  auto sender = fbb.CreateString(h.sender);
  wire::EnvelopeBuilder b(fbb);
  b.add_message_id(h.message_id);
  b.add_sample_id(h.sample_id);
  b.add_sender(sender);
  b.add_send_time_ns(h.send_time_ns != 0 ? h.send_time_ns : wall_time_ns());
  b.add_policy_version(h.policy_version);
  b.add_payload_type(type);
  b.add_payload(payload);
  fbb.Finish(b.Finish(), wire::EnvelopeIdentifier());
  return envelope::from_builder(fbb);
}

envelope make_blob(const header& h, const void* data, std::size_t size) {
  flatbuffers::FlatBufferBuilder fbb(size + 256);
  auto bytes = fbb.CreateVector(static_cast<const std::uint8_t*>(data), size);
  auto blob = wire::CreateBlob(fbb, bytes);
  return seal(fbb, h, wire::Payload::Blob, blob.Union());
}

std::string_view payload_name(wire::Payload type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  if (i > static_cast<std::size_t>(wire::Payload::MAX)) return "unknown";
  return wire::EnumNamesPayload()[i];
}

result<std::string> to_json(const envelope& e) {
  if (!e.valid()) return error{"empty envelope"};
  // The parser is built once from the embedded binary schema; GenerateText only reads it.
  static const auto parser = [] {
    auto p = std::make_unique<flatbuffers::Parser>();
    p->opts.strict_json = true;
    p->opts.indent_step = -1;  // one line
    p->opts.output_default_scalars_in_json = false;
    if (!p->Deserialize(detail::schema_bfbs, detail::schema_bfbs_size)) p.reset();
    return p;
  }();
  if (!parser) return error{"embedded message schema could not be loaded"};
  std::string out;
  if (!flatbuffers::GenerateText(*parser, e.data(), &out))
    return error{"envelope could not be rendered as JSON"};
  return out;
}

}  // namespace kforge::messages
