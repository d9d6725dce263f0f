#pragma once
// The one way to report an expected failure: result<T> holds a T, or a failure (a code,
// of slotted_category() as a rule, and a detail text for logs and answers). Callers
// branch on the code (`r.error() == errc::...`), never on the text. Our own rather than
// boost::system::result: model/ includes only util/ and the standard library
// (daemon/LAYERS), and every failure here carries a text besides its code.

#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

#include "model/errc.hpp"

namespace slotted {

struct failure {
  std::error_code code;
  // What the operator needs besides the code (the database's message, errno's text),
  // told as it is in logs and answers; empty: the code's own message says it all.
  std::string detail;

  failure(std::error_code c, std::string d = {}) : code(c), detail(std::move(d)) {}
  failure(errc e, std::string d = {}) : code(e), detail(std::move(d)) {}

  // The detail, or else the code's message.
  std::string text() const { return detail.empty() ? code.message() : detail; }
};

template <typename T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(failure f) : v_(std::in_place_index<1>, std::move(f)) {}
  result(errc e, std::string detail = {}) : result(failure(e, std::move(detail))) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  // Only when has_value() (else std::bad_variant_access: a bug).
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The failure's code; none (false) when there is a value.
  std::error_code error() const noexcept {
    return has_value() ? std::error_code() : std::get<1>(v_).code;
  }
  // Only when !has_value().
  const failure& failed() const { return std::get<1>(v_); }

 private:
  std::variant<T, failure> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(failure f) : failure_(std::move(f)) {}
  result(errc e, std::string detail = {}) : failure_(failure(e, std::move(detail))) {}

  bool has_value() const noexcept { return !failure_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  std::error_code error() const noexcept { return failure_ ? failure_->code : std::error_code(); }
  // Only when !has_value().
  const failure& failed() const { return failure_.value(); }

 private:
  std::optional<failure> failure_;
};

}  // namespace slotted
