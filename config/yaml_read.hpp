#pragma once
// Reading YAML with errors that name the field: the helpers config/config.cpp
// and config/security.cpp share. The first bad field throws bad_field, which
// unwinds to the public parse function that catches it and returns the
// error as a config::result; the exception never leaves those files.
//
// A section is described once, as a table of its fields (read_fields): each
// key with its reader. The table gives both the keys the section accepts and
// how each is read, in order.

#include <climits>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

/// A section that may be absent or left empty (`placement:`), meaning defaults.
bool present(const YAML::Node& n);

std::string as_string(const YAML::Node& n, const std::string& path);
std::string non_empty(const YAML::Node& n, const std::string& path);  ///< a string that must not be ""
long long integer_in(const YAML::Node& n, const std::string& path, long long lo, long long hi);
double as_number(const YAML::Node& n, const std::string& path);

/// The value `n` names, one of `names`, or an error listing them all:
/// `unknown WHAT "X" (expected a, b or c)`; with no `what`, `expected a or b, got "X"`.
template <class E, std::size_t N>
E one_of(const YAML::Node& n, const std::string& path, const char* what, const named<E> (&names)[N]);

/// Reads one key's value `n` (at `path`) into the place the reader was made for.
using reader = std::function<void(const YAML::Node& n, const std::string& path)>;

/// One key of a section: its name, how its value is read and, for a key that
/// must be given, the message its absence gets ("required"). A row without a
/// key is a check between reads (fields that go together), run with the
/// section itself.
struct field {
  std::string_view key;
  reader read;
  const char* required = nullptr;
};

/// Reads section `n` (at `path`, "" for the root) by its table: `n` must be a
/// map of `fields`' keys only, each at most once; then every key present is
/// read, in the table's order, and an absent required one is an error.
void read_fields(const YAML::Node& n, const std::string& path, const std::vector<field>& fields);

// Readers of the common kinds; each leaves `out` as it is when its key is absent.
reader integer(int& out, long long lo, long long hi = INT_MAX);  ///< lo <= n <= hi
reader text(std::string& out);            ///< any string
reader non_empty_text(std::string& out);  ///< a string that must not be ""
/// One of `names` (one_of); `names` must outlive the reader (a constexpr table).
template <class E, std::size_t N>
reader choice(E& out, const char* what, const named<E> (&names)[N]) {
  return [&out, what, &names](const YAML::Node& n, const std::string& path) { out = one_of(n, path, what, names); };
}
/// A section within a section: null or left empty keeps its defaults, else `read` reads it.
reader section(reader read);

/// one_of's error: `got` is none of `names`.
[[noreturn]] void reject_choice(const std::string& path, const char* what, const std::string& got,
                                const std::vector<std::string_view>& names);

template <class E, std::size_t N>
E one_of(const YAML::Node& n, const std::string& path, const char* what, const named<E> (&names)[N]) {
  const std::string s = as_string(n, path);
  if (auto value = from_name(names, s)) return *value;
  std::vector<std::string_view> list;
  for (const auto& name : names) list.push_back(name.first);
  reject_choice(path, what, s, list);
}

}  // namespace scg::config::yaml
