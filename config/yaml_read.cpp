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

void reject_choice(const std::string& path, const char* what, const std::string& got,
                   const std::vector<std::string_view>& names) {
  std::string expected;
  for (std::size_t i = 0; i < names.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  if (!what) reject(path, "expected " + expected + ", got " + in_quotes(got));
  reject(path, "unknown " + std::string(what) + " " + in_quotes(got) + " (expected " + expected + ")");
}

void read_fields(const YAML::Node& n, const std::string& path, const std::vector<field>& fields) {
  const std::string where = path.empty() ? "(root)" : path;
  if (!n.IsMap()) reject(where, "expected a map, got " + describe(n));
  std::vector<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) reject(where, "keys must be strings");
    const std::string& key = kv.first.Scalar();
    bool known = false;
    for (const auto& f : fields) known = known || (!f.key.empty() && f.key == key);
    if (!known) reject(child(path, key), "unknown key");
    for (const auto& s : seen)
      if (s == key) reject(child(path, key), "duplicate key");
    seen.push_back(key);
  }
  for (const auto& f : fields) {
    const std::string key(f.key);
    if (key.empty())
      f.read(n, path);
    else if (const YAML::Node value = n[key])
      f.read(value, child(path, key));
    else if (f.required)
      reject(child(path, key), f.required);
  }
}

reader integer(int& out, long long lo, long long hi) {
  return [&out, lo, hi](const YAML::Node& n, const std::string& path) {
    out = static_cast<int>(integer_in(n, path, lo, hi));
  };
}

reader text(std::string& out) {
  return [&out](const YAML::Node& n, const std::string& path) { out = as_string(n, path); };
}

reader non_empty_text(std::string& out) {
  return [&out](const YAML::Node& n, const std::string& path) { out = non_empty(n, path); };
}

reader section(reader read) {
  return [read = std::move(read)](const YAML::Node& n, const std::string& path) {
    if (present(n)) read(n, path);
  };
}

}  // namespace scg::config::yaml
