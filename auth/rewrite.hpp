#pragma once
// The two message edits scg makes on purpose (docs/contract.md, "Verbatim"):
// the verified identity replaces user_context.user_id in every request, and
// the backend's own token is redacted from Config responses. Everything else
// (unknown fields, UserContext.extensions, field order) is kept byte for byte.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace scg::auth {

/// Spark's setting that holds the backend's authentication token.
inline constexpr std::string_view authenticate_token_key = "spark.connect.authenticate.token";

/// Returns `request` with user_context (field 2 of every Spark Connect
/// request) carrying `user_id` as its user_id (field 1): replaced in every
/// user_context occurrence (protobuf merges repeated occurrences, so each must
/// carry it), inserted when there is none. nullopt when `request` is not
/// valid wire format.
std::optional<std::string> rewrite_user_id(std::string_view request, std::string_view user_id);

enum class redact_outcome { unchanged, redacted, malformed };

/// True when a Config key names the token setting: the whole key, or what
/// get_all(prefix) leaves of it after stripping the prefix ("token",
/// "authenticate.token", ...).
bool names_token_setting(std::string_view key);

/// In a ConfigResponse (pairs = field 2, KeyValue key = 1, value = 2), sets
/// to "[redacted]" the value of every pair whose key names the token setting
/// (names_token_setting) or whose value is one of `secrets` (the backend
/// tokens scg holds; empty ones are ignored). `out` is written only when the
/// outcome is `redacted`.
redact_outcome redact_config_response(std::string_view response, std::string& out,
                                      const std::vector<std::string>& secrets = {});

}  // namespace scg::auth
