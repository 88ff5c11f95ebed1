#include "auth/rewrite.hpp"

#include <algorithm>

#include "core/protowire.hpp"

namespace scg::auth {

namespace {

namespace protowire = core::protowire;
using protowire::field;

constexpr std::uint32_t user_context_field = 2;  // every request
constexpr std::uint32_t user_id_field = 1;       // UserContext
constexpr std::uint32_t pairs_field = 2;         // ConfigResponse
constexpr std::uint32_t key_field = 1;           // KeyValue
constexpr std::uint32_t value_field = 2;         // KeyValue

/// A UserContext with its user_id set to `user_id`; other fields kept.
std::optional<std::string> with_user_id(std::string_view context, std::string_view user_id) {
  std::string out;
  out.reserve(context.size() + user_id.size() + 6);
  protowire::put_bytes(out, user_id_field, user_id);
  field f;
  while (!context.empty()) {
    if (!protowire::next(context, f)) return std::nullopt;
    // Only the length-delimited field 1 is user_id; a field 1 of another wire
    // type is an unknown field to protobuf and stays.
    if (f.number == user_id_field && f.type == 2) continue;
    out.append(f.whole);
  }
  return out;
}

}  // namespace

std::optional<std::string> rewrite_user_id(std::string_view request, std::string_view user_id) {
  std::string out;
  out.reserve(request.size() + user_id.size() + 12);
  bool seen = false;
  field f;
  while (!request.empty()) {
    if (!protowire::next(request, f)) return std::nullopt;
    if (f.number != user_context_field || f.type != 2) {
      out.append(f.whole);
      continue;
    }
    auto context = with_user_id(f.payload, user_id);
    if (!context) return std::nullopt;
    protowire::put_bytes(out, user_context_field, *context);
    seen = true;
  }
  if (!seen) {
    std::string context;
    protowire::put_bytes(context, user_id_field, user_id);
    protowire::put_bytes(out, user_context_field, context);
  }
  return out;
}

bool names_token_setting(std::string_view key) {
  if (key.empty() || key.size() > authenticate_token_key.size()) return false;
  const auto at = authenticate_token_key.size() - key.size();
  return authenticate_token_key.substr(at) == key && (at == 0 || authenticate_token_key[at - 1] == '.');
}

redact_outcome redact_config_response(std::string_view response, std::string& out,
                                      const std::vector<std::string>& secrets) {
  std::string result;
  result.reserve(response.size());
  bool changed = false;
  field f;
  while (!response.empty()) {
    if (!protowire::next(response, f)) return redact_outcome::malformed;
    if (f.number != pairs_field || f.type != 2) {
      result.append(f.whole);
      continue;
    }
    // The key is the last length-delimited field 1, as protobuf reads it.
    std::string_view pair = f.payload, key, value;
    field g;
    while (!pair.empty()) {
      if (!protowire::next(pair, g)) return redact_outcome::malformed;
      if (g.number == key_field && g.type == 2) key = g.payload;
      if (g.number == value_field && g.type == 2) value = g.payload;
    }
    const bool secret = std::any_of(secrets.begin(), secrets.end(),
                                    [&](const std::string& s) { return !s.empty() && value == s; });
    if (!names_token_setting(key) && !secret) {
      result.append(f.whole);
      continue;
    }
    std::string redacted;
    for (pair = f.payload; !pair.empty();) {
      protowire::next(pair, g);  // already checked above
      if (g.number != value_field || g.type != 2) redacted.append(g.whole);
    }
    protowire::put_bytes(redacted, value_field, "[redacted]");
    protowire::put_bytes(result, pairs_field, redacted);
    changed = true;
  }
  if (!changed) return redact_outcome::unchanged;
  out = std::move(result);
  return redact_outcome::redacted;
}

}  // namespace scg::auth
