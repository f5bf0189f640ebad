#pragma once
// Errors as values. Components may throw inside themselves; what crosses a component, actor or
// process boundary is a result<T> whose error names what was wrong (file, field, reason).

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kforge {

/// A failure with a message meant for a person: it names the input, the field and the reason.
struct error {
  std::string message;
};

/// Either a T or an error. Check ok() before value(); value() on an error throws, which is a bug.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(error e) : v_(std::move(e)) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const error& err() const& { return std::get<1>(v_); }
  const std::string& message() const { return std::get<1>(v_).message; }

 private:
  std::variant<T, error> v_;
};

/// result<void>: success or an error.
class [[nodiscard]] status {
 public:
  status() = default;
  status(error e) : e_(std::move(e)) {}
  static status success() { return {}; }

  bool ok() const noexcept { return !e_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const std::string& message() const { return e_->message; }
  const error& err() const { return *e_; }

 private:
  std::optional<error> e_;
};

}  // namespace kforge
