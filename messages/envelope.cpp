#include "messages/envelope.hpp"

#include <cstring>
#include <new>
#include <stdexcept>

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

// The block an envelope_builder (or a copy) allocates: this owner, then the bytes. One allocation
// holds the reference count and the envelope, and the bytes start 16-aligned.
class block_owner final : public detail::buffer_owner {
 public:
  block_owner() noexcept : buffer_owner(&destroy) {}

 private:
  static void destroy(buffer_owner* o) noexcept;
};

constexpr std::size_t block_align = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
constexpr std::size_t block_header =
    (sizeof(block_owner) + block_align - 1) / block_align * block_align;
static_assert(block_align % envelope_alignment == 0);

// Bytes with room for a block_owner in front (constructed there once the bytes are an envelope's).
std::uint8_t* allocate_block(std::size_t size) {
  return static_cast<std::uint8_t*>(::operator new(block_header + size)) + block_header;
}
void free_block(std::uint8_t* bytes) noexcept { ::operator delete(bytes - block_header); }
block_owner* own_block(std::uint8_t* bytes) noexcept {
  return new (bytes - block_header) block_owner();
}

void block_owner::destroy(buffer_owner* o) noexcept {
  auto* b = static_cast<block_owner*>(o);
  b->~block_owner();
  ::operator delete(static_cast<void*>(b));
}

// The envelope_builder's allocator. Stateless; FlatBuffers' default reallocate_downward (allocate,
// copy, deallocate) serves a builder that outgrows its initial size.
class block_allocator final : public flatbuffers::Allocator {
 public:
  std::uint8_t* allocate(std::size_t size) override { return allocate_block(size); }
  void deallocate(std::uint8_t* p, std::size_t) override { free_block(p); }
};

block_allocator the_block_allocator;

#ifndef NDEBUG
void check_built(const envelope& e) {
  if (auto why = verify(e.data(), e.size()); !why.empty())
    throw std::logic_error("kforge built an invalid envelope: " + why);
  if (reinterpret_cast<std::uintptr_t>(e.data()) % envelope_alignment != 0)
    throw std::logic_error("kforge built a misaligned envelope");
}
#endif

template <class Builder>
envelope finish(Builder& fbb, const header& h, wire::Payload type,
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

}  // namespace

envelope_builder::envelope_builder(std::size_t initial_size)
    : flatbuffers::FlatBufferBuilder(initial_size, &the_block_allocator, false) {}

result<envelope> envelope::from_bytes(const void* data, std::size_t size) {
  if (size > max_envelope_bytes || size < 8)
    return error{verify(static_cast<const std::uint8_t*>(data), size)};
  auto* bytes = allocate_block(size);
  std::memcpy(bytes, data, size);
  // Verify the copy, not the source: the source may change under us (shared memory).
  envelope e(own_block(bytes), bytes, size);
  if (auto why = verify(bytes, size); !why.empty()) return error{std::move(why)};
  return e;
}

result<envelope> envelope::adopt_verified(detail::buffer_owner* owner, const std::uint8_t* data,
                                          std::size_t size) {
  envelope held(owner, data, size);  // released on every path below
  // FlatBuffers reads scalars in place; an odd start would make every 64-bit read misaligned.
  if (reinterpret_cast<std::uintptr_t>(data) % envelope_alignment != 0)
    return from_bytes(data, size);
  if (auto why = verify(data, size); !why.empty()) return error{std::move(why)};
  return held;
}

envelope envelope::from_builder(envelope_builder& fbb) {
  const std::size_t size = fbb.GetSize();
  std::size_t reserved = 0;
  std::size_t offset = 0;
  std::uint8_t* block = fbb.ReleaseRaw(reserved, offset);  // allocated by the_block_allocator
  fbb.Clear();
  envelope e(own_block(block), block + offset, size);
#ifndef NDEBUG
  check_built(e);
#endif
  return e;
}

envelope envelope::from_builder(flatbuffers::FlatBufferBuilder& fbb) {
  using owner_type = detail::holder_owner<flatbuffers::DetachedBuffer>;
  auto owner = std::make_unique<owner_type>(fbb.Release());
  fbb.Clear();
  const auto* data = owner->value.data();
  const auto size = owner->value.size();
  envelope e(owner.release(), data, size);
#ifndef NDEBUG
  check_built(e);
#endif
  return e;
}

bool operator==(const envelope& a, const envelope& b) noexcept {
  if (a.size_ != b.size_) return false;
  if (a.data_ == b.data_) return true;
  return std::memcmp(a.data_, b.data_, a.size_) == 0;
}

envelope seal(envelope_builder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload) {
  return finish(fbb, h, type, payload);
}

envelope seal(flatbuffers::FlatBufferBuilder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload) {
  return finish(fbb, h, type, payload);
}

envelope make_blob(const header& h, const void* data, std::size_t size) {
  // Room for the payload, the header fields, tables, padding and the builder's scratch space, so
  // the builder allocates once.
  envelope_builder fbb(size + h.sender.size() + 256);
  std::uint8_t* dst = nullptr;
  auto bytes = fbb.CreateUninitializedVector<std::uint8_t>(size, &dst);
  if (size > 0) std::memcpy(dst, data, size);
  auto blob = wire::CreateBlob(fbb, bytes);
  return seal(fbb, h, wire::Payload::Blob, blob.Union());
}

std::string_view payload_name(wire::Payload type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  if (i > static_cast<std::size_t>(wire::Payload::MAX)) return "unknown";
  return wire::EnumNamesPayload()[i];
}

namespace {

/// FlatBuffers' text is made JSON in one pass over it:
/// - it writes a non-finite float as a bare inf, -inf or nan, which no JSON reader takes (a wrong
///   kernel's max_abs_error is often inf). Outside strings they become the strings "inf", "-inf"
///   and "nan", so every line stays JSON and still says which it was;
/// - with allow_non_utf8 it writes a byte of a string that is not UTF-8 as \xNN, which JSON does
///   not have: it becomes \u00NN, the code point of the byte's value. Why: a reason is a
///   compiler's or a candidate process's output, any bytes; refusing such a message stopped
///   `kforge inspect` at it, and every message after it was lost to the reader.
std::string to_strict_json(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  bool in_string = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (in_string) {
      if (c == '\\' && i + 3 < in.size() && in[i + 1] == 'x') {
        out += "\\u00";
        out.append(in, i + 2, 2);
        i += 3;
        continue;
      }
      out += c;
      if (c == '\\' && i + 1 < in.size()) out += in[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    const std::size_t j = i + (c == '-' || c == '+' ? 1 : 0);
    if (in.compare(j, 3, "inf") == 0 || in.compare(j, 3, "nan") == 0) {
      out += '"' + std::string(c == '-' ? "-" : "") + in.substr(j, 3) + '"';
      i = j + 2;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

result<std::string> to_json(const envelope& e) {
  if (!e.valid()) return error{"empty envelope"};
  // The parser is built once from the embedded binary schema; GenerateText only reads it.
  static const auto parser = [] {
    auto p = std::make_unique<flatbuffers::Parser>();
    p->opts.strict_json = true;
    p->opts.allow_non_utf8 = true;  // rendered \xNN, made \u00NN by to_strict_json
    p->opts.indent_step = -1;  // one line
    p->opts.output_default_scalars_in_json = false;
    if (!p->Deserialize(detail::schema_bfbs, detail::schema_bfbs_size)) p.reset();
    return p;
  }();
  if (!parser) return error{"embedded message schema could not be loaded"};
  std::string out;
  if (!flatbuffers::GenerateText(*parser, e.data(), &out))
    return error{"envelope could not be rendered as JSON"};
  return to_strict_json(out);
}

}  // namespace kforge::messages
