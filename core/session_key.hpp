#pragma once
// The key scg files a Spark session under: tenant, user and session id, as
// one string for maps, messages and the replicated table.

#include <optional>
#include <string>
#include <string_view>

namespace scg::core {

/// Identity of a Spark session as the gateway keys it.
struct session_key {
  std::string tenant;
  std::string user_id;
  std::string session_id;
  /// One string for maps and messages. Each part is length-prefixed, so no
  /// choice of ids can make two different keys collide.
  std::string str() const;
  /// The parts of a str() result; nullopt when `s` is not one. The one place
  /// that reads a key back, for the admin API's listings and filters.
  static std::optional<session_key> parse(std::string_view s);
};

}  // namespace scg::core
