#pragma once
// result<T, E>: a value, or the error that stopped it from being made. The
// one way start-up and configuration code says "this failed, here is why"
// (config::result<T> is result<T, config::error>: a field and a message).

#include <utility>
#include <variant>

namespace scg::core {

/// A T, or the E that prevented it. It is a std::variant<T, E> with names,
/// so std::get_if and std::holds_alternative work on it as well, and a
/// function that returns the plain variant converts into it.
template <class T, class E>
class result : public std::variant<T, E> {
 public:
  using std::variant<T, E>::variant;
  result(std::variant<T, E> v) : std::variant<T, E>(std::move(v)) {}

  bool ok() const { return this->index() == 0; }
  T& value() & { return std::get<0>(base()); }
  const T& value() const& { return std::get<0>(base()); }
  T&& value() && { return std::get<0>(std::move(base())); }
  const E& error() const { return std::get<1>(base()); }

 private:
  std::variant<T, E>& base() { return *this; }
  const std::variant<T, E>& base() const { return *this; }
};

}  // namespace scg::core
