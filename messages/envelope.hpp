#pragma once
// A verified, immutable envelope: the only way bytes from a socket or a file become something the
// rest of kforge reads. Construction verifies the buffer with the FlatBuffers verifier; a copy
// shares the bytes, so passing envelopes between actors costs a reference count.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "messages/envelope_generated.h"

namespace kforge::messages {

namespace wire = ::kforge::wire;

/// Largest envelope accepted from the wire or a file; bigger buffers are rejected unread.
inline constexpr std::size_t max_envelope_bytes = std::size_t{1} << 30;

class envelope {
 public:
  /// Empty envelope: holds nothing; valid() is false. Exists so containers and CAF can hold it.
  envelope() = default;

  /// Copies and verifies untrusted bytes; the error says what was wrong with them.
  static result<envelope> from_bytes(const void* data, std::size_t size);
  /// Takes and verifies untrusted bytes.
  static result<envelope> from_bytes(std::vector<std::uint8_t> bytes);
  /// Takes a finished builder (made by kforge itself, so it is verified only in debug builds).
  static envelope from_builder(flatbuffers::FlatBufferBuilder& fbb);

  bool valid() const noexcept { return bytes_ != nullptr; }
  const wire::Envelope& get() const noexcept { return *wire::GetEnvelope(bytes_->data()); }
  const wire::Envelope* operator->() const noexcept { return &get(); }

  wire::Payload type() const noexcept { return get().payload_type(); }
  /// The payload as T, or nullptr when it holds another type.
  template <class T>
  const T* as() const noexcept {
    return valid() ? get().payload_as<T>() : nullptr;
  }

  const std::uint8_t* data() const noexcept { return valid() ? bytes_->data() : nullptr; }
  std::size_t size() const noexcept { return valid() ? bytes_->size() : 0; }
  const std::vector<std::uint8_t>& bytes() const;
  std::shared_ptr<const std::vector<std::uint8_t>> shared_bytes() const { return bytes_; }

  friend bool operator==(const envelope& a, const envelope& b) noexcept;
  friend bool operator!=(const envelope& a, const envelope& b) noexcept { return !(a == b); }

 private:
  explicit envelope(std::shared_ptr<const std::vector<std::uint8_t>> bytes)
      : bytes_(std::move(bytes)) {}
  std::shared_ptr<const std::vector<std::uint8_t>> bytes_;
};

/// Header fields every envelope carries.
struct header {
  std::uint64_t message_id = 0;
  std::uint64_t sample_id = 0;
  std::string sender;
  std::int64_t send_time_ns = 0;  ///< 0: stamped with the current wall time when built
  std::uint64_t policy_version = 0;
};

/// Wraps a payload already built into `fbb` as an envelope. `payload` is the offset of a table of
/// the union member `type`.
envelope seal(flatbuffers::FlatBufferBuilder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload);

/// Packs an object-API payload (e.g. wire::TaskT) into an envelope.
template <class NativeT>
envelope pack(const header& h, const NativeT& payload) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  using Table = typename NativeT::TableType;
  auto off = Table::Pack(fbb, &payload);
  return seal(fbb, h, wire::PayloadTraits<Table>::enum_value, off.Union());
}

/// An envelope of opaque bytes (tests, benchmarks).
envelope make_blob(const header& h, const void* data, std::size_t size);

/// The name of a payload type as in the schema ("Task", "Candidate", ...).
std::string_view payload_name(wire::Payload type) noexcept;

/// The envelope as one JSON object (flatc's JSON form of the schema), for `kforge inspect`.
result<std::string> to_json(const envelope& e);

/// SHA-256 of the .fbs files, computed at configure time. Recordings carry it; a reader refuses a
/// recording written under another schema.
std::string_view schema_hash() noexcept;

}  // namespace kforge::messages
