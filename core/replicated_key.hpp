#pragma once
// The keys of the replicated table (cluster/replicated_table.hpp) and the
// values each kind holds, in one place. On the wire a key is its kind's
// letter, '/', and an id; the table itself treats keys and values as opaque
// strings, so these bytes are what replicas of every release exchange.
//
//   kind        key                  value (the entry's `backend` field)
//   session     s/SESSION            backend name
//   operation   o/OPERATION          backend name (the entry's `session` names its session)
//   drain       d/BACKEND            "draining" (deleted: undrained)
//   health      h/BACKEND            "healthy" | "unhealthy"
//   load        l/BACKEND            utilization, a decimal number (std::to_string)
//   activity    a/NODE⏎BACKEND       what NODE still runs on a drained backend
//                                    (actors/drain_status.hpp encodes it)

#include <optional>
#include <string>
#include <string_view>

namespace scg::core {

enum class key_kind : char {
  session = 's',
  operation = 'o',
  drain = 'd',
  health = 'h',
  load = 'l',
  activity = 'a',
};

/// The key of `id` of kind `k`: its bytes on the wire.
std::string make_key(key_kind k, std::string_view id);

/// A key split into its kind and id (a view into the key).
struct parsed_key {
  key_kind kind;
  std::string_view id;
};

/// nullopt for a key of no kind this build knows (a newer peer's).
std::optional<parsed_key> parse_key(std::string_view key);

/// Session and operation keys bind a client's state to a backend; the other
/// kinds describe a backend.
inline bool is_binding(key_kind k) { return k == key_kind::session || k == key_kind::operation; }
bool is_binding_key(std::string_view key);
/// Is `key` of kind `k`?
inline bool has_kind(std::string_view key, key_kind k) {
  return key.size() >= 2 && key[0] == static_cast<char>(k) && key[1] == '/';
}

/// "session", "operation", "drain", "health", "load", "activity" (for logs).
const char* to_string(key_kind k);

// --- typed values
inline constexpr std::string_view drain_value = "draining";
std::string health_value(bool healthy);
/// nullopt when `v` is neither value.
std::optional<bool> parse_health(std::string_view v);
std::string load_value(double utilization);
/// The number `v` starts with, as strtod reads it; nullopt when none.
std::optional<double> parse_load(const std::string& v);

}  // namespace scg::core
