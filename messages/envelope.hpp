#pragma once
// A verified, immutable envelope: the only way bytes from a socket or a file become something the
// rest of kforge reads. Construction verifies the buffer with the FlatBuffers verifier; a copy
// shares the bytes, so passing envelopes between actors costs a reference count.
//
// The bytes are never copied on the way in when they need not be: an envelope built here keeps
// the builder's own buffer, and one made from received bytes can keep whatever object holds them
// (a zmq frame, a vector) and verify them where they lie.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "messages/envelope_generated.h"

namespace kforge::messages {

namespace wire = ::kforge::wire;

/// A message's optional string field as a string, "" where it is absent (the object API writes an
/// empty string as absent, so the two read alike).
inline std::string text_of(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

/// Largest envelope accepted from the wire or a file; bigger buffers are rejected unread.
inline constexpr std::size_t max_envelope_bytes = std::size_t{1} << 30;

/// Alignment the start of an envelope's bytes needs. FlatBuffers aligns each scalar to its size
/// relative to the buffer's start (the verifier checks only that), and the schema has 64-bit
/// fields, so reading them with aligned loads needs an 8-aligned start.
inline constexpr std::size_t envelope_alignment = 8;

namespace detail {

// What keeps an envelope's bytes alive, shared by its copies and by zmq frames sending it. The
// count is intrusive so that handing a reference to a C API (zmq_msg_init_data's hint) costs no
// allocation; `destroy_` frees the owner and what it holds when the last reference goes.
class buffer_owner {
 public:
  buffer_owner(const buffer_owner&) = delete;
  buffer_owner& operator=(const buffer_owner&) = delete;
  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy_(this);
  }

 protected:
  using destroy_fn = void (*)(buffer_owner*) noexcept;
  explicit buffer_owner(destroy_fn destroy) noexcept : destroy_(destroy) {}
  ~buffer_owner() = default;

 private:
  std::atomic<std::uint32_t> refs_{1};
  destroy_fn destroy_;
};

// An owner that holds any object with data() and size() (a zmq::message_t, a vector, a
// flatbuffers::DetachedBuffer) in one allocation.
template <class Holder>
class holder_owner final : public buffer_owner {
 public:
  explicit holder_owner(Holder&& h) noexcept(std::is_nothrow_move_constructible_v<Holder>)
      : buffer_owner(&destroy), value(std::move(h)) {}
  Holder value;

 private:
  static void destroy(buffer_owner* o) noexcept { delete static_cast<holder_owner*>(o); }
};

}  // namespace detail

class envelope_builder;

class envelope {
 public:
  /// Empty envelope: holds nothing; valid() is false. Exists so containers and CAF can hold it.
  envelope() = default;
  envelope(const envelope& o) noexcept : owner_(o.owner_), data_(o.data_), size_(o.size_) {
    if (owner_) owner_->retain();
  }
  envelope(envelope&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  envelope& operator=(const envelope& o) noexcept {
    envelope(o).swap(*this);
    return *this;
  }
  envelope& operator=(envelope&& o) noexcept {
    envelope(std::move(o)).swap(*this);
    return *this;
  }
  ~envelope() {
    if (owner_) owner_->release();
  }
  void swap(envelope& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  /// Copies and verifies untrusted bytes; the error says what was wrong with them.
  static result<envelope> from_bytes(const void* data, std::size_t size);
  /// Takes and verifies untrusted bytes (no copy).
  static result<envelope> from_bytes(std::vector<std::uint8_t> bytes) {
    return adopt(std::move(bytes));
  }
  /// Takes `holder`, anything owning untrusted bytes with data() and size() (a zmq::message_t, a
  /// vector), and verifies the bytes where they lie: no copy, unless they do not start at
  /// `envelope_alignment` (then they are copied first). The envelope keeps `holder` alive, so
  /// it must not share a larger buffer that should not stay allocated that long.
  template <class Holder>
  static result<envelope> adopt(Holder&& holder);
  /// Takes a finished builder's buffer without copying it (kforge built it, so it is verified only
  /// in debug builds). The builder is left empty, ready for reuse.
  static envelope from_builder(envelope_builder& fbb);
  /// As above for a builder with another allocator: its buffer is kept, at one more allocation.
  static envelope from_builder(flatbuffers::FlatBufferBuilder& fbb);

  bool valid() const noexcept { return owner_ != nullptr; }
  const wire::Envelope& get() const noexcept { return *wire::GetEnvelope(data_); }
  const wire::Envelope* operator->() const noexcept { return &get(); }

  wire::Payload type() const noexcept { return get().payload_type(); }
  /// The payload as T, or nullptr when it holds another type.
  template <class T>
  const T* as() const noexcept {
    return valid() ? get().payload_as<T>() : nullptr;
  }

  /// The verified bytes (nullptr and 0 when empty); valid as long as any copy of this envelope or
  /// a retain() reference lives.
  const std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  flatbuffers::span<const std::uint8_t> bytes() const noexcept {
    return flatbuffers::span<const std::uint8_t>(data_, size_);
  }

  /// For C APIs that take (data, free function, hint), like zmq_msg_init_data: a reference to the
  /// bytes as an opaque token that keeps data() valid until passed to release(), on any thread.
  /// `*this` must be valid.
  void* retain() const noexcept {
    owner_->retain();
    return owner_;
  }
  /// Drops a reference taken by retain().
  static void release(void* token) noexcept {
    static_cast<detail::buffer_owner*>(token)->release();
  }

  friend bool operator==(const envelope& a, const envelope& b) noexcept;
  friend bool operator!=(const envelope& a, const envelope& b) noexcept { return !(a == b); }

 private:
  envelope(detail::buffer_owner* owner, const std::uint8_t* data, std::size_t size) noexcept
      : owner_(owner), data_(data), size_(size) {}
  // Verifies bytes held by `owner` (which this call takes, also on failure).
  static result<envelope> adopt_verified(detail::buffer_owner* owner, const std::uint8_t* data,
                                         std::size_t size);

  detail::buffer_owner* owner_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

template <class Holder>
result<envelope> envelope::adopt(Holder&& holder) {
  static_assert(!std::is_lvalue_reference_v<Holder>, "adopt takes its holder: std::move it");
  using owner_type = detail::holder_owner<std::decay_t<Holder>>;
  auto owner = std::make_unique<owner_type>(std::move(holder));
  // Read the location after the move: a small zmq frame keeps its bytes inside the object.
  const auto* p = static_cast<const std::uint8_t*>(static_cast<const void*>(
      std::as_const(owner->value).data()));
  const std::size_t n = owner->value.size();
  return adopt_verified(owner.release(), p, n);
}

/// A FlatBufferBuilder whose buffer becomes an envelope's without a copy or another allocation:
/// its allocator reserves room for the envelope's reference count in front of the buffer. Build
/// the payload with it, then seal() it.
class envelope_builder : public flatbuffers::FlatBufferBuilder {
 public:
  /// `initial_size`: bytes reserved up front; the whole envelope fitting in it means one
  /// allocation.
  explicit envelope_builder(std::size_t initial_size = 1024);
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
envelope seal(envelope_builder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload);
/// As above for a plain builder (its buffer is kept at one more allocation).
envelope seal(flatbuffers::FlatBufferBuilder& fbb, const header& h, wire::Payload type,
              flatbuffers::Offset<void> payload);

/// Packs an object-API payload (e.g. wire::TaskT) into an envelope.
template <class NativeT>
envelope pack(const header& h, const NativeT& payload) {
  envelope_builder fbb(1024);
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
