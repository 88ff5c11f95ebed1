#pragma once
// Reading YAML with errors that name the field: the helpers config/config.cpp
// and config/security.cpp share. The first bad field throws bad_field, which
// unwinds to the one public parse function that catches it and returns the
// error; the exception never leaves those files.

#include <climits>
#include <initializer_list>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace YAML {
class Node;
}

namespace scg::config::yaml {

struct bad_field {
  error err;
};

[[noreturn]] void reject(const std::string& path, std::string message);

std::string in_quotes(const std::string& s);

/// How a node reads in an error message: "a map", "a list", null or the quoted scalar.
std::string describe(const YAML::Node& n);

/// "path.key", or "key" at the root.
std::string child(const std::string& path, const std::string& key);
std::string item(const std::string& path, std::size_t i);

/// Checks that `n` is a map whose keys are all in `known`, each at most once.
void check_keys(const YAML::Node& n, const std::string& path, std::initializer_list<std::string_view> known);

/// A section that may be absent or left empty (`placement:`), meaning defaults.
bool present(const YAML::Node& n);

std::string as_string(const YAML::Node& n, const std::string& path);
std::string non_empty(const YAML::Node& n, const std::string& path);  ///< a string that must not be ""
long long integer_in(const YAML::Node& n, const std::string& path, long long lo, long long hi);
double as_number(const YAML::Node& n, const std::string& path);

/// Reads optional `key` of `parent` into `out` (left as is when absent).
void read_int(const YAML::Node& parent, const std::string& path, const char* key, int& out, long long lo,
              long long hi = INT_MAX);

}  // namespace scg::config::yaml
