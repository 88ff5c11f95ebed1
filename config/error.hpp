#pragma once
// What configuration and start-up code return when something is wrong: the
// field at fault and what is wrong with it, or the value asked for.

#include <string>

#include "core/result.hpp"

namespace scg::config {

/// A configuration error; `field` is the dotted path of the offending key
/// (e.g. "backends[1].address"), `message` says what is wrong with it.
struct error {
  std::string field;
  std::string message;
  std::string to_string() const { return field + ": " + message; }  ///< "FIELD: MESSAGE"
};

/// A T, or the error that names the field at fault.
template <class T>
using result = core::result<T, error>;

}  // namespace scg::config
