#include "config/yaml_read.hpp"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <vector>

namespace scg::config::yaml {

void reject(const std::string& path, std::string message) { throw bad_field{{path, std::move(message)}}; }

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return in_quotes(n.Scalar());
    default:
      return "null";
  }
}

std::string child(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string item(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

void check_keys(const YAML::Node& n, const std::string& path, std::initializer_list<std::string_view> known) {
  const std::string where = path.empty() ? "(root)" : path;
  if (!n.IsMap()) reject(where, "expected a map, got " + describe(n));
  std::vector<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) reject(where, "keys must be strings");
    const std::string& key = kv.first.Scalar();
    bool is_known = false;
    for (auto k : known) is_known = is_known || k == key;
    if (!is_known) reject(child(path, key), "unknown key");
    for (const auto& s : seen)
      if (s == key) reject(child(path, key), "duplicate key");
    seen.push_back(key);
  }
}

bool present(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }

std::string as_string(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) reject(path, "expected a string, got " + describe(n));
  return n.Scalar();
}

std::string non_empty(const YAML::Node& n, const std::string& path) {
  std::string s = as_string(n, path);
  if (s.empty()) reject(path, "must not be empty");
  return s;
}

long long integer_in(const YAML::Node& n, const std::string& path, long long lo, long long hi) {
  if (!n.IsScalar()) reject(path, "expected an integer, got " + describe(n));
  const std::string& s = n.Scalar();
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    reject(path, "expected an integer, got " + in_quotes(s));
  if (v < lo) reject(path, "must be at least " + std::to_string(lo) + ", got " + std::to_string(v));
  if (v > hi) reject(path, "must be at most " + std::to_string(hi) + ", got " + std::to_string(v));
  return v;
}

double as_number(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) reject(path, "expected a number, got " + describe(n));
  const std::string& s = n.Scalar();
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v))
    reject(path, "expected a number, got " + in_quotes(s));
  return v;
}

void read_int(const YAML::Node& parent, const std::string& path, const char* key, int& out, long long lo,
              long long hi) {
  if (parent[key]) out = static_cast<int>(integer_in(parent[key], child(path, key), lo, hi));
}

}  // namespace scg::config::yaml
