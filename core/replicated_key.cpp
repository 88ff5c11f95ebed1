#include "core/replicated_key.hpp"

#include <cstdlib>

namespace scg::core {

std::string make_key(key_kind k, std::string_view id) {
  std::string key;
  key.reserve(2 + id.size());
  key += static_cast<char>(k);
  key += '/';
  key += id;
  return key;
}

std::optional<parsed_key> parse_key(std::string_view key) {
  if (key.size() < 2 || key[1] != '/') return std::nullopt;
  switch (key[0]) {
    case 's': case 'o': case 'd': case 'h': case 'l': case 'a':
      return parsed_key{static_cast<key_kind>(key[0]), key.substr(2)};
    default:
      return std::nullopt;
  }
}

bool is_binding_key(std::string_view key) {
  auto k = parse_key(key);
  return k && is_binding(k->kind);
}

const char* to_string(key_kind k) {
  switch (k) {
    case key_kind::session: return "session";
    case key_kind::operation: return "operation";
    case key_kind::drain: return "drain";
    case key_kind::health: return "health";
    case key_kind::load: return "load";
    case key_kind::activity: return "activity";
  }
  return "unknown";
}

std::string health_value(bool healthy) { return healthy ? "healthy" : "unhealthy"; }

std::optional<bool> parse_health(std::string_view v) {
  if (v == "healthy") return true;
  if (v == "unhealthy") return false;
  return std::nullopt;
}

std::string load_value(double utilization) { return std::to_string(utilization); }

std::optional<double> parse_load(const std::string& v) {
  char* end = nullptr;
  const double u = std::strtod(v.c_str(), &end);
  if (end == v.c_str()) return std::nullopt;
  return u;
}

}  // namespace scg::core
